//! libFuzzer target: [`fuzz::meta::check`] on every input (run it with `scripts/fuzz.sh meta`).
#![no_main]

#[global_allocator]
static GLOBAL: fuzz::alloc::CountingAlloc = fuzz::alloc::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::meta::check(data));
