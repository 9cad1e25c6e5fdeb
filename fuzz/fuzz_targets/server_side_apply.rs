//! Fuzz target: `apiserver::fuzz::server_side_apply` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    apiserver::fuzz::server_side_apply(data);
});
