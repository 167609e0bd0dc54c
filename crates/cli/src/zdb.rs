//! # zdb — the pool debugger, run in the calling process
//!
//! Theory: OpenZFS's `zdb` (`cmd/zdb/zdb.c`, zdb(8)) reads a pool's devices directly
//! and never writes. `tarn zdb` does the same: it does not talk to the daemon; it
//! finds the pool's leaves as `zpool import` does and opens them read-only and
//! unlocked ([`tarn_spa::Pool::open_inspect`]), so it works on an exported pool
//! (`-e [-p DIR]…`, devices searched in each DIR, `/dev` by default) and beside the
//! daemon on an imported one (its leaves' directories come from the cachefile, as
//! OpenZFS's zdb reads `zpool.cache`); there it sees the last synced txg. Output
//! follows OpenZFS's zdb where Tarn has the same data; options Tarn does not
//! implement are refused with zdb's usage message, never ignored.
//!
//! Implemented: `-C` (configuration), `-l DEV` (labels), `-u` (active uberblock),
//! `-h` (history), `-m`/`-mm` (metaslabs, space map summary), `-b`/`-bb` (block
//! statistics and the leak check; exit status 2 on a leak), `-d`…`-dddd`
//! (datasets and objects), `-R POOL VDEV:OFFSET:[LSIZE/]PSIZE[:FLAGS]` (raw block;
//! flags `d` decompress and `r` raw output), `-S` (simulated dedup: every file-data
//! block read and hashed, OpenZFS's DDT histogram and ratio line), `-D`/`-DD` (the
//! pool's dedup table: one line per checksum and class, histograms from `-DD`, the
//! ratio line), `-e`, `-p DIR`.
//!
//! Exit status: 0 success, 1 an error (no such pool, unreadable data), 2 a usage
//! error, a label that cannot be read, or a leak.
//!
//! Called by: `main` for `tarn zdb …`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use crate::format::{ddt_histogram, ddt_ratios, DedupBlock};
use tarn_phys::label::{LabelConfig, VdevConfig};
use tarn_phys::{BlkPtr, Compression, ObjectType, UberblockPhys, UBERBLOCK_MAGIC};
use tarn_spa::Pool;

const USAGE: &str = "Usage:\tzdb [-bCdhmSu] [-e [-p path ...]] poolname [object ...]\n\
\tzdb [-dddd] [-e [-p path ...]] dataset [object ...]\n\
\tzdb -l device\n\
\tzdb -R [-e [-p path ...]] poolname vdev:offset:[lsize/]psize[:flags]\n\
\n    Dataset name must include at least one separator character '/' or '@'\n\
    If dataset name is specified, only that dataset is dumped\n\
    If object numbers are specified, only those objects are dumped\n\
\n    Options to control amount of output:\n\
        -b block statistics and leak check (-bb: by type)\n\
        -C config\n\
        -d dataset(s) (-dd objects, -dddd dnode detail)\n\
        -h pool history\n\
        -l read label contents\n\
        -m metaslabs (-mm: space map summary)\n\
        -R read and display block from a device\n\
        -S simulate dedup to measure effect\n\
        -u uberblock\n\
\n    Other options:\n\
        -e pool is exported/destroyed\n\
        -p <path> -- path to vdev dir (default: /dev)\n\
    Specify an option more than once (e.g. -bb) to make only that option verbose\n\
    Default is to dump everything non-verbosely\n";

/// What the command line asked for.
#[derive(Debug, Default)]
struct Opts {
    /// Repetitions of each option letter.
    count: BTreeMap<char, u32>,
    /// `-p` directories.
    paths: Vec<PathBuf>,
    operands: Vec<String>,
}

impl Opts {
    fn n(&self, c: char) -> u32 {
        self.count.get(&c).copied().unwrap_or(0)
    }
}

/// Output of one run: text for stdout (bytes, for `-R :r`), stderr, exit status.
struct Run {
    out: Vec<u8>,
    err: String,
    code: i32,
}

impl Run {
    fn fail(code: i32, msg: String) -> Run {
        Run {
            out: Vec::new(),
            err: msg,
            code,
        }
    }
}

fn usage_error(msg: &str) -> Run {
    Run::fail(2, format!("{msg}{USAGE}"))
}

