//! The documentation holds together: every relative link in `README.md` and `docs/*.md` leads
//! to a file that exists and, with a `#fragment` into a Markdown page, to a heading of that
//! page; the README's `memspin` table names exactly the flags `memspin --help` lists; and every
//! flag the pages give `memspin-loadgen` is one its `--help` lists. The checkers are tested on
//! small pages of their own first, so a checker that finds nothing fails too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ sits in the workspace")
        .to_path_buf()
}

/// README.md and every docs/*.md, in a stable order.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("a docs/ directory")
        .map(|entry| entry.expect("a readable docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "docs/ holds no page");
    pages.extend(docs);
    pages
}

#[track_caller]
fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines of `text` outside fenced code blocks, with their line numbers (1-based).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut in_fence = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// `line` without its inline code spans (a span may hold `](` that is no link).
fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join("")
}

/// The anchor GitHub gives a heading: lower case, spaces to hyphens, other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a page's headings give, with GitHub's `-1`, `-2` suffixes for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let base = slug(heading.trim_start_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while !anchors.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    anchors
}

/// The targets of inline links `[text](target)` on the page's prose lines.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    for (number, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(start) = rest.find("](") {
            rest = &rest[start + 2..];
            let Some(end) = rest.find(')') else {
                break;
            };
            links.push((number, rest[..end].to_string()));
            rest = &rest[end..];
        }
    }
    links
}

/// What is wrong with the relative links of the page at `path` whose text is `text`: one line
/// per link that leads nowhere.
fn broken_links(path: &Path, text: &str) -> Vec<String> {
    let dir = path.parent().expect("a page lives in a directory");
    let mut broken = Vec::new();
    for (number, target) in links(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, fragment) = match target.split_once('#') {
            Some((file, fragment)) => (file, Some(fragment)),
            None => (target.as_str(), None),
        };
        let where_ = format!("{}:{number}: ({target})", path.display());
        // An empty file part is this page, whose text is at hand.
        let resolved = dir.join(file);
        if !file.is_empty() && !resolved.exists() {
            broken.push(format!("{where_}: no such file"));
            continue;
        }
        let Some(fragment) = fragment else {
            continue;
        };
        let page = if file.is_empty() {
            text.to_string()
        } else if resolved.extension().is_some_and(|ext| ext == "md") {
            read(&resolved)
        } else {
            continue;
        };
        if !anchors(&page).contains(fragment) {
            broken.push(format!("{where_}: no heading with this anchor"));
        }
    }
    broken
}

#[test]
fn the_link_checker_finds_what_is_broken() {
    let dir = root().join("docs");
    let page = dir.join("example.md");
    let text = "# A page\n\n## Several workers (`-t N`)\n\n\
                [fine](#several-workers--t-n) [fine](../README.md) [away](https://example.com)\n\
                [gone](nope.md) [gone too](#no-such-heading) [`code`](../README.md#no-such)\n\
                ```text\n[in a fence](nope.md)\n```\n`[in a span](nope.md)`\n";
    let broken = broken_links(&page, text);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].contains("(nope.md): no such file"), "{broken:#?}");
    assert!(
        broken[1].contains("(#no-such-heading): no heading"),
        "{broken:#?}"
    );
    assert!(
        broken[2].contains("(../README.md#no-such): no heading"),
        "{broken:#?}"
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug(" Redis clients (RESP)"), "redis-clients-resp");
    assert_eq!(
        slug("The `memspin` command line"),
        "the-memspin-command-line"
    );
    assert_eq!(
        slug("Connections: limits, timeouts, SYN backlog, neighbours"),
        "connections-limits-timeouts-syn-backlog-neighbours"
    );
    assert_eq!(
        slug("Accepted differences from memcached 1.6"),
        "accepted-differences-from-memcached-16"
    );
    let repeated = anchors("# Tests\n## Tests\n```\n# not a heading\n```\n");
    assert_eq!(repeated, BTreeSet::from(["tests".into(), "tests-1".into()]));
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut count = 0;
    for page in pages() {
        let text = read(&page);
        count += links(&text).len();
        broken.extend(broken_links(&page, &text));
    }
    assert!(
        count > 50,
        "only {count} links found: is the extraction broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The long and short flags (`--name`, `-x`) in `text`, without the dashes.
fn flags_in(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if let Some(long) = word.strip_prefix("--") {
            if long.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                flags.insert(format!("--{long}"));
            }
        } else if let Some(short) = word.strip_prefix('-') {
            // `-v`, and `-vv`/`-vvv` as repeats of it.
            let mut chars = short.chars();
            if let Some(c) = chars.next()
                && c.is_ascii_alphabetic()
                && chars.all(|d| d == c)
            {
                flags.insert(format!("-{c}"));
            }
        }
    }
    flags
}

