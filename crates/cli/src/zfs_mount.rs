//! # zfs_mount — where and how datasets mount (OpenZFS `zfs mount` policy)
//!
//! Theory: the pool stores properties; this module turns them into mounts of one
//! [`PoolEntry`]: the effective mountpoint (`-R altroot` applied), `canmount`, the
//! zpl options, and the checks a mountpoint must pass before anything is created
//! there (no `..`, and under an altroot no escape through symbolic links). The FUSE
//! mechanics are [`crate::mounts`]; callers are the command modules and the daemon's
//! start and shutdown, all holding the state lock.
//!
//! Invariant: `PoolEntry::mounts` holds exactly the datasets this process mounted and
//! has not unmounted; a dataset a receive is writing is never mounted.

use std::path::{Path, PathBuf};

use tarn_spa::DatasetInfo;

use crate::format::parse_size;
use crate::mounts::{self, MountOpts};
use crate::state::{cannot, PoolEntry};

/// The value of a dataset property ("" when the pool layer does not report it).
pub fn prop<'a>(info: &'a DatasetInfo, name: &str) -> &'a str {
    info.props.get(name).map(|(v, _)| v.as_str()).unwrap_or("")
}

/// Where a dataset mounts (altroot applied), or None for `none`/`legacy`/unset.
pub fn effective_mountpoint(info: &DatasetInfo, altroot: Option<&Path>) -> Option<PathBuf> {
    let mp = prop(info, "mountpoint");
    if !mp.starts_with('/') {
        return None;
    }
    Some(match altroot {
        Some(root) => root.join(mp.trim_start_matches('/')),
        None => PathBuf::from(mp),
    })
}

/// Check where dataset `name` would mount before anything is created there: `mp`
/// (from [`effective_mountpoint`]) must have no `..` component, and under `-R altroot`
/// the path its existing part resolves to (symbolic links followed, as mount(2)
/// would) must stay inside the altroot's own resolved path. Property values and
/// names are checked when they are set, but a pool written elsewhere may hold
/// anything, so this is checked again on every mount. The error is the whole message.
pub fn check_mountpoint(name: &str, mp: &Path, altroot: Option<&Path>) -> Result<(), String> {
    use std::path::Component;
    if mp.components().any(|c| c == Component::ParentDir) {
        return Err(format!("cannot mount '{name}': mountpoint '{}' contains '..' components", mp.display()));
    }
    let Some(root) = altroot else { return Ok(()) };
    let resolve = |p: &Path| -> std::io::Result<PathBuf> {
        // The deepest part that exists (a dangling link counts, and fails to resolve),
        // resolved, with the rest appended as it is (it has no `..`).
        let mut base = p;
        let mut rest = Vec::new();
        while std::fs::symlink_metadata(base).is_err() {
            match (base.parent(), base.file_name()) {
                (Some(parent), Some(last)) => {
                    rest.push(last.to_os_string());
                    base = parent;
                }
                _ => break,
            }
        }
        let mut out = std::fs::canonicalize(base)?;
        out.extend(rest.iter().rev());
        Ok(out)
    };
    let outside = || {
        format!(
            "cannot mount '{name}': mountpoint '{}' is outside the alternate root '{}'",
            mp.display(),
            root.display()
        )
    };
    let real_root = resolve(root).map_err(|e| format!("cannot mount '{name}': cannot resolve alternate root '{}': {e}", root.display()))?;
    let real_mp = resolve(mp).map_err(|e| format!("cannot mount '{name}': cannot resolve mountpoint '{}': {e}", mp.display()))?;
    if !mp.starts_with(root) || !real_mp.starts_with(&real_root) {
        return Err(outside());
    }
    Ok(())
}

/// The mountpoint as `zfs list`/`zfs get` show it (altroot applied; "none"/"legacy").
pub fn shown_mountpoint(info: &DatasetInfo, altroot: Option<&Path>) -> String {
    match effective_mountpoint(info, altroot) {
        Some(p) => p.display().to_string(),
        None => {
            let v = prop(info, "mountpoint");
            if v.is_empty() {
                "-".into()
            } else {
                v.to_string()
            }
        }
    }
}