fn parse(args: &[String]) -> Result<Opts, Run> {
    let mut o = Opts::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            o.operands.extend(args[i + 1..].iter().cloned());
            break;
        }
        if !a.starts_with('-') || a == "-" {
            o.operands.push(a.clone());
            i += 1;
            continue;
        }
        let letters: Vec<char> = a[1..].chars().collect();
        let mut j = 0;
        while j < letters.len() {
            let c = letters[j];
            match c {
                'b' | 'C' | 'd' | 'D' | 'h' | 'l' | 'm' | 'u' | 'R' | 'S' | 'e' => *o.count.entry(c).or_default() += 1,
                'p' => {
                    let rest: String = letters[j + 1..].iter().collect();
                    let dir = if !rest.is_empty() {
                        rest
                    } else {
                        i += 1;
                        match args.get(i) {
                            Some(d) => d.clone(),
                            None => return Err(usage_error("zdb: option requires an argument -- 'p'\n")),
                        }
                    };
                    o.paths.push(PathBuf::from(dir));
                    j = letters.len();
                    continue;
                }
                other => return Err(usage_error(&format!("zdb: invalid option -- '{other}'\n"))),
            }
            j += 1;
        }
        i += 1;
    }
    Ok(o)
}

/// `tarn zdb ARGS`: run it and write the result; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let r = run(args);
    let mut so = std::io::stdout();
    let _ = so.write_all(&r.out);
    let _ = so.flush();
    eprint!("{}", r.err);
    r.code
}

