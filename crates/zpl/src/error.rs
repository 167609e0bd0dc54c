//! The ZPL error enum: expected POSIX outcomes, kept apart from media errors and
//! corruption. `fuse` maps each variant to one errno; nothing here knows errno values.

use tarn_dmu::DmuError;

/// Errors of the POSIX layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZplError {
    /// No such file, directory or inode (ENOENT).
    #[error("not found")]
    NotFound,
    /// The name already exists (EEXIST).
    #[error("already exists")]
    Exists,
    /// A directory was required (ENOTDIR).
    #[error("not a directory")]
    NotDir,
    /// A non-directory was required (EISDIR).
    #[error("is a directory")]
    IsDir,
    /// The directory is not empty (ENOTEMPTY).
    #[error("directory not empty")]
    NotEmpty,
    /// The pool or dataset is out of space (ENOSPC).
    #[error("no space left")]
    NoSpace,
    /// The file system is mounted read-only or the pool refuses changes (EROFS).
    #[error("read-only file system")]
    ReadOnly,
    /// A name longer than 255 bytes, or a symlink target longer than 4095 (ENAMETOOLONG).
    #[error("name too long")]
    NameTooLong,
    /// Invalid argument (EINVAL): bad name, rename into own subtree, wrong file type.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// Cross-device link or rename (EXDEV).
    #[error("cross-device link")]
    CrossDevice,
    /// The link count would overflow (EMLINK).
    #[error("too many links")]
    TooManyLinks,
    /// Operation not permitted (EPERM): e.g. a hard link to a directory.
    #[error("operation not permitted")]
    Perm,
    /// The write would pass the largest file size (EFBIG).
    #[error("file too large")]
    FileTooBig,
    /// The operation is not supported (EOPNOTSUPP).
    #[error("operation not supported")]
    NotSupported,
    /// The inode names something that no longer exists in the form it was found: a
    /// file of a snapshot that has since been destroyed (ESTALE).
    #[error("stale file handle")]
    Stale,
    /// A number does not fit where it must go: an object of a snapshot whose id is too
    /// large for the control directory's inode numbering (EOVERFLOW).
    #[error("value too large")]
    Overflow,
    /// A block could not be read or written correctly (EIO), as reported by the DMU.
    #[error("I/O error: {0}")]
    Io(String),
    /// A ZPL structure failed validation (EIO); `object` is the object that holds it.
    #[error("object {object} is corrupt: {what}")]
    Corrupt {
        /// Object whose bonus or ZAP failed validation.
        object: u64,
        /// What was wrong.
        what: &'static str,
    },
}

impl From<DmuError> for ZplError {
    fn from(e: DmuError) -> Self {
        match e {
            DmuError::NoSuchObject(_) | DmuError::NotFound => ZplError::NotFound,
            DmuError::Exists => ZplError::Exists,
            DmuError::NoSpace => ZplError::NoSpace,
            DmuError::Invalid(what) => ZplError::Invalid(what),
            DmuError::Io(s) => ZplError::Io(s),
            DmuError::Corrupt(c) => ZplError::Io(format!("corrupt: {c}")),
            DmuError::ReadOnly => ZplError::ReadOnly,
            #[allow(unreachable_patterns)]
            other => ZplError::Io(other.to_string()),
        }
    }
}
