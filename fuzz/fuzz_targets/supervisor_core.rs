#![no_main]
libfuzzer_sys::fuzz_target!(|input: quorate_fuzz::CoreInput| quorate_fuzz::supervisor_core(input));