fn run(args: &[String]) -> Run {
    let o = match parse(args) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if o.n('l') > 0 {
        if o.count.len() > 1 || o.operands.len() != 1 || !o.paths.is_empty() {
            return usage_error("");
        }
        return dump_labels(&o.operands[0]);
    }
    if !o.paths.is_empty() && o.n('e') == 0 {
        return usage_error("zdb: -p option requires use of -e\n");
    }
    let Some(target) = o.operands.first().cloned() else {
        return usage_error("");
    };
    let pool_name = target.split(['/', '@']).next().unwrap_or_default().to_string();
    let pool = match open(&o, &pool_name) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if o.n('R') > 0 {
        if o.count.keys().any(|c| *c != 'R' && *c != 'e') || o.operands.len() != 2 || target != pool_name {
            return usage_error("");
        }
        return read_block(&pool, &o.operands[1]);
    }
    let is_dataset = target != pool_name;
    let mut objects = Vec::new();
    for s in &o.operands[1..] {
        match parse_u64(s) {
            Some(v) => objects.push(v),
            None => return Run::fail(1, format!("zdb: invalid object '{s}'\n")),
        }
    }
    if (is_dataset || !objects.is_empty()) && o.count.keys().any(|c| !matches!(c, 'd' | 'e')) {
        return usage_error("");
    }
    // No option: everything, non-verbosely (as OpenZFS; -S is never implied).
    let all = !o.count.keys().any(|c| *c != 'e');
    let mut out = String::new();
    let mut code = 0;
    let want = |c: char| if all { 1 } else { o.n(c) };
    if want('C') > 0 {
        out.push_str("\nMOS Configuration:\n");
        dump_config_root(&mut out, &pool, 8);
    }
    if want('u') > 0 {
        match pool.active_uberblock() {
            Some(ub) => dump_uberblock(&mut out, &ub),
            None => return Run::fail(1, format!("zdb: can't read the uberblock of txg {}\n", pool.synced_txg())),
        }
    }
    if want('h') > 0 {
        match pool.history() {
            Ok(lines) => {
                out.push_str("\nHistory:\n");
                for l in lines {
                    let _ = writeln!(out, "{l}");
                }
            }
            Err(e) => return Run::fail(1, format!("zdb: can't read history: {e}\n")),
        }
    }
    if want('d') > 0 || is_dataset {
        let names: Vec<String> = if is_dataset {
            vec![target.clone()]
        } else {
            match pool.list_all() {
                Ok(v) => v.into_iter().map(|d| d.name).collect(),
                Err(e) => return Run::fail(1, format!("zdb: {e}\n")),
            }
        };
        for n in names {
            match pool.dataset_dump(&n, &objects) {
                Ok(d) => dump_dataset(&mut out, &d, o.n('d').max(1), !objects.is_empty()),
                Err(e) => {
                    let _ = std::io::stdout().write_all(out.as_bytes());
                    return Run::fail(1, format!("failed to hold dataset '{n}': {e}\n"));
                }
            }
        }
    }
    if want('m') > 0 {
        dump_metaslabs(&mut out, &pool, want('m'));
    }
    if want('b') > 0 {
        code = dump_blocks(&mut out, &pool, want('b'));
    }
    if want('D') > 0 {
        // -DDDD and more dump the table's entries in OpenZFS; not built here.
        if o.n('D') > 3 {
            return usage_error("zdb: -DDDD (dump the dedup table's entries) is not supported\n");
        }
        dump_ddt(&mut out, &pool, want('D'));
    }
    // Reads every data block: only when asked for (as in OpenZFS, not part of the default).
    if o.n('S') > 0 {
        match pool.simulated_ddt() {
            Ok(entries) => dump_simulated_ddt(&mut out, &entries),
            Err(e) => {
                let _ = std::io::stdout().write_all(out.as_bytes());
                return Run::fail(1, format!("zdb: dedup simulation failed: {e}\n"));
            }
        }
    }
    Run {
        out: out.into_bytes(),
        err: String::new(),
        code,
    }
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Find and open the pool: `-e` searches the `-p` directories (default `/dev`);
/// otherwise the cachefile names its leaves.
fn open(o: &Opts, name: &str) -> Result<Arc<Pool>, Run> {
    let dirs: Vec<PathBuf> = if o.n('e') > 0 {
        if o.paths.is_empty() {
            vec![PathBuf::from("/dev")]
        } else {
            o.paths.clone()
        }
    } else {
        let cached = crate::cachefile::read(&crate::cachefile::default_path());
        let Some(p) = cached.iter().find(|p| p.name == name) else {
            return Err(Run::fail(1, format!("zdb: can't open '{name}': No such file or directory\n")));
        };
        let mut dirs: Vec<PathBuf> = p.leaves.iter().filter_map(|l| l.parent().map(PathBuf::from)).collect();
        dirs.sort();
        dirs.dedup();
        dirs
    };
    Pool::open_inspect(name, &dirs).map_err(|e| {
        let e = e.to_string();
        let e = e.strip_prefix(&format!("cannot import '{name}': ")).unwrap_or(&e).to_string();
        Run::fail(1, format!("zdb: can't open '{name}': {e}\n"))
    })
}

// ---- sizes and names -------------------------------------------------------------

/// OpenZFS's `zfs_nicenum`: 1024-based, at most about five characters ("512",
/// "1K", "1.50K", "10.5M", "128K").
pub fn nicenum(n: u64) -> String {
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut i = 0;
    let mut v = n;
    while v >= 1024 && i < UNITS.len() - 1 {
        v /= 1024;
        i += 1;
    }
    if i == 0 {
        return n.to_string();
    }
    let div = (1u128 << (10 * i)) as f64;
    if (n as u128).is_multiple_of(1u128 << (10 * i)) {
        return format!("{v}{}", UNITS[i]);
    }
    let x = n as f64 / div;
    for prec in [2usize, 1, 0] {
        let s = format!("{x:.prec$}");
        if s.len() <= 4 {
            return format!("{s}{}", UNITS[i]);
        }
    }
    format!("{x:.0}{}", UNITS[i])
}

/// The name `zdb` gives an object type (OpenZFS's `dmu_ot` names where Tarn has the
/// same kind of object; Tarn's own kinds get a plain description).
pub fn type_name(t: ObjectType) -> &'static str {
    match t {
        ObjectType::None => "none",
        ObjectType::Dnode => "DMU dnode",
        ObjectType::Objset => "DMU objset",
        ObjectType::Indirect => "indirect block",
        ObjectType::FileData => "ZFS plain file",
        ObjectType::DirZap => "ZFS directory",
        ObjectType::Zap => "ZAP",
        ObjectType::Packed => "packed nvlist",
        ObjectType::SpaceMap => "SPA space map",
        ObjectType::History => "SPA history",
        ObjectType::Symlink => "ZFS symlink",
        ObjectType::DslDataset => "DSL dataset",
        ObjectType::IntentLog => "ZFS intent log",
        ObjectType::Deadlist => "deadlist",
        ObjectType::MetaslabRoot => "metaslab directory",
        ObjectType::MetaslabPage => "metaslab directory page",
        ObjectType::MetaslabMap => "metaslab space map",
        ObjectType::SpaceMapLog => "space map log",
    }
}

