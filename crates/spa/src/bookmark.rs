//! # bookmark — `zfs bookmark`: a snapshot's identity without its blocks
//!
//! Theory. A bookmark (`pool/fs#name`) remembers what an incremental send needs of a
//! snapshot — its GUID and creation txg (and time, for `zfs list`) — and nothing else:
//! it holds no blocks, so the snapshot it was made from can be destroyed and
//! `zfs send -i fs#bm fs@new` still sends exactly the blocks born after that txg, to
//! a receiver whose newest snapshot has that GUID (OpenZFS `dsl_bookmark.c`; Tarn
//! keeps no redaction lists).
//!
//! Storage: one packed record for the pool, named `bookmarks` in the pool directory
//! ZAP (created with the first bookmark; a pool without one has no bookmarks). Each
//! entry is `name_len u16 | name | guid u64 | creation_txg u64 | creation_time u64`
//! (LE), after a `count u32`; names are validated when read. Bookmarks are few, so a
//! change rewrites the record in the txg of the command.
//!
//! Invariants: a bookmark's file system exists (destroying a file system destroys its
//! bookmarks; renaming it renames them in the same txg); its txg is a txg at which a
//! snapshot of that file system was taken.
//!
//! Called by: the CLI (`zfs bookmark`, `zfs destroy fs#bm`, `zfs list -t bookmark`)
//! and [`crate::sendrecv`] (`-i #bm`).

use crate::dsl::{create_packed, read_packed, write_packed};
use crate::pool::{dmu_err, now_s, Pool, MOS_DIR_OBJ};
use crate::{Result, SpaError};
use tarn_dmu::{zap, TxHold};

/// Name of the bookmark record in the pool directory ZAP.
pub(crate) const DIR_BOOKMARKS: &[u8] = b"bookmarks";
/// Most bookmarks a pool may hold.
const BOOKMARKS_MAX: u32 = 1 << 20;

/// One bookmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bookmark {
    /// Full name, `pool/fs#name`.
    pub name: String,
    /// GUID of the snapshot it was made from.
    pub guid: u64,
    /// That snapshot's creation txg.
    pub creation_txg: u64,
    /// Creation time of the snapshot, seconds since the epoch.
    pub creation_time_s: u64,
}

/// Check `fs#name` (a snapshot name with `#` for `@`).
pub fn validate_bookmark_name(name: &str) -> Result<()> {
    let Some((fs, short)) = name.split_once('#') else {
        return Err(SpaError::Invalid(format!(
            "cannot create bookmark '{name}': missing '#' delimiter in bookmark name"
        )));
    };
    if short.contains('#') || short.contains('@') {
        return Err(SpaError::Invalid(format!(
            "cannot create bookmark '{name}': invalid character in bookmark name"
        )));
    }
    crate::validate_snapshot_name(&format!("{fs}@{short}"))
        .map_err(|e| SpaError::Invalid(format!("cannot create bookmark '{name}': {}", e.to_string().rsplit(": ").next().unwrap_or(""))))
}

pub(crate) fn encode(list: &[Bookmark]) -> Vec<u8> {
    let mut b = (list.len() as u32).to_le_bytes().to_vec();
    for m in list {
        b.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
        b.extend_from_slice(m.name.as_bytes());
        for x in [m.guid, m.creation_txg, m.creation_time_s] {
            b.extend_from_slice(&x.to_le_bytes());
        }
    }
    b
}

pub(crate) fn decode(b: &[u8]) -> Result<Vec<Bookmark>> {
    let bad = |what: &str| SpaError::Corrupt(format!("bookmark record damaged: {what}"));
    if b.is_empty() {
        return Ok(Vec::new());
    }
    let mut pos = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = b.get(pos..pos.checked_add(n).ok_or_else(|| bad("length"))?).ok_or_else(|| bad("truncated"))?;
        pos += n;
        Ok(s)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
    if count > BOOKMARKS_MAX {
        return Err(bad("too many entries"));
    }
    let mut out = Vec::new();
    for _ in 0..count {
        let len = u16::from_le_bytes(take(2)?.try_into().expect("2 bytes")) as usize;
        let name = String::from_utf8(take(len)?.to_vec()).map_err(|_| bad("name is not UTF-8"))?;
        validate_bookmark_name(&name).map_err(|_| bad("invalid name"))?;
        let mut f = [0u64; 3];
        for x in f.iter_mut() {
            *x = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
        }
        out.push(Bookmark {
            name,
            guid: f[0],
            creation_txg: f[1],
            creation_time_s: f[2],
        });
    }
    Ok(out)
}

impl Pool {
    fn bookmarks_obj(&self) -> Result<Option<u64>> {
        zap::lookup(&*self.mos, MOS_DIR_OBJ, DIR_BOOKMARKS).map_err(dmu_err)
    }

    /// Every bookmark of the pool, by name.
    /// Errors: `Corrupt` for a damaged record.
    pub fn bookmarks(&self) -> Result<Vec<Bookmark>> {
        match self.bookmarks_obj()? {
            None => Ok(Vec::new()),
            Some(obj) => decode(&read_packed(&*self.mos, obj)?),
        }
    }

    /// The bookmark named `name` (`pool/fs#bm`). Errors: `NotFound`.
    pub fn bookmark_info(&self, name: &str) -> Result<Bookmark> {
        self.bookmarks()?
            .into_iter()
            .find(|b| b.name == name)
            .ok_or_else(|| SpaError::NotFound(format!("cannot open '{name}': bookmark does not exist")))
    }

