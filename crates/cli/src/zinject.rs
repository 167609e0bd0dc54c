//! # zinject — fault injection into imported pools, run inside the daemon
//!
//! Theory: the device-fault subset of OpenZFS `zinject(8)`, with its syntax, listing
//! tables and messages (`cmd/zinject/zinject.c`, `translate.c`):
//!
//! * `zinject` — list the handlers: a table of error handlers (`ID POOL GUID TYPE
//!   ERROR FREQ MATCH INJECT`), then one of delay handlers (`ID POOL GUID DELAY (ms)
//!   LANES FREQ MATCH INJECT`), each followed by a blank line; "No handlers
//!   registered." when there are none.
//! * `zinject -c <id|all>` — remove one handler ("removed handler N") or all
//!   ("removed all registered handlers").
//! * `zinject -d device [-e io|checksum|corrupt] [-T read|write|flush|all] [-f pct]
//!   [-q] pool` — fail (`io`, the default here) or corrupt (`checksum`; `corrupt` is
//!   OpenZFS's newer name for the same bit flip) the I/O of one leaf.
//! * `zinject -d device -D ms[:lanes] | -D seek:max_ms[:min_ms] [-T read|write|all]
//!   [-f pct] [-q] pool` — make that leaf slow: OpenZFS's fixed latency with lanes
//!   (lanes default to 1 here; OpenZFS requires them), or Tarn's seek model of one
//!   disk head (`min_ms`, default 1, per I/O plus a seek cost proportional to the
//!   distance from the previous I/O, up to `max_ms` across the whole device; flushes
//!   cost `min_ms`). See `tarn_vdev::inject` for the exact semantics.
//!
//! `device` is a leaf path of the pool (resolved against the client's cwd like a
//! `zpool create` vdev; symlinks are followed) or its vdev GUID (decimal, or hex with
//! `0x`). Everything is checked before anything is registered: an unknown pool
//! ("cannot open 'p': no such pool"), an unknown device ("cannot find device 'd' in
//! pool 'p'"), or a refused combination registers nothing. A pool with handlers cannot
//! be exported or destroyed ("pool is busy", as OpenZFS), see [`busy`].
//!
//! Not implemented from OpenZFS: data faults (`-t`, `-b`), label faults (`-L`), `nxio`
//! and `dtl` errors, `-A`, `-I`, `-p`, `-P`, `-E`, `-F`, and the ARC/unload flags
//! (`-a`, `-u`, `-m`); they are refused as invalid options.
//!
//! Exit status: 0 on success, 1 for a failed request or bad value, 2 for a usage error,
//! as OpenZFS. The caller holds the daemon's state lock.

use std::path::Path;
use std::time::Duration;

use tarn_spa::inject::{self, Action, Delay, Fault, HandlerInfo, IoType, LeafDevice, FREQ_ALWAYS_PPM};
use tarn_spa::{Pool, SpaError};

use crate::args::{self, getopt};
use crate::proto::Response;
use crate::state::{Ctx, State};