/// A block pointer the way zdb prints one (OpenZFS `snprintf_blkptr`):
/// `DVA[0]=<vdev:offset:asize> [L0 type] checksum compression size=LSIZEL/PSIZEP
/// birth=TXGL fill=N cksum=…` (numbers in hex as there, birth and fill in decimal).
pub fn blkptr_string(bp: &BlkPtr) -> String {
    if bp.is_hole() {
        return "<hole>".into();
    }
    let mut s = String::new();
    for (i, d) in bp.dvas().enumerate() {
        let _ = write!(s, "DVA[{i}]=<{}:{:x}:{:x}> ", d.vdev, d.offset_bytes, d.asize_bytes);
    }
    let ck: Vec<String> = bp
        .checksum
        .chunks_exact(8)
        .map(|w| format!("{:x}", u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))))
        .collect();
    let _ = write!(
        s,
        "[L{} {}] {} {} size={:x}L/{:x}P birth={}L fill={} cksum={}",
        bp.level,
        type_name(bp.otype),
        bp.checksum_alg.name(),
        bp.compression.name(),
        bp.lsize_bytes,
        bp.psize_bytes,
        bp.birth_txg,
        bp.fill,
        ck.join(":")
    );
    s
}

// ---- -C and -l -------------------------------------------------------------------

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn dump_vdev_tree(out: &mut String, v: &VdevConfig, indent: usize) {
    let mut kv = |k: &str, val: String| {
        pad(out, indent);
        let _ = writeln!(out, "{k}: {val}");
    };
    kv("type", format!("'{}'", v.kind));
    kv("id", v.id.to_string());
    kv("guid", v.guid.to_string());
    if let Some(p) = &v.path {
        kv("path", format!("'{p}'"));
    }
    if v.nparity > 0 {
        kv("nparity", v.nparity.to_string());
    }
    if v.kind != "root" {
        kv("ashift", v.ashift.to_string());
        kv("asize", v.asize_bytes.to_string());
        kv("is_log", u8::from(v.is_log).to_string());
    }
    if v.offline {
        kv("offline", "1".into());
    }
    if v.faulted {
        kv("faulted", "1".into());
    }
    for (i, c) in v.children.iter().enumerate() {
        pad(out, indent);
        let _ = writeln!(out, "children[{i}]:");
        dump_vdev_tree(out, c, indent + 4);
    }
    for (i, c) in v.spares.iter().enumerate() {
        pad(out, indent);
        let _ = writeln!(out, "spares[{i}]:");
        dump_vdev_tree(out, c, indent + 4);
    }
}

fn dump_config_root(out: &mut String, pool: &Pool, indent: usize) {
    let cfg = pool.vdev_config();
    let mut kv = |k: &str, val: String| {
        pad(out, indent);
        let _ = writeln!(out, "{k}: {val}");
    };
    kv("version", tarn_phys::TARN_FORMAT_VERSION.to_string());
    kv("name", format!("'{}'", pool.name()));
    kv("state", "0".into());
    kv("txg", pool.synced_txg().to_string());
    kv("pool_guid", pool.guid().to_string());
    kv("vdev_children", cfg.children.len().to_string());
    pad(out, indent);
    out.push_str("vdev_tree:\n");
    dump_vdev_tree(out, &cfg, indent + 4);
}

fn dump_label_config(out: &mut String, c: &LabelConfig) {
    let mut kv = |k: &str, val: String| {
        let _ = writeln!(out, "    {k}: {val}");
    };
    let state = match c.state {
        tarn_phys::label::PoolState::Active => 0,
        tarn_phys::label::PoolState::Exported => 1,
        tarn_phys::label::PoolState::Destroyed => 2,
    };
    kv("version", c.version.to_string());
    kv("name", format!("'{}'", c.name));
    kv("state", state.to_string());
    kv("txg", c.txg.to_string());
    kv("pool_guid", c.pool_guid.to_string());
    kv("hostname", format!("'{}'", c.hostname));
    kv("top_guid", c.top_guid.to_string());
    kv("guid", c.guid.to_string());
    kv("vdev_children", c.vdev_tree.children.len().to_string());
    out.push_str("    vdev_tree:\n");
    dump_vdev_tree(out, &c.vdev_tree, 8);
}

