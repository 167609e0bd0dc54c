//! # format — OpenZFS-compatible text output
//!
//! Theory: every table `zpool`/`zfs` prints is a list of rows of cells computed first,
//! then laid out in one pass, so column widths are the maximum over the header and
//! every row (OpenZFS collects all rows before printing too). Three layouts exist:
//!
//! * human tables (`zpool list`, `zfs list`, `zfs get`, `zpool get`): header in capitals,
//!   two spaces between columns, each column left- or right-justified as OpenZFS does
//!   (names and strings left, numbers right); the last column, when left-justified, is
//!   not padded (no trailing blanks); numeric columns are at least 5 wide;
//! * scripted (`-H`): no header, one tab between fields, nothing padded;
//! * the `zpool status` / `zpool import` configuration trees, whose name column is as
//!   wide as the widest name plus its indentation (two spaces per level), at least 10.
//!   Separate log vdevs are left out of the pool's tree and listed after it under a
//!   `logs` line (OpenZFS `print_class_vdevs`: a tab, "logs", a tab), two spaces in;
//!   the name column's width counts them too. Hot spares follow under `spares`
//!   (OpenZFS `print_spares`): AVAIL, or INUSE "currently in use", no counters.
//!   Cache devices come between the two under `cache` (OpenZFS `print_l2cache`),
//!   with their counters.
//!   A leaf that a running resilver writes ends with "(resilvering)"; a faulted leaf
//!   says "too many errors".
//!
//! Sizes are printed like `zfs_nicebytes`: 1024-based, suffixes K M G T P E, at most
//! five characters ("1.88G", "63.5G", "960M"), exact multiples without decimals
//! ("128K"), values under 1024 as "512B" (and "0B"). With `-p` the raw number is
//! printed instead. This module is pure: no pool, no I/O, so it is unit tested alone.

use std::collections::BTreeMap;
use tarn_spa::{ImportCandidate, VdevStatus};

const SUFFIXES: [&str; 7] = ["B", "K", "M", "G", "T", "P", "E"];

/// `zfs_nicenum` without a byte suffix for small values (counters: "0", "12", "1.50K").
pub fn nicenum(n: u64) -> String {
    nice(n, false)
}

/// `secs` since the epoch in the local time zone (`$TZ`, else `/etc/localtime`),
/// formatted by strftime-style `fmt`.
pub fn local_time(secs: u64, fmt: &str) -> String {
    match jiff::Timestamp::from_second(secs.min(i64::MAX as u64) as i64) {
        Ok(ts) => ts.to_zoned_datetime(jiff::tz::TimeZone::system()).strftime(fmt).to_string(),
        Err(_) => secs.to_string(),
    }
}

/// `ctime(3)`'s form in local time: "Mon Nov 23 05:15:01 2026".
pub fn ctime(secs: u64) -> String {
    local_time(secs, "%a %b %e %H:%M:%S %Y")
}

/// A `zpool history` record as stored (`YYYY-MM-DD.HH:MM:SS command`, UTC) with its
/// time in local time, as OpenZFS prints it.
pub fn history_line(record: &str) -> String {
    let Some((when, rest)) = record.split_once(' ') else {
        return record.to_string();
    };
    let utc = jiff::civil::DateTime::strptime("%Y-%m-%d.%H:%M:%S", when)
        .ok()
        .and_then(|dt| dt.to_zoned_datetime(jiff::tz::TimeZone::UTC).ok());
    match utc {
        Some(z) => format!("{} {rest}", local_time(z.timestamp().as_second().max(0) as u64, "%Y-%m-%d.%H:%M:%S")),
        None => record.to_string(),
    }
}

/// A status tree with its device names as `zpool status` prints them: a leaf under
/// `/dev/` loses that prefix unless `full_paths` (`-P`), as OpenZFS's
/// `zpool_vdev_name` does; file vdevs keep their paths.
pub fn device_names(mut v: VdevStatus, full_paths: bool) -> VdevStatus {
    if !full_paths {
        if let Some(short) = v.name.strip_prefix("/dev/") {
            v.name = short.to_string();
        }
    }
    v.children = v.children.into_iter().map(|c| device_names(c, full_paths)).collect();
    v
}

