//! `zpool scrub` and the scan and error parts of `zpool status`.
//!
//! Theory: the daemon starts, pauses and cancels scans through the pool
//! (`Pool::scrub_start`/`scrub_pause`/`scrub_cancel`); `-w` waits for the scan after
//! the daemon's state lock is released ([`State::wait_scan`]), so other commands —
//! `zpool status` showing the progress — keep working meanwhile. The `scan:` lines
//! follow OpenZFS's `zpool status` layout (in progress, paused, finished, canceled,
//! for scrub and resilver), with sizes in `zfs_nicebytes` style and durations as
//! `HH:MM:SS` (with a day count past 24 hours). `errors:` with `-v` lists the files
//! of the pool's error log by path: `/mountpoint/path` when the dataset is mounted,
//! `dataset:/path` when not, `dataset:<0xN>` when the path cannot be found.
//!
//! Called by: `zpool::run` (the `scrub` subcommand, `status`).

use crate::format::nicebytes;
use crate::proto::Response;
use crate::state::{PoolEntry, State};
use tarn_spa::scan::{ScanKind, ScanState, ScanStatus};
use tarn_spa::Pool;

const SCRUB_USAGE: &str = "usage:\n\tscrub [-s | -p] [-w] <pool> ...\n";

/// `zpool scrub [-s | -p] [-w] pool ...`.
pub fn scrub(st: &mut State, args: &[String]) -> Response {
    let p = match crate::args::getopt(args, "spw") {
        Ok(p) => p,
        Err(e) => return Response::usage(format!("{e}\n{SCRUB_USAGE}")),
    };
    if p.has('s') && p.has('p') {
        return Response::usage(format!("invalid option combination: -s and -p are mutually exclusive\n{SCRUB_USAGE}"));
    }
    if p.operands.is_empty() {
        return Response::usage(format!("missing pool name argument\n{SCRUB_USAGE}"));
    }
    let mut resp = Response::ok("");
    for name in &p.operands {
        let Some(entry) = st.pools.get(name) else {
            resp.stderr.push_str(&format!("cannot open '{name}': no such pool\n"));
            resp.code = 1;
            continue;
        };
        let pool = entry.pool.clone();
        let r = if p.has('s') {
            pool.scrub_cancel()
        } else if p.has('p') {
            pool.scrub_pause()
        } else {
            pool.scrub_start()
        };
        match r {
            Ok(()) => {
                let _ = pool.log_history_durable(&format!("zpool scrub {}", args.join(" ")));
                if p.has('w') && !p.has('s') && !p.has('p') {
                    st.wait_scan.push(pool);
                }
            }
            Err(e) => {
                resp.stderr.push_str(&format!("{e}\n"));
                resp.code = 1;
            }
        }
    }
    resp
}

