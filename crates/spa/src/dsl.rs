//! DSL: the dataset directory, dataset records and properties.
//!
//! Theory. The MOS holds one *pool directory* object ([`crate::pool::MOS_DIR_OBJ`]):
//! JSON (our stand-in for ZFS's packed nvlists and small ZAPs) naming every dataset,
//! its MOS record object and its locally set properties, plus pool properties and the
//! history object. Each dataset's record is a MOS object of type `DslDataset` whose
//! bonus is a [`DslDatasetPhys`]: the root block pointer of its object set, its GUID,
//! creation txg and time, and the bytes it references. The sync thread updates the
//! record whenever the object set's root changes, in the same txg.
//!
//! Properties follow OpenZFS (`zfsprops(7)`): `mountpoint` is inherited by appending
//! the child's relative name; others are inherited as is; unset means the default.
//! Values are validated before anything changes; a `mountpoint` with `..` components
//! is refused (it could lead a mount out of `-R altroot`; the daemon also refuses to
//! mount one read from a pool written elsewhere).
//!
//! Called by: the `Pool` methods below (admin operations under `admin` + a txg hold).

use crate::pool::{dmu_err, now_s, Pool, MOS_DIR_OBJ};
use crate::{DatasetInfo, Result, SpaError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tarn_dmu::objset::Objset;
use tarn_dmu::{zap, ObjectStore, TxHold};
use tarn_phys::{BlkPtr, ChecksumAlg, CompressSetting, ObjectType};
use tarn_zil::Zilog;

/// Pool-directory ZAP entry naming the dataset-name ZAP.
pub(crate) const DIR_DATASETS: &[u8] = b"datasets";
/// Pool-directory ZAP entry naming the `zpool history` object.
pub(crate) const DIR_HISTORY: &[u8] = b"history";
/// Pool-directory ZAP entry naming the pool-property record.
pub(crate) const DIR_POOL_PROPS: &[u8] = b"pool_props";
/// Pool-directory ZAP entry naming the scan record.
pub(crate) const DIR_SCAN: &[u8] = b"scan";
/// Pool-directory ZAP entry naming the persistent error log.
pub(crate) const DIR_ERRLOG: &[u8] = b"errlog";
/// Directory entry of the block reference table (present once something was cloned).
pub(crate) const DIR_BRT: &[u8] = b"brt";
/// Directory entries of the dedup table and its log (present once dedup was used).
pub(crate) const DIR_DDT: &[u8] = b"ddt";
pub(crate) const DIR_DDT_LOG: &[u8] = b"ddt-log";
/// Largest packed record (property list, scan record, error log) read from disk.
pub(crate) const PACKED_MAX_BYTES: u64 = 16 << 20;
/// Largest number of datasets and snapshots an import loads.
pub(crate) const DATASETS_MAX: u64 = 1 << 22;

/// The in-memory copy of the pool directory. The on-disk truth is a set of MOS
/// objects (format version 2, `docs/format.md` §"Pool directory"); every change is
/// written to the one object it concerns, in the txg of the change.
#[derive(Debug, Clone, Default)]
pub(crate) struct Dir {
    /// File system name → record (heads only).
    pub datasets: BTreeMap<String, DsRec>,
    /// Snapshot name (`fs@snap`) → record.
    pub snaps: BTreeMap<String, DsRec>,
    /// MOS object holding `zpool history` text.
    pub history_obj: u64,
    /// The dataset-name ZAP (`name` → dataset object), heads and snapshots.
    pub names_obj: u64,
    /// MOS object holding the packed pool-property record.
    pub pool_props_obj: u64,
    /// MOS object holding the scan record.
    pub scan_obj: u64,
    /// MOS object holding the error log.
    pub errlog_obj: u64,
    /// MOS object holding the block reference table (0: none yet).
    pub brt_obj: u64,
    /// MOS objects holding the dedup table and its log (0: none yet).
    pub ddt_obj: u64,
    pub ddt_log_obj: u64,
    /// Locally set pool properties (e.g. comment).
    pub pool_props: BTreeMap<String, String>,
    /// The last or current scrub/resilver (absent in pools never scanned).
    pub scan: Option<crate::scan::ScanPhys>,
    /// Objects with unrecoverable blocks found by scans: (dataset MOS object, object).
    pub errlog: BTreeSet<(u64, u64)>,
    /// What `Dir::load` left out: one line per stored property that breaks the rules
    /// of [`check_dataset_prop`] (for the import notes; never written back).
    pub ignored: Vec<String>,
}

/// A dataset's (or snapshot's) entry in the directory.
#[derive(Debug, Clone)]
pub(crate) struct DsRec {
    /// MOS object whose bonus is the `DslDatasetPhys`.
    pub obj: u64,
    /// Locally set properties.
    pub props: BTreeMap<String, String>,
}

/// Encode a property list: count u32, then per entry key_len u16, key, value_len u16,
/// value (UTF-8, no NUL), sorted by key.
pub(crate) fn encode_props(props: &BTreeMap<String, String>) -> Vec<u8> {
    let mut b = (props.len() as u32).to_le_bytes().to_vec();
    for (k, v) in props {
        b.extend_from_slice(&(k.len() as u16).to_le_bytes());
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    b
}

/// Decode [`encode_props`]' format; any overrun, bad UTF-8 or count mismatch is corrupt.
pub(crate) fn decode_props(b: &[u8]) -> Result<BTreeMap<String, String>> {
    let bad = || SpaError::Corrupt("property record damaged".into());
    let mut pos = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = b.get(pos..pos.checked_add(n).ok_or_else(bad)?).ok_or_else(bad)?;
        pos += n;
        Ok(s)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().unwrap());
    let mut out = BTreeMap::new();
    for _ in 0..count {
        let kl = u16::from_le_bytes(take(2)?.try_into().unwrap()) as usize;
        let k = String::from_utf8(take(kl)?.to_vec()).map_err(|_| bad())?;
        let vl = u16::from_le_bytes(take(2)?.try_into().unwrap()) as usize;
        let v = String::from_utf8(take(vl)?.to_vec()).map_err(|_| bad())?;
        out.insert(k, v);
    }
    Ok(out)
}

/// The length of a packed record (its bonus, u64 LE), checked against `max_bytes`.
pub(crate) fn packed_len(mos: &dyn ObjectStore, obj: u64, max_bytes: u64) -> Result<u64> {
    let b = mos.bonus(obj).map_err(dmu_err)?;
    let len = u64::from_le_bytes(
        b.get(0..8)
            .ok_or_else(|| SpaError::Corrupt(format!("record {obj}: no length")))?
            .try_into()
            .unwrap(),
    );
    if len > max_bytes {
        return Err(SpaError::Corrupt(format!("record {obj}: length {len} too large")));
    }
    Ok(len)
}

/// Read a packed record: its length is the object's bonus (u64 LE), capped at
/// [`PACKED_MAX_BYTES`].
pub(crate) fn read_packed(mos: &dyn ObjectStore, obj: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; packed_len(mos, obj, PACKED_MAX_BYTES)? as usize];
    mos.read(obj, 0, &mut buf).map_err(dmu_err)?;
    Ok(buf)
}

/// Read an object stored like a packed record whose length may pass
/// [`PACKED_MAX_BYTES`] (up to `max_bytes`: the dedup table and its log), handing it
/// to `each` a piece of at most `piece_bytes` at a time, so that a length read from
/// disk never sizes an allocation by itself.
pub(crate) fn read_pieces(mos: &dyn ObjectStore, obj: u64, max_bytes: u64, piece_bytes: usize, each: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let len = packed_len(mos, obj, max_bytes)?;
    let mut buf = Vec::new();
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(piece_bytes as u64) as usize;
        buf.resize(n, 0);
        mos.read(obj, off, &mut buf).map_err(dmu_err)?;
        each(&buf)?;
        off += n as u64;
    }
    Ok(())
}

/// Replace a packed record's contents.
pub(crate) fn write_packed(mos: &dyn ObjectStore, tx: &TxHold, obj: u64, bytes: &[u8]) -> Result<()> {
    if !bytes.is_empty() {
        mos.write(tx, obj, 0, bytes).map_err(dmu_err)?;
    }
    mos.free_range(tx, obj, bytes.len() as u64, u64::MAX).map_err(dmu_err)?;
    mos.set_bonus(tx, obj, &(bytes.len() as u64).to_le_bytes()).map_err(dmu_err)
}

/// A new, empty packed-record object.
pub(crate) fn create_packed(mos: &dyn ObjectStore, tx: &TxHold) -> Result<u64> {
    mos.create_object(tx, ObjectType::Packed, 512, 128 << 10, &0u64.to_le_bytes()).map_err(dmu_err)
}

fn encode_errlog(set: &BTreeSet<(u64, u64)>) -> Vec<u8> {
    set.iter().flat_map(|(a, b)| a.to_le_bytes().into_iter().chain(b.to_le_bytes())).collect()
}