/// The README's `memspin` table: the first cell of each row.
fn memspin_table_flags(readme: &str) -> BTreeSet<String> {
    let start = readme
        .find("## The `memspin` command line")
        .expect("the README has the memspin command-line section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut flags = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        flags.extend(flags_in(row.split('|').nth(1).unwrap_or_default()));
    }
    flags
}

fn memspin_help() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_memspin"))
        .arg("--help")
        .output()
        .expect("run memspin --help");
    assert!(output.status.success(), "memspin --help failed");
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

/// The flags a help text lists: the words that start its option lines (clap indents those by
/// 2 or 6 spaces, and the lines of a long description by more).
fn help_flags(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let option_lines = help.lines().filter_map(|line| {
        let trimmed = line.trim_start();
        (trimmed.starts_with('-') && line.len() - trimmed.len() <= 6).then_some(trimmed)
    });
    for line in option_lines {
        let names = line.split("  ").next().unwrap_or_default();
        let names = names.split(['<', '[']).next().unwrap_or_default();
        flags.extend(flags_in(names));
    }
    flags
}

#[test]
fn the_readme_table_names_every_memspin_flag_and_no_other() {
    let documented = memspin_table_flags(&read(&root().join("README.md")));
    let mut listed = help_flags(&memspin_help());
    listed.retain(|f| !matches!(f.as_str(), "--help" | "-h" | "--version" | "-V"));
    assert!(
        listed.contains("--net") && listed.contains("-t") && listed.contains("-v"),
        "help parsed into {listed:?}"
    );
    let unknown: Vec<_> = documented.difference(&listed).collect();
    let undocumented: Vec<_> = listed.difference(&documented).collect();
    assert!(
        unknown.is_empty(),
        "in the README's table, not in --help: {unknown:?}"
    );
    assert!(
        undocumented.is_empty(),
        "in --help, not in the README's table: {undocumented:?}"
    );
}

/// The flags given to `memspin-loadgen` in `text`: on each line that runs it, the words after
/// its name, following `\` continuations.
fn loadgen_flags_used(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let mut continued = false;
    for line in text.lines() {
        let tail = if let Some(at) = line.find("memspin-loadgen ") {
            Some(&line[at + "memspin-loadgen ".len()..])
        } else if continued {
            Some(line)
        } else {
            None
        };
        continued = false;
        if let Some(tail) = tail {
            // Only the command: up to a comment, a pipe, or the end of a code span.
            let command = tail
                .split(['#', '|', '`', ';', ')'])
                .next()
                .unwrap_or_default();
            flags.extend(
                flags_in(command)
                    .into_iter()
                    .filter(|f| f.starts_with("--")),
            );
            continued = line.trim_end().ends_with('\\');
        }
    }
    flags
}

fn loadgen_help() -> String {
    let mut command = loadgen::cli::Args::command();
    let mut help = command.render_long_help().to_string();
    for sub in command.get_subcommands_mut() {
        help.push_str(&sub.render_long_help().to_string());
    }
    help
}

#[test]
fn every_loadgen_flag_the_docs_give_is_in_its_help() {
    let listed = help_flags(&loadgen_help());
    assert!(
        listed.contains("--rate") && listed.contains("--html"),
        "help parsed into {listed:?}"
    );
    let mut unknown = Vec::new();
    let mut used = 0;
    for page in pages() {
        let flags = loadgen_flags_used(&read(&page));
        used += flags.len();
        for flag in flags.difference(&listed) {
            unknown.push(format!("{}: {flag}", page.display()));
        }
    }
    assert!(
        used > 5,
        "only {used} loadgen flags found: is the extraction broken?"
    );
    assert!(
        unknown.is_empty(),
        "not in memspin-loadgen --help:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_loadgen_flag_finder_reads_commands_only() {
    let text = "memspin-loadgen -s A -c 8 --rate 5 \\\n  --prefill --json x.json # --nope\n\
                then `memspin-loadgen --idle sleep` and --not-this\n";
    let found: Vec<String> = loadgen_flags_used(text).into_iter().collect();
    assert_eq!(found, ["--idle", "--json", "--prefill", "--rate"]);
}