/// zpl options from the effective properties.
pub fn mount_opts(info: &DatasetInfo) -> MountOpts {
    let rs = parse_size(prop(info, "recordsize")).filter(|n| n.is_power_of_two() && (512..=1 << 20).contains(n));
    MountOpts {
        readonly: prop(info, "readonly") == "on",
        atime: prop(info, "atime") != "off",
        recordsize_bytes: rs.unwrap_or(128 << 10) as u32,
        sync: match prop(info, "sync") {
            "always" => mounts::SyncProp::Always,
            "disabled" => mounts::SyncProp::Disabled,
            _ => mounts::SyncProp::Standard,
        },
        snapdir: tarn_zpl::SnapDir::parse(prop(info, "snapdir")).unwrap_or_default(),
    }
}

/// `canmount` ("on" when unset).
pub fn canmount(info: &DatasetInfo) -> &str {
    match prop(info, "canmount") {
        "" => "on",
        v => v,
    }
}

/// Mount one dataset; the error is the whole message for the user.
pub fn mount_one(entry: &mut PoolEntry, info: &DatasetInfo, explicit: bool) -> Result<(), String> {
    let name = &info.name;
    if entry.mounts.contains_key(name) {
        return Err(format!("cannot mount '{name}': filesystem already mounted"));
    }
    // A name read from a pool written elsewhere has not been through the name rules.
    if let Err(e) = tarn_spa::validate_dataset_name(name) {
        return Err(cannot(&format!("cannot mount '{name}'"), e));
    }
    // A file system a receive is writing (or left partially received for `-s`) is
    // never mounted: its contents are not a snapshot's.
    if entry.pool.is_inconsistent(name) {
        if !explicit {
            return Ok(());
        }
        return Err(format!(
            "cannot mount '{name}': dataset is partially received (see 'zfs get receive_resume_token')"
        ));
    }
    match canmount(info) {
        "off" => return Err(format!("cannot mount '{name}': 'canmount' property is set to 'off'")),
        "noauto" if !explicit => return Ok(()),
        _ => {}
    }
    let mp = match effective_mountpoint(info, entry.altroot.as_deref()) {
        Some(p) => p,
        None if prop(info, "mountpoint") == "legacy" => {
            return Err(format!("cannot mount '{name}': legacy mountpoint\nuse mount(8) to mount this filesystem"));
        }
        None => return Err(format!("cannot mount '{name}': no mountpoint set")),
    };
    check_mountpoint(name, &mp, entry.altroot.as_deref())?;
    if entry.mounts.values().any(|m| m.mountpoint == mp) {
        return Err(format!("cannot mount '{}': mountpoint is in use", mp.display()));
    }
    let os = entry.pool.objset(name).map_err(|e| cannot(&format!("cannot mount '{name}'"), e))?;
    // TARN_ZIL=off (benchmarks only): mount without the intent log, so every fsync
    // forces a txg sync as before the log existed.
    // A pool imported read-only mounts read-only and replays no intent log (a replay
    // writes).
    let zil = entry
        .pool
        .zilog(name)
        .ok()
        .filter(|_| !entry.readonly && std::env::var("TARN_ZIL").as_deref() != Ok("off"));
    let snaps = mounts::PoolSnapshots::new(&entry.pool, name);
    let mut opts = mount_opts(info);
    opts.readonly |= entry.readonly;
    let m = mounts::mount(os, zil, snaps, name, &mp, opts).map_err(|e| format!("cannot mount '{}': {e}", mp.display()))?;
    tracing::info!("mounted {name} at {}", mp.display());
    entry.mounts.insert(name.clone(), m);
    Ok(())
}

/// Unmount one dataset if mounted (and its mounted descendants first).
pub fn unmount_one(entry: &mut PoolEntry, name: &str) -> Result<(), String> {
    unmount_one_ext(entry, name, false)
}

