#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| quorate_fuzz::plan_file(data));
