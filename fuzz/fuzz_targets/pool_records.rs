//! The pool directory's MOS records (`tarn_spa::fuzzing::pool_records`). The body lives in crates/fuzzing so CI replays the corpus on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tarn_spa::fuzzing::pool_records(data));
