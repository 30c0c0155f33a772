#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tailweight_fuzz::grpc_health(data));
