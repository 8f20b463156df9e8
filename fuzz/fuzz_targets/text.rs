//! libFuzzer target: [`fuzz::text::check`] on every input (run it with `scripts/fuzz.sh text`).
#![no_main]

#[global_allocator]
static GLOBAL: fuzz::alloc::CountingAlloc = fuzz::alloc::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::text::check(data));