/// `zinject -h`, printed on stdout as OpenZFS does.
pub const USAGE: &str = "usage:\n\n\
\tzinject\n\n\
\t\tList all active injection records.\n\n\
\tzinject -c <id|all>\n\n\
\t\tClear the particular record (if given a numeric ID), or\n\
\t\tall records if 'all' is specified.\n\n\
\tzinject -d device [-e errno] [-T <read|write|flush|all>] [-f frequency]\n\
\t\t[-q] pool\n\n\
\t\tInject a fault into a particular device: a leaf path of the\n\
\t\tpool or its vdev GUID.\n\
\t\t'errno' can be 'io' (the default: the IO fails with EIO) or\n\
\t\t'checksum' (or 'corrupt': one bit of what a read returns is\n\
\t\tflipped, so the checksum fails and redundancy repairs it;\n\
\t\treads only).\n\
\t\t'frequency' is a value between 0.0001 and 100.0 that limits\n\
\t\tdevice error injection to a percentage of the IOs.\n\n\
\tzinject -d device -D latency[:lanes] [-T <read|write|all>] [-f frequency]\n\
\t\t[-q] pool\n\n\
\t\tAdd an artificial delay to IO requests on a particular\n\
\t\tdevice, such that the requests take a minimum of 'latency'\n\
\t\tmilliseconds to complete. Each delay has an associated\n\
\t\tnumber of 'lanes' (default 1) which defines the number of\n\
\t\tconcurrent IO requests that can be processed: with one lane\n\
\t\trequests queue behind each other like on a single disk head.\n\
\t\tDelays are additive: '-D 10:1' followed by '-D 25:2' gives\n\
\t\tthe device one 10 ms lane and two 25 ms lanes. A delay on\n\
\t\twrites also delays cache flushes.\n\n\
\tzinject -d device -D seek:max[:min] [-T <read|write|all>] [-f frequency]\n\
\t\t[-q] pool\n\n\
\t\tSimulate a hard disk head: one IO at a time, each taking\n\
\t\t'min' milliseconds (default 1) plus a seek proportional to\n\
\t\tits distance from where the previous IO ended, so that a seek\n\
\t\tacross the whole device takes 'max' milliseconds. A cache\n\
\t\tflush takes 'min'. Decimals are accepted ('seek:12:0.5').\n\n\
\t\t-q\tQuiet mode.  Only print out the handler number added.\n";

/// Run `zinject ARGS`.
pub fn run(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    if args.is_empty() {
        return Response::ok(list(&inject::handlers()));
    }
    let p = match getopt(args, "c:d:D:e:f:hqT:") {
        Ok(p) => p,
        Err(e) => {
            return match e.strip_prefix("missing argument for '").and_then(|r| r.chars().next()) {
                Some(c) => usage_error(&format!("option -{c} requires an operand"), 1),
                None => usage_error(&e, 2),
            };
        }
    };
    if p.has('h') {
        return Response::ok(USAGE);
    }
    if let Some(cancel) = p.last('c') {
        if ['d', 'D', 'e', 'f', 'T'].iter().any(|&c| p.has(c)) {
            return usage_error("cancel (-c) incompatible with any other options", 2);
        }
        if !p.operands.is_empty() {
            return usage_error("extraneous argument to '-c'", 2);
        }
        return clear(&cancel);
    }
    let Some(device) = p.last('d') else {
        return usage_error("a device (-d) must be specified", 2);
    };
    let fault = match p.last('e').as_deref() {
        None => None,
        Some(w) => match w.to_ascii_lowercase().as_str() {
            "io" => Some(Fault::Io),
            "checksum" | "corrupt" => Some(Fault::Checksum),
            _ => return usage_error(&format!("invalid error type '{w}': must be one of: io checksum corrupt"), 1),
        },
    };
    let io_type = match p.last('T') {
        None => IoType::All,
        Some(w) => match IoType::parse(&w) {
            Some(t) => t,
            None => return usage_error(&format!("invalid I/O type '{w}': must be 'read', 'write', 'flush' or 'all'"), 1),
        },
    };
    let freq_ppm = match p.last('f') {
        None => FREQ_ALWAYS_PPM,
        Some(w) => match parse_frequency(&w) {
            Ok(f) => f,
            Err(e) => return Response::err(format!("{e}frequency value must be in the range [0.0001, 100.0]")),
        },
    };
    let delay = match p.last('D') {
        None => None,
        Some(w) => match parse_delay(&w) {
            Some(d) => Some(d),
            None => return usage_error(&format!("invalid i/o delay value: '{w}'"), 1),
        },
    };
    let action = match (delay, fault) {
        (Some(_), Some(_)) => return Response::err("error type -e incompatible with delay injection"),
        (Some(d), None) => Action::Delay(d),
        (None, f) => Action::Fault(f.unwrap_or(Fault::Io)),
    };
    let pool_name = match p.operands.as_slice() {
        [name] => name,
        _ => return usage_error("device (-d) injection requires a single pool name", 2),
    };
    let Some(entry) = st.pools.get(pool_name) else {
        return Response::err(format!("cannot open '{pool_name}': no such pool"));
    };
    let Some(leaf) = find_device(&entry.pool, &device, &ctx.cwd) else {
        return Response::err(format!("cannot find device '{device}' in pool '{pool_name}'"));
    };
    let id = match entry.pool.inject(leaf.guid, io_type, action, freq_ppm) {
        Ok(id) => id,
        Err(SpaError::Invalid(m)) | Err(SpaError::NotFound(m)) => return Response::err(m),
        Err(e) => return Response::err(format!("failed to add handler: {e}")),
    };
    if p.has('q') {
        return Response::ok(format!("{id}\n"));
    }
    let registered = entry
        .pool
        .inject_handlers()
        .into_iter()
        .find(|h| h.id == id)
        .map(|h| h.spec.io_type)
        .unwrap_or(io_type);
    Response::ok(format!(
        "Added handler {id} with the following properties:\n  pool: {pool_name}\n  vdev: {:x}\niotype: {}\n",
        leaf.guid,
        registered.as_str()
    ))
}

