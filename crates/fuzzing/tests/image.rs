//! The image fuzzer's cases, run in CI from fixed seeds (libFuzzer runs the same
//! `run_case` from `fuzz/fuzz_targets/image.rs`). A panic in any thread — the sync
//! thread's panics are caught and turned into a suspended pool, so the hook below is
//! what sees them — or a case that never ends fails the test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tarn_fuzzing::{parse_input, run_case, Image, Ops};

/// Panics seen in any thread since the hook was installed, with their messages.
fn panics() -> &'static Mutex<Vec<String>> {
    static P: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    P.get_or_init(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("?").to_string();
            panics().lock().unwrap_or_else(|e| e.into_inner()).push(format!("[{thread}] {info}"));
            prev(info);
        }));
        Mutex::new(Vec::new())
    })
}

/// The one image both tests share (building it takes a pool create and export).
fn image() -> &'static Image {
    static I: OnceLock<Image> = OnceLock::new();
    I.get_or_init(|| Image::build().expect("pristine image"))
}

/// Kill the process if a case runs longer than `limit` (a hang is a defect; the input
/// is printed so it can be replayed with the fuzz target).
fn watchdog(limit: Duration, label: String) -> Arc<AtomicUsize> {
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        while d.load(Ordering::SeqCst) == 0 {
            if t.elapsed() > limit {
                eprintln!("case hung for {limit:?}: {label}");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    done
}

/// The two tests share the panic list: they run one after the other.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn pristine_case_succeeds_at_every_step() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    panics();
    let scratch = tempfile::tempdir().unwrap();
    let all = Ops::CHANGE | Ops::DESTROY | Ops::SCRUB | Ops::SNAPSHOT | Ops::ROLLBACK | Ops::INSPECT | Ops::SEND;
    let out = run_case(image(), scratch.path(), &[all]).unwrap();
    assert_eq!(out.mutated_blocks, 0);
    assert!(out.imported);
    // The only refusal on the pristine path: fz/a@s1 has a clone (fz/c) until the clone
    // is destroyed, so the first destroy of the snapshot fails and the second succeeds.
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    assert!(
        out.errors[0].starts_with("destroy snapshot") && out.errors[0].contains("clone"),
        "{:?}",
        out.errors
    );
    assert!(out.steps_ok > 60, "{out:?}");
    assert!(panics().lock().unwrap().is_empty());
}

#[test]
fn seeded_damaged_images_give_errors_not_panics() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    panics();
    let cases: u64 = std::env::var("TARN_IMGFUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let scratch = tempfile::tempdir().unwrap();
    let mut x: u64 = std::env::var("TARN_IMGFUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x243f_6a88_85a3_08d3)
        | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut mutated, mut imported, mut refused) = (0, 0, 0);
    for case in 0..cases {
        let n = 1 + next() as usize % 4;
        let mut input = vec![(next() % 128) as u8];
        for _ in 0..n {
            input.extend_from_slice(&next().to_le_bytes());
        }
        let label = format!("case {case} input {input:02x?}");
        let done = watchdog(Duration::from_secs(180), label.clone());
        let out = run_case(image(), scratch.path(), &input).unwrap_or_else(|e| panic!("{label}: harness: {e}"));
        done.store(1, Ordering::SeqCst);
        let p = panics().lock().unwrap().clone();
        assert!(p.is_empty(), "{label} ({:?}) panicked: {p:#?}", parse_input(&input));
        mutated += usize::from(out.mutated_blocks > 0);
        if out.imported {
            imported += 1;
        } else {
            refused += 1;
        }
    }
    eprintln!("{cases} cases: {mutated} with damaged blocks, {imported} imported, {refused} refused at import");
    // The fuzzer must actually reach the metadata: most cases damage at least one block.
    assert!(mutated * 2 > cases as usize, "only {mutated} of {cases} cases damaged a block");
}