/// `HH:MM:SS`, or `N days HH:MM:SS` past a day (OpenZFS's duration style).
fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d} days {h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// `ctime(3)` style date in local time: "Mon Nov 23 05:15:01 2026".
pub fn ctime(secs: u64) -> String {
    crate::format::ctime(secs)
}

/// The `  scan: ...` lines of `zpool status` (empty when the pool was never scanned).
pub fn scan_lines(s: &ScanStatus, now_s: u64) -> String {
    let p = &s.phys;
    let (what, done_word) = match p.func {
        ScanKind::Scrub => ("scrub", "repaired"),
        ScanKind::Resilver => ("resilver", "resilvered"),
    };
    match p.state {
        ScanState::Finished => {
            let secs = p.end_time_s.saturating_sub(p.start_time_s).saturating_sub(p.paused_total_s);
            let head = match p.func {
                ScanKind::Scrub => format!("scrub repaired {}", nicebytes(p.repaired_bytes)),
                ScanKind::Resilver => format!("resilvered {}", nicebytes(p.repaired_bytes)),
            };
            format!("  scan: {head} in {} with {} errors on {}\n", duration(secs), p.errors, ctime(p.end_time_s))
        }
        ScanState::Canceled => format!("  scan: {what} canceled on {}\n", ctime(p.end_time_s)),
        ScanState::Scanning => {
            let mut out = match p.paused_since_s {
                Some(since) => format!("  scan: {what} paused since {}\n\t{what} started on {}\n", ctime(since), ctime(p.start_time_s)),
                None => format!("  scan: {what} in progress since {}\n", ctime(p.start_time_s)),
            };
            let total = p.to_examine_bytes.max(p.examined_bytes);
            let elapsed = now_s.saturating_sub(s.pass_start_s).max(1);
            let scan_rate = p.examined_bytes.saturating_sub(s.pass_examined_start_bytes) / elapsed;
            let issue_rate = p.issued_bytes.saturating_sub(s.pass_issued_start_bytes) / elapsed;
            let (ex, is, tot) = (nicebytes(p.examined_bytes), nicebytes(p.issued_bytes), nicebytes(total));
            if p.paused_since_s.is_none() {
                out.push_str(&format!(
                    "\t{ex} / {tot} scanned at {}/s, {is} / {tot} issued at {}/s\n",
                    nicebytes(scan_rate),
                    nicebytes(issue_rate)
                ));
            } else {
                out.push_str(&format!("\t{ex} / {tot} scanned, {is} / {tot} issued\n"));
            }
            let pct = if total == 0 {
                0.0
            } else {
                100.0 * p.issued_bytes.min(total) as f64 / total as f64
            };
            out.push_str(&format!("\t{} {done_word}, {pct:.2}% done", nicebytes(p.repaired_bytes)));
            if p.paused_since_s.is_none() {
                match total.saturating_sub(p.issued_bytes).checked_div(issue_rate) {
                    Some(left_s) => out.push_str(&format!(", {} to go\n", duration(left_s))),
                    None => out.push_str(", no estimated completion time\n"),
                }
            } else {
                out.push('\n');
            }
            out
        }
    }
}

/// A status block whose `status:`/`action:`/`see:` lines are replaced by OpenZFS's
/// text for a pool being resilvered (which takes precedence over "degraded").
pub fn with_resilver_explanation(block: &str) -> String {
    let (Some(from), Some(to)) = (
        block.find(" state: ").and_then(|i| block[i..].find('\n').map(|j| i + j + 1)),
        block.find("config:\n"),
    ) else {
        return block.to_string();
    };
    format!(
        "{}status: One or more devices is currently being resilvered.  The pool will\n\
         \tcontinue to function, possibly in a degraded state.\n\
         action: Wait for the resilver to complete.\n{}",
        &block[..from],
        &block[to..]
    )
}

/// The files of the pool's error log, as `zpool status -v` lists them.
pub fn error_files(entry: &PoolEntry) -> Vec<String> {
    let pool: &Pool = &entry.pool;
    let mut out: Vec<String> = pool
        .error_log()
        .into_iter()
        .map(|(ds, obj)| {
            if ds.starts_with("<metadata>") || obj == u64::MAX {
                return format!("{ds}:<0x{:x}>", if obj == u64::MAX { 0 } else { obj });
            }
            let path = pool.objset(&ds).ok().and_then(|os| tarn_zpl::object_path(&*os, obj));
            match (path, entry.mounts.get(&ds)) {
                (Some(p), Some(m)) => format!("{}{}", m.mountpoint.display(), p),
                (Some(p), None) => format!("{ds}:{p}"),
                (None, _) => format!("{ds}:<0x{obj:x}>"),
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Tarn's line under `errors:` when frees were refused since import (a block pointer
/// naming space that was not allocated: a crafted or damaged pool, or a block freed
/// twice). Tarn leaves such space alone rather than panic as OpenZFS does without
/// `zfs_recover`, so the space may be leaked; `zdb -b` tells. Empty when `count` is 0.
pub fn refused_frees_note(pool: &str, count: u64) -> String {
    if count == 0 {
        return String::new();
    }
    format!(
        "\nwarning: {count} frees of space that was not allocated were refused since import;\n\
         \tsome space may be leaked. Check with 'tarn zdb -b {pool}'.\n"
    )
}

/// The `errors:` part of `zpool status` for a pool whose error count is `count`.
pub fn errors_block(entry: &PoolEntry, count: u64, verbose: bool) -> String {
    if count == 0 {
        return "errors: No known data errors\n".into();
    }
    let files = error_files(entry);
    if !verbose || files.is_empty() {
        return format!("errors: {count} data errors, use '-v' for a list\n");
    }
    let mut out = String::from("errors: Permanent errors have been detected in the following files:\n\n");
    for f in files {
        out.push_str(&format!("        {f}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_spa::scan::ScanPhys;

    #[test]
    fn refused_frees_are_named_only_when_there_are_some() {
        assert_eq!(refused_frees_note("tank", 0), "");
        let n = refused_frees_note("tank", 3);
        assert!(n.starts_with("\nwarning: 3 frees of space that was not allocated were refused"), "{n}");
        assert!(n.ends_with("Check with 'tarn zdb -b tank'.\n"), "{n}");
    }

    fn phys(state: ScanState) -> ScanPhys {
        ScanPhys {
            func: ScanKind::Scrub,
            state,
            start_time_s: 1_700_000_000,
            end_time_s: 1_700_000_065,
            min_txg: 0,
            max_txg: 10,
            to_examine_bytes: 2 << 30,
            examined_bytes: 1 << 30,
            issued_bytes: 512 << 20,
            repaired_bytes: 0,
            errors: 0,
            bookmark: Default::default(),
            paused_since_s: None,
            paused_total_s: 0,
        }
    }

    #[test]
    fn scan_lines_follow_openzfs() {
        let st = |p: ScanPhys| ScanStatus {
            pass_start_s: p.start_time_s,
            pass_examined_start_bytes: 0,
            pass_issued_start_bytes: 0,
            phys: p,
        };
        // Local time: the day and hour depend on the zone the test runs in.
        let t0 = ctime(1_700_000_000);
        assert!(t0.ends_with(" 2023") && t0.contains("Nov 1") && t0.split_whitespace().count() == 5, "{t0}");
        assert_eq!(
            scan_lines(&st(phys(ScanState::Finished)), 0),
            format!("  scan: scrub repaired 0B in 00:01:05 with 0 errors on {}\n", ctime(1_700_000_065))
        );
        let running = scan_lines(&st(phys(ScanState::Scanning)), 1_700_000_010);
        assert_eq!(
            running,
            format!(
                "  scan: scrub in progress since {t0}\n\
             \t1G / 2G scanned at 102M/s, 512M / 2G issued at 51.2M/s\n\
             \t0B repaired, 25.00% done, 00:00:30 to go\n"
            )
        );
        let mut paused = phys(ScanState::Scanning);
        paused.paused_since_s = Some(1_700_000_020);
        assert!(scan_lines(&st(paused), 0).starts_with(&format!("  scan: scrub paused since {}\n\tscrub started on", ctime(1_700_000_020))));
        let mut r = phys(ScanState::Finished);
        r.func = ScanKind::Resilver;
        r.repaired_bytes = 3 << 20;
        assert!(scan_lines(&st(r), 0).starts_with("  scan: resilvered 3M in 00:01:05 with 0 errors on"));
        assert_eq!(duration(90_061), "1 days 01:01:01");
        let degraded = "  pool: t\n state: DEGRADED\nstatus: One or more devices could not be opened.\naction: x\nconfig:\n\nrows\n";
        assert_eq!(
            with_resilver_explanation(degraded),
            "  pool: t\n state: DEGRADED\nstatus: One or more devices is currently being resilvered.  The pool will\n\
             \tcontinue to function, possibly in a degraded state.\naction: Wait for the resilver to complete.\nconfig:\n\nrows\n"
        );
    }
}
