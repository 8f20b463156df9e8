//! Records the git revision the binary is built from (`MEMSPIN_GIT_REVISION`, for the JSON's
//! `environment.loadgen.git_revision`): the commit, `-dirty` when tracked files had changes,
//! `unknown` outside a git checkout or without git.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let revision = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(rev) if !rev.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{rev}-dirty") } else { rev }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=MEMSPIN_GIT_REVISION={revision}");
    // A new commit or checkout moves HEAD or the index; rebuild then.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for path in ["HEAD", "index"].into_iter().chain(branch.as_deref()) {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