impl Dir {
    /// Load the directory from the MOS: the directory ZAP, then every dataset name
    /// (validated), record and property list. Errors: `Corrupt` for anything damaged.
    pub(crate) fn load(mos: &dyn ObjectStore) -> Result<Dir> {
        let entry = |k: &[u8]| -> Result<u64> {
            zap::lookup(mos, MOS_DIR_OBJ, k)
                .map_err(dmu_err)?
                .ok_or_else(|| SpaError::Corrupt(format!("pool directory has no '{}'", String::from_utf8_lossy(k))))
        };
        let mut d = Dir {
            names_obj: entry(DIR_DATASETS)?,
            history_obj: entry(DIR_HISTORY)?,
            pool_props_obj: entry(DIR_POOL_PROPS)?,
            scan_obj: entry(DIR_SCAN)?,
            errlog_obj: entry(DIR_ERRLOG)?,
            brt_obj: zap::lookup(mos, MOS_DIR_OBJ, DIR_BRT).map_err(dmu_err)?.unwrap_or(0),
            ddt_obj: zap::lookup(mos, MOS_DIR_OBJ, DIR_DDT).map_err(dmu_err)?.unwrap_or(0),
            ddt_log_obj: zap::lookup(mos, MOS_DIR_OBJ, DIR_DDT_LOG).map_err(dmu_err)?.unwrap_or(0),
            ..Dir::default()
        };
        d.pool_props = decode_props(&read_packed(mos, d.pool_props_obj)?)?;
        let scan = read_packed(mos, d.scan_obj)?;
        if !scan.is_empty() {
            d.scan = Some(serde_json::from_slice(&scan).map_err(|e| SpaError::Corrupt(format!("scan record: {e}")))?);
        }
        let el = read_packed(mos, d.errlog_obj)?;
        if el.len() % 16 != 0 {
            return Err(SpaError::Corrupt("error log damaged".into()));
        }
        for c in el.chunks_exact(16) {
            d.errlog
                .insert((u64::from_le_bytes(c[..8].try_into().unwrap()), u64::from_le_bytes(c[8..].try_into().unwrap())));
        }
        let mut cursor = 0u64;
        let mut seen = 0u64;
        loop {
            let batch = zap::list(mos, d.names_obj, cursor, 1024).map_err(dmu_err)?;
            for e in &batch {
                seen += 1;
                if seen > DATASETS_MAX {
                    return Err(SpaError::Corrupt("too many datasets".into()));
                }
                let name = String::from_utf8(e.name.clone()).map_err(|_| SpaError::Corrupt("dataset name is not UTF-8".into()))?;
                crate::names::validate_any_name(&name)
                    .map_err(|_| SpaError::Corrupt(format!("invalid dataset name '{}' in pool directory", name.escape_debug())))?;
                let phys = DslDatasetPhys::decode(&mos.bonus(e.value).map_err(dmu_err)?)?;
                let mut props = if phys.props_obj != 0 {
                    decode_props(&read_packed(mos, phys.props_obj)?)?
                } else {
                    BTreeMap::new()
                };
                d.ignored.extend(keep_valid_props(&name, &mut props));
                let rec = DsRec { obj: e.value, props };
                if phys.is_snapshot() != name.contains('@') {
                    return Err(SpaError::Corrupt(format!("dataset '{name}': snapshot flag does not match its name")));
                }
                if phys.is_snapshot() {
                    d.snaps.insert(name, rec);
                } else {
                    d.datasets.insert(name, rec);
                }
            }
            match batch.last() {
                Some(l) if batch.len() == 1024 => cursor = l.next_cursor,
                _ => break,
            }
        }
        Ok(d)
    }
}

/// Flag bit of [`DslDatasetPhys::flags`]: the record is a snapshot.
pub(crate) const DS_FLAG_SNAPSHOT: u64 = 1;
/// Flag bit of [`DslDatasetPhys::flags`]: a receive into this file system has not
/// finished (OpenZFS `DS_FLAG_INCONSISTENT`). It is never mounted; an import destroys
/// or rolls it back unless it holds a resume token (`crate::sendrecv`).
pub(crate) const DS_FLAG_INCONSISTENT: u64 = 2;
/// Flag bit of [`DslDatasetPhys::flags`]: `zfs destroy -d` marked this snapshot; it is
/// destroyed when its last hold and last clone are gone (`holds.rs`; OpenZFS's
/// `DS_FLAG_DEFER_DESTROY`, the same bit).
pub(crate) const DS_FLAG_DEFER_DESTROY: u64 = 1 << 3;

/// Dataset record (bonus of a `DslDataset` MOS object, [`DslDatasetPhys::SIZE_BYTES`]
/// = 256 bytes, all integers u64 LE; OpenZFS `dsl_dataset_phys_t` is the model):
///
/// | off | field |
/// |----:|-------|
/// | 0   | rootbp (128): the object set's root |
/// | 128 | guid |
/// | 136 | creation_txg |
/// | 144 | creation_time_s |
/// | 152 | referenced_bytes: allocated bytes of every block of the tree |
/// | 160 | flags (bit 0: snapshot, bit 1: inconsistent, a receive in progress; bit 3: defer_destroy) |
/// | 168 | props_obj: packed property record, 0 = none |
/// | 176 | prev_snap_obj: the newest snapshot older than this one (or the origin, for a clone without snapshots), 0 = none |
/// | 184 | prev_snap_txg: its creation txg; blocks born after it belong to this dataset alone |
/// | 192 | next_snap_obj: for a snapshot, the next newer snapshot or the head |
/// | 200 | deadlist_obj: blocks that died here while born at or before prev_snap_txg |
/// | 208 | origin_obj: for a clone, the snapshot it was cloned from |
/// | 216 | num_clones: for a snapshot, clones whose origin it is |
/// | 224 | userrefs: number of user holds (entries of userrefs_obj) |
/// | 232 | userrefs_obj: MOS ZAP of user holds, tag → creation time (s); 0 = no holds |
/// | 240 | reserved (16 bytes, zero) |
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DslDatasetPhys {
    pub rootbp: BlkPtr,
    pub guid: u64,
    pub creation_txg: u64,
    pub creation_time_s: u64,
    pub used_bytes: u64,
    pub flags: u64,
    pub props_obj: u64,
    pub prev_snap_obj: u64,
    pub prev_snap_txg: u64,
    pub next_snap_obj: u64,
    pub deadlist_obj: u64,
    pub origin_obj: u64,
    pub num_clones: u64,
    pub userrefs: u64,
    pub userrefs_obj: u64,
}

// Field offsets of an encoded [`DslDatasetPhys`] (u64 LE after the root pointer).
const DS_ROOTBP_OFF: usize = 0;
const DS_GUID_OFF: usize = 128;
const DS_CREATION_TXG_OFF: usize = 136;
const DS_CREATION_TIME_OFF: usize = 144;
const DS_USED_OFF: usize = 152;
const DS_FLAGS_OFF: usize = 160;
const DS_PROPS_OBJ_OFF: usize = 168;
const DS_PREV_SNAP_OBJ_OFF: usize = 176;
const DS_PREV_SNAP_TXG_OFF: usize = 184;
const DS_NEXT_SNAP_OBJ_OFF: usize = 192;
const DS_DEADLIST_OBJ_OFF: usize = 200;
const DS_ORIGIN_OBJ_OFF: usize = 208;
const DS_NUM_CLONES_OFF: usize = 216;
const DS_USERREFS_OFF: usize = 224;
const DS_USERREFS_OBJ_OFF: usize = 232;
/// 16 reserved bytes, zero, to the end.
const DS_RESERVED_OFF: usize = 240;

impl DslDatasetPhys {
    pub(crate) const SIZE_BYTES: usize = 256;
    pub(crate) fn is_snapshot(&self) -> bool {
        self.flags & DS_FLAG_SNAPSHOT != 0
    }
    pub(crate) fn is_inconsistent(&self) -> bool {
        self.flags & DS_FLAG_INCONSISTENT != 0
    }
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; Self::SIZE_BYTES];
        self.rootbp.encode_into(&mut b[DS_ROOTBP_OFF..DS_GUID_OFF]);
        let f = [
            (DS_GUID_OFF, self.guid),
            (DS_CREATION_TXG_OFF, self.creation_txg),
            (DS_CREATION_TIME_OFF, self.creation_time_s),
            (DS_USED_OFF, self.used_bytes),
            (DS_FLAGS_OFF, self.flags),
            (DS_PROPS_OBJ_OFF, self.props_obj),
            (DS_PREV_SNAP_OBJ_OFF, self.prev_snap_obj),
            (DS_PREV_SNAP_TXG_OFF, self.prev_snap_txg),
            (DS_NEXT_SNAP_OBJ_OFF, self.next_snap_obj),
            (DS_DEADLIST_OBJ_OFF, self.deadlist_obj),
            (DS_ORIGIN_OBJ_OFF, self.origin_obj),
            (DS_NUM_CLONES_OFF, self.num_clones),
            (DS_USERREFS_OFF, self.userrefs),
            (DS_USERREFS_OBJ_OFF, self.userrefs_obj),
        ];
        for (off, v) in f {
            b[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        if b.len() < Self::SIZE_BYTES {
            return Err(SpaError::Corrupt("dataset record too short".into()));
        }
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        if b[DS_RESERVED_OFF..Self::SIZE_BYTES].iter().any(|&x| x != 0)
            || u(DS_FLAGS_OFF) & !(DS_FLAG_SNAPSHOT | DS_FLAG_INCONSISTENT | DS_FLAG_DEFER_DESTROY) != 0
        {
            return Err(SpaError::Corrupt("dataset record has unknown flags or reserved bytes set".into()));
        }
        Ok(DslDatasetPhys {
            rootbp: BlkPtr::decode(&b[DS_ROOTBP_OFF..DS_GUID_OFF]).map_err(|e| SpaError::Corrupt(e.to_string()))?,
            guid: u(DS_GUID_OFF),
            creation_txg: u(DS_CREATION_TXG_OFF),
            creation_time_s: u(DS_CREATION_TIME_OFF),
            used_bytes: u(DS_USED_OFF),
            flags: u(DS_FLAGS_OFF),
            props_obj: u(DS_PROPS_OBJ_OFF),
            prev_snap_obj: u(DS_PREV_SNAP_OBJ_OFF),
            prev_snap_txg: u(DS_PREV_SNAP_TXG_OFF),
            next_snap_obj: u(DS_NEXT_SNAP_OBJ_OFF),
            deadlist_obj: u(DS_DEADLIST_OBJ_OFF),
            origin_obj: u(DS_ORIGIN_OBJ_OFF),
            num_clones: u(DS_NUM_CLONES_OFF),
            userrefs: u(DS_USERREFS_OFF),
            userrefs_obj: u(DS_USERREFS_OBJ_OFF),
        })
    }
}

/// Properties this version implements, in `zfs get all` order, with defaults.
pub const DATASET_PROPS: &[(&str, &str)] = &[
    ("recordsize", "128K"),
    ("mountpoint", ""),
    ("checksum", "on"),
    ("compression", "off"),
    ("atime", "on"),
    ("readonly", "off"),
    ("snapdir", "hidden"),
    ("canmount", "on"),
    ("copies", "1"),
    ("sync", "standard"),
    ("logbias", "latency"),
    ("primarycache", "all"),
    ("secondarycache", "all"),
    ("dedup", "off"),
];