/// A compression ratio as OpenZFS prints `compressratio`: 100 × logical / physical
/// in integer arithmetic (1.00 when nothing is stored), two decimals and an `x`
/// ("%llu.%02llux"); `parsable` (`-p`) leaves the `x` off.
pub fn ratio(logical_bytes: u64, physical_bytes: u64, parsable: bool) -> String {
    let r = (u128::from(logical_bytes) * 100).checked_div(u128::from(physical_bytes)).unwrap_or(100);
    format!("{}.{:02}{}", r / 100, r % 100, if parsable { "" } else { "x" })
}

/// `zfs_nicebytes`: "0B", "512B", "128K", "1.88G".
pub fn nicebytes(n: u64) -> String {
    nice(n, true)
}

fn nice(n: u64, bytes: bool) -> String {
    let mut index = 0usize;
    let mut v = n;
    while v >= 1024 && index < SUFFIXES.len() - 1 {
        v /= 1024;
        index += 1;
    }
    if index == 0 {
        return if bytes { format!("{n}B") } else { format!("{n}") };
    }
    let unit = SUFFIXES[index];
    let div = 1u128 << (10 * index);
    if (n as u128).is_multiple_of(div) {
        return format!("{}{unit}", (n as u128) / div);
    }
    let value = n as f64 / div as f64;
    // Most precision that fits in five characters, suffix included.
    for precision in (0..=2).rev() {
        let s = format!("{value:.precision$}{unit}");
        if s.len() <= 5 {
            return s;
        }
    }
    format!("{value:.0}{unit}")
}

/// Parse a human size into bytes; the pool layer owns the rule (`tarn_spa::parse_size`).
pub use tarn_spa::parse_size;

/// Horizontal placement of a column's cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right.
    Left,
    /// Padded on the left (numbers).
    Right,
}

/// One column of a table: header text, alignment, minimum width.
#[derive(Debug, Clone)]
pub struct Column {
    /// Header ("NAME", "SIZE", ...).
    pub header: String,
    /// Alignment of header and cells.
    pub align: Align,
    /// Minimum width (5 for OpenZFS numeric columns).
    pub min_width: usize,
}

impl Column {
    /// A left-aligned column.
    pub fn left(header: &str) -> Column {
        Column {
            header: header.to_string(),
            align: Align::Left,
            min_width: 0,
        }
    }
    /// A right-aligned numeric column (at least 5 wide).
    pub fn right(header: &str) -> Column {
        Column {
            header: header.to_string(),
            align: Align::Right,
            min_width: 5,
        }
    }
}

