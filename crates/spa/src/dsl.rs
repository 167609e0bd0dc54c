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
//! Values are validated before anything changes.
//!
//! Called by: the `Pool` methods below (admin operations under `admin` + a txg hold).

use crate::pool::{dmu_err, now_s, Pool, MOS_DIR_OBJ};
use crate::{DatasetInfo, Result, SpaError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use tarn_dmu::objset::Objset;
use tarn_dmu::{ObjectStore, TxHold};
use tarn_phys::{BlkPtr, Compression, ObjectType};
use tarn_zil::Zilog;

/// The pool directory (MOS object 1), JSON-encoded; its length is the bonus (u64 LE).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Dir {
    /// Dataset name → record.
    pub datasets: BTreeMap<String, DsRec>,
    /// MOS object holding `zpool history` text.
    pub history_obj: u64,
    /// Locally set pool properties (e.g. comment).
    pub pool_props: BTreeMap<String, String>,
    /// The last or current scrub/resilver (absent in pools never scanned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<crate::scan::ScanPhys>,
    /// Objects with unrecoverable blocks found by scans: (dataset MOS object, object).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub errlog: std::collections::BTreeSet<(u64, u64)>,
}

/// A dataset's entry in the directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DsRec {
    /// MOS object whose bonus is the `DslDatasetPhys`.
    pub obj: u64,
    /// Locally set properties.
    pub props: BTreeMap<String, String>,
}

impl Dir {
    pub(crate) fn load(mos: &dyn ObjectStore) -> tarn_dmu::Result<Dir> {
        let b = mos.bonus(MOS_DIR_OBJ)?;
        let len = u64::from_le_bytes(b.get(0..8).ok_or(tarn_dmu::DmuError::Invalid("directory length"))?.try_into().unwrap());
        if len > 64 << 20 {
            return Err(tarn_dmu::DmuError::Invalid("directory too large"));
        }
        let mut buf = vec![0u8; len as usize];
        mos.read(MOS_DIR_OBJ, 0, &mut buf)?;
        serde_json::from_slice(&buf).map_err(|e| tarn_dmu::DmuError::Corrupt(tarn_phys::Corrupt::new("pool directory", e.to_string())))
    }
}

/// Dataset record layout (bonus of a `DslDataset` MOS object, 160 bytes):
/// rootbp @0 (128), guid u64 @128, creation_txg u64 @136, creation_time_s u64 @144,
/// used_bytes u64 @152.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DslDatasetPhys {
    pub rootbp: BlkPtr,
    pub guid: u64,
    pub creation_txg: u64,
    pub creation_time_s: u64,
    pub used_bytes: u64,
}

impl DslDatasetPhys {
    pub(crate) const SIZE_BYTES: usize = 160;
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; Self::SIZE_BYTES];
        self.rootbp.encode_into(&mut b[0..128]);
        b[128..136].copy_from_slice(&self.guid.to_le_bytes());
        b[136..144].copy_from_slice(&self.creation_txg.to_le_bytes());
        b[144..152].copy_from_slice(&self.creation_time_s.to_le_bytes());
        b[152..160].copy_from_slice(&self.used_bytes.to_le_bytes());
        b
    }
    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        if b.len() < Self::SIZE_BYTES {
            return Err(SpaError::Corrupt("dataset record too short".into()));
        }
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Ok(DslDatasetPhys {
            rootbp: BlkPtr::decode(&b[0..128]).map_err(|e| SpaError::Corrupt(e.to_string()))?,
            guid: u(128),
            creation_txg: u(136),
            creation_time_s: u(144),
            used_bytes: u(152),
        })
    }
}

/// Properties this version implements, in `zfs get all` order, with defaults.
pub const DATASET_PROPS: &[(&str, &str)] = &[
    ("recordsize", "128K"),
    ("mountpoint", ""),
    ("compression", "off"),
    ("atime", "on"),
    ("readonly", "off"),
    ("canmount", "on"),
    ("sync", "standard"),
    ("logbias", "latency"),
];

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
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