/// Parse a human size as zfs(8) and zpool(8) take them ("256M", "4G", "1.5G", "512",
/// "128k", "64MiB", "64MB") into bytes: a decimal number, then an optional unit
/// B/K/M/G/T/P/E (powers of 1024) with an optional `B` or `iB`. `None` for anything
/// else or a value past `u64::MAX`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    if num.is_empty() {
        return None;
    }
    let suffix = suffix.trim().to_ascii_uppercase();
    let suffix = suffix.strip_suffix("IB").map(|x| x.to_string()).unwrap_or(suffix);
    let suffix = if suffix.len() == 2 && suffix.ends_with('B') {
        suffix[..1].to_string()
    } else {
        suffix
    };
    let shift = match suffix.as_str() {
        "" | "B" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        "E" => 60,
        _ => return None,
    };
    if num.contains('.') {
        let v: f64 = num.parse().ok()?;
        let bytes = v * (1u128 << shift) as f64;
        if !(0.0..1.8e19).contains(&bytes) {
            return None;
        }
        Some(bytes as u64)
    } else {
        let v: u128 = num.parse().ok()?;
        let bytes = v << shift;
        u64::try_from(bytes).ok()
    }
}

fn human_size(v: u64) -> String {
    if v >= 1 << 20 && v.is_multiple_of(1 << 20) {
        format!("{}M", v >> 20)
    } else if v >= 1 << 10 && v.is_multiple_of(1 << 10) {
        format!("{}K", v >> 10)
    } else {
        v.to_string()
    }
}

/// The `compression` values this version implements, as `zfs set` lists them when
/// refusing one (OpenZFS's list without `lzjb`, which Tarn does not implement).
pub const COMPRESSION_VALUES: &str =
    "on | off | gzip | gzip-[1-9] | zle | lz4 | zstd | zstd-[1-19] | zstd-fast | zstd-fast-[1-10,20,30,40,50,60,70,80,90,100,500,1000]";

/// The `checksum` values this version implements (OpenZFS's list without
/// `fletcher2`, `skein` and `edonr`, which Tarn does not implement).
pub const CHECKSUM_VALUES: &str = "on | off | fletcher4 | sha256 | sha512 | blake3";

/// Longest user property name, in bytes, plus one (OpenZFS `ZAP_MAXNAMELEN`).
pub const USER_PROP_NAME_MAX_BYTES: usize = 256;
/// Longest user property value, in bytes, plus one (OpenZFS `ZFS_MAXPROPLEN`).
pub const USER_PROP_VALUE_MAX_BYTES: usize = 8192;

/// Suffix of a received value's key in a dataset's property record: `zfs receive`
/// stores a stream's `compression=lz4` as `compression$recvd`, beside any local
/// `compression` (OpenZFS keeps the same pair in a dataset's props ZAP). The
/// effective value is the local one, else the received one, else the inherited one;
/// its source reads `received`.
pub const RECEIVED_SUFFIX: &str = "$recvd";

/// Suffix of the marker `zfs inherit` (without `-S`) leaves when a received value
/// exists: `prop$inherit` hides `prop$recvd` until `zfs inherit -S` or `zfs set`
/// removes the marker (OpenZFS's `$inherit` entry).
pub const INHERIT_SUFFIX: &str = "$inherit";

/// Whether `name` is a user property name (zfsprops(7) "User Properties"; OpenZFS
/// `zfs_prop_user`): it contains a colon and only lowercase letters, digits and
/// `:` `-` `.` `_`. Such properties hold any string, are never interpreted and are
/// always inherited.
pub fn is_user_prop(name: &str) -> bool {
    name.contains(':') && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b":-._".contains(&c))
}

/// Check the lengths of a user property assignment ([`is_user_prop`] names only);
/// `Err` holds OpenZFS's reason ("property name '…' is too long", "property value
/// '…' is too long").
pub fn check_user_prop(prop: &str, value: &str) -> std::result::Result<(), String> {
    if prop.len() >= USER_PROP_NAME_MAX_BYTES {
        return Err(format!("property name '{prop}' is too long"));
    }
    if value.len() >= USER_PROP_VALUE_MAX_BYTES {
        return Err(format!("property value '{value}' is too long"));
    }
    Ok(())
}

/// Read-only dataset properties: `zfs set` of one says "'X' is readonly".
pub const READONLY_DATASET_PROPS: &[&str] = &[
    "used",
    "available",
    "referenced",
    "type",
    "creation",
    "createtxg",
    "guid",
    "name",
    "mounted",
    "origin",
    "written",
    "compressratio",
    "refcompressratio",
    "logicalused",
    "logicalreferenced",
    "usedbydataset",
    "usedbysnapshots",
    "usedbychildren",
    "usedbyrefreservation",
    "clones",
    "userrefs",
    "defer_destroy",
    "snapshot_count",
    crate::RESUME_TOKEN_PROP,
];

/// Check a dataset property assignment (`prop` by its full name) and return the value
/// to store: recordsize as "128K", a mountpoint without `.` components or a trailing
/// slash. This is the one place these rules live; the CLI asks it. `Err` holds
/// OpenZFS's reason ("'atime' must be one of 'on | off'", "'used' is readonly",
/// "invalid property 'foo'"), to follow "cannot set property for 'fs': ".
pub fn check_dataset_prop(prop: &str, value: &str) -> std::result::Result<String, String> {
    if is_user_prop(prop) {
        return check_user_prop(prop, value).map(|()| value.to_string());
    }
    let one_of = |choices: &[&str]| -> std::result::Result<String, String> {
        if choices.contains(&value) {
            Ok(value.to_string())
        } else {
            Err(format!("'{prop}' must be one of '{}'", choices.join(" | ")))
        }
    };
    match prop {
        "mountpoint" => {
            if value == "none" || value == "legacy" {
                return Ok(value.into());
            }
            if !value.starts_with('/') {
                return Err("'mountpoint' must be an absolute path, 'none', or 'legacy'".into());
            }
            if value.split('/').any(|c| c == "..") {
                return Err("'mountpoint' must not contain '..' components".into());
            }
            let parts: Vec<&str> = value.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
            Ok(format!("/{}", parts.join("/")))
        }
        "recordsize" => match parse_size(value) {
            Some(n) if (512..=(1 << 20)).contains(&n) && n.is_power_of_two() => Ok(human_size(n)),
            _ => Err("'recordsize' must be power of 2 from 512B to 1M".into()),
        },
        "atime" | "readonly" => one_of(&["on", "off"]),
        "canmount" => one_of(&["on", "off", "noauto"]),
        "snapdir" => one_of(&["hidden", "visible"]),
        "sync" => one_of(&["standard", "always", "disabled"]),
        "logbias" => one_of(&["latency", "throughput"]),
        "primarycache" | "secondarycache" => one_of(&["all", "none", "metadata"]),
        "compression" => match CompressSetting::parse(value) {
            Some(_) => Ok(value.into()),
            None => Err(format!("'compression' must be one of '{COMPRESSION_VALUES}'")),
        },
        "checksum" => match ChecksumAlg::parse(value) {
            Some(_) => Ok(value.into()),
            None => Err(format!("'checksum' must be one of '{CHECKSUM_VALUES}'")),
        },
        "copies" => one_of(&["1", "2", "3"]),
        "dedup" => match dedup_setting(value) {
            Some(_) => Ok(value.into()),
            None => Err("'dedup' must be one of 'on | off | verify | sha256[,verify] | sha512[,verify] | blake3[,verify]'".into()),
        },
        p if READONLY_DATASET_PROPS.contains(&p) => Err(format!("'{p}' is readonly")),
        _ => Err(format!("invalid property '{prop}'")),
    }
}

/// Drop from `props` (read from disk for dataset `name`) every entry `zfs set` would
/// refuse, so a pool written elsewhere cannot slip in a setting; returns a line per
/// entry dropped, for the import notes. The resume token (not user-settable) stays.
pub(crate) fn keep_valid_props(name: &str, props: &mut BTreeMap<String, String>) -> Vec<String> {
    let mut dropped = Vec::new();
    props.retain(|k, v| {
        let ok = if let Some(base) = k.strip_suffix(RECEIVED_SUFFIX) {
            check_dataset_prop(base, v).is_ok()
        } else if let Some(base) = k.strip_suffix(INHERIT_SUFFIX) {
            v.is_empty() && (is_user_prop(base) || DATASET_PROPS.iter().any(|(p, _)| *p == base))
        } else {
            k == crate::RESUME_TOKEN_PROP || check_dataset_prop(k, v).is_ok()
        };
        if !ok {
            dropped.push(format!(
                "dataset '{}': stored property '{}' ignored (not a valid setting)",
                name.escape_debug(),
                k.escape_debug()
            ));
        }
        ok
    });
    dropped
}

/// [`check_dataset_prop`] as a pool error: `Invalid("cannot set property 'X': why")`
/// (an unknown property: "invalid property 'X'").
pub(crate) fn check_prop(prop: &str, value: &str) -> Result<String> {
    check_dataset_prop(prop, value).map_err(|why| {
        if why.starts_with("invalid property") {
            SpaError::Invalid(why)
        } else {
            SpaError::Invalid(format!("cannot set property '{prop}': {why}"))
        }
    })
}

/// Parse a dataset `recordsize` value ("128K") into bytes. The value may come from
/// disk (a crafted pool): anything that is not a power of two from 512 B to
/// [`tarn_phys::MAX_BLOCK_SIZE_BYTES`] gives the default, 128 KiB.
pub fn recordsize_bytes(value: &str) -> u32 {
    match parse_size(value) {
        Some(n) if (512..=tarn_phys::MAX_BLOCK_SIZE_BYTES as u64).contains(&n) && n.is_power_of_two() => n as u32,
        _ => 128 << 10,
    }
}

fn parent_of(name: &str) -> Option<&str> {
    name.rfind('/').map(|i| &name[..i])
}

/// Where `name` inherits properties from: a snapshot from its file system, a file
/// system from its parent.
fn inherits_from(name: &str) -> Option<&str> {
    match name.split_once('@') {
        Some((fs, _)) => Some(fs),
        None => parent_of(name),
    }
}