fn dump_labels(dev: &str) -> Run {
    let leaf = match tarn_vdev::Leaf::open_readonly(std::path::Path::new(dev)) {
        Ok(l) => l,
        Err(e) => return Run::fail(1, format!("zdb: can't open '{dev}': {e}\n")),
    };
    let mut out = String::new();
    let mut found = false;
    for (i, r) in tarn_vdev::label::read_configs(&leaf).into_iter().enumerate() {
        out.push_str("------------------------------------\n");
        let _ = writeln!(out, "LABEL {i}");
        out.push_str("------------------------------------\n");
        match r {
            Ok(c) => {
                found = true;
                dump_label_config(&mut out, &c);
            }
            Err(e) => {
                let _ = writeln!(out, "failed to unpack label {i}: {e}");
            }
        }
    }
    Run {
        out: out.into_bytes(),
        err: String::new(),
        code: if found { 0 } else { 2 },
    }
}

// ---- -u --------------------------------------------------------------------------

fn dump_uberblock(out: &mut String, ub: &UberblockPhys) {
    out.push_str("\nUberblock:\n");
    let _ = writeln!(out, "\tmagic = {UBERBLOCK_MAGIC:016x}");
    let _ = writeln!(out, "\tversion = {}", ub.version);
    let _ = writeln!(out, "\ttxg = {}", ub.txg);
    let _ = writeln!(out, "\tguid_sum = {}", ub.guid_sum);
    let when = jiff::Timestamp::from_second(ub.timestamp_s.min(i64::MAX as u64) as i64)
        .map(|t| t.strftime("%a %b %e %H:%M:%S %Y").to_string())
        .unwrap_or_default();
    let _ = writeln!(out, "\ttimestamp = {} UTC = {when}", ub.timestamp_s);
    let _ = writeln!(out, "\trootbp = {}", blkptr_string(&ub.rootbp));
    let _ = writeln!(out, "\tspacemap = {}", blkptr_string(&ub.spacemap_bp));
}

// ---- -m --------------------------------------------------------------------------

fn dump_metaslabs(out: &mut String, pool: &Pool, verbosity: u32) {
    out.push_str("\nMetaslabs:\n");
    for v in pool.metaslab_report() {
        if v.class == "hole" {
            continue;
        }
        let frag = v.fragmentation_pct.map(|f| format!("{f}%")).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "\tvdev {:10}\tclass {}\tmetaslabs {:5}\tfragmentation {frag}",
            v.vdev,
            v.class,
            v.metaslabs.len()
        );
        let _ = writeln!(
            out,
            "\n\t{:<15}   {:<19}   {:<15}   {:<12}   {:<13}",
            "metaslabs", "offset", "spacemap", "free", "fragmentation"
        );
        let _ = writeln!(out, "\t{:-<15}   {:-<19}   {:-<15}   {:-<12}   {:-<13}", "", "", "", "", "");
        for m in &v.metaslabs {
            let _ = writeln!(
                out,
                "\tmetaslab {:6}   offset {:12x}   spacemap {:6}   free {:>7}   fragmentation {:3}%",
                m.index,
                m.start_bytes,
                m.flush_txg,
                nicenum(m.free_bytes),
                m.fragmentation_pct
            );
            if verbosity >= 2 {
                let _ = writeln!(
                    out,
                    "\t  space map: flushed txg {}, size {}, free segments {}, largest free segment {}, deferred free {}",
                    m.flush_txg,
                    nicenum(m.size_bytes),
                    m.free_segments,
                    nicenum(m.max_free_segment_bytes),
                    nicenum(m.deferred_bytes)
                );
            }
        }
        out.push('\n');
    }
}

// ---- -b --------------------------------------------------------------------------