/// OpenZFS prints the message on stderr and the usage on stdout.
fn usage_error(msg: &str, code: i32) -> Response {
    Response {
        stdout: USAGE.into(),
        stderr: format!("{msg}\n"),
        code,
    }
}

/// `-c id` / `-c all`.
fn clear(cancel: &str) -> Response {
    if cancel == "all" {
        inject::clear_all();
        return Response::ok("removed all registered handlers\n");
    }
    let Ok(id) = cancel.parse::<u64>() else {
        return usage_error(&format!("invalid handle id '{cancel}': must be an integer or 'all'"), 1);
    };
    if inject::clear(id) {
        Response::ok(format!("removed handler {id}\n"))
    } else {
        Response::err(format!("failed to remove handler {id}: No such file or directory"))
    }
}

/// Refusal of `zpool export`/`zpool destroy` (`verb`) while the pool has handlers, in
/// OpenZFS's words; `None` when it has none.
pub fn busy(pool: &Pool, verb: &str) -> Option<String> {
    if pool.inject_handlers().is_empty() {
        None
    } else {
        Some(format!("cannot {verb} '{}': pool is busy", pool.name()))
    }
}

/// The leaf `word` names: its vdev GUID (decimal or `0x` hex), else its path.
fn find_device(pool: &Pool, word: &str, cwd: &Path) -> Option<LeafDevice> {
    let leaves = pool.leaf_devices();
    if let Some(guid) = parse_guid(word) {
        if let Some(l) = leaves.iter().find(|l| l.guid == guid) {
            return Some(l.clone());
        }
    }
    let path = args::resolve_device(word, cwd, false);
    if let Some(l) = leaves.iter().find(|l| Path::new(&l.path) == path) {
        return Some(l.clone());
    }
    let canonical = std::fs::canonicalize(&path).ok()?;
    leaves
        .iter()
        .find(|l| std::fs::canonicalize(&l.path).ok().as_ref() == Some(&canonical))
        .cloned()
}

/// A non-zero GUID written as `strtoull(s, 0)` reads it (decimal or `0x` hex).
fn parse_guid(word: &str) -> Option<u64> {
    let g = match word.strip_prefix("0x").or_else(|| word.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => word.parse::<u64>().ok()?,
    };
    (g != 0).then_some(g)
}

/// `-f pct` → parts per million; the error is OpenZFS's message prefix.
fn parse_frequency(word: &str) -> Result<u32, &'static str> {
    let pct: f64 = word.trim().parse().map_err(|_| "invalid value: ")?;
    if !pct.is_finite() {
        return Err("invalid value: ");
    }
    let share = pct / 100.0;
    if !(0.000001..=1.0).contains(&share) {
        return Err("out of range: ");
    }
    Ok((share * FREQ_ALWAYS_PPM as f64).round() as u32)
}

