//! # cachefile — the list of pools the daemon imports when it starts
//!
//! Theory: OpenZFS keeps `/etc/zfs/zpool.cache`, and at boot `zfs-import-cache`
//! imports every pool it lists and `zfs-mount` mounts their file systems. Tarn's
//! equivalent is `/etc/tarn/tarn.cache` (`$TARN_CACHEFILE` overrides the path, which
//! test harnesses must set): a JSON document naming, for each pool, its name, GUID,
//! leaf paths and altroot. The daemon reads the default file before it answers
//! anyone ([`import_all`]) and imports and mounts each pool in it, so neither a
//! reboot nor a `kill -9` of the daemon needs a manual `zpool import`.
//!
//! The pool property `cachefile` chooses the file per pool, as in OpenZFS: unset
//! (shown as `-`) is the default file, `none` keeps the pool out of every file, and an
//! absolute path lists it in that file instead (which the daemon does not read at
//! start; it is for other tools). The property lives in the daemon
//! ([`crate::state::PoolEntry::cachefile`]) and in the file itself, not in the pool.
//!
//! Who writes: the zpool commands, after the pool layer succeeded — create and
//! import add the pool ([`record`]), export and destroy remove it ([`forget`]), and
//! set/attach/replace/add re-record it (its leaves or file moved). Shutting the daemon
//! down (`daemon --stop`, SIGTERM) exports every pool but leaves the files alone, so
//! the next daemon brings them back. A pool imported read-only is never recorded.
//!
//! Invariant: a file is replaced whole, written to `<file>.tmp` (mode 0600,
//! `O_NOFOLLOW`), fsynced and renamed over the old one, so a crash leaves the old or
//! the new list, never a torn one. A file that cannot be parsed is treated as empty
//! (and logged); a missing one is empty.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tarn_spa::{ImportOptions, Pool};

use crate::state::{PoolEntry, State};

/// Where the daemon looks for pools to import at start unless `$TARN_CACHEFILE`
/// says otherwise.
pub const DEFAULT_CACHEFILE: &str = "/etc/tarn/tarn.cache";

/// `$TARN_CACHEFILE` or [`DEFAULT_CACHEFILE`].
pub fn default_path() -> PathBuf {
    std::env::var_os("TARN_CACHEFILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHEFILE))
}

/// One pool as a cachefile lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedPool {
    /// Pool name.
    pub name: String,
    /// Pool GUID (what the import asks for, so a renamed file cannot bring in another
    /// pool of the same name).
    pub guid: u64,
    /// Leaf paths when it was recorded; their directories are searched on import.
    pub leaves: Vec<PathBuf>,
    /// `-R altroot` it was imported or created with.
    pub altroot: Option<PathBuf>,
    /// The `cachefile` property when it names a file (`None`: the default file).
    pub cachefile: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFileDoc {
    version: u32,
    pools: Vec<CachedPool>,
}

const DOC_VERSION: u32 = 1;

/// Check a `cachefile=` value as OpenZFS does: empty (the default), `none`, or an
/// absolute path to a file in an existing directory. Returns what to keep in
/// [`PoolEntry::cachefile`]; the error is the text after "cannot …: ".
pub fn check_property(value: &str) -> Result<Option<String>, String> {
    match value {
        "" => Ok(None),
        "none" => Ok(Some("none".into())),
        v if !v.starts_with('/') => Err("property 'cachefile' must be empty, an absolute path, or 'none'".into()),
        v => {
            let p = Path::new(v);
            let (Some(parent), Some(file)) = (p.parent(), p.file_name()) else {
                return Err(format!("'{v}' is not a valid file"));
            };
            if v.ends_with('/') || file == "." || file == ".." {
                return Err(format!("'{v}' is not a valid file"));
            }
            if !parent.as_os_str().is_empty() && !parent.is_dir() {
                return Err(format!("'{}' is not a valid directory", parent.display()));
            }
            Ok(Some(v.to_string()))
        }
    }
}

/// The file a pool's entry goes to, or `None` (`cachefile=none`, or read-only).
pub fn path_of(entry: &PoolEntry) -> Option<PathBuf> {
    if entry.readonly {
        return None;
    }
    match entry.cachefile.as_deref() {
        None => Some(default_path()),
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
    }
}

/// The pools listed in `path` (empty when it is missing or unreadable).
pub fn read(path: &Path) -> Vec<CachedPool> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!("cannot read cachefile {}: {e}", path.display());
            return Vec::new();
        }
    };
    match serde_json::from_str::<CacheFileDoc>(&text) {
        Ok(doc) => doc.pools,
        Err(e) => {
            tracing::warn!("ignoring unparsable cachefile {}: {e}", path.display());
            Vec::new()
        }
    }
}