fn dump_blocks(out: &mut String, pool: &Pool, verbosity: u32) -> i32 {
    out.push_str("\nTraversing all blocks to verify nothing leaked ...\n\n");
    let mut code = 0;
    match pool.leak_check() {
        Ok(_) => out.push_str("\tNo leaks (block sum matches space maps exactly)\n"),
        Err(e) => {
            let _ = writeln!(out, "\t{e}");
            out.push_str("\tleaked space: block sum does not match the space maps\n");
            code = 2;
        }
    }
    let st = match pool.block_stats() {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "\ttraversal failed: {e}");
            return 1;
        }
    };
    let t = st.total;
    let avg = |b: u64| b.checked_div(t.count).unwrap_or(0);
    let ratio = |a: u64, b: u64| if b == 0 { 1.0 } else { a as f64 / b as f64 };
    out.push('\n');
    let _ = writeln!(out, "\tbp count:      {:>10}", t.count);
    let _ = writeln!(out, "\tbp logical:    {:>10}      avg: {:>6}", t.lsize_bytes, avg(t.lsize_bytes));
    let _ = writeln!(
        out,
        "\tbp physical:   {:>10}      avg: {:>6}     compression: {:>6.2}",
        t.psize_bytes,
        avg(t.psize_bytes),
        ratio(t.lsize_bytes, t.psize_bytes)
    );
    let _ = writeln!(
        out,
        "\tbp allocated:  {:>10}      avg: {:>6}     compression: {:>6.2}",
        t.asize_bytes,
        avg(t.asize_bytes),
        ratio(t.lsize_bytes, t.asize_bytes)
    );
    let used = if st.size_bytes == 0 {
        0.0
    } else {
        100.0 * st.space_map_alloc_bytes as f64 / st.size_bytes as f64
    };
    let _ = writeln!(out, "\tSPA allocated: {:>10}     used: {used:5.2}%", st.space_map_alloc_bytes);
    if verbosity >= 2 {
        out.push_str("\nBlocks\tLSIZE\tPSIZE\tASIZE\t  avg\t comp\t%Total\tType\n");
        let row = |out: &mut String, s: &tarn_spa::TypeStats, name: &str| {
            let avg = s.asize_bytes.checked_div(s.count).unwrap_or(0);
            let comp = ratio(s.lsize_bytes, s.psize_bytes);
            let pct = if t.asize_bytes == 0 {
                0.0
            } else {
                100.0 * s.asize_bytes as f64 / t.asize_bytes as f64
            };
            let _ = writeln!(
                out,
                "{:>6}\t{:>5}\t{:>5}\t{:>5}\t{:>5}\t{comp:5.2}\t{pct:6.2}\t{name}",
                nicenum(s.count),
                nicenum(s.lsize_bytes),
                nicenum(s.psize_bytes),
                nicenum(s.asize_bytes),
                nicenum(avg)
            );
        };
        for (ty, s) in &st.by_type {
            row(out, s, type_name(*ty));
        }
        row(out, &t, "Total");
    }
    out.push('\n');
    code
}

// ---- -S --------------------------------------------------------------------------

/// `zdb -S`: OpenZFS's DDT histogram of a simulated table (every data block as if
/// deduplicated) and the summary line of ratios.
fn dump_simulated_ddt(out: &mut String, entries: &[tarn_spa::SimDdtEntry]) {
    let blocks: Vec<DedupBlock> = entries
        .iter()
        .filter(|e| e.refcount > 0)
        .map(|e| DedupBlock {
            lsize_bytes: e.lsize_bytes,
            psize_bytes: e.psize_bytes,
            dsize_bytes: e.asize_bytes,
            refcount: e.refcount,
        })
        .collect();
    out.push_str("Simulated DDT histogram:\n\n");
    out.push_str(&ddt_histogram(&blocks, nicenum));
    let _ = writeln!(out, "\n{}", ddt_ratios(&blocks));
}

/// `zdb -D` (`-DD`, `-DDD`; more is refused): the pool's dedup table as OpenZFS prints its DDT
/// objects — one line per checksum and class ("duplicate": referenced more than
/// once, "unique": once) with its entries and bytes per entry on disk and in core,
/// from `-DD` each class's histogram and the histogram over all of them, then the
/// ratio line. "All DDTs are empty" without any entry.
fn dump_ddt(out: &mut String, pool: &Pool, verbosity: u32) {
    let entries = pool.zio().ddt().entries();
    if entries.is_empty() {
        out.push_str("All DDTs are empty\n");
        return;
    }
    let block = DedupBlock::of_entry;
    let mut classes: BTreeMap<(u8, bool), Vec<DedupBlock>> = BTreeMap::new();
    for (k, e) in &entries {
        classes.entry((k.checksum_alg, e.refcount == 1)).or_default().push(block(k, e));
    }
    for ((alg, unique), blocks) in &classes {
        let name = tarn_phys::ChecksumAlg::from_u8(*alg).map_or("unknown", |a| a.name());
        let _ = writeln!(
            out,
            "DDT-{name}-zap-{}: {} entries, size {} on disk, {} in core",
            if *unique { "unique" } else { "duplicate" },
            blocks.len(),
            tarn_zio::ddt::DDT_RECORD_BYTES,
            tarn_zio::ddt::DDT_ENTRY_CORE_BYTES
        );
        if verbosity >= 2 {
            out.push('\n');
            out.push_str(&ddt_histogram(blocks, nicenum));
            out.push('\n');
        }
    }
    let all: Vec<DedupBlock> = entries.iter().map(|(k, e)| block(k, e)).collect();
    if verbosity >= 2 {
        out.push_str("\nDDT histogram (aggregated over all DDTs):\n\n");
        out.push_str(&ddt_histogram(&all, nicenum));
    }
    let _ = writeln!(out, "\n{}", ddt_ratios(&all));
}