/// [`unmount_one`]; `force` (`-f` of `zfs unmount/destroy/rollback/rename`) unmounts
/// busy file systems too. A file system that fails to unmount stays mounted and
/// listed (the error says why).
pub fn unmount_one_ext(entry: &mut PoolEntry, name: &str, force: bool) -> Result<(), String> {
    let prefix = format!("{name}/");
    let mut victims: Vec<String> = entry.mounts.keys().filter(|k| k.as_str() == name || k.starts_with(&prefix)).cloned().collect();
    victims.sort();
    for v in victims.into_iter().rev() {
        if let Some(m) = entry.mounts.get_mut(&v) {
            let mp = m.mountpoint.clone();
            m.unmount(force).map_err(|e| format!("cannot unmount '{}': {e}", mp.display()))?;
            entry.mounts.remove(&v);
            tracing::info!("unmounted {v} from {}", mp.display());
        }
    }
    Ok(())
}

/// Mount every dataset of the pool that should be (parents first). Returns the errors.
pub fn mount_all(entry: &mut PoolEntry) -> Vec<String> {
    let infos = match entry.pool.list_datasets() {
        Ok(i) => i,
        Err(e) => return vec![format!("cannot list datasets: {e}")],
    };
    let mut errors = Vec::new();
    for info in &infos {
        if entry.mounts.contains_key(&info.name) || canmount(info) != "on" || effective_mountpoint(info, entry.altroot.as_deref()).is_none() {
            continue;
        }
        if let Err(e) = mount_one(entry, info, false) {
            errors.push(e);
        }
    }
    errors
}

/// Unmount every dataset of the pool, children first. `force`: unmount busy file
/// systems too ([`unmount_one_ext`]) and keep going on errors.
pub fn unmount_all(entry: &mut PoolEntry, force: bool) -> Vec<String> {
    let names: Vec<String> = entry.mounts.keys().rev().cloned().collect();
    let mut errors = Vec::new();
    for n in names {
        if let Err(e) = unmount_one_ext(entry, &n, force) {
            errors.push(e);
            if !force {
                break;
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn mountpoints_stay_inside_the_altroot() {
        let tmp = tempfile::tempdir().unwrap();
        let alt = tmp.path().join("alt");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(alt.join("p/a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, alt.join("p/link")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), alt.join("p/dangling")).unwrap();
        let ok = |mp: &Path| check_mountpoint("p/x", mp, Some(&alt));
        ok(&alt).unwrap();
        ok(&alt.join("p/a")).unwrap();
        ok(&alt.join("p/new/deeper")).unwrap();
        // A dataset named p/../../etc read from disk mounts by default at /p/../../etc.
        let dotdot = effective_mountpoint_of("/p/../../etc", Some(&alt));
        assert!(ok(&dotdot).unwrap_err().contains("contains '..' components"));
        let e = ok(&alt.join("p/link/sub")).unwrap_err();
        assert_eq!(
            e,
            format!(
                "cannot mount 'p/x': mountpoint '{}' is outside the alternate root '{}'",
                alt.join("p/link/sub").display(),
                alt.display()
            )
        );
        assert!(ok(&alt.join("p/dangling/sub")).unwrap_err().contains("cannot resolve mountpoint"));
        assert!(ok(Path::new("/etc")).unwrap_err().contains("outside the alternate root"));
        // Without an altroot any absolute path is the administrator's choice, but `..`
        // is still refused.
        check_mountpoint("p/x", &alt.join("p/link/sub"), None).unwrap();
        assert!(check_mountpoint("p/x", Path::new("/a/../etc"), None).is_err());
    }

    fn effective_mountpoint_of(mp: &str, altroot: Option<&Path>) -> PathBuf {
        let info = DatasetInfo {
            name: "p".into(),
            used_bytes: 0,
            avail_bytes: 0,
            refer_bytes: 0,
            props: [("mountpoint".to_string(), (mp.to_string(), "local".to_string()))].into(),
        };
        effective_mountpoint(&info, altroot).unwrap()
    }
}
