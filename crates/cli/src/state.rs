//! # state — what the daemon holds: imported pools, their mounts, per-command context
//!
//! Theory: [`State`] is everything the daemon knows, behind the one mutex the daemon
//! takes for a whole command ([`crate::daemon`]); the command modules ([`crate::zpool`],
//! [`crate::zfs`] and the others) receive `&mut State` and a [`Ctx`] and never see the
//! daemon itself, so calls go one way: daemon → commands → state. It owns:
//!
//! * `State::pools`: pool name → [`PoolEntry`] (the `Arc<Pool>`, the altroot given at
//!   create/import time, whether it was imported read-only, its `cachefile` property,
//!   and the live [`Mounted`] datasets keyed by dataset name);
//! * `$TARN_STATE_DIR/known_dirs`: directories that held leaves of pools it created or
//!   imported (one path a line), searched by default by `zpool import`.
//!
//! Invariant: a name is in `pools` exactly while that pool is open in this process
//! (inserted after a successful create/import, removed after export/destroy).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_spa::Pool;

use crate::mounts::Mounted;
use crate::proto::Response;

/// One imported pool and what the daemon mounted from it.
pub struct PoolEntry {
    /// The open pool.
    pub pool: Arc<Pool>,
    /// `-R altroot` given at create/import (prefixes every mountpoint).
    pub altroot: Option<PathBuf>,
    /// Mounted datasets by name.
    pub mounts: BTreeMap<String, Mounted>,
    /// Imported with `-o readonly=on`: nothing is written, and it is left out of
    /// every cachefile (a restart must not bring it back read-write).
    pub readonly: bool,
    /// The `cachefile` property: `None` for the default file, `Some("none")` for
    /// none, or an absolute path ([`crate::cachefile`]).
    pub cachefile: Option<String>,
}

impl PoolEntry {
    /// A freshly created or imported pool: nothing mounted yet, read-write, listed in
    /// the default cachefile.
    pub fn new(pool: Arc<Pool>, altroot: Option<PathBuf>) -> PoolEntry {
        PoolEntry {
            pool,
            altroot,
            mounts: BTreeMap::new(),
            readonly: false,
            cachefile: None,
        }
    }
}

/// Everything the daemon holds, behind one mutex.
pub struct State {
    /// Imported pools by name.
    pub pools: BTreeMap<String, PoolEntry>,
    /// `$TARN_STATE_DIR`.
    pub state_dir: PathBuf,
    /// Pools whose scan the current request waits for (`zpool scrub -w`) once the
    /// state lock is released; emptied by every request.
    pub wait_scan: Vec<Arc<Pool>>,
    /// Work the current request runs after the state lock is released (a `zfs send`
    /// or `zfs recv` stream, which may take hours and must not stop other commands);
    /// its response replaces the one `dispatch` returned, whose stdout is kept in
    /// front. Emptied by every request.
    pub deferred: Option<Job>,
}

/// Long work of one request, run without the state lock; it takes the lock itself
/// (through the argument) for short steps such as mounting.
pub type Job = Box<dyn FnOnce(&Mutex<State>) -> Response + Send>;

/// The per-command context: the client's cwd and the command line (for history).
pub struct Ctx {
    /// Client working directory.
    pub cwd: PathBuf,
    /// Full argv after `tarn`.
    pub argv: Vec<String>,
    /// The client's stdin, stdout and stderr when the request carried them
    /// ([`crate::proto::wants_stdio`]); a command takes them out.
    pub stdio: Mutex<Vec<std::os::fd::OwnedFd>>,
    /// Set when the command changed a pool but its txg could not be synced (the pool
    /// suspended): [`crate::daemon::dispatch_with`] then fails the command instead of
    /// reporting a success that is not on disk.
    pub commit_error: Mutex<Option<String>>,
}

impl Ctx {
    /// Record the command in `pool`'s history and wait until the command's changes
    /// are durable (`Pool::log_history_durable`); a failure is kept in
    /// [`Ctx::commit_error`] and fails the command.
    pub fn commit(&self, pool: &tarn_spa::Pool) {
        if let Err(e) = pool.log_history_durable(&self.command_line()) {
            tracing::warn!("{}: changes not committed: {e}", pool.name());
            self.commit_error.lock().get_or_insert(e.to_string());
        }
    }

    /// The command line as `zpool history` records it.
    pub fn command_line(&self) -> String {
        self.argv.join(" ")
    }
}

impl State {
    /// Empty state for `state_dir`.
    pub fn new(state_dir: PathBuf) -> State {
        State {
            pools: BTreeMap::new(),
            state_dir,
            wait_scan: Vec::new(),
            deferred: None,
        }
    }

    /// Directories remembered for `zpool import`.
    pub fn known_dirs(&self) -> Vec<PathBuf> {
        std::fs::read_to_string(self.state_dir.join("known_dirs"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(PathBuf::from)
            .collect()
    }

    /// Remember the directories of these leaves (deduplicated).
    pub fn remember_dirs<I: IntoIterator<Item = PathBuf>>(&self, leaves: I) {
        let mut dirs = self.known_dirs();
        let mut changed = false;
        for leaf in leaves {
            if let Some(d) = leaf.parent() {
                if d.as_os_str().is_empty() || d == Path::new("/dev") {
                    continue;
                }
                if !dirs.iter().any(|x| x == d) {
                    dirs.push(d.to_path_buf());
                    changed = true;
                }
            }
        }
        if changed {
            let text: String = dirs.iter().map(|d| format!("{}\n", d.display())).collect();
            let _ = std::fs::create_dir_all(&self.state_dir);
            let _ = std::fs::write(self.state_dir.join("known_dirs"), text);
        }
    }
}

/// `"{what}: {e}"`. The pool layer words some errors as a whole message
/// ("cannot use 'x': invalid character ..."): its own "cannot … 'x': " prefix is
/// replaced by `what`, so the verb is the command's; "invalid vdev specification"
/// messages stand alone as in OpenZFS.
pub fn cannot(what: &str, e: impl std::fmt::Display) -> String {
    let s = e.to_string();
    if s.starts_with("invalid vdev specification") {
        return s;
    }
    if s.starts_with("cannot ") {
        if let Some(i) = s.find("': ") {
            return format!("{what}: {}", &s[i + 3..]);
        }
        return s;
    }
    format!("{what}: {s}")
}

/// Leaf paths of a status tree.
pub fn leaves(v: &tarn_spa::VdevStatus) -> Vec<PathBuf> {
    if v.children.is_empty() {
        return vec![PathBuf::from(&v.name)];
    }
    v.children.iter().flat_map(leaves).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cannot_rewords_prefixes() {
        assert_eq!(
            cannot("cannot create 'a'", "dataset already exists"),
            "cannot create 'a': dataset already exists"
        );
        assert_eq!(
            cannot("cannot create 'a/b*'", "cannot use 'a/b*': invalid character '*' in name"),
            "cannot create 'a/b*': invalid character '*' in name"
        );
        assert_eq!(cannot("cannot create 'a'", "invalid vdev specification: x"), "invalid vdev specification: x");
    }
}