// ---- -d --------------------------------------------------------------------------

fn dump_dataset(out: &mut String, d: &tarn_spa::DatasetDump, verbosity: u32, objects_named: bool) {
    let kind = match d.os_type {
        // A dataset record whose tree was never written (created, never mounted): an
        // empty file system, the only kind of dataset Tarn has.
        0 if d.objects.is_empty() => "ZPL",
        tarn_dmu::objset::OS_TYPE_ZFS => "ZPL",
        tarn_dmu::objset::OS_TYPE_MOS => "META",
        _ => "UNKNOWN",
    };
    let _ = writeln!(
        out,
        "Dataset {} [{kind}], ID {}, cr_txg {}, {}, {} objects",
        d.name,
        d.id,
        d.creation_txg,
        nicenum(d.referenced_bytes),
        d.object_count
    );
    if verbosity < 2 && !objects_named {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:>10}  {:>3}  {:>5}  {:>5}  {:>5}  {:>6}  {:>5}  {:>6}  type",
        "Object", "lvl", "iblk", "dblk", "dsize", "dnsize", "lsize", "%full"
    );
    for o in &d.objects {
        let dn = &o.dnode;
        let _ = writeln!(
            out,
            "{:>10}  {:>3}  {:>5}  {:>5}  {:>5}  {:>6}  {:>5}  {:>6.2}  {}",
            o.object,
            dn.nlevels,
            nicenum(1u64 << dn.indblkshift.min(63)),
            nicenum(u64::from(dn.datablksz_bytes)),
            nicenum(dn.used_bytes),
            tarn_phys::DNODE_SIZE_BYTES,
            nicenum(o.lsize_bytes()),
            o.full_pct(),
            type_name(dn.otype)
        );
        if verbosity >= 4 {
            let _ = writeln!(out, "\tdnode maxblkid: {}", dn.maxblkid);
            let _ = writeln!(out, "\tdnode used: {}", dn.used_bytes);
            let _ = writeln!(out, "\tbonus type: {}, bonus length: {}", dn.bonus_type, dn.bonus.len());
            let _ = writeln!(out, "\tfilled blocks: {}", o.filled_blocks);
            let _ = writeln!(out, "\tblkptr: {}", blkptr_string(&dn.blkptr));
            out.push('\n');
        }
    }
    out.push('\n');
}

// ---- -R --------------------------------------------------------------------------