    fn save_bookmarks(&self, tx: &TxHold, list: &[Bookmark]) -> Result<()> {
        let obj = match self.bookmarks_obj()? {
            Some(o) => o,
            None => {
                let o = create_packed(&*self.mos, tx)?;
                zap::add(&*self.mos, tx, MOS_DIR_OBJ, DIR_BOOKMARKS, o).map_err(dmu_err)?;
                o
            }
        };
        write_packed(&*self.mos, tx, obj, &encode(list))
    }

    /// `zfs bookmark SOURCE fs#name`: SOURCE is a snapshot `fs@snap` or another
    /// bookmark `fs#other` of the same file system.
    ///
    /// Errors (OpenZFS wording): `Invalid` for a bad name or a source in another file
    /// system, `NotFound` for a missing source, `Exists` for an existing bookmark.
    pub fn create_bookmark(&self, source: &str, name: &str) -> Result<()> {
        validate_bookmark_name(name)?;
        let fs = name.split('#').next().unwrap_or_default();
        let src_fs = source.split(['@', '#']).next().unwrap_or_default();
        if src_fs != fs {
            return Err(SpaError::Invalid(format!(
                "cannot create bookmark '{name}': source is not an ancestor of the new bookmark's dataset"
            )));
        }
        let (guid, creation_txg, creation_time_s) = if source.contains('@') {
            let p = self.ds_phys(self.snap_obj(source)?)?;
            (p.guid, p.creation_txg, p.creation_time_s)
        } else if source.contains('#') {
            let b = self.bookmark_info(source)?;
            (b.guid, b.creation_txg, b.creation_time_s)
        } else {
            return Err(SpaError::Invalid(format!(
                "cannot create bookmark '{name}': source '{source}' is not a snapshot or bookmark"
            )));
        };
        {
            let _s = self.sync_lock.lock();
            let tx = self.gate.hold_nowait().map_err(dmu_err)?;
            let _a = self.admin.lock();
            let mut list = self.bookmarks()?;
            if list.iter().any(|b| b.name == name) {
                return Err(SpaError::Exists(format!("cannot create bookmark '{name}': bookmark")));
            }
            list.push(Bookmark {
                name: name.to_string(),
                guid,
                creation_txg,
                creation_time_s: if creation_time_s == 0 { now_s() } else { creation_time_s },
            });
            self.save_bookmarks(&tx, &list)?;
        }
        self.sync()
    }

    /// `zfs destroy fs#bm`. Errors: `NotFound`.
    pub fn destroy_bookmark(&self, name: &str) -> Result<()> {
        {
            let _s = self.sync_lock.lock();
            let tx = self.gate.hold_nowait().map_err(dmu_err)?;
            let _a = self.admin.lock();
            let mut list = self.bookmarks()?;
            let before = list.len();
            list.retain(|b| b.name != name);
            if list.len() == before {
                return Err(SpaError::NotFound(format!("cannot destroy '{name}': bookmark does not exist")));
            }
            self.save_bookmarks(&tx, &list)?;
        }
        self.sync()
    }

    /// Give bookmarks new names, `(old, new)` pairs (their file system is being
    /// renamed, `crate::rename`), in `tx`.
    pub(crate) fn rename_bookmarks(&self, tx: &TxHold, moves: &[(String, String)]) -> Result<()> {
        let mut list = self.bookmarks()?;
        for b in list.iter_mut() {
            if let Some((_, new)) = moves.iter().find(|(old, _)| *old == b.name) {
                b.name = new.clone();
            }
        }
        self.save_bookmarks(tx, &list)
    }

    /// Drop the bookmarks of file system `fs` (it is being destroyed), in `tx`.
    pub(crate) fn drop_bookmarks_of(&self, tx: &TxHold, fs: &str) -> Result<()> {
        if self.bookmarks_obj()?.is_none() {
            return Ok(());
        }
        let mut list = self.bookmarks()?;
        let prefix = format!("{fs}#");
        let before = list.len();
        list.retain(|b| !b.name.starts_with(&prefix));
        if list.len() != before {
            self.save_bookmarks(tx, &list)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_damage_is_refused() {
        let l = vec![
            Bookmark {
                name: "tank/fs#a".into(),
                guid: 7,
                creation_txg: 9,
                creation_time_s: 11,
            },
            Bookmark {
                name: "tank#b".into(),
                guid: 1,
                creation_txg: 2,
                creation_time_s: 3,
            },
        ];
        let b = encode(&l);
        assert_eq!(decode(&b).unwrap(), l);
        assert!(decode(&[]).unwrap().is_empty());
        for cut in 1..b.len() {
            assert!(decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = b.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
        let mut badname = encode(&[Bookmark {
            name: "tank/fs#a".into(),
            guid: 1,
            creation_txg: 1,
            creation_time_s: 1,
        }]);
        badname[6 + 7] = b'@'; // "tank/fs@a": not a bookmark name
        assert!(decode(&badname).is_err());
    }

    #[test]
    fn names() {
        assert!(validate_bookmark_name("tank/fs#a").is_ok());
        assert!(validate_bookmark_name("tank/fs@a").is_err());
        assert!(validate_bookmark_name("tank/fs#a#b").is_err());
        assert!(validate_bookmark_name("tank/fs#").is_err());
        assert!(validate_bookmark_name("tank/fs#a b!").is_err());
    }
}
