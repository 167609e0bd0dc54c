//! Send stream records, streams, resume tokens, packages (`tarn_fuzzing::targets::send_record`). The body lives in crates/fuzzing so CI replays the corpus on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tarn_fuzzing::targets::send_record(data));