/// `VDEV:OFFSET:[LSIZE/]PSIZE[:FLAGS]`, numbers in hex as OpenZFS reads them.
fn read_block(pool: &Pool, spec: &str) -> Run {
    let parts: Vec<&str> = spec.split(':').collect();
    if !(3..=4).contains(&parts.len()) {
        return Run::fail(
            1,
            format!("Invalid block specifier: {spec}  - {}\n", "expected vdev:offset:[lsize/]psize[:flags]"),
        );
    }
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let Some(vdev) = parts[0].parse::<u64>().ok() else {
        return Run::fail(1, format!("Invalid block specifier: {spec}  - invalid vdev '{}'\n", parts[0]));
    };
    let Some(offset) = hex(parts[1]) else {
        return Run::fail(1, format!("Invalid block specifier: {spec}  - invalid offset '{}'\n", parts[1]));
    };
    let (lsize, psize) = match parts[2].split_once('/') {
        Some((l, p)) => (hex(l), hex(p)),
        None => (None, hex(parts[2])),
    };
    let Some(psize) = psize else {
        return Run::fail(1, format!("Invalid block specifier: {spec}  - invalid size '{}'\n", parts[2]));
    };
    if parts[2].contains('/') && lsize.is_none() {
        return Run::fail(1, format!("Invalid block specifier: {spec}  - invalid size '{}'\n", parts[2]));
    }
    let (mut decompress, mut raw) = (false, false);
    for f in parts.get(3).copied().unwrap_or("").chars() {
        match f {
            'd' => decompress = true,
            'r' => raw = true,
            other => return Run::fail(1, format!("***Invalid flag {other}\n")),
        }
    }
    let mut data = match pool.read_raw(vdev, offset, psize) {
        Ok(d) => d,
        Err(e) => return Run::fail(1, format!("zdb: can't read block {spec}: {e}\n")),
    };
    let mut err = String::new();
    if decompress {
        match decompress_any(&data, psize, lsize) {
            Some((alg, l, d)) => {
                let _ = writeln!(err, "Trying {psize:08x} -> {l:08x} ({alg}) succeeded");
                data = d;
            }
            None => return Run::fail(1, format!("Decompression of {spec} failed\n")),
        }
    }
    let out = if raw { data } else { hexdump(&data).into_bytes() };
    Run { out, err, code: 0 }
}

/// Try every compression Tarn knows (from `tarn_phys`) on `data`, with `lsize` or,
/// without it, each power of two from `psize` up to the largest record.
fn decompress_any(data: &[u8], psize: u64, lsize: Option<u64>) -> Option<(&'static str, u64, Vec<u8>)> {
    let sizes: Vec<u64> = match lsize {
        Some(l) if l <= u64::from(tarn_phys::MAX_BLOCK_SIZE_BYTES) => vec![l],
        Some(_) => return None,
        None => std::iter::successors(Some(psize.next_power_of_two()), |s| Some(s * 2))
            .take_while(|s| *s <= u64::from(tarn_phys::MAX_BLOCK_SIZE_BYTES))
            .collect(),
    };
    let algs: Vec<Compression> = (0..=u8::MAX)
        .filter_map(|v| Compression::from_u8(v).ok())
        .filter(|c| *c != Compression::Off)
        .collect();
    for l in sizes {
        for c in &algs {
            if let Ok(d) = c.decompress(data, l as usize) {
                if d.len() as u64 == l {
                    return Some((c.name(), l, d));
                }
            }
        }
    }
    None
}

/// OpenZFS zdb's block dump: per 16 bytes the offset, two 64-bit words (little
/// endian, as read on x86) and the printable characters.
fn hexdump(data: &[u8]) -> String {
    let mut s = String::from("\n\t\t\t  0 1 2 3 4 5 6 7   8 9 a b c d e f  0123456789abcdef\n");
    for (i, line) in data.chunks(16).enumerate() {
        let mut w = [0u8; 16];
        w[..line.len()].copy_from_slice(line);
        let a = u64::from_le_bytes(w[..8].try_into().unwrap_or([0; 8]));
        let b = u64::from_le_bytes(w[8..].try_into().unwrap_or([0; 8]));
        let text: String = line.iter().map(|&c| if (0x20..0x7f).contains(&c) { c as char } else { '.' }).collect();
        let _ = writeln!(s, "{:06x}:  {a:016x}  {b:016x}  {text}", i * 16);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nicenum_matches_zfs_nicenum() {
        assert_eq!(nicenum(0), "0");
        assert_eq!(nicenum(512), "512");
        assert_eq!(nicenum(1024), "1K");
        assert_eq!(nicenum(1536), "1.50K");
        assert_eq!(nicenum(128 << 10), "128K");
        assert_eq!(nicenum(10_800_000), "10.3M");
    }

    #[test]
    fn unknown_options_are_refused_with_usage() {
        let r = run(&["-G".to_string(), "tank".to_string()]);
        assert_eq!(r.code, 2);
        assert!(r.err.starts_with("zdb: invalid option -- 'G'\nUsage:"), "{}", r.err);
        let r = run(&["-c".to_string(), "tank".to_string()]);
        assert_eq!(r.code, 2);
        let r = run(&["-p".to_string(), "/tmp".to_string(), "tank".to_string()]);
        assert!(r.err.contains("-p option requires use of -e"), "{}", r.err);
    }
}