/// Replace `path` with `pools`: written to `<path>.tmp`, fsynced, renamed over it.
pub fn write(path: &Path, pools: &[CachedPool]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let doc = CacheFileDoc {
        version: DOC_VERSION,
        pools: pools.to_vec(),
    };
    let mut body = serde_json::to_vec_pretty(&doc).map_err(std::io::Error::other)?;
    body.push(b'\n');
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(&body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Remove the pool with `guid` from `path` (no write when it is not there).
fn remove_from(path: &Path, guid: u64) {
    let mut pools = read(path);
    let before = pools.len();
    pools.retain(|p| p.guid != guid);
    if pools.len() != before {
        if let Err(e) = write(path, &pools) {
            tracing::warn!("cannot update cachefile {}: {e}", path.display());
        }
    }
}

/// Bring pool `name`'s entry in line with the daemon: listed (name, leaves, altroot
/// as now) in the file its `cachefile` property names, and in no other file it was
/// listed in before (`old` is the file it went to before a `zpool set cachefile`).
pub fn record(st: &State, name: &str, old: Option<PathBuf>) {
    let Some(entry) = st.pools.get(name) else { return };
    let guid = entry.pool.guid();
    let target = path_of(entry);
    if let Some(old) = old.filter(|o| Some(o) != target.as_ref()) {
        remove_from(&old, guid);
    }
    let Some(path) = target else { return };
    let item = CachedPool {
        name: name.to_string(),
        guid,
        leaves: crate::state::leaves(&entry.pool.status()),
        altroot: entry.altroot.clone(),
        cachefile: entry.cachefile.clone(),
    };
    let mut pools = read(&path);
    if pools.contains(&item) {
        return;
    }
    pools.retain(|p| p.guid != guid && p.name != name);
    pools.push(item);
    if let Err(e) = write(&path, &pools) {
        tracing::warn!("cannot update cachefile {}: {e}", path.display());
    }
}

/// Take a pool out of its cachefile (`zpool export`, `zpool destroy`).
pub fn forget(entry: &PoolEntry) {
    if let Some(path) = path_of(entry) {
        remove_from(&path, entry.pool.guid());
    }
}

/// Daemon start: import every pool the default cachefile lists (by GUID, searching
/// the directories of its recorded leaves) and mount its file systems, as
/// `zfs-import-cache` and `zfs-mount` do. A pool that cannot be imported is logged
/// and stays listed, so it comes back once its devices do. Returns the names
/// imported.
pub fn import_all(st: &mut State) -> Vec<String> {
    let path = default_path();
    let mut imported = Vec::new();
    for c in read(&path) {
        if st.pools.contains_key(&c.name) {
            continue;
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        for l in &c.leaves {
            if let Some(d) = l.parent().filter(|d| !d.as_os_str().is_empty()) {
                if !dirs.iter().any(|x| x == d) {
                    dirs.push(d.to_path_buf());
                }
            }
        }
        let opts = ImportOptions {
            new_name: Some(c.name.clone()),
            ..ImportOptions::default()
        };
        let pool = match Pool::import_with(&c.guid.to_string(), &dirs, &opts) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("cachefile {}: cannot import '{}': {e}", path.display(), c.name);
                continue;
            }
        };
        let mut entry = PoolEntry::new(pool, c.altroot.clone());
        entry.cachefile = c.cachefile.clone();
        for e in crate::zfs_mount::mount_all(&mut entry) {
            tracing::error!("{e}");
        }
        tracing::info!("imported '{}' from cachefile {}", c.name, path.display());
        st.pools.insert(c.name.clone(), entry);
        imported.push(c.name);
    }
    imported
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_values() {
        assert_eq!(check_property("").unwrap(), None);
        assert_eq!(check_property("none").unwrap().as_deref(), Some("none"));
        assert_eq!(check_property("/tmp/x.cache").unwrap().as_deref(), Some("/tmp/x.cache"));
        assert_eq!(
            check_property("rel").unwrap_err(),
            "property 'cachefile' must be empty, an absolute path, or 'none'"
        );
        assert!(check_property("/nonexistent-dir-tarn/x").unwrap_err().contains("is not a valid directory"));
        assert!(check_property("/tmp/").unwrap_err().contains("is not a valid file"));
    }

    #[test]
    fn write_is_whole_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("sub/tarn.cache");
        let p = CachedPool {
            name: "tank".into(),
            guid: 7,
            leaves: vec!["/v/a".into()],
            altroot: None,
            cachefile: None,
        };
        write(&f, std::slice::from_ref(&p)).unwrap();
        assert_eq!(read(&f), vec![p]);
        assert!(!tmp.path().join("sub/tarn.cache.tmp").exists());
        std::fs::write(&f, "garbage").unwrap();
        assert!(read(&f).is_empty());
    }
}