impl Pool {
    /// Create the version-2 pool directory in a new MOS: the directory ZAP at
    /// [`MOS_DIR_OBJ`], the dataset-name ZAP, history, pool properties, scan record and
    /// error log. Called once by `Pool::create`, in txg 1.
    pub(crate) fn init_dir(&self, tx: &TxHold, pool_props: BTreeMap<String, String>) -> Result<()> {
        let mos = &*self.mos;
        zap::create_at(mos, tx, MOS_DIR_OBJ, ObjectType::Zap).map_err(dmu_err)?;
        let names = zap::create(mos, tx, ObjectType::Zap).map_err(dmu_err)?;
        let hist = mos
            .create_object(tx, ObjectType::History, 512, 128 << 10, &0u64.to_le_bytes())
            .map_err(dmu_err)?;
        let pprops = create_packed(mos, tx)?;
        let scan = create_packed(mos, tx)?;
        let errlog = create_packed(mos, tx)?;
        for (k, v) in [
            (DIR_DATASETS, names),
            (DIR_HISTORY, hist),
            (DIR_POOL_PROPS, pprops),
            (DIR_SCAN, scan),
            (DIR_ERRLOG, errlog),
        ] {
            zap::add(mos, tx, MOS_DIR_OBJ, k, v).map_err(dmu_err)?;
        }
        write_packed(mos, tx, pprops, &encode_props(&pool_props))?;
        *self.dir.lock() = Dir {
            names_obj: names,
            history_obj: hist,
            pool_props_obj: pprops,
            scan_obj: scan,
            errlog_obj: errlog,
            pool_props,
            ..Dir::default()
        };
        Ok(())
    }

    /// A dataset or snapshot record.
    pub(crate) fn ds_phys(&self, obj: u64) -> Result<DslDatasetPhys> {
        DslDatasetPhys::decode(&self.mos.bonus(obj).map_err(dmu_err)?)
    }

    /// Replace a dataset or snapshot record.
    pub(crate) fn set_ds_phys(&self, tx: &TxHold, obj: u64, phys: &DslDatasetPhys) -> Result<()> {
        self.mos.set_bonus(tx, obj, &phys.encode()).map_err(dmu_err)
    }

    /// Store a dataset's local properties in its own record (created on first use):
    /// one small object per dataset, so a change writes a few blocks however many
    /// datasets the pool has.
    pub(crate) fn save_ds_props(&self, tx: &TxHold, obj: u64, props: &BTreeMap<String, String>) -> Result<()> {
        let mut phys = self.ds_phys(obj)?;
        if phys.props_obj == 0 {
            if props.is_empty() {
                return Ok(());
            }
            phys.props_obj = create_packed(&*self.mos, tx)?;
            self.set_ds_phys(tx, obj, &phys)?;
        }
        write_packed(&*self.mos, tx, phys.props_obj, &encode_props(props))
    }

    /// Store the pool properties record.
    pub(crate) fn save_pool_props(&self, tx: &TxHold) -> Result<()> {
        let (obj, bytes) = {
            let d = self.dir.lock();
            (d.pool_props_obj, encode_props(&d.pool_props))
        };
        write_packed(&*self.mos, tx, obj, &bytes)
    }

    /// Store the scan record and the error log.
    pub(crate) fn save_scan_records(&self, tx: &TxHold) -> Result<()> {
        let (so, sb, eo, eb) = {
            let d = self.dir.lock();
            let sb = match &d.scan {
                Some(s) => serde_json::to_vec(s).map_err(|e| SpaError::Io(e.to_string()))?,
                None => Vec::new(),
            };
            (d.scan_obj, sb, d.errlog_obj, encode_errlog(&d.errlog))
        };
        write_packed(&*self.mos, tx, so, &sb)?;
        write_packed(&*self.mos, tx, eo, &eb)
    }

    /// Enter `name → obj` in the dataset-name ZAP.
    pub(crate) fn link_name(&self, tx: &TxHold, name: &str, obj: u64) -> Result<()> {
        let names = self.dir.lock().names_obj;
        zap::add(&*self.mos, tx, names, name.as_bytes(), obj).map_err(dmu_err)
    }

    /// Remove `name` from the dataset-name ZAP.
    pub(crate) fn unlink_name(&self, tx: &TxHold, name: &str) -> Result<()> {
        let names = self.dir.lock().names_obj;
        zap::remove(&*self.mos, tx, names, name.as_bytes()).map_err(dmu_err)
    }

    pub(crate) fn create_dataset_record(&self, tx: &TxHold, name: &str, props: &BTreeMap<String, String>) -> Result<u64> {
        self.create_dataset_record_from(tx, name, props, None)
    }

    /// Create a head dataset record (a clone of `origin` = (snapshot object, its
    /// record) when given) and enter it in the directory.
    pub(crate) fn create_dataset_record_from(
        &self,
        tx: &TxHold,
        name: &str,
        props: &BTreeMap<String, String>,
        origin: Option<(u64, &DslDatasetPhys)>,
    ) -> Result<u64> {
        let mut clean = BTreeMap::new();
        for (k, v) in props {
            clean.insert(k.clone(), check_prop(k, v)?);
        }
        let mut phys = DslDatasetPhys {
            rootbp: BlkPtr::HOLE,
            guid: rand::random(),
            creation_txg: tx.txg,
            creation_time_s: now_s(),
            ..Default::default()
        };
        if let Some((oobj, o)) = origin {
            phys.rootbp = o.rootbp;
            phys.used_bytes = o.used_bytes;
            phys.prev_snap_obj = oobj;
            phys.prev_snap_txg = o.creation_txg;
            phys.origin_obj = oobj;
        }
        // A clone's `usedbysnapshots` asks each list of its chain about the origin's
        // txg: its first list keeps that cut (`snapshot::DeadlistHeader`).
        let cut_txg = (phys.origin_obj != 0).then_some(phys.prev_snap_txg);
        phys.deadlist_obj = crate::snapshot::create_deadlist(&*self.mos, tx, cut_txg)?;
        let obj = self.mos.create_object(tx, ObjectType::DslDataset, 512, 512, &phys.encode()).map_err(dmu_err)?;
        self.save_ds_props(tx, obj, &clean)?;
        self.link_name(tx, name, obj)?;
        self.dir.lock().datasets.insert(name.to_string(), crate::dsl::DsRec { obj, props: clean });
        Ok(obj)
    }

    /// Names of every file system (no snapshots), sorted; cheap (no record is read),
    /// for existence checks that must not cost a full listing.
    pub fn dataset_names(&self) -> Vec<String> {
        self.dir.lock().datasets.keys().cloned().collect()
    }

    /// `zfs create`: `name` must be `pool/...` with an existing parent
    /// (`create_parents` = `-p` creates missing ancestors).
    pub fn create_dataset(&self, name: &str, props: &BTreeMap<String, String>) -> Result<()> {
        self.create_dataset_ext(name, props, false)
    }

    /// `zfs create [-p]`.
    pub fn create_dataset_ext(&self, name: &str, props: &BTreeMap<String, String>, create_parents: bool) -> Result<()> {
        crate::validate_dataset_name(name)?;
        if name.split('/').next() != Some(self.name.as_str()) {
            return Err(SpaError::NotFound(format!(
                "cannot create '{name}': no such pool '{}'",
                name.split('/').next().unwrap_or("")
            )));
        }
        if !name.contains('/') {
            return Err(SpaError::Exists(format!("cannot create '{name}': dataset")));
        }
        for (k, v) in props {
            check_prop(k, v)?;
        }
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        if self.dir.lock().datasets.contains_key(name) {
            return Err(SpaError::Exists(format!("cannot create '{name}': dataset")));
        }
        let missing = self.missing_parents(name);
        if !missing.is_empty() && !create_parents {
            return Err(SpaError::NotFound(format!("cannot create '{name}': parent does not exist")));
        }
        for m in missing.iter().rev() {
            self.create_dataset_record(&tx, m, &BTreeMap::new())?;
        }
        self.create_dataset_record(&tx, name, props)?;
        Ok(())
    }

    /// `zfs destroy [-r]`; returns the destroyed names, deepest first.
    pub fn destroy_dataset(&self, name: &str, recursive: bool) -> Result<Vec<String>> {
        self.destroy_dataset_ext(name, recursive, false)
    }

    /// `zfs destroy [-r] [-R] fs|fs@snap`. `recursive` (`-r`) takes descendants and
    /// snapshots along; `with_clones` (`-R`) also every clone of those snapshots (and
    /// their dependents). Validation happens before anything changes (a held snapshot
    /// in the plan is `Busy`); returns the destroyed names in the order destroyed,
    /// including an origin marked for deferred destroy that went with its last clone.
    pub fn destroy_dataset_ext(&self, name: &str, recursive: bool, with_clones: bool) -> Result<Vec<String>> {
        if name == self.name {
            return Err(SpaError::Invalid(format!(
                "cannot destroy '{name}': operation does not apply to pools\nuse 'zfs destroy -r {name}' to destroy all datasets in the pool\nuse 'zpool destroy {name}' to destroy the pool itself"
            )));
        }
        let victims = self.destroy_plan(name, recursive, with_clones)?;
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let mut done: Vec<String> = Vec::new();
        for t in &victims {
            // A deferred origin goes with its last clone (holds.rs); the plan may name it later.
            if done.contains(t) {
                continue;
            }
            if t.contains('@') {
                self.destroy_snapshot_locked(&tx, t)?;
                done.push(t.clone());
                continue;
            }
            let rec = self
                .dir
                .lock()
                .datasets
                .remove(t)
                .ok_or_else(|| SpaError::NotFound(format!("cannot open '{t}': dataset does not exist")))?;
            let os = self.objsets.lock().remove(&rec.obj);
            if let Some(zl) = self.zilogs.lock().remove(&rec.obj) {
                zl.destroy(tx.txg);
            }
            let h = self.ds_phys(rec.obj)?;
            let root = os.map(|o| o.root_bp()).unwrap_or(h.rootbp);
            self.destroy_head_blocks(&tx, rec.obj, &root, &h)?;
            self.unlink_name(&tx, t)?;
            self.drop_bookmarks_of(&tx, t)?;
            self.mos.free_object(&tx, rec.obj).map_err(dmu_err)?;
            done.push(t.clone());
            done.extend(self.reap_deferred(&tx, h.origin_obj)?);
        }
        Ok(done)
    }