/// Validate and normalize a property assignment. Returns the value to store.
pub(crate) fn check_prop(prop: &str, value: &str) -> Result<String> {
    let bad = |why: &str| Err(SpaError::Invalid(format!("cannot set property '{prop}': {why}")));
    match prop {
        "mountpoint" => {
            if value == "none" || value == "legacy" {
                Ok(value.into())
            } else if value.starts_with('/') {
                let v = value.trim_end_matches('/');
                Ok(if v.is_empty() { "/".into() } else { v.into() })
            } else {
                bad("'mountpoint' must be an absolute path, 'none', or 'legacy'")
            }
        }
        "recordsize" => match parse_size(value) {
            Some(n) if (512..=(1 << 20)).contains(&n) && n.is_power_of_two() => Ok(human_size(n)),
            _ => bad("'recordsize' must be a power of 2 from 512B to 1M"),
        },
        "atime" | "readonly" => match value {
            "on" | "off" => Ok(value.into()),
            _ => bad(&format!("'{prop}' must be one of 'on | off'")),
        },
        "canmount" => match value {
            "on" | "off" | "noauto" => Ok(value.into()),
            _ => bad("'canmount' must be one of 'on | off | noauto'"),
        },
        "sync" => match value {
            "standard" | "always" | "disabled" => Ok(value.into()),
            _ => bad("'sync' must be one of 'standard | always | disabled'"),
        },
        "logbias" => match value {
            "latency" | "throughput" => Ok(value.into()),
            _ => bad("'logbias' must be one of 'latency | throughput'"),
        },
        "compression" => match Compression::parse(value) {
            Some(_) => Ok(value.into()),
            None => bad("'compression' must be one of 'on | off | lz4'"),
        },
        "used" | "available" | "referenced" | "type" | "creation" | "guid" | "name" | "mounted" => {
            Err(SpaError::Invalid(format!("cannot set property '{prop}': read-only property")))
        }
        _ => Err(SpaError::Invalid(format!("invalid property '{prop}'"))),
    }
}

/// Parse a dataset `recordsize` value ("128K") into bytes.
pub fn recordsize_bytes(value: &str) -> u32 {
    parse_size(value).unwrap_or(128 << 10) as u32
}

fn parent_of(name: &str) -> Option<&str> {
    name.rfind('/').map(|i| &name[..i])
}

impl Pool {
    pub(crate) fn save_dir(&self, tx: &TxHold) -> Result<()> {
        let json = serde_json::to_vec(&*self.dir.lock()).map_err(|e| SpaError::Io(e.to_string()))?;
        self.mos.write(tx, MOS_DIR_OBJ, 0, &json).map_err(dmu_err)?;
        self.mos.free_range(tx, MOS_DIR_OBJ, json.len() as u64, u64::MAX).map_err(dmu_err)?;
        self.mos.set_bonus(tx, MOS_DIR_OBJ, &(json.len() as u64).to_le_bytes()).map_err(dmu_err)
    }

    pub(crate) fn create_dataset_record(&self, tx: &TxHold, name: &str, props: &BTreeMap<String, String>) -> Result<u64> {
        let mut clean = BTreeMap::new();
        for (k, v) in props {
            clean.insert(k.clone(), check_prop(k, v)?);
        }
        let phys = DslDatasetPhys {
            rootbp: BlkPtr::HOLE,
            guid: rand::random(),
            creation_txg: tx.txg,
            creation_time_s: now_s(),
            used_bytes: 0,
        };
        let obj = self.mos.create_object(tx, ObjectType::DslDataset, 512, 512, &phys.encode()).map_err(dmu_err)?;
        self.dir.lock().datasets.insert(name.to_string(), crate::dsl::DsRec { obj, props: clean });
        Ok(obj)
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
        let tx = self.gate.hold().map_err(dmu_err)?;
        let _a = self.admin.lock();
        if self.dir.lock().datasets.contains_key(name) {
            return Err(SpaError::Exists(format!("cannot create '{name}': dataset")));
        }
        let mut missing = Vec::new();
        let mut p = parent_of(name);
        while let Some(par) = p {
            if self.dir.lock().datasets.contains_key(par) {
                break;
            }
            missing.push(par.to_string());
            p = parent_of(par);
        }
        if !missing.is_empty() && !create_parents {
            return Err(SpaError::NotFound(format!("cannot create '{name}': parent does not exist")));
        }
        for m in missing.iter().rev() {
            self.create_dataset_record(&tx, m, &BTreeMap::new())?;
        }
        self.create_dataset_record(&tx, name, props)?;
        self.save_dir(&tx)
    }

