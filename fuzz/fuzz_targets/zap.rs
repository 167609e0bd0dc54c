//! ZAP objects and their operations (`tarn_fuzzing::targets::zap_object`). The body lives in crates/fuzzing so CI replays the corpus on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tarn_fuzzing::targets::zap_object(data));
