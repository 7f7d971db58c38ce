#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardplan_fuzz::model_card(data));