    /// What `zfs destroy` would destroy, in a safe order (clones before their origins,
    /// snapshots newest first before their head, children before parents), or the
    /// OpenZFS error that refuses it.
    pub fn destroy_plan(&self, name: &str, recursive: bool, with_clones: bool) -> Result<Vec<String>> {
        let recursive = recursive || with_clones;
        let d = self.dir.lock().clone();
        let mut out: Vec<String> = Vec::new();
        if let Some((fs, _)) = name.split_once('@') {
            let mut names = vec![name.to_string()];
            if recursive {
                let snap = &name[fs.len()..];
                let prefix = format!("{fs}/");
                names.extend(
                    d.datasets
                        .keys()
                        .filter(|k| k.starts_with(&prefix))
                        .map(|k| format!("{k}{snap}"))
                        .filter(|n| d.snaps.contains_key(n)),
                );
            }
            if !d.snaps.contains_key(name) && names.len() == 1 {
                return Err(SpaError::NotFound("could not find any snapshots to destroy; check snapshot names.".to_string()));
            }
            for n in names.into_iter().filter(|n| d.snaps.contains_key(n)) {
                self.plan_snapshot(&d, &n, with_clones, &mut out)?;
            }
            return Ok(out);
        }
        if !d.datasets.contains_key(name) {
            return Err(SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")));
        }
        let prefix = format!("{name}/");
        let children: Vec<String> = d.datasets.keys().filter(|k| k.starts_with(&prefix)).cloned().collect();
        let snaps: Vec<String> = d
            .snaps
            .keys()
            .filter(|k| k.starts_with(&format!("{name}@")) || k.starts_with(&prefix))
            .cloned()
            .collect();
        if (!children.is_empty() || !snaps.is_empty()) && !recursive {
            let mut all = children.clone();
            all.extend(snaps.iter().filter(|s| s.starts_with(&format!("{name}@"))).cloned());
            all.extend(snaps.iter().filter(|s| !s.starts_with(&format!("{name}@"))).cloned());
            return Err(SpaError::HasChildren(all.join("\n")));
        }
        self.plan_fs(&d, name, with_clones, &mut out)?;
        Ok(out)
    }

    fn plan_fs(&self, d: &Dir, fs: &str, with_clones: bool, out: &mut Vec<String>) -> Result<()> {
        if out.iter().any(|o| o == fs) {
            return Ok(());
        }
        let prefix = format!("{fs}/");
        let mut children: Vec<String> = d
            .datasets
            .keys()
            .filter(|k| k.starts_with(&prefix) && !k[prefix.len()..].contains('/'))
            .cloned()
            .collect();
        children.sort();
        for c in children {
            self.plan_fs(d, &c, with_clones, out)?;
        }
        for sn in self.snapshots_of(fs).into_iter().rev() {
            self.plan_snapshot(d, &sn, with_clones, out)?;
        }
        out.push(fs.to_string());
        Ok(())
    }

    fn plan_snapshot(&self, d: &Dir, snap: &str, with_clones: bool, out: &mut Vec<String>) -> Result<()> {
        if out.iter().any(|o| o == snap) {
            return Ok(());
        }
        let obj = d.snaps[snap].obj;
        let clones = self.clones_of(obj);
        let pending: Vec<&String> = clones.iter().filter(|c| !out.contains(c)).collect();
        if !pending.is_empty() {
            if !with_clones {
                return Err(SpaError::Busy(format!(
                    "cannot destroy '{snap}': snapshot has dependent clones\nuse '-R' to destroy the following datasets:\n{}",
                    clones.join("\n")
                )));
            }
            for c in clones {
                self.plan_fs(d, &c, with_clones, out)?;
            }
        }
        self.check_not_held(snap, obj)?;
        out.push(snap.to_string());
        Ok(())
    }

    /// Effective value and source of `prop` for dataset or snapshot `name`: its own
    /// value, else the nearest ancestor's (a snapshot inherits from its file system),
    /// else the default. A user property set nowhere is `("-", "-")`.
    fn effective(&self, d: &crate::dsl::Dir, name: &str, prop: &str) -> (String, String) {
        let received_key = format!("{prop}{RECEIVED_SUFFIX}");
        let inherit_key = format!("{prop}{INHERIT_SUFFIX}");
        // A dataset's own value: local, else received unless `zfs inherit` hid it.
        let own = |n: &str| -> Option<(String, &'static str)> {
            let r = d.datasets.get(n).or_else(|| d.snaps.get(n))?;
            if let Some(v) = r.props.get(prop) {
                return Some((v.clone(), "local"));
            }
            if r.props.contains_key(&inherit_key) {
                return None;
            }
            r.props.get(&received_key).map(|v| (v.clone(), "received"))
        };
        let local = |n: &str| own(n).map(|(v, _)| v);
        if let Some((v, source)) = own(name) {
            return (self.with_altroot(prop, v), source.into());
        }
        // canmount is not inherited (zfsprops(7)).
        if prop == "canmount" {
            return ("on".into(), "default".into());
        }
        let mut p = inherits_from(name);
        while let Some(par) = p {
            if let Some(v) = local(par) {
                let v = if prop == "mountpoint" && v.starts_with('/') {
                    let rel = &name[par.len() + 1..];
                    if v == "/" {
                        format!("/{rel}")
                    } else {
                        format!("{v}/{rel}")
                    }
                } else {
                    v
                };
                return (self.with_altroot(prop, v), format!("inherited from {par}"));
            }
            p = inherits_from(par);
        }
        if is_user_prop(prop) {
            return ("-".into(), "-".into());
        }
        let default = match prop {
            "mountpoint" => format!("/{name}"),
            other => DATASET_PROPS.iter().find(|(k, _)| *k == other).map(|(_, v)| v.to_string()).unwrap_or_default(),
        };
        (self.with_altroot(prop, default), "default".into())
    }

    /// User properties in effect on `name` (its own and inherited), with sources.
    fn user_props(&self, d: &crate::dsl::Dir, name: &str) -> BTreeMap<String, (String, String)> {
        let mut keys = std::collections::BTreeSet::new();
        let mut cur = Some(name);
        while let Some(n) = cur {
            if let Some(r) = d.datasets.get(n).or_else(|| d.snaps.get(n)) {
                keys.extend(
                    r.props
                        .keys()
                        .map(|k| k.strip_suffix(RECEIVED_SUFFIX).unwrap_or(k))
                        .filter(|k| is_user_prop(k))
                        .map(str::to_string),
                );
            }
            cur = inherits_from(n);
        }
        keys.into_iter()
            .map(|k| {
                let v = self.effective(d, name, &k);
                (k, v)
            })
            .collect()
    }

    fn with_altroot(&self, prop: &str, v: String) -> String {
        match (prop, self.altroot()) {
            ("mountpoint", Some(root)) if v.starts_with('/') => format!("{}{}", root.trim_end_matches('/'), if v == "/" { "" } else { &v }),
            _ => v,
        }
    }

    /// All file systems, in listing order, with effective properties and space figures
    /// (`used`, `usedbydataset`, `usedbysnapshots`, `usedbychildren`,
    /// `usedbyrefreservation`, `written`, `origin`, …).
    /// No snapshot gets a row or its own space figures; each file system's
    /// `usedbysnapshots` still walks its snapshot chain (each snapshot's record and
    /// dead-list summary).
    pub fn list_datasets(&self) -> Result<Vec<DatasetInfo>> {
        self.list_filtered(&|n: &str| !n.contains('@'))
    }

    /// Every snapshot, in listing order, with its figures (`used` = what destroying it
    /// alone frees, `referenced`, `written`, `clones`, `createtxg`, `userrefs`).
    pub fn list_snapshots(&self) -> Result<Vec<DatasetInfo>> {
        self.list_filtered(&|n: &str| n.contains('@'))
    }

    /// File systems and snapshots together, in OpenZFS's listing order.
    pub fn list_all(&self) -> Result<Vec<DatasetInfo>> {
        self.list_filtered(&|_| true)
    }

    /// [`Pool::list_all`] restricted to the subtree of `root`: the file system `root`
    /// (or the snapshot, when `root` names one), its descendants, and their snapshots,
    /// with the same figures. Its cost follows the subtree, not the pool: `zfs get
    /// used tank/a` among 10,000 datasets reads one dataset record and space figure,
    /// not 10,000 (only a snapshot's `clones` needs every file system's origin).
    /// Empty when `root` does not exist.
    pub fn list_under(&self, root: &str) -> Result<Vec<DatasetInfo>> {
        self.list_under_kinds(root, true)
    }

    /// [`Pool::list_under`] without the snapshots of the subtree when `snapshots` is
    /// false (`root` naming a snapshot still lists that one): `zfs list fs`, which
    /// shows file systems only, then computes no snapshot's row (its `used` reads its
    /// successor's dead-list header, or the whole list when the header's cut is not
    /// the txg it needs); the file systems' `usedbysnapshots` still walks their
    /// snapshot chains.
    pub fn list_under_kinds(&self, root: &str, snapshots: bool) -> Result<Vec<DatasetInfo>> {
        let fs = root.split('@').next().unwrap_or(root);
        let snap = root.contains('@');
        self.list_filtered(&|n: &str| {
            if snap {
                return n == root;
            }
            if !snapshots && n.contains('@') {
                return false;
            }
            let nfs = n.split('@').next().unwrap_or(n);
            nfs == fs || crate::names::is_descendant(nfs, fs)
        })
    }

    /// The listing of every file system and snapshot whose name `keep` accepts; `keep`
    /// must accept the descendant file systems of every file system it accepts (a file
    /// system's `used` sums its children's; its snapshots' share comes from its own
    /// record, so they need not be accepted).
    fn list_filtered(&self, keep: &dyn Fn(&str) -> bool) -> Result<Vec<DatasetInfo>> {
        let d = self.dir.lock().clone();
        let slop = (self.size_bytes() >> 5).max(4 << 20);
        let defl = |b: u64| self.zio.deflated_bytes(b);
        let avail = defl(self.zio.free_bytes().saturating_sub(slop));
        let name_by_obj: BTreeMap<u64, &String> = d.datasets.iter().chain(d.snaps.iter()).map(|(n, r)| (r.obj, n)).collect();
        let kept: Vec<(&String, &crate::dsl::DsRec)> = d.datasets.iter().chain(d.snaps.iter()).filter(|(n, _)| keep(n)).collect();
        // Every kept record once: space figures and origins are derived from these.
        let mut recs: BTreeMap<u64, DslDatasetPhys> = BTreeMap::new();
        for (_, r) in &kept {
            recs.insert(r.obj, self.ds_phys(r.obj)?);
        }
        let rec = |o: u64| recs.get(&o).cloned().map_or_else(|| self.ds_phys(o), Ok);
        let mut space = BTreeMap::new();
        for (n, r) in &kept {
            space.insert((*n).clone(), self.ds_space(r.obj, &recs[&r.obj], &rec)?);
        }
        // A snapshot's clones may live anywhere in the pool: every file system's origin
        // is read, but only when a snapshot is listed.
        let mut clones: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        if kept.iter().any(|(n, _)| n.contains('@')) {
            for (n, r) in &d.datasets {
                let origin = match recs.get(&r.obj) {
                    Some(p) => p.origin_obj,
                    None => self.ds_phys(r.obj)?.origin_obj,
                };
                if origin != 0 {
                    clones.entry(origin).or_default().push(n.clone());
                }
            }
        }
        // used = dataset + snapshots + children, children first (deepest names last
        // in reverse order).
        let mut used: BTreeMap<String, u64> = BTreeMap::new();
        let mut heads: Vec<&String> = kept.iter().map(|(n, _)| *n).filter(|n| !n.contains('@')).collect();
        heads.sort_by_key(|n| std::cmp::Reverse(n.matches('/').count()));
        let mut by_children: BTreeMap<String, u64> = BTreeMap::new();
        for n in heads {
            let sp = space[n];
            let kids = by_children.get(n).copied().unwrap_or(0);
            let u = sp.used_by_dataset + sp.used_by_snapshots + kids;
            used.insert(n.clone(), u);
            if let Some(par) = parent_of(n) {
                *by_children.entry(par.to_string()).or_default() += u;
            }
        }
        let mut out = Vec::new();
        let ro = |v: String| (v, "-".to_string());
        for (name, rec) in kept {
            let sp = space[name];
            let phys = &recs[&rec.obj];
            let is_snap = phys.is_snapshot();
            let mut props = BTreeMap::new();
            let u = if is_snap { sp.unique } else { used[name] };
            if !is_snap {
                for (p, _) in DATASET_PROPS {
                    props.insert(p.to_string(), self.effective(&d, name, p));
                }
                let kids = by_children.get(name).copied().unwrap_or(0);
                props.insert("usedbydataset".into(), ro(defl(sp.used_by_dataset).to_string()));
                props.insert("usedbysnapshots".into(), ro(defl(sp.used_by_snapshots).to_string()));
                props.insert("usedbychildren".into(), ro(defl(kids).to_string()));
                props.insert("usedbyrefreservation".into(), ro("0".into()));
                let origin = name_by_obj.get(&phys.origin_obj).map_or("-".to_string(), |n| n.to_string());
                props.insert("origin".into(), ro(origin));
                props.insert(
                    crate::RESUME_TOKEN_PROP.into(),
                    ro(rec.props.get(crate::RESUME_TOKEN_PROP).cloned().unwrap_or_else(|| "-".into())),
                );
                let prefix = format!("{name}@");
                props.insert(
                    "snapshot_count".into(),
                    ro(d.snaps.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).count().to_string()),
                );
            } else {
                props.insert("clones".into(), ro(clones.get(&rec.obj).map(|c| c.join(",")).unwrap_or_default()));
                props.insert("userrefs".into(), ro((phys.userrefs + self.temp_hold_count(rec.obj)).to_string()));
                let defer = phys.flags & DS_FLAG_DEFER_DESTROY != 0;
                props.insert("defer_destroy".into(), ro(if defer { "on" } else { "off" }.into()));
            }
            props.extend(self.user_props(&d, name));
            props.insert("type".into(), ro(if is_snap { "snapshot" } else { "filesystem" }.into()));
            props.insert("used".into(), ro(defl(u).to_string()));
            props.insert("available".into(), ro(if is_snap { "-".into() } else { avail.to_string() }));
            props.insert("referenced".into(), ro(defl(sp.referenced).to_string()));
            props.insert("written".into(), ro(defl(sp.written).to_string()));
            props.insert("creation".into(), ro(phys.creation_time_s.to_string()));
            props.insert("createtxg".into(), ro(phys.creation_txg.to_string()));
            props.insert("guid".into(), ro(phys.guid.to_string()));
            out.push(DatasetInfo {
                name: name.clone(),
                used_bytes: defl(u),
                avail_bytes: if is_snap { 0 } else { avail },
                refer_bytes: defl(sp.referenced),
                props,
            });
        }
        // OpenZFS's order: each file system, then its snapshots oldest first, then its
        // children (so `/` sorts before every name character).
        let key = |i: &DatasetInfo| {
            let (fs, snap) = i.name.split_once('@').map(|(f, _)| (f, true)).unwrap_or((i.name.as_str(), false));
            let txg: u64 = if snap {
                i.props.get("createtxg").and_then(|v| v.0.parse().ok()).unwrap_or(0) + 1
            } else {
                0
            };
            (fs.replace('/', "\u{1}"), txg, i.name.clone())
        };
        out.sort_by_cached_key(key);
        Ok(out)
    }

