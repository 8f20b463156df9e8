//! Fuzz targets for memspin's wire parsers and request engine, and the checks they run.
//!
//! ```text
//! fuzzer bytes ─▶ binary::check  ─▶ protocol::binary (request and response frames)
//!              ─▶ text::check    ─▶ protocol::text (request lines, data blocks, numbers)
//!              ─▶ meta::check    ─▶ protocol::meta (meta lines and flags)
//!              ─▶ engine::check  ─▶ pipeline::generate ─▶ Engine::execute, one or two workers,
//!                                   fed in random pieces and read at random moments
//! ```
//!
//! Each `check` takes the fuzzer's bytes, runs the code under test and panics when a property
//! fails; the properties are listed in each module's header. The libFuzzer binaries in
//! `fuzz_targets/` (feature `libfuzzer`, built by `scripts/fuzz.sh` with coverage
//! instrumentation on stable Rust) call them, and so does `tests/corpus.rs`, which replays
//! the checked-in corpus (`corpus/<target>/`) under `cargo test`.

pub mod alloc;
pub mod binary;
pub mod engine;
pub mod input;
pub mod meta;
pub mod pipeline;
pub mod text;

#[cfg(test)]
#[global_allocator]
static GLOBAL: alloc::CountingAlloc = alloc::CountingAlloc;