/// Lay out a table. `scripted` (`-H`): no header, tab-separated, no padding.
pub fn table(columns: &[Column], rows: &[Vec<String>], scripted: bool) -> String {
    let mut out = String::new();
    if scripted {
        for row in rows {
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let mut widths: Vec<usize> = columns.iter().map(|c| c.header.chars().count().max(c.min_width)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let header: Vec<String> = columns.iter().map(|c| c.header.clone()).collect();
    for line in std::iter::once(&header).chain(rows.iter()) {
        let mut s = String::new();
        for (i, col) in columns.iter().enumerate() {
            let cell = line.get(i).map(String::as_str).unwrap_or("");
            let last = i + 1 == columns.len();
            if i > 0 {
                s.push_str("  ");
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            match col.align {
                Align::Right => {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(cell);
                }
                Align::Left => {
                    s.push_str(cell);
                    if !last {
                        s.push_str(&" ".repeat(pad));
                    }
                }
            }
        }
        out.push_str(&s);
        out.push('\n');
    }
    out
}

fn tree_width(v: &VdevStatus, depth: usize) -> usize {
    let own = v.name.chars().count() + depth;
    let extra = v.spares.iter().chain(&v.caches).map(|c| tree_width(c, depth + 2));
    v.children.iter().map(|c| tree_width(c, depth + 2)).chain(extra).fold(own, usize::max)
}

fn is_leaf(v: &VdevStatus) -> bool {
    v.children.is_empty()
}

/// OpenZFS's reason after an unusable vdev's state: a leaf that could not be opened,
/// or an interior vdev with too few usable children ("insufficient replicas").
fn aux_note(v: &VdevStatus, root: bool) -> &'static str {
    if root || !(v.state == "UNAVAIL" || v.state == "FAULTED") {
        ""
    } else if is_leaf(v) && v.state == "FAULTED" {
        "  too many errors"
    } else if is_leaf(v) {
        "  cannot open"
    } else {
        "  insufficient replicas"
    }
}

/// The root's children of one class: normal vdevs (`logs` false) or log vdevs.
fn class_children(root: &VdevStatus, logs: bool) -> impl Iterator<Item = &VdevStatus> {
    root.children.iter().filter(move |c| c.is_log == logs)
}

fn status_rows(v: &VdevStatus, depth: usize, width: usize, root: bool, out: &mut String) {
    let pad = width.saturating_sub(v.name.chars().count() + depth);
    out.push_str(&format!(
        "\t{}{}{}  {:<8} {:>5} {:>5} {:>5}",
        " ".repeat(depth),
        v.name,
        " ".repeat(pad),
        v.state,
        nicenum(v.read_errors),
        nicenum(v.write_errors),
        nicenum(v.checksum_errors)
    ));
    out.push_str(aux_note(v, root));
    if v.resilvering {
        out.push_str("  (resilvering)");
    }
    out.push('\n');
    let children: Vec<&VdevStatus> = if root {
        class_children(v, false).collect()
    } else {
        v.children.iter().collect()
    };
    for c in children {
        status_rows(c, depth + 2, width, false, out);
    }
}

/// The `config:` tree of `zpool status` (header line and one line per vdev), log
/// vdevs under `logs` after the pool's tree.
pub fn status_config(root: &VdevStatus) -> String {
    let width = tree_width(root, 0).max(10);
    let mut out = format!("\t{:<width$}  {:<8} {:>5} {:>5} {:>5}\n", "NAME", "STATE", "READ", "WRITE", "CKSUM");
    status_rows(root, 0, width, true, &mut out);
    let mut logs = class_children(root, true).peekable();
    if logs.peek().is_some() {
        out.push_str("\tlogs\t\n");
        for l in logs {
            status_rows(l, 2, width, false, &mut out);
        }
    }
    if !root.caches.is_empty() {
        // OpenZFS `print_l2cache`: after the log vdevs, before the spares, with
        // counters.
        out.push_str("\tcache\n");
        for c in &root.caches {
            status_rows(c, 2, width, false, &mut out);
        }
    }
    if !root.spares.is_empty() {
        // OpenZFS `print_spares`: state AVAIL/INUSE (padded, no counters), then why.
        out.push_str("\tspares\n");
        for sp in &root.spares {
            let note = match sp.state.as_str() {
                "INUSE" => "  currently in use",
                "UNAVAIL" => "  cannot open",
                _ => "",
            };
            out.push_str(&format!("\t  {:<w$}  {:<8}{note}\n", sp.name, sp.state, w = width - 2));
        }
    }
    out
}

/// One deduplicated block for [`dedup_stats`]: logical, physical and allocated
/// (all DVAs) bytes, and the pointers naming it.
#[derive(Debug, Clone, Copy)]
pub struct DedupBlock {
    /// Logical size, bytes.
    pub lsize_bytes: u64,
    /// Physical size, bytes.
    pub psize_bytes: u64,
    /// Allocated bytes over every DVA.
    pub dsize_bytes: u64,
    /// Pointers naming it.
    pub refcount: u64,
}

impl DedupBlock {
    /// The block of dedup table entry (`k`, `e`).
    pub fn of_entry(k: &tarn_zio::ddt::DdtKey, e: &tarn_zio::ddt::DdtEntry) -> DedupBlock {
        DedupBlock {
            lsize_bytes: u64::from(k.lsize_bytes),
            psize_bytes: u64::from(k.psize_bytes),
            dsize_bytes: e.dva.iter().map(|d| d.asize_bytes).sum(),
            refcount: e.refcount,
        }
    }
}

/// The dedup block of `zpool status -D` (OpenZFS `print_dedup_stats`): " dedup: DDT
/// entries N, size X on disk, Y in core" (bytes per entry), a blank line, then
/// [`ddt_histogram`]; " dedup: no DDT entries" when the table is empty.
pub fn dedup_stats(blocks: &[DedupBlock], disk_bytes_per_entry: u64, core_bytes_per_entry: u64) -> String {
    if blocks.is_empty() {
        return " dedup: no DDT entries\n".into();
    }
    format!(
        " dedup: DDT entries {}, size {} on disk, {} in core\n\n{}",
        blocks.len(),
        nicebytes(disk_bytes_per_entry),
        nicebytes(core_bytes_per_entry),
        ddt_histogram(blocks, nicebytes)
    )
}

/// OpenZFS's DDT histogram (`zpool_dump_ddt`, also `zdb -DD`/`-S`): one row per
/// bucket of reference counts (powers of two), the blocks and bytes allocated (each
/// block once) and referenced (once per reference), then a Total row. `size` formats
/// the byte columns (`zpool` prints [`nicebytes`], `zdb` [`nicenum`]).
pub fn ddt_histogram(blocks: &[DedupBlock], size: fn(u64) -> String) -> String {
    // [allocated blocks, lsize, psize, dsize, referenced blocks, lsize, psize, dsize]
    let mut buckets: BTreeMap<u32, [u64; 8]> = BTreeMap::new();
    for b in blocks.iter().filter(|b| b.refcount > 0) {
        let h = 63 - b.refcount.leading_zeros();
        let r = buckets.entry(h).or_default();
        let add = [1, b.lsize_bytes, b.psize_bytes, b.dsize_bytes];
        for i in 0..4 {
            r[i] += add[i];
            r[4 + i] += add[i].saturating_mul(b.refcount);
        }
    }
    let mut out = String::new();
    out.push_str("bucket              allocated                       referenced          \n");
    out.push_str("______   ______________________________   ______________________________\n");
    out.push_str("refcnt   blocks   LSIZE   PSIZE   DSIZE   blocks   LSIZE   PSIZE   DSIZE\n");
    out.push_str("------   ------   -----   -----   -----   ------   -----   -----   -----\n");
    let row = |label: String, r: &[u64; 8]| {
        format!(
            "{label:>6}   {:>6}   {:>5}   {:>5}   {:>5}   {:>6}   {:>5}   {:>5}   {:>5}\n",
            nicenum(r[0]),
            size(r[1]),
            size(r[2]),
            size(r[3]),
            nicenum(r[4]),
            size(r[5]),
            size(r[6]),
            size(r[7])
        )
    };
    let mut total = [0u64; 8];
    for (h, r) in &buckets {
        out.push_str(&row(nicenum(1u64 << h), r));
        for i in 0..8 {
            total[i] += r[i];
        }
    }
    out.push_str(&row("Total".into(), &total));
    out
}

/// `zdb`'s ratio line under a DDT histogram: dedup (referenced over allocated
/// bytes), compress (logical over physical), copies (allocated over physical) and
/// dedup × compress / copies, of the referenced blocks.
pub fn ddt_ratios(blocks: &[DedupBlock]) -> String {
    let (mut ref_dsize, mut alloc_dsize, mut ref_lsize, mut ref_psize) = (0u64, 0u64, 0u64, 0u64);
    for b in blocks {
        alloc_dsize += b.dsize_bytes;
        ref_dsize += b.dsize_bytes * b.refcount;
        ref_lsize += b.lsize_bytes * b.refcount;
        ref_psize += b.psize_bytes * b.refcount;
    }
    let ratio = |a: u64, b: u64| if b == 0 { 1.0 } else { a as f64 / b as f64 };
    let dedup = ratio(ref_dsize, alloc_dsize);
    let compress = ratio(ref_lsize, ref_psize);
    let copies = ratio(ref_dsize, ref_psize);
    format!(
        "dedup = {dedup:.2}, compress = {compress:.2}, copies = {copies:.2}, dedup * compress / copies = {:.2}\n",
        dedup * compress / copies
    )
}

fn any_errors(v: &VdevStatus) -> bool {
    v.read_errors + v.write_errors + v.checksum_errors > 0 || v.children.iter().any(any_errors)
}

/// Whether some leaf below `v` is in `state`.
fn any_leaf(v: &VdevStatus, state: &str) -> bool {
    if is_leaf(v) {
        v.state == state
    } else {
        v.children.iter().any(|c| any_leaf(c, state))
    }
}

/// `status:`/`action:`/`see:` lines for a pool in this state (empty when healthy).
/// A degraded pool is explained by its first kind of trouble in OpenZFS's order:
/// devices that could not be opened, data errors, faulted devices, offline devices.
pub fn status_explanation(health: &str, root: &VdevStatus, data_errors: u64) -> String {
    let degraded_by = |state: &str| health == "DEGRADED" && !any_leaf(root, "UNAVAIL") && data_errors == 0 && any_leaf(root, state);
    if degraded_by("FAULTED") {
        return "status: One or more devices are faulted in response to persistent errors.\n\
                \tSufficient replicas exist for the pool to continue functioning in a\n\
                \tdegraded state.\n\
                action: Replace the faulted device, or use 'zpool clear' to mark the device\n\
                \trepaired.\n   \
                see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-K4\n"
            .to_string();
    }
    if degraded_by("OFFLINE") {
        return "status: One or more devices has been taken offline by the administrator.\n\
                \tSufficient replicas exist for the pool to continue functioning in a\n\
                \tdegraded state.\n\
                action: Online the device using 'zpool online' or replace the device with\n\
                \t'zpool replace'.\n"
            .to_string();
    }
    match health {
        "DEGRADED" => "status: One or more devices could not be opened.  Sufficient replicas exist for\n\
                       \tthe pool to continue functioning in a degraded state.\n\
                       action: Attach the missing device and online it using 'zpool online'.\n   \
                       see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-2Q\n"
            .to_string(),
        "UNAVAIL" | "FAULTED" => "status: One or more devices could not be opened.  There are insufficient\n\
                                  \treplicas for the pool to continue functioning.\n\
                                  action: Attach the missing device and online it using 'zpool online'.\n   \
                                  see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-3C\n"
            .to_string(),
        "SUSPENDED" => "status: One or more devices are faulted in response to IO failures.\n\
                        action: Make sure the affected devices are connected, then run 'zpool clear'.\n   \
                        see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-HC\n"
            .to_string(),
        _ if data_errors > 0 => "status: One or more devices has experienced an error resulting in data\n\
                                 \tcorruption.  Applications may be affected.\n\
                                 action: Restore the file in question if possible.  Otherwise restore the\n\
                                 \tentire pool from backup.\n   \
                                 see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-8A\n"
            .to_string(),
        _ if any_errors(root) => "status: One or more devices has experienced an unrecoverable error.  An\n\
                                  \tattempt was made to correct the error.  Applications are unaffected.\n\
                                  action: Determine if the device needs to be replaced, and clear the errors\n\
                                  \tusing 'zpool clear' or replace the device with 'zpool replace'.\n   \
                                  see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-9P\n"
            .to_string(),
        _ => String::new(),
    }
}

/// One pool's whole `zpool status` block (without the blank line between pools).
pub fn pool_status(name: &str, health: &str, root: &VdevStatus, data_errors: u64) -> String {
    let mut out = format!("  pool: {name}\n state: {health}\n");
    out.push_str(&status_explanation(health, root, data_errors));
    out.push_str("config:\n\n");
    out.push_str(&status_config(root));
    out.push('\n');
    if data_errors == 0 {
        out.push_str("errors: No known data errors\n");
    } else {
        out.push_str(&format!("errors: {data_errors} data errors, use '-v' for a list\n"));
    }
    out
}

/// True when `zpool status -x` would leave this pool out.
pub fn pool_is_healthy(health: &str, root: &VdevStatus, data_errors: u64) -> bool {
    health == "ONLINE" && data_errors == 0 && !any_errors(root)
}

fn import_rows(v: &VdevStatus, depth: usize, width: usize, out: &mut String) {
    let pad = width.saturating_sub(v.name.chars().count() + depth);
    out.push_str(&format!("\t{}{}{}  {}", " ".repeat(depth), v.name, " ".repeat(pad), v.state));
    out.push_str(aux_note(v, depth == 0));
    out.push('\n');
    let children: Vec<&VdevStatus> = if depth == 0 {
        class_children(v, false).collect()
    } else {
        v.children.iter().collect()
    };
    for c in children {
        import_rows(c, depth + 2, width, out);
    }
}

/// The missing log vdevs that make `zpool import` ask for `-m`, as OpenZFS's
/// `print_vdev_tree` lists them: top-level vdevs four spaces in with `" [log]"`, their
/// leaves two further.
pub fn missing_vdev_tree(missing: &[VdevStatus]) -> String {
    fn rows(v: &VdevStatus, indent: usize, out: &mut String) {
        let tag = if v.is_log { " [log]" } else { "" };
        out.push_str(&format!("\t{}{}{tag}\n", " ".repeat(indent), v.name));
        for c in &v.children {
            rows(c, indent + 2, out);
        }
    }
    let mut out = String::new();
    for v in missing {
        rows(v, 4, &mut out);
    }
    out
}

/// One candidate of `zpool import` (no name): the OpenZFS listing.
pub fn import_candidate(c: &ImportCandidate) -> String {
    let mut out = format!("   pool: {}\n     id: {}\n  state: {}\n", c.name, c.guid, c.health);
    let active = c.state == "active";
    let destroyed = c.state == "destroyed";
    match c.health.as_str() {
        "ONLINE" if active => {
            out.push_str(
                "status: The pool was last accessed by another system.\n \
                 action: The pool can be imported using its name or numeric identifier and\n\
                 \tthe '-f' flag.\n   \
                 see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-EY\n",
            );
        }
        "ONLINE" if destroyed => {
            out.push_str(
                "status: The pool was destroyed, but can be imported using the '-Df' flags.\n \
                 action: The pool can be imported using its name or numeric identifier and\n\
                 \tthe '-D' and '-f' flags.\n",
            );
        }
        "ONLINE" => {
            out.push_str(" action: The pool can be imported using its name or numeric identifier.\n");
        }
        "DEGRADED" => {
            out.push_str(
                "status: One or more devices are missing from the system.\n \
                 action: The pool can be imported despite missing or damaged devices.  The\n\
                 \tfault tolerance of the pool may be compromised if imported.\n   \
                 see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-2Q\n",
            );
        }
        _ => {
            out.push_str(
                "status: One or more devices are missing from the system.\n \
                 action: The pool cannot be imported. Attach the missing\n\
                 \tdevices and try again.\n   \
                 see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-3C\n",
            );
        }
    }
    out.push_str(" config:\n\n");
    let width = tree_width(&c.config, 0).max(10);
    import_rows(&c.config, 0, width, &mut out);
    let mut logs = class_children(&c.config, true).peekable();
    if logs.peek().is_some() {
        out.push_str("\tlogs\t\n");
        for l in logs {
            import_rows(l, 2, width, &mut out);
        }
    }
    out
}

/// `zfs mount` with no arguments: one "name  mountpoint" line per mounted dataset.
pub fn mount_list(mounts: &[(String, String)]) -> String {
    mounts.iter().map(|(n, m)| format!("{n:<30}  {m}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(name: &str, state: &str, children: Vec<VdevStatus>) -> VdevStatus {
        VdevStatus::new(name, state, children)
    }

    #[test]
    fn nicebytes_matches_openzfs() {
        assert_eq!(nicebytes(0), "0B");
        assert_eq!(nicebytes(512), "512B");
        assert_eq!(nicebytes(1023), "1023B");
        assert_eq!(nicebytes(1024), "1K");
        assert_eq!(nicebytes(128 << 10), "128K");
        assert_eq!(nicebytes(1536), "1.50K");
        assert_eq!(nicebytes(24 * 1024 + 512), "24.5K");
        assert_eq!(nicebytes((1.88 * (1u64 << 30) as f64) as u64), "1.88G");
        assert_eq!(nicebytes((63.5 * (1u64 << 30) as f64) as u64), "63.5G");
        assert_eq!(nicebytes(960 << 20), "960M");
        assert_eq!(nicebytes((959.7 * (1u64 << 20) as f64) as u64), "960M");
        assert_eq!(nicebytes(1 << 40), "1T");
        assert_eq!(nicebytes(u64::MAX), "16.0E");
        assert_eq!(nicenum(0), "0");
        assert_eq!(nicenum(12), "12");
        assert_eq!(nicenum(2048), "2K");
    }

    #[test]
    fn nicebytes_never_longer_than_five() {
        let mut n = 1u64;
        while n < u64::MAX / 3 {
            let s = nicebytes(n);
            assert!(s.len() <= 5, "{n} -> {s}");
            n = n * 3 + 7;
        }
    }

    #[test]
    fn zpool_list_layout() {
        let cols = vec![
            Column::left("NAME"),
            Column::right("SIZE"),
            Column::right("ALLOC"),
            Column::right("FREE"),
            Column::right("CAP"),
            Column {
                header: "HEALTH".into(),
                align: Align::Right,
                min_width: 8,
            },
            Column::left("ALTROOT"),
        ];
        let rows = vec![vec!["tank", "1.88G", "111K", "1.87G", "0%", "ONLINE", "-"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()];
        let s = table(&cols, &rows, false);
        assert_eq!(
            s,
            "NAME   SIZE  ALLOC   FREE    CAP    HEALTH  ALTROOT\n\
             tank  1.88G   111K  1.87G     0%    ONLINE  -\n"
        );
        let h = table(&cols, &rows, true);
        assert_eq!(h, "tank\t1.88G\t111K\t1.87G\t0%\tONLINE\t-\n");
    }

    #[test]
    fn zfs_list_layout() {
        let cols = vec![
            Column::left("NAME"),
            Column::right("USED"),
            Column::right("AVAIL"),
            Column::right("REFER"),
            Column::left("MOUNTPOINT"),
        ];
        let rows: Vec<Vec<String>> = vec![
            vec!["tank", "150K", "1.75G", "24K", "/tank"],
            vec!["tank/home", "24K", "1.75G", "24K", "/tank/home"],
        ]
        .into_iter()
        .map(|r| r.into_iter().map(String::from).collect())
        .collect();
        assert_eq!(
            table(&cols, &rows, false),
            "NAME        USED  AVAIL  REFER  MOUNTPOINT\n\
             tank        150K  1.75G    24K  /tank\n\
             tank/home    24K  1.75G    24K  /tank/home\n"
        );
    }

    #[test]
    fn status_tree_mirror() {
        let root = v(
            "tank",
            "ONLINE",
            vec![v("mirror-0", "ONLINE", vec![v("/srv/a", "ONLINE", vec![]), v("/srv/b", "ONLINE", vec![])])],
        );
        let s = pool_status("tank", "ONLINE", &root, 0);
        assert_eq!(
            s,
            "  pool: tank\n state: ONLINE\nconfig:\n\n\
             \tNAME        STATE     READ WRITE CKSUM\n\
             \ttank        ONLINE       0     0     0\n\
             \t  mirror-0  ONLINE       0     0     0\n\
             \t    /srv/a  ONLINE       0     0     0\n\
             \t    /srv/b  ONLINE       0     0     0\n\n\
             errors: No known data errors\n"
        );
        assert!(pool_is_healthy("ONLINE", &root, 0));
    }

    #[test]
    fn status_tree_long_names_and_degraded() {
        let mut b = v("/tmp/scratch/vdevs/b", "UNAVAIL", vec![]);
        b.read_errors = 3;
        let root = v(
            "tank",
            "DEGRADED",
            vec![v("mirror-0", "DEGRADED", vec![v("/tmp/scratch/vdevs/a", "ONLINE", vec![]), b])],
        );
        let s = pool_status("tank", "DEGRADED", &root, 2);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[2], "status: One or more devices could not be opened.  Sufficient replicas exist for");
        assert_eq!(lines[3], "\tthe pool to continue functioning in a degraded state.");
        assert_eq!(lines[4], "action: Attach the missing device and online it using 'zpool online'.");
        assert!(lines[5].starts_with("   see: "));
        assert_eq!(lines[6], "config:");
        // width = 4 + 20 = 24
        assert_eq!(lines[8], format!("\t{:<24}  STATE     READ WRITE CKSUM", "NAME"));
        assert_eq!(lines[9], format!("\t{:<24}  DEGRADED     0     0     0", "tank"));
        assert_eq!(lines[12], "\t    /tmp/scratch/vdevs/b  UNAVAIL      3     0     0  cannot open");
        assert_eq!(lines.last().unwrap(), &"errors: 2 data errors, use '-v' for a list");
        assert!(!pool_is_healthy("DEGRADED", &root, 0));
    }

    #[test]
    fn status_tree_with_logs() {
        let mut slog = v("/srv/slog", "ONLINE", vec![]);
        slog.is_log = true;
        let mut lmirror = v("mirror-2", "ONLINE", vec![v("/srv/c", "ONLINE", vec![]), v("/srv/d", "ONLINE", vec![])]);
        lmirror.is_log = true;
        let root = v(
            "tank",
            "ONLINE",
            vec![
                v("mirror-0", "ONLINE", vec![v("/srv/a", "ONLINE", vec![]), v("/srv/b", "ONLINE", vec![])]),
                slog,
                lmirror,
            ],
        );
        assert_eq!(
            status_config(&root),
            "\tNAME         STATE     READ WRITE CKSUM\n\
             \ttank         ONLINE       0     0     0\n\
             \t  mirror-0   ONLINE       0     0     0\n\
             \t    /srv/a   ONLINE       0     0     0\n\
             \t    /srv/b   ONLINE       0     0     0\n\
             \tlogs\t\n\
             \t  /srv/slog  ONLINE       0     0     0\n\
             \t  mirror-2   ONLINE       0     0     0\n\
             \t    /srv/c   ONLINE       0     0     0\n\
             \t    /srv/d   ONLINE       0     0     0\n"
        );
        let mut gone = v("/srv/slog", "UNAVAIL", vec![]);
        gone.is_log = true;
        let root = v("tank", "DEGRADED", vec![v("/srv/a", "ONLINE", vec![]), gone.clone()]);
        let s = status_config(&root);
        assert!(s.ends_with("\tlogs\t\n\t  /srv/slog  UNAVAIL      0     0     0  cannot open\n"), "{s}");
        let mut m = v("mirror-1", "UNAVAIL", vec![v("/srv/c", "UNAVAIL", vec![]), v("/srv/d", "UNAVAIL", vec![])]);
        m.is_log = true;
        let root = v("tank", "DEGRADED", vec![v("/srv/a", "ONLINE", vec![]), m.clone()]);
        assert!(status_config(&root)
            .contains("\t  mirror-1  UNAVAIL      0     0     0  insufficient replicas\n\t    /srv/c  UNAVAIL      0     0     0  cannot open\n"));
        assert_eq!(
            missing_vdev_tree(&[gone, m]),
            "\t    /srv/slog [log]\n\t    mirror-1 [log]\n\t      /srv/c\n\t      /srv/d\n"
        );
    }

    #[test]
    fn dedup_block_of_status() {
        assert_eq!(dedup_stats(&[], 120, 136), " dedup: no DDT entries\n");
        let b = |refcount| DedupBlock {
            lsize_bytes: 128 << 10,
            psize_bytes: 128 << 10,
            dsize_bytes: 128 << 10,
            refcount,
        };
        let s = dedup_stats(&[b(1), b(2), b(3), b(1024)], 120, 136);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], " dedup: DDT entries 4, size 120B on disk, 136B in core");
        assert_eq!(lines[4], "refcnt   blocks   LSIZE   PSIZE   DSIZE   blocks   LSIZE   PSIZE   DSIZE");
        assert_eq!(lines[6], "     1        1    128K    128K    128K        1    128K    128K    128K");
        // refcounts 2 and 3 share the bucket of 2.
        assert_eq!(lines[7], "     2        2    256K    256K    256K        5    640K    640K    640K");
        assert_eq!(lines[8], "    1K        1    128K    128K    128K       1K    128M    128M    128M");
        assert_eq!(lines[9], " Total        4    512K    512K    512K    1.01K    129M    129M    129M");
    }

    #[test]
    fn status_tree_with_cache_between_logs_and_spares() {
        let mut slog = v("/srv/slog", "ONLINE", vec![]);
        slog.is_log = true;
        let mut root = v("tank", "ONLINE", vec![v("/srv/a", "ONLINE", vec![]), slog]);
        let mut ssd = v("/srv/ssd-cache", "ONLINE", vec![]);
        ssd.read_errors = 2;
        root.caches = vec![ssd, v("/srv/gone", "UNAVAIL", vec![])];
        root.spares = vec![v("/srv/sp", "AVAIL", vec![])];
        assert_eq!(
            status_config(&root),
            "\tNAME              STATE     READ WRITE CKSUM\n\
             \ttank              ONLINE       0     0     0\n\
             \t  /srv/a          ONLINE       0     0     0\n\
             \tlogs\t\n\
             \t  /srv/slog       ONLINE       0     0     0\n\
             \tcache\n\
             \t  /srv/ssd-cache  ONLINE       2     0     0\n\
             \t  /srv/gone       UNAVAIL      0     0     0  cannot open\n\
             \tspares\n\
             \t  /srv/sp         AVAIL   \n"
        );
    }

    #[test]
    fn import_listing() {
        let root = v(
            "tank",
            "ONLINE",
            vec![v("mirror-0", "ONLINE", vec![v("/srv/a", "ONLINE", vec![]), v("/srv/b", "ONLINE", vec![])])],
        );
        let c = ImportCandidate {
            name: "tank".into(),
            guid: 1234,
            health: "ONLINE".into(),
            state: "exported".into(),
            config: root,
            dirs: vec![],
        };
        assert_eq!(
            import_candidate(&c),
            "   pool: tank\n     id: 1234\n  state: ONLINE\n \
             action: The pool can be imported using its name or numeric identifier.\n \
             config:\n\n\
             \ttank        ONLINE\n\
             \t  mirror-0  ONLINE\n\
             \t    /srv/a  ONLINE\n\
             \t    /srv/b  ONLINE\n"
        );
    }

    #[test]
    fn mount_listing() {
        let s = mount_list(&[("tank".into(), "/tank".into())]);
        assert_eq!(s, format!("{:<30}  /tank\n", "tank"));
    }
}