    /// `written@snap` of file system `fs`: bytes referenced now that were born after
    /// snapshot `snap` (a snapshot of `fs` or of its origin chain). `NotFound` when
    /// `snap` does not exist.
    pub fn written_since(&self, fs: &str, snap: &str) -> Result<u64> {
        let (hobj, sobj) = {
            let d = self.dir.lock();
            let h = d.datasets.get(fs).or_else(|| d.snaps.get(fs)).map(|r| r.obj);
            let s = d.snaps.get(snap).map(|r| r.obj);
            match (h, s) {
                (Some(h), Some(s)) => (h, s),
                _ => return Err(SpaError::NotFound(format!("cannot open '{snap}': dataset does not exist"))),
            }
        };
        let s = self.ds_phys(sobj)?;
        let h = self.ds_phys(hobj)?;
        let root = if h.is_snapshot() {
            h.rootbp
        } else {
            self.objsets.lock().get(&hobj).map(|o| o.root_bp()).unwrap_or(h.rootbp)
        };
        let mut total = 0u64;
        tarn_dmu::traverse::traverse_resumable(
            &self.zio,
            &root,
            s.creation_txg.saturating_add(1),
            0,
            &mut |bp, _| total += bp.asize_total_bytes(),
            &mut |_| false,
        )
        .map_err(dmu_err)?;
        Ok(self.zio.deflated_bytes(total))
    }

    /// Logical and physical bytes of every block that file system or snapshot `name`
    /// references as of the last synced txg (summed over its block tree: the logical
    /// figure is [`BlkPtr::ucsize_bytes`], lsize for file data and psize for metadata
    /// as OpenZFS's `ds_uncompressed_bytes`; the physical one psize), from which
    /// `logicalreferenced` and `refcompressratio` are computed. Walks the whole tree: its cost follows the dataset's size, so it
    /// is asked for only when one of those properties is. `NotFound` when `name` does
    /// not exist.
    pub fn referenced_lsize_psize(&self, name: &str) -> Result<(u64, u64)> {
        let obj = {
            let d = self.dir.lock();
            match d.datasets.get(name).or_else(|| d.snaps.get(name)) {
                Some(r) => r.obj,
                None => return Err(SpaError::NotFound(format!("cannot open '{name}': dataset does not exist"))),
            }
        };
        let phys = self.ds_phys(obj)?;
        let root = if phys.is_snapshot() {
            phys.rootbp
        } else {
            self.objsets.lock().get(&obj).map(|o| o.root_bp()).unwrap_or(phys.rootbp)
        };
        let (mut lsize, mut psize) = (0u64, 0u64);
        tarn_dmu::traverse::traverse(&self.zio, &root, &mut |bp| {
            lsize += bp.ucsize_bytes();
            psize += u64::from(bp.psize_bytes);
        })
        .map_err(dmu_err)?;
        Ok((lsize, psize))
    }

