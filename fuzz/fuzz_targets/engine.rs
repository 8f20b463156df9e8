//! libFuzzer target: [`fuzz::engine::check`] on every input (run it with `scripts/fuzz.sh engine`).
#![no_main]

#[global_allocator]
static GLOBAL: fuzz::alloc::CountingAlloc = fuzz::alloc::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::engine::check(data));
