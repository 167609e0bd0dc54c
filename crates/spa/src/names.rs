//! Pool and dataset name rules (OpenZFS `module/zcommon/zfs_namecheck.c`, our words).

use crate::{Result, SpaError};

/// Longest pool or dataset name, in bytes (ZFS_MAX_DATASET_NAME_LEN − 1).
pub const NAME_MAX_BYTES: usize = 255;

fn valid_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | ' ')
}

fn check_component(name: &str, comp: &str) -> Result<()> {
    if comp.is_empty() {
        return Err(SpaError::Invalid(format!(
            "cannot use '{name}': empty component or misplaced '@' or '#' delimiter in name"
        )));
    }
    if let Some(c) = comp.chars().find(|&c| !valid_char(c)) {
        return Err(SpaError::Invalid(format!("cannot use '{name}': invalid character '{c}' in name")));
    }
    if comp == "." || comp == ".." {
        return Err(SpaError::Invalid(format!("cannot use '{name}': self reference, '.' is found in name")));
    }
    Ok(())
}

/// Whether dataset `name` is below `of` in the dataset tree (`of/…`; `of` itself is
/// not).
pub fn is_descendant(name: &str, of: &str) -> bool {
    name.len() > of.len() && name.starts_with(of) && name.as_bytes()[of.len()] == b'/'
}

/// Validate a pool name. Errors carry OpenZFS's reasons ("name must begin with a
/// letter", "invalid character ... in pool name", "name is reserved").
pub fn validate_pool_name(name: &str) -> Result<()> {
    let bad = |why: String| Err(SpaError::Invalid(format!("cannot create '{name}': {why}")));
    if name.is_empty() {
        return bad("name must begin with a letter".into());
    }
    if name.len() > NAME_MAX_BYTES {
        return bad("name is too long".into());
    }
    if let Some(c) = name.chars().find(|&c| !valid_char(c) || c == ' ') {
        return bad(format!("invalid character '{c}' in pool name"));
    }
    if !name.chars().next().unwrap().is_ascii_alphabetic() {
        return bad("name must begin with a letter".into());
    }
    let reserved = ["mirror", "raidz", "draid", "spare", "log", "cache", "special", "dedup"];
    if reserved
        .iter()
        .any(|r| name == *r || (name.starts_with(r) && *r != "log" && *r != "cache" && *r != "spare" && name[r.len()..].chars().all(|c| c.is_ascii_digit())))
        || ["mirror", "raidz", "draid"].iter().any(|r| name.starts_with(r))
    {
        return bad("name is reserved".into());
    }
    let b = name.as_bytes();
    if b[0] == b'c' && b.len() > 1 && b[1].is_ascii_digit() {
        return bad("name is reserved".into());
    }
    Ok(())
}

/// Validate a dataset name `pool/a/b`: valid pool part, non-empty components of
/// `[A-Za-z0-9_.:- ]`, no snapshots (`@`) here, ≤ 255 bytes.
pub fn validate_dataset_name(name: &str) -> Result<()> {
    if name.len() > NAME_MAX_BYTES {
        return Err(SpaError::Invalid(format!("cannot use '{name}': name is too long")));
    }
    if name.contains('@') || name.contains('#') {
        return Err(SpaError::Invalid(format!(
            "cannot use '{name}': snapshots and bookmarks are not supported here"
        )));
    }
    if name.starts_with('/') || name.ends_with('/') {
        return Err(SpaError::Invalid(format!("cannot use '{name}': leading or trailing slash in name")));
    }
    let mut parts = name.split('/');
    let pool = parts.next().unwrap_or("");
    if pool.is_empty() || !pool.chars().next().unwrap().is_ascii_alphabetic() {
        return Err(SpaError::Invalid(format!("cannot use '{name}': name must begin with a letter")));
    }
    check_component(name, pool)?;
    for c in parts {
        check_component(name, c)?;
    }
    Ok(())
}

/// Validate a snapshot name `fs@snap`: a valid dataset name, one `@`, and a
/// non-empty snapshot component of the same characters (OpenZFS `snapshot_namecheck`).
pub fn validate_snapshot_name(name: &str) -> Result<()> {
    if name.len() > NAME_MAX_BYTES {
        return Err(SpaError::Invalid(format!("cannot use '{name}': name is too long")));
    }
    let Some((fs, snap)) = name.split_once('@') else {
        return Err(SpaError::Invalid(format!("cannot use '{name}': missing '@' delimiter in snapshot name")));
    };
    validate_dataset_name(fs)?;
    if snap.contains('@') || snap.contains('/') || snap.contains('#') {
        return Err(SpaError::Invalid(format!("cannot use '{name}': multiple '@' and/or '#' delimiters in name")));
    }
    check_component(name, snap)
}

/// Validate any name read from a pool directory: a dataset or a snapshot name.
pub(crate) fn validate_any_name(name: &str) -> Result<()> {
    if name.contains('@') {
        validate_snapshot_name(name)
    } else {
        validate_dataset_name(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn pool_names() {
        assert!(validate_pool_name("tank").is_ok());
        assert!(validate_pool_name("tank-1.a_b:c").is_ok());
        for bad in ["", "1tank", "mirror", "raidz2", "c0d0", "ta/nk", "ta nk", "ta@nk", "log", "spare"] {
            assert!(validate_pool_name(bad).is_err(), "{bad} accepted");
        }
        let e = validate_pool_name("1tank").unwrap_err().to_string();
        assert!(e.contains("must begin with a letter"), "{e}");
    }
    #[test]
    fn snapshot_names() {
        assert!(validate_snapshot_name("tank/home@mon").is_ok());
        for bad in ["tank/home", "tank@", "tank@a@b", "tank@a/b", "tank/@a", "tank@a b%", "tank@.."] {
            assert!(validate_snapshot_name(bad).is_err(), "{bad} accepted");
        }
    }
    #[test]
    fn dataset_names() {
        assert!(validate_dataset_name("tank/home").is_ok());
        assert!(validate_dataset_name("tank/home/a.b-c").is_ok());
        for bad in ["tank/", "/tank", "tank//x", "tank/a@b", "tank/a*b", "tank/..", ""] {
            assert!(validate_dataset_name(bad).is_err(), "{bad} accepted");
        }
    }
}
