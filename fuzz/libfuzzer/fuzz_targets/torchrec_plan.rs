#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardplan_fuzz::torchrec_plan(data));
