//! Replays the checked-in corpus (`fuzz/corpus/<target>/`) through every target's checks, so
//! `cargo test` runs each seed and each reproducer of a bug the fuzzer found, without
//! libFuzzer or instrumentation.

use std::path::{Path, PathBuf};

#[global_allocator]
static GLOBAL: fuzz::alloc::CountingAlloc = fuzz::alloc::CountingAlloc;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

#[track_caller]
fn replay(target: &str, check: fn(&[u8])) {
    let files = corpus(target);
    assert!(
        files.len() >= 3,
        "{target}: the corpus has {} files",
        files.len()
    );
    for file in files {
        let data = std::fs::read(&file).expect("corpus file");
        let result = std::panic::catch_unwind(|| check(&data));
        assert!(result.is_ok(), "{target}: {} fails", file.display());
    }
}

#[test]
fn binary_corpus() {
    replay("binary", fuzz::binary::check);
}

#[test]
fn text_corpus() {
    replay("text", fuzz::text::check);
}

#[test]
fn meta_corpus() {
    replay("meta", fuzz::meta::check);
}

#[test]
fn engine_corpus() {
    replay("engine", fuzz::engine::check);
}
