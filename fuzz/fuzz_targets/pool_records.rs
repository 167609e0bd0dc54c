//! The pool directory's records in the MOS: dataset record, property list, bookmark
//! list, scan record (`tarn_spa::fuzzing::pool_records` checks round trips).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tarn_spa::fuzzing::pool_records(data));
