//! Replays the fuzz corpora kept in `fuzz/corpus/<target>/` through the targets'
//! bodies on the stable toolchain, so a decoder change that breaks on an input the
//! fuzzer once found shows up in CI (issue 11 §1: "CI replays the corpus").

use std::path::PathBuf;
use tarn_fuzzing::targets::{run, TARGETS};

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

#[test]
fn every_decoder_target_replays_its_corpus() {
    for t in TARGETS {
        let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(t))
            .unwrap_or_else(|e| panic!("fuzz/corpus/{t}: {e}"))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "fuzz/corpus/{t} is empty");
        for f in &files {
            let data = std::fs::read(f).unwrap();
            assert!(run(t, &data), "unknown target {t}");
        }
        eprintln!("{t}: {} inputs replayed", files.len());
    }
}

#[test]
fn unknown_target_is_refused() {
    assert!(!run("no-such-target", b""));
}
