//! L2ARC device headers and log blocks (`tarn_fuzzing::targets::l2arc`). The body lives in crates/fuzzing so CI replays the corpus on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tarn_fuzzing::targets::l2arc(data));