    /// The root block pointer (object-set root) of snapshot `name` (`fs@snap`), as
    /// recorded in its dataset record. Errors: `NotFound` for a missing snapshot.
    pub fn snapshot_root_bp(&self, name: &str) -> Result<BlkPtr> {
        let obj = self
            .dir
            .lock()
            .snaps
            .get(name)
            .map(|r| r.obj)
            .ok_or_else(|| SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")))?;
        Ok(self.ds_phys(obj)?.rootbp)
    }

    /// `logicalused` of file system `name` (zfsprops(7)): the logical size
    /// ([`BlkPtr::ucsize_bytes`]: lsize of file data, psize of metadata) of every distinct block held by `name`, its snapshots and
    /// its descendants with theirs, as of the last synced txg. A clone's blocks born
    /// at or before its origin belong to the origin and are left out, as they are of
    /// `used`. Each block is counted once (by its first DVA) however many of those
    /// trees share it. Walks every tree, shared parts once per tree: asked for only
    /// when the property is. Errors: `NotFound` for a missing file system or a
    /// snapshot name (snapshots have no `logicalused`), `Dmu` for unreadable blocks.
    pub fn logical_used(&self, name: &str) -> Result<u64> {
        Ok(self.used_lsize_psize(name)?.0)
    }

    /// Logical and physical bytes ([`BlkPtr::ucsize_bytes`], psize summed) of the blocks that make up
    /// file system `name`'s `used` space: the distinct blocks of [`Pool::logical_used`]
    /// (its head, its snapshots, its descendants and theirs; a clone's origin blocks
    /// left out). `compressratio` is their quotient, as OpenZFS divides its dsl_dir's
    /// `dd_uncompressed_bytes` by `dd_compressed_bytes` (zfsprops(7): "the compression
    /// ratio achieved for the used space of this dataset"). Copies do not count: a
    /// block is counted once whatever its DVAs. Errors as [`Pool::logical_used`].
    pub fn used_lsize_psize(&self, name: &str) -> Result<(u64, u64)> {
        let (heads, snaps) = {
            let d = self.dir.lock();
            if !d.datasets.contains_key(name) {
                return Err(SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")));
            }
            let inside = |fs: &str| fs == name || crate::names::is_descendant(fs, name);
            let heads: Vec<(String, u64)> = d.datasets.iter().filter(|(n, _)| inside(n)).map(|(n, r)| (n.clone(), r.obj)).collect();
            let snaps: Vec<(String, u64)> = d
                .snaps
                .iter()
                .filter(|(n, _)| inside(n.split('@').next().unwrap_or("")))
                .map(|(n, r)| (n.clone(), r.obj))
                .collect();
            (heads, snaps)
        };
        // Per file system: its current root and, for a clone, the first txg that is its
        // own (blocks up to the origin's txg are the origin's); its snapshots share it.
        let mut min_birth: BTreeMap<String, u64> = BTreeMap::new();
        let mut roots: Vec<(BlkPtr, u64)> = Vec::new();
        for (fs, obj) in heads {
            let phys = self.ds_phys(obj)?;
            let min = if phys.origin_obj != 0 {
                self.ds_phys(phys.origin_obj)?.creation_txg + 1
            } else {
                0
            };
            let root = self.objsets.lock().get(&obj).map(|o| o.root_bp()).unwrap_or(phys.rootbp);
            roots.push((root, min));
            min_birth.insert(fs, min);
        }
        for (snap, obj) in snaps {
            let min = min_birth.get(snap.split('@').next().unwrap_or("")).copied().unwrap_or(0);
            roots.push((self.ds_phys(obj)?.rootbp, min));
        }
        let mut seen = std::collections::HashSet::new();
        let (mut lsize, mut psize) = (0u64, 0u64);
        for (root, min_birth_txg) in roots {
            tarn_dmu::traverse::traverse_resumable(
                &self.zio,
                &root,
                min_birth_txg,
                0,
                &mut |bp, _| {
                    if bp.birth_txg >= min_birth_txg && seen.insert((bp.dva[0].vdev, bp.dva[0].offset_bytes)) {
                        lsize += bp.ucsize_bytes();
                        psize += u64::from(bp.psize_bytes);
                    }
                },
                &mut |_| false,
            )
            .map_err(dmu_err)?;
        }
        Ok((lsize, psize))
    }

    /// `zfs set name prop=value`: a native property ([`DATASET_PROPS`]) on a file
    /// system, or a user property ([`is_user_prop`]) on a file system or a snapshot.
    ///
    /// Errors: `Invalid` for an unknown or read-only property, a bad value, or a native
    /// property on a snapshot (OpenZFS wording); `NotFound` for a missing dataset.
    pub fn set_dataset_prop(&self, name: &str, prop: &str, value: &str) -> Result<()> {
        if name.contains('@') && !is_user_prop(prop) {
            check_prop(prop, value)?;
            return Err(SpaError::Invalid(format!(
                "cannot set property '{prop}': this property can not be modified for snapshots"
            )));
        }
        let v = check_prop(prop, value)?;
        // Dedup keys its table by a strong checksum: not with `checksum=off`.
        let d = self.dir.lock();
        let (dedup, sum) = match prop {
            "dedup" => (v.clone(), self.effective(&d, name, "checksum").0),
            "checksum" => (self.effective(&d, name, "dedup").0, v.clone()),
            _ => (String::new(), String::new()),
        };
        drop(d);
        if sum == "off" && !dedup.is_empty() && dedup != "off" {
            return Err(SpaError::Invalid(format!(
                "cannot set property for '{name}': 'dedup' needs a checksum, and 'checksum' would be 'off'"
            )));
        }
        self.change_props(name, |props| {
            props.remove(&format!("{prop}{INHERIT_SUFFIX}"));
            props.insert(prop.to_string(), v);
        })
    }

    /// `zfs inherit prop name`: drop `name`'s own value of `prop` (a native property of
    /// a file system, or a user property of a file system or snapshot). A received
    /// value is hidden too (the property is inherited or takes its default);
    /// [`Pool::revert_to_received`] is `zfs inherit -S`.
    ///
    /// Errors: `Invalid` for an unknown property or a native one on a snapshot;
    /// `NotFound` for a missing dataset.
    pub fn inherit_dataset_prop(&self, name: &str, prop: &str) -> Result<()> {
        self.check_inheritable(name, prop)?;
        let received_key = format!("{prop}{RECEIVED_SUFFIX}");
        self.change_props(name, |props| {
            props.remove(prop);
            if props.contains_key(&received_key) {
                props.insert(format!("{prop}{INHERIT_SUFFIX}"), String::new());
            }
        })
    }

    /// `zfs inherit -S prop name`: drop `name`'s local value of `prop` so that the
    /// value received with a stream applies again; where none was received, the same
    /// as [`Pool::inherit_dataset_prop`] (zfs-inherit(8)).
    ///
    /// Errors: as [`Pool::inherit_dataset_prop`].
    pub fn revert_to_received(&self, name: &str, prop: &str) -> Result<()> {
        self.check_inheritable(name, prop)?;
        self.change_props(name, |props| {
            props.remove(prop);
            props.remove(&format!("{prop}{INHERIT_SUFFIX}"));
        })
    }

    /// Store `props` as the values `name` received with a stream (source `received`),
    /// each validated as `zfs set` does; with `replace`, every value received before
    /// and not in `props` goes (a package carries a file system's whole set). Local
    /// values keep precedence, as in OpenZFS.
    ///
    /// Errors, before anything changes: `Invalid` for a property or value `zfs set`
    /// refuses; `NotFound` for a missing dataset.
    pub fn set_received_props(&self, name: &str, props: &BTreeMap<String, String>, replace: bool) -> Result<()> {
        let mut clean = BTreeMap::new();
        for (k, v) in props {
            clean.insert(format!("{k}{RECEIVED_SUFFIX}"), check_prop(k, v)?);
        }
        if clean.is_empty() && !replace {
            return Ok(());
        }
        self.change_props(name, |p| {
            if replace {
                p.retain(|k, _| !k.ends_with(RECEIVED_SUFFIX));
            }
            p.extend(clean);
        })
    }

    /// The values file system or snapshot `name` received with streams (property →
    /// value; overridden ones included), for `zfs get`'s `RECEIVED` column. Empty for
    /// a missing dataset.
    pub fn received_props(&self, name: &str) -> BTreeMap<String, String> {
        let d = self.dir.lock();
        let Some(r) = d.datasets.get(name).or_else(|| d.snaps.get(name)) else {
            return BTreeMap::new();
        };
        r.props
            .iter()
            .filter_map(|(k, v)| k.strip_suffix(RECEIVED_SUFFIX).map(|k| (k.to_string(), v.clone())))
            .collect()
    }

    fn check_inheritable(&self, name: &str, prop: &str) -> Result<()> {
        if !is_user_prop(prop) && !DATASET_PROPS.iter().any(|(k, _)| *k == prop) {
            return Err(SpaError::Invalid(format!("invalid property '{prop}'")));
        }
        if name.contains('@') && !is_user_prop(prop) {
            return Err(SpaError::Invalid(format!(
                "cannot inherit property '{prop}': this property can not be modified for snapshots"
            )));
        }
        Ok(())
    }

    /// Change the property record of a file system or snapshot with `edit`, store it
    /// and apply the result to open object sets.
    fn change_props(&self, name: &str, edit: impl FnOnce(&mut BTreeMap<String, String>)) -> Result<()> {
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let (obj, props) = {
            let mut d = self.dir.lock();
            let d = &mut *d;
            let rec = d
                .datasets
                .get_mut(name)
                .or_else(|| d.snaps.get_mut(name))
                .ok_or_else(|| SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")))?;
            edit(&mut rec.props);
            (rec.obj, rec.props.clone())
        };
        self.save_ds_props(&tx, obj, &props)?;
        drop(_a);
        drop(tx);
        self.apply_props_to_open();
        Ok(())
    }

    /// Apply the effective properties to every open object set and intent log (after
    /// a change of properties or of the names they are inherited through).
    pub(crate) fn apply_props_to_open(&self) {
        let d = self.dir.lock().clone();
        let open = self.objsets.lock().clone();
        let logs = self.zilogs.lock().clone();
        for (name, rec) in &d.datasets {
            if let Some(os) = open.get(&rec.obj) {
                self.apply_props(&d, name, os);
            }
            if let Some(zl) = logs.get(&rec.obj) {
                self.apply_log_props(&d, name, zl);
            }
        }
    }

    fn apply_log_props(&self, d: &Dir, name: &str, zl: &Zilog) {
        zl.set_logbias_throughput(self.effective(d, name, "logbias").0 == "throughput");
    }

    /// Record in the error log every object of dataset `id` whose read fails.
    fn watch_reads(&self, id: u64, os: &Objset) {
        let log = self.scanner.read_errors.clone();
        os.set_read_error_sink(Arc::new(move |obj| {
            log.lock().insert((id, obj));
        }));
    }

    fn apply_props(&self, d: &Dir, name: &str, os: &Objset) {
        let comp = CompressSetting::parse(&self.effective(d, name, "compression").0).unwrap_or(CompressSetting::OFF);
        os.set_compression(comp);
        let sum = ChecksumAlg::parse(&self.effective(d, name, "checksum").0).unwrap_or(ChecksumAlg::Fletcher4);
        // `dedup` names the checksum its table is keyed by, and it overrides
        // `checksum` for file data (zfsprops(7)).
        match dedup_setting(&self.effective(d, name, "dedup").0) {
            Some((mode, alg)) if mode != tarn_zio::Dedup::Off && sum != ChecksumAlg::Off => {
                os.set_checksum(alg);
                os.set_dedup(mode);
            }
            _ => {
                os.set_checksum(sum);
                os.set_dedup(tarn_zio::Dedup::Off);
            }
        }
        os.set_copies(self.effective(d, name, "copies").0.parse().unwrap_or(1));
        os.set_readonly(self.effective(d, name, "readonly").0 == "on");
        os.set_primarycache(tarn_zio::CachePolicy::parse(&self.effective(d, name, "primarycache").0).unwrap_or_default());
        os.set_secondarycache(tarn_zio::CachePolicy::parse(&self.effective(d, name, "secondarycache").0).unwrap_or_default());
    }

    /// The dataset's object set (for zpl). A fresh dataset has no objects; the caller
    /// formats it (zpl) the first time.
    pub fn objset(&self, name: &str) -> Result<Arc<dyn ObjectStore>> {
        Ok(self.objset_concrete(name)?)
    }

    /// Like [`Pool::objset`] but returning the concrete type (tests, zdb).
    pub fn objset_concrete(&self, name: &str) -> Result<Arc<Objset>> {
        let d = self.dir.lock().clone();
        let rec = d
            .datasets
            .get(name)
            .ok_or_else(|| SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")))?;
        let mut open = self.objsets.lock();
        if let Some(os) = open.get(&rec.obj) {
            return Ok(os.clone());
        }
        let phys = DslDatasetPhys::decode(&self.mos.bonus(rec.obj).map_err(dmu_err)?)?;
        let os = Objset::open(self.zio.clone(), self.gate.clone(), &phys.rootbp, phys.used_bytes).map_err(dmu_err)?;
        self.install_kill(rec.obj, &os, &phys);
        self.apply_props(&d, name, &os);
        self.watch_reads(rec.obj, &os);
        open.insert(rec.obj, os.clone());
        let zl = Zilog::open(self.zio.clone(), self.gate.clone(), os.clone());
        self.apply_log_props(&d, name, &zl);
        self.zilogs.lock().insert(rec.obj, zl);
        Ok(os)
    }

    /// The intent log of a dataset (opening its object set if needed). A log that
    /// awaits replay must be replayed (zpl does it at mount) before new records count.
    pub fn zilog(&self, name: &str) -> Result<Arc<Zilog>> {
        let os = self.objset_concrete(name)?;
        let z = self.zilogs.lock().values().find(|z| Arc::ptr_eq(z.objset(), &os)).cloned();
        z.ok_or_else(|| SpaError::NotFound(format!("cannot open '{name}': no intent log")))
    }

    /// Warnings from import for the user (an intent log that could not be read).
    pub fn import_notes(&self) -> Vec<String> {
        self.import_notes.lock().clone()
    }

    /// Import: open the object set of dataset record `id` and claim its intent-log
    /// chain if it has one, before anything can be allocated.
    pub(crate) fn claim_intent_log(&self, id: u64, phys: &DslDatasetPhys) -> Result<()> {
        let os = Objset::open(self.zio.clone(), self.gate.clone(), &phys.rootbp, phys.used_bytes).map_err(dmu_err)?;
        if os.zil_header().is_empty() {
            return Ok(());
        }
        self.install_kill(id, &os, phys);
        let zl = Zilog::open(self.zio.clone(), self.gate.clone(), os.clone());
        let info = zl.claim();
        tracing::info!("pool {}: claimed {} intent-log blocks of dataset object {id}", self.name, info.blocks);
        let d = self.dir.lock().clone();
        if let Some(why) = &info.unreadable {
            let name = d.datasets.iter().find(|(_, r)| r.obj == id).map(|(n, _)| n.clone()).unwrap_or_default();
            let note = format!(
                "dataset '{name}': intent log unreadable ({why}); changes acknowledged after txg {} may be lost",
                info.since_txg
            );
            tracing::warn!("pool {}: {note}", self.name);
            self.import_notes.lock().push(note);
        }
        if let Some((name, _)) = d.datasets.iter().find(|(_, r)| r.obj == id) {
            self.apply_props(&d, name, &os);
            self.apply_log_props(&d, name, &zl);
        }
        self.watch_reads(id, &os);
        self.objsets.lock().insert(id, os);
        self.zilogs.lock().insert(id, zl);
        Ok(())
    }

    /// Effective value of a dataset property (e.g. "mountpoint", "recordsize").
    pub fn dataset_prop(&self, name: &str, prop: &str) -> Result<(String, String)> {
        let d = self.dir.lock().clone();
        if !d.datasets.contains_key(name) {
            return Err(SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")));
        }
        Ok(self.effective(&d, name, prop))
    }
}

/// A `dedup` value: the write mode and the checksum the table is keyed by (`on`
/// and `verify` mean SHA-256, OpenZFS's default dedup checksum). `None` for a value
/// Tarn does not take (skein and edonr are not built).
pub(crate) fn dedup_setting(v: &str) -> Option<(tarn_zio::Dedup, ChecksumAlg)> {
    use tarn_zio::Dedup;
    let (alg, verify) = match v.strip_suffix(",verify") {
        Some(a) => (a, true),
        None => (v, false),
    };
    let mode = if verify { Dedup::Verify } else { Dedup::On };
    match alg {
        "off" if !verify => Some((Dedup::Off, ChecksumAlg::Fletcher4)),
        "on" if !verify => Some((Dedup::On, ChecksumAlg::Sha256)),
        "verify" if !verify => Some((Dedup::Verify, ChecksumAlg::Sha256)),
        "sha256" => Some((mode, ChecksumAlg::Sha256)),
        "sha512" => Some((mode, ChecksumAlg::Sha512)),
        "blake3" => Some((mode, ChecksumAlg::Blake3)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parse_size_units() {
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("4g"), Some(4 << 30));
        assert_eq!(parse_size("128K"), Some(128 << 10));
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_size("64MB"), Some(64 << 20));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("abc"), None);
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn stored_properties_that_break_the_rules_are_dropped() {
        let mut p: BTreeMap<String, String> = [
            ("mountpoint", "/a/../../etc"),
            ("recordsize", "3K"),
            ("atime", "off"),
            ("used", "5"),
            ("Bad:Name", "x"),
            ("com.example:ok", "fine"),
            (crate::RESUME_TOKEN_PROP, "1-abc"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let notes = keep_valid_props("p/fs", &mut p);
        assert_eq!(p.keys().collect::<Vec<_>>(), ["atime", "com.example:ok", crate::RESUME_TOKEN_PROP]);
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("'mountpoint'")), "{notes:?}");
    }
    use super::*;
    #[test]
    fn prop_validation() {
        assert_eq!(check_prop("recordsize", "131072").unwrap(), "128K");
        assert_eq!(check_prop("recordsize", "1M").unwrap(), "1M");
        assert!(check_prop("recordsize", "3000").is_err());
        assert!(check_prop("recordsize", "2M").is_err());
        assert!(check_prop("mountpoint", "relative").is_err());
        assert_eq!(check_prop("mountpoint", "/a/b/").unwrap(), "/a/b");
        assert!(check_prop("mountpoint", "/a/../../etc")
            .unwrap_err()
            .to_string()
            .contains("must not contain '..' components"));
        assert!(check_prop("mountpoint", "/..").is_err());
        assert_eq!(check_prop("mountpoint", "/a/..b").unwrap(), "/a/..b");
        assert!(check_prop("atime", "yes").is_err());
        assert!(check_prop("canmount", "noauto").is_ok());
        assert_eq!(check_prop("snapdir", "visible").unwrap(), "visible");
        assert!(check_prop("snapdir", "bogus").is_err());
        assert!(check_prop("bogus", "1").is_err());
        assert!(check_prop("used", "1").is_err());
    }
    #[test]
    fn record_roundtrip() {
        let p = DslDatasetPhys {
            rootbp: BlkPtr::HOLE,
            guid: 5,
            creation_txg: 6,
            creation_time_s: 7,
            used_bytes: 8,
            flags: DS_FLAG_SNAPSHOT,
            props_obj: 9,
            prev_snap_obj: 10,
            prev_snap_txg: 11,
            next_snap_obj: 12,
            deadlist_obj: 13,
            origin_obj: 14,
            num_clones: 15,
            userrefs: 16,
            userrefs_obj: 17,
        };
        let b = p.encode();
        assert_eq!(b.len(), DslDatasetPhys::SIZE_BYTES);
        assert_eq!(DslDatasetPhys::decode(&b).unwrap(), p);
        // Offsets as docs/format.md §11 gives them.
        assert_eq!(u64::from_le_bytes(b[160..168].try_into().unwrap()), DS_FLAG_SNAPSHOT);
        assert_eq!(u64::from_le_bytes(b[200..208].try_into().unwrap()), 13);
        assert_eq!(u64::from_le_bytes(b[224..232].try_into().unwrap()), 16);
        assert_eq!(u64::from_le_bytes(b[232..240].try_into().unwrap()), 17);
        let mut deferred = p.clone();
        deferred.flags |= DS_FLAG_DEFER_DESTROY;
        assert_eq!(DslDatasetPhys::decode(&deferred.encode()).unwrap(), deferred);
        // Reserved bytes and unknown flags are corruption.
        let mut bad = b.clone();
        bad[240] = 1;
        assert!(DslDatasetPhys::decode(&bad).is_err());
        let mut bad = b.clone();
        bad[161] = 1;
        assert!(DslDatasetPhys::decode(&bad).is_err());
        assert!(DslDatasetPhys::decode(&b[..200]).is_err());
    }
    #[test]
    fn props_roundtrip_and_damage() {
        let mut m = BTreeMap::new();
        m.insert("mountpoint".to_string(), "/srv/x".to_string());
        m.insert("atime".to_string(), "off".to_string());
        let b = encode_props(&m);
        assert_eq!(decode_props(&b).unwrap(), m);
        for cut in 0..b.len() {
            assert!(decode_props(&b[..cut]).is_err() || cut == 0 && m.is_empty());
        }
        let mut bad = b.clone();
        bad[0] = 0xff;
        assert!(decode_props(&bad).is_err());
    }
}