    /// `zfs destroy [-r]`; returns the destroyed names, deepest first.
    pub fn destroy_dataset(&self, name: &str, recursive: bool) -> Result<Vec<String>> {
        if name == self.name {
            return Err(SpaError::Invalid(format!(
                "cannot destroy '{name}': operation does not apply to pools\nuse 'zfs destroy -r {name}' to destroy all datasets in the pool\nuse 'zpool destroy {name}' to destroy the pool itself"
            )));
        }
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let (targets, children) = {
            let d = self.dir.lock();
            if !d.datasets.contains_key(name) {
                return Err(SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")));
            }
            let prefix = format!("{name}/");
            let children: Vec<String> = d.datasets.keys().filter(|k| k.starts_with(&prefix)).cloned().collect();
            let mut t = children.clone();
            t.push(name.to_string());
            t.sort_by_key(|n| std::cmp::Reverse(n.matches('/').count()));
            (t, children)
        };
        if !children.is_empty() && !recursive {
            return Err(SpaError::HasChildren(children.join("\n")));
        }
        for t in &targets {
            let rec = self.dir.lock().datasets.remove(t).unwrap();
            let os = self.objsets.lock().remove(&rec.obj);
            if let Some(zl) = self.zilogs.lock().remove(&rec.obj) {
                zl.destroy(tx.txg);
            }
            let root = match os {
                Some(os) => os.root_bp(),
                None => DslDatasetPhys::decode(&self.mos.bonus(rec.obj).map_err(dmu_err)?)?.rootbp,
            };
            let zio = self.zio.clone();
            let txg = tx.txg;
            tarn_dmu::traverse::traverse(&zio, &root, &mut |bp| zio.free_block(bp, txg)).map_err(dmu_err)?;
            self.mos.free_object(&tx, rec.obj).map_err(dmu_err)?;
        }
        self.save_dir(&tx)?;
        Ok(targets)
    }

    fn refer_bytes(&self, obj: u64) -> u64 {
        if let Some(os) = self.objsets.lock().get(&obj) {
            return os.used_bytes();
        }
        self.mos
            .bonus(obj)
            .ok()
            .and_then(|b| DslDatasetPhys::decode(&b).ok())
            .map(|p| p.used_bytes)
            .unwrap_or(0)
    }

    /// Effective value and source of `prop` for dataset `name`.
    fn effective(&self, d: &crate::dsl::Dir, name: &str, prop: &str) -> (String, String) {
        let local = |n: &str| d.datasets.get(n).and_then(|r| r.props.get(prop)).cloned();
        if let Some(v) = local(name) {
            return (self.with_altroot(prop, v), "local".into());
        }
        // canmount is not inherited (zfsprops(7)).
        if prop == "canmount" {
            return ("on".into(), "default".into());
        }
        let mut p = parent_of(name);
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
            p = parent_of(par);
        }
        let default = match prop {
            "mountpoint" => format!("/{name}"),
            other => DATASET_PROPS.iter().find(|(k, _)| *k == other).map(|(_, v)| v.to_string()).unwrap_or_default(),
        };
        (self.with_altroot(prop, default), "default".into())
    }

    fn with_altroot(&self, prop: &str, v: String) -> String {
        match (prop, self.altroot()) {
            ("mountpoint", Some(root)) if v.starts_with('/') => format!("{}{}", root.trim_end_matches('/'), if v == "/" { "" } else { &v }),
            _ => v,
        }
    }