/// Milliseconds as written on the command line (decimals allowed), at most an hour.
fn parse_ms(word: &str) -> Option<Duration> {
    let ms: f64 = word.parse().ok()?;
    (ms.is_finite() && (0.0..=3_600_000.0).contains(&ms)).then(|| Duration::from_secs_f64(ms / 1000.0))
}

/// `-D ms[:lanes]` (whole milliseconds > 0, lanes >= 1) or `-D seek:max[:min]`.
fn parse_delay(word: &str) -> Option<Delay> {
    if let Some(rest) = word.strip_prefix("seek:") {
        let mut it = rest.split(':');
        let max_latency = parse_ms(it.next()?)?;
        let min_latency = match it.next() {
            Some(w) => parse_ms(w)?,
            None => Duration::from_millis(1),
        };
        if it.next().is_some() || max_latency.is_zero() || min_latency > max_latency {
            return None;
        }
        return Some(Delay::Seek { min_latency, max_latency });
    }
    let (ms, lanes) = match word.split_once(':') {
        Some((ms, lanes)) => (ms, lanes.parse::<u32>().ok()?),
        None => (word, 1),
    };
    let ms: u64 = ms.parse().ok()?;
    if ms == 0 || ms > 3_600_000 || lanes == 0 {
        return None;
    }
    Some(Delay::Fixed {
        latency: Duration::from_millis(ms),
        lanes,
    })
}

/// Milliseconds for the listing: whole numbers without decimals, others trimmed.
fn fmt_ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    let s = format!("{ms:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn freq_pct(h: &HandlerInfo) -> f64 {
    h.spec.freq_ppm as f64 / FREQ_ALWAYS_PPM as f64 * 100.0
}

