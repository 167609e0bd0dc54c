//! End-to-end: the hardening of issue 11 that a user can see. Mounts are `nosuid,nodev`
//! with the dataset name as their only source; `-R altroot` confines mountpoints
//! (symbolic links followed) and `..` is refused in `mountpoint=`.

mod common;
use common::*;
use std::path::Path;

/// The mountinfo line of `mnt`: (per-mount options, source), both as the kernel writes
/// them (a space is `\040`).
fn mountinfo(mnt: &Path) -> Option<(String, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = mnt.to_str().unwrap().replace(' ', "\\040");
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let dash = f.iter().position(|x| *x == "-")?;
        (f[4] == want).then(|| (f[5].to_string(), f[dash + 2].to_string()))
    })
}

#[test]
fn mounts_are_nosuid_nodev_and_named_by_the_dataset() {
    if !fuse_usable("mounts_are_nosuid_nodev_and_named_by_the_dataset") {
        return;
    }
    let env = Env::new();
    let mnt = env.path().join("mnt");
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "-o", "size=128M", "p", "v/a"]).ok();
    // Comma-free but otherwise unusual: space, colon, dot, dash, underscore.
    env.zfs(&["create", "p/a b:c.d-e_f"]).ok();
    for (dir, source) in [(mnt.clone(), "p"), (mnt.join("a b:c.d-e_f"), "p/a\\040b:c.d-e_f")] {
        let (options, src) = mountinfo(&dir).unwrap_or_else(|| panic!("{} is not mounted", dir.display()));
        let options: Vec<&str> = options.split(',').collect();
        assert!(options.contains(&"nosuid") && options.contains(&"nodev"), "{}: {options:?}", dir.display());
        assert_eq!(src, source);
    }
}

#[test]
fn dotdot_mountpoints_are_refused() {
    let env = Env::new();
    let alt = env.path().join("alt").display().to_string();
    env.zpool(&["create", "-m", "/x/../y", "-o", "size=128M", "q", "v/q"])
        .fails_with("cannot create 'q': 'mountpoint' must not contain '..' components");
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "p", "v/a"]).ok();
    env.zfs(&["create", "-o", "mountpoint=/p/../../etc", "p/esc"])
        .fails_with("'mountpoint' must not contain '..' components");
    env.zfs(&["list", "p/esc"]).fails_with("dataset does not exist");
    env.zfs(&["set", "mountpoint=/a/../../etc", "p"]).fails_with("'mountpoint' must not contain '..' components");
    env.zfs(&["set", "mountpoint=/..", "p"]).fails_with("'mountpoint' must not contain '..' components");
    let shown = env.zfs(&["get", "-H", "-o", "value", "mountpoint", "p"]).ok().stdout;
    assert_eq!(shown.trim(), format!("{alt}/p"));
    // A name that merely contains dots is fine.
    env.zfs(&["set", "mountpoint=/a/..b", "p"]).ok();
}

#[test]
fn altroot_confines_mounts_through_symlinks() {
    if !fuse_usable("altroot_confines_mounts_through_symlinks") {
        return;
    }
    let env = Env::new();
    let alt = env.path().join("alt");
    let outside = env.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    env.zpool(&["create", "-R", alt.to_str().unwrap(), "-o", "size=128M", "p", "v/a"]).ok();
    assert!(mountinfo(&alt.join("p")).is_some());
    // Anyone who can write in a mounted file system can plant a link out of the altroot.
    std::os::unix::fs::symlink(&outside, alt.join("p/link")).unwrap();
    let out = env.zfs(&["create", "-o", "mountpoint=/p/link/sub", "p/esc"]);
    out.fails_with(&format!(
        "cannot mount 'p/esc': mountpoint '{}' is outside the alternate root '{}'",
        alt.join("p/link/sub").display(),
        alt.display()
    ));
    assert!(!outside.join("sub").exists(), "nothing is created outside the altroot");
    assert!(mountinfo(&outside.join("sub")).is_none());
    env.zfs(&["mount", "p/esc"]).fails_with("is outside the alternate root");
    // Inside the altroot all is as before.
    env.zfs(&["set", "mountpoint=/p/inside", "p/esc"]).ok();
    env.zfs(&["mount", "p/esc"]).ok();
    assert!(mountinfo(&alt.join("p/inside")).is_some());
}
