//! Fuzz target: `apiserver::fuzz::strategic_merge` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    apiserver::fuzz::strategic_merge(data);
});