/// The `zinject` listing (OpenZFS `print_all_handlers`, device and delay tables).
pub fn list(handlers: &[HandlerInfo]) -> String {
    let mut out = String::new();
    let faults: Vec<&HandlerInfo> = handlers.iter().filter(|h| matches!(h.spec.action, Action::Fault(_))).collect();
    if !faults.is_empty() {
        out.push_str(&format!(
            "{:>3}  {:<15}  {:<16}  {:<5}  {:<10}  {:<9}  {:<6}  {:<6}\n",
            "ID", "POOL", "GUID", "TYPE", "ERROR", "FREQ", "MATCH", "INJECT"
        ));
        out.push_str("---  ---------------  ----------------  -----  ----------  ---------  ------  ------\n");
        for h in faults {
            let Action::Fault(f) = h.spec.action else { continue };
            out.push_str(&format!(
                "{:>3}  {:<15}  {:x}  {:<5}  {:<10}  {:>8.4}%  {:>6}  {:>6}\n",
                h.id,
                h.spec.pool,
                h.spec.vdev_guid,
                h.spec.io_type.as_str(),
                f.as_str(),
                freq_pct(h),
                h.match_count,
                h.inject_count
            ));
        }
        out.push('\n');
    }
    let delays: Vec<&HandlerInfo> = handlers.iter().filter(|h| matches!(h.spec.action, Action::Delay(_))).collect();
    if !delays.is_empty() {
        out.push_str(&format!(
            "{:>3}  {:<15}  {:<16}  {:<10}  {:<5}  {:<9}  {:<6}  {:<6}\n",
            "ID", "POOL", "GUID", "DELAY (ms)", "LANES", "FREQ", "MATCH", "INJECT"
        ));
        out.push_str("---  ---------------  ----------------  ----------  -----  ---------  ------  ------\n");
        for h in delays {
            let Action::Delay(d) = h.spec.action else { continue };
            let (delay, lanes) = match d {
                Delay::Fixed { latency, lanes } => (fmt_ms(latency), lanes),
                Delay::Seek { min_latency, max_latency } => (format!("seek:{}:{}", fmt_ms(max_latency), fmt_ms(min_latency)), 1),
            };
            out.push_str(&format!(
                "{:>3}  {:<15}  {:x}  {:>10}  {:>5}  {:>8.4}%  {:>6}  {:>6}\n",
                h.id,
                h.spec.pool,
                h.spec.vdev_guid,
                delay,
                lanes,
                freq_pct(h),
                h.match_count,
                h.inject_count
            ));
        }
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("No handlers registered.\nRun 'zinject -h' for usage information.\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_spa::inject::HandlerSpec;

    #[test]
    fn delay_syntax() {
        let ms = Duration::from_millis;
        assert_eq!(parse_delay("10"), Some(Delay::Fixed { latency: ms(10), lanes: 1 }));
        assert_eq!(parse_delay("10:4"), Some(Delay::Fixed { latency: ms(10), lanes: 4 }));
        assert_eq!(
            parse_delay("seek:20"),
            Some(Delay::Seek {
                min_latency: ms(1),
                max_latency: ms(20)
            })
        );
        assert_eq!(
            parse_delay("seek:12:0.5"),
            Some(Delay::Seek {
                min_latency: Duration::from_micros(500),
                max_latency: ms(12)
            })
        );
        for bad in [
            "0",
            "0:1",
            "10:0",
            "-1",
            "x",
            "10:",
            ":2",
            "1.5",
            "seek:",
            "seek:0",
            "seek:5:6",
            "seek:5:1:1",
            "seek:x",
            "seek:-3",
        ] {
            assert_eq!(parse_delay(bad), None, "{bad}");
        }
    }

    #[test]
    fn frequency_syntax() {
        assert_eq!(parse_frequency("100"), Ok(FREQ_ALWAYS_PPM));
        assert_eq!(parse_frequency("50"), Ok(500_000));
        assert_eq!(parse_frequency("0.0001"), Ok(1));
        assert_eq!(parse_frequency("0"), Err("out of range: "));
        assert_eq!(parse_frequency("100.5"), Err("out of range: "));
        assert_eq!(parse_frequency("ten"), Err("invalid value: "));
    }

    #[test]
    fn guid_syntax() {
        assert_eq!(parse_guid("12345"), Some(12345));
        assert_eq!(parse_guid("0x1f"), Some(31));
        assert_eq!(parse_guid("0"), None);
        assert_eq!(parse_guid("/tmp/a"), None);
    }

    #[test]
    fn listing_tables() {
        assert_eq!(list(&[]), "No handlers registered.\nRun 'zinject -h' for usage information.\n");
        let h = |id, io_type, action, freq_ppm, m, i| HandlerInfo {
            id,
            spec: HandlerSpec {
                pool: "tank".into(),
                vdev_guid: 0x1234abcd,
                path: "/v/a".into(),
                io_type,
                action,
                freq_ppm,
            },
            match_count: m,
            inject_count: i,
        };
        let ms = Duration::from_millis;
        let out = list(&[
            h(1, IoType::Read, Action::Fault(Fault::Checksum), FREQ_ALWAYS_PPM, 7, 7),
            h(2, IoType::All, Action::Delay(Delay::Fixed { latency: ms(25), lanes: 2 }), FREQ_ALWAYS_PPM, 3, 3),
            h(3, IoType::All, Action::Fault(Fault::Io), 250_000, 40, 9),
            h(
                4,
                IoType::All,
                Action::Delay(Delay::Seek {
                    min_latency: Duration::from_micros(500),
                    max_latency: ms(12),
                }),
                FREQ_ALWAYS_PPM,
                0,
                0,
            ),
        ]);
        let want = " ID  POOL             GUID              TYPE   ERROR       FREQ       MATCH   INJECT
---  ---------------  ----------------  -----  ----------  ---------  ------  ------
  1  tank             1234abcd  read   checksum    100.0000%       7       7
  3  tank             1234abcd  all    io           25.0000%      40       9

 ID  POOL             GUID              DELAY (ms)  LANES  FREQ       MATCH   INJECT
---  ---------------  ----------------  ----------  -----  ---------  ------  ------
  2  tank             1234abcd          25      2  100.0000%       3       3
  4  tank             1234abcd  seek:12:0.5      1  100.0000%       0       0

";
        assert_eq!(out, want);
    }
}
