//! # access — who may ask the daemon what
//!
//! Theory: the daemon answers root (and its own user, for private test daemons) in
//! full. When `$TARN_READ_GROUP` names a group (by name or number) when the daemon
//! starts, members of that group may also run the commands that only read, as
//! OpenZFS lets users read without delegation: `zpool list`, `zpool status`,
//! `zpool get`, `zpool iostat`, `zfs list`, `zfs get` ([`read_only_command`]). The
//! socket's directory is then mode 0710 and the socket 0660, both of that group, so
//! members can reach the socket and nobody else can; membership is the peer's
//! primary group (`SO_PEERCRED`) or the group database's list for its user
//! (`getgrouplist`), checked on every connection. Anything else from a member, and
//! everything from others, is answered OpenZFS's "Permission denied the ZFS
//! utilities must be run as root." before the command runs.
//!
//! Called by: [`crate::daemon`] at start ([`read_group`]) and per connection
//! ([`access_of`], then [`read_only_command`] on the parsed request).

use std::ffi::CString;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;

/// What a connection may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Every command (root, or the daemon's own user).
    Full,
    /// Only [`read_only_command`]s (a member of the read group).
    ReadOnly,
    /// Nothing.
    Denied,
}

/// The group `$TARN_READ_GROUP` names (a name or a number), or `None` when it is
/// unset; an unknown name is an error for the daemon to report.
pub fn read_group() -> Result<Option<u32>, String> {
    let Some(v) = std::env::var_os("TARN_READ_GROUP") else {
        return Ok(None);
    };
    let v = v.to_string_lossy().into_owned();
    if v.is_empty() {
        return Ok(None);
    }
    if let Ok(gid) = v.parse::<u32>() {
        return Ok(Some(gid));
    }
    let name = CString::new(v.clone()).map_err(|_| format!("TARN_READ_GROUP: bad group name '{v}'"))?;
    // SAFETY: getgrnam_r writes only into the buffers given, sized by `buf.len()`.
    unsafe {
        let mut grp: libc::group = std::mem::zeroed();
        let mut out: *mut libc::group = std::ptr::null_mut();
        let mut buf = vec![0 as libc::c_char; 16 << 10];
        let rc = libc::getgrnam_r(name.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut out);
        if rc != 0 || out.is_null() {
            return Err(format!("TARN_READ_GROUP: no group named '{v}'"));
        }
        Ok(Some(grp.gr_gid))
    }
}

/// The user and primary group ids of the process at the other end (`SO_PEERCRED`).
pub fn peer_cred(stream: &UnixStream) -> std::io::Result<(u32, u32)> {
    // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes into it.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let rc = libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        );
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((cred.uid, cred.gid))
    }
}

/// Whether user `uid` (whose process runs with primary group `gid`) is in `group`:
/// by its primary group, or by the group database (`getgrouplist`).
pub fn in_group(uid: u32, gid: u32, group: u32) -> bool {
    if gid == group {
        return true;
    }
    // SAFETY: getpwuid_r and getgrouplist write only into the buffers given, sized
    // by the lengths passed with them.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let mut buf = vec![0 as libc::c_char; 16 << 10];
        if libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) != 0 || out.is_null() {
            return false;
        }
        if pw.pw_gid == group {
            return true;
        }
        let mut groups = vec![0 as libc::gid_t; 256];
        let mut n = groups.len() as libc::c_int;
        if libc::getgrouplist(pw.pw_name, pw.pw_gid, groups.as_mut_ptr(), &mut n) < 0 {
            return false;
        }
        groups[..n.max(0) as usize].contains(&group)
    }
}

/// What a peer may do: everything when `full(uid)`, read-only commands when it is in
/// `read_gid`, else nothing.
pub fn access_of(uid: u32, gid: u32, read_gid: Option<u32>, full: impl Fn(u32) -> bool) -> Access {
    if full(uid) {
        Access::Full
    } else if read_gid.is_some_and(|g| in_group(uid, gid, g)) {
        Access::ReadOnly
    } else {
        Access::Denied
    }
}

/// The commands a read-group member may run: they only read.
pub fn read_only_command(argv: &[String]) -> bool {
    let words: Vec<&str> = argv.iter().take(2).map(String::as_str).collect();
    matches!(
        words.as_slice(),
        ["zpool", "list" | "status" | "get" | "iostat"] | ["zfs", "list" | "get"] | ["kstat", _]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_commands() {
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        for ok in [
            "zpool list",
            "zpool status -v",
            "zpool get all p",
            "zpool iostat -v 1 2",
            "zfs list -r",
            "zfs get used p",
            "kstat arcstats",
        ] {
            assert!(read_only_command(&v(ok)), "{ok}");
        }
        for no in [
            "zpool destroy p",
            "zfs create p/x",
            "zfs set atime=off p",
            "daemon --stop",
            "daemon --set arc_max=1G",
            "zinject",
            "zpool history",
        ] {
            assert!(!read_only_command(&v(no)), "{no}");
        }
    }

    #[test]
    fn access_levels() {
        assert_eq!(access_of(0, 0, None, |u| u == 0), Access::Full);
        assert_eq!(access_of(1000, 4242, None, |u| u == 0), Access::Denied);
        assert_eq!(access_of(1000, 4242, Some(4242), |u| u == 0), Access::ReadOnly);
        assert_eq!(access_of(1000, 4242, Some(4243), |u| u == 0), Access::Denied);
    }
}
