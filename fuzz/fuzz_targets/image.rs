//! The structure-aware image fuzzer (`crates/fuzzing/src/image.rs`): the input picks which metadata
//! blocks of a small real pool are damaged (and re-sealed by the write path) and which
//! operations run over the damaged pool after import. Slow (about a case per second):
//! run it with `-timeout=120` and under a memory limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tarn_fuzzing::{run_case, Image};

fn image() -> &'static Image {
    static I: OnceLock<Image> = OnceLock::new();
    I.get_or_init(|| Image::build().expect("pristine image"))
}

fuzz_target!(|data: &[u8]| {
    let scratch = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    run_case(image(), std::path::Path::new(scratch), data).expect("harness");
});
