#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardplan_fuzz::task_suite(data));
