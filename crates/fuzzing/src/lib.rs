//! Tarn's fuzzing harness (issue 11 §1).
//!
//! Theory: every decoder of bytes read from a disk or a stream has a fuzz target in
//! `fuzz/` (libFuzzer, nightly), and CI must see regressions without a nightly
//! toolchain. So the body of every target lives here, in [`targets`], as a plain
//! function of the input: the `fuzz/` targets are one-line wrappers, and this crate's
//! tests replay the kept corpora (`fuzz/corpus/<target>/`) through the same functions
//! on stable. [`image`] is the structure-aware image fuzzer: whole pools with sealed
//! metadata damage, driven through import and every kind of operation.
//!
//! The contract every function here checks: a decoder returns a value or an error for
//! any input — never a panic, a hang or a huge allocation — and what it accepts
//! re-encodes to itself. A panic inside these functions is a finding.
//!
//! Called by: `fuzz/fuzz_targets/*.rs`, `tests/corpus_replay.rs`, `tests/image.rs`.

pub mod image;
pub mod targets;

pub use image::{parse_input, run_case, Directive, Image, Ops, Outcome};