    /// All datasets, sorted by name, with effective properties.
    pub fn list_datasets(&self) -> Result<Vec<DatasetInfo>> {
        let d = self.dir.lock().clone();
        let slop = (self.size_bytes() >> 5).max(4 << 20);
        let avail = self.zio.deflated_bytes(self.zio.free_bytes().saturating_sub(slop));
        let refer: BTreeMap<String, u64> = d
            .datasets
            .iter()
            .map(|(n, r)| (n.clone(), self.zio.deflated_bytes(self.refer_bytes(r.obj))))
            .collect();
        let mut out = Vec::new();
        for (name, rec) in &d.datasets {
            let prefix = format!("{name}/");
            let used = refer[name] + refer.iter().filter(|(n, _)| n.starts_with(&prefix)).map(|(_, v)| *v).sum::<u64>();
            let mut props = BTreeMap::new();
            for (p, _) in DATASET_PROPS {
                props.insert(p.to_string(), self.effective(&d, name, p));
            }
            let phys = self.mos.bonus(rec.obj).ok().and_then(|b| DslDatasetPhys::decode(&b).ok());
            props.insert("type".into(), ("filesystem".into(), "-".into()));
            props.insert("used".into(), (used.to_string(), "-".into()));
            props.insert("available".into(), (avail.to_string(), "-".into()));
            props.insert("referenced".into(), (refer[name].to_string(), "-".into()));
            props.insert(
                "creation".into(),
                (phys.as_ref().map(|p| p.creation_time_s).unwrap_or(0).to_string(), "-".into()),
            );
            props.insert("guid".into(), (phys.as_ref().map(|p| p.guid).unwrap_or(0).to_string(), "-".into()));
            props.insert("compressratio".into(), ("1.00x".into(), "-".into()));
            out.push(DatasetInfo {
                name: name.clone(),
                used_bytes: used,
                avail_bytes: avail,
                refer_bytes: refer[name],
                props,
            });
        }
        Ok(out)
    }

    /// `zfs set name prop=value` (mountpoint, recordsize, atime, readonly, canmount, compression).
    pub fn set_dataset_prop(&self, name: &str, prop: &str, value: &str) -> Result<()> {
        let v = check_prop(prop, value)?;
        let tx = self.gate.hold().map_err(dmu_err)?;
        let _a = self.admin.lock();
        {
            let mut d = self.dir.lock();
            let rec = d
                .datasets
                .get_mut(name)
                .ok_or_else(|| SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")))?;
            rec.props.insert(prop.to_string(), v);
        }
        self.save_dir(&tx)?;
        drop(_a);
        drop(tx);
        self.apply_props_to_open();
        Ok(())
    }

    /// `zfs inherit prop name`.
    pub fn inherit_dataset_prop(&self, name: &str, prop: &str) -> Result<()> {
        if !DATASET_PROPS.iter().any(|(k, _)| *k == prop) {
            return Err(SpaError::Invalid(format!("invalid property '{prop}'")));
        }
        let tx = self.gate.hold().map_err(dmu_err)?;
        let _a = self.admin.lock();
        {
            let mut d = self.dir.lock();
            let rec = d
                .datasets
                .get_mut(name)
                .ok_or_else(|| SpaError::NotFound(format!("cannot open '{name}': dataset does not exist")))?;
            rec.props.remove(prop);
        }
        self.save_dir(&tx)?;
        drop(_a);
        drop(tx);
        self.apply_props_to_open();
        Ok(())
    }

    fn apply_props_to_open(&self) {
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
        let comp = Compression::parse(&self.effective(d, name, "compression").0).unwrap_or(Compression::Off);
        os.set_compression(comp);
        os.set_readonly(self.effective(d, name, "readonly").0 == "on");
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

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn prop_validation() {
        assert_eq!(check_prop("recordsize", "131072").unwrap(), "128K");
        assert_eq!(check_prop("recordsize", "1M").unwrap(), "1M");
        assert!(check_prop("recordsize", "3000").is_err());
        assert!(check_prop("recordsize", "2M").is_err());
        assert!(check_prop("mountpoint", "relative").is_err());
        assert_eq!(check_prop("mountpoint", "/a/b/").unwrap(), "/a/b");
        assert!(check_prop("atime", "yes").is_err());
        assert!(check_prop("canmount", "noauto").is_ok());
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
        };
        assert_eq!(DslDatasetPhys::decode(&p.encode()).unwrap(), p);
    }
}
