//! Fuzz target: `apiserver::fuzz::json_patches` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    apiserver::fuzz::json_patches(data);
});
