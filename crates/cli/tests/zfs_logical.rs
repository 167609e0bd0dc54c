//! End-to-end: `logicalreferenced` and `logicalused` (zfsprops(7)): the space data
//! takes before compression. Compressible text under lz4 is referenced at its full
//! logical size while `referenced` is far smaller; `logicalused` adds what snapshots
//! alone hold and what descendants hold, each block once; snapshots have a
//! `logicalreferenced` and no `logicalused`. Skipped, with a message, when FUSE is not
//! usable here.

mod common;
use common::*;

const MB: u64 = 1 << 20;

fn bytes(env: &Env, prop: &str, ds: &str) -> u64 {
    let out = env.zfs(&["get", "-Hp", "-o", "value", prop, ds]).ok().stdout;
    out.trim().parse().unwrap_or_else(|_| panic!("{prop} of {ds}: {out:?}"))
}

#[test]
fn logical_space_properties() {
    if !fuse_usable("logical_space_properties") {
        return;
    }
    let env = Env::new();
    let m = env.mounted_pool(&["-O", "compression=lz4"]);
    env.zfs(&["create", "tank/fs"]).ok();
    env.zfs(&["create", "-o", "compression=off", "tank/fs/kid"]).ok();
    let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog\n".iter().copied().cycle().take(8 << 20).collect();
    std::fs::write(m.join("fs/text"), &text).unwrap();
    let noise: Vec<u8> = (0..(2 << 20) as u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(m.join("fs/kid/noise"), &noise).unwrap();
    env.zpool(&["sync", "tank"]).ok();

    // 8 MiB of text: logically 8 MiB and a bit of metadata, physically much less.
    let lref = bytes(&env, "logicalreferenced", "tank/fs");
    let refd = bytes(&env, "referenced", "tank/fs");
    assert!((8 * MB..9 * MB).contains(&lref), "logicalreferenced {lref}");
    assert!(refd * 3 < lref, "referenced {refd} vs logical {lref}");
    // The uncompressed child: logical about what it references.
    let kid = bytes(&env, "logicalreferenced", "tank/fs/kid");
    assert!((2 * MB..3 * MB).contains(&kid), "kid {kid}");
    // logicalused of the parent counts the child's blocks too.
    let lused = bytes(&env, "logicalused", "tank/fs");
    assert!(lused >= lref + kid && lused < lref + kid + MB, "logicalused {lused} vs {lref} + {kid}");

    // A snapshot keeps the old text: after a rewrite the parent's logicalused grows
    // by about the 8 MiB only the snapshot holds; its logicalreferenced does not.
    env.zfs(&["snapshot", "tank/fs@a"]).ok();
    let other: Vec<u8> = b"pack my box with five dozen liquor jugs\n".iter().copied().cycle().take(8 << 20).collect();
    std::fs::write(m.join("fs/text"), &other).unwrap();
    env.zpool(&["sync", "tank"]).ok();
    let lused2 = bytes(&env, "logicalused", "tank/fs");
    assert!(lused2 >= lused + 8 * MB - MB / 2, "logicalused {lused} -> {lused2}");
    let lref2 = bytes(&env, "logicalreferenced", "tank/fs");
    assert!(lref2.abs_diff(lref) < MB, "logicalreferenced {lref} -> {lref2}");
    assert_eq!(bytes(&env, "logicalreferenced", "tank/fs@a"), lref);
    let s = env.zfs(&["get", "-H", "-o", "value", "logicalused", "tank/fs@a"]).ok().stdout;
    assert_eq!(s, "-\n");
    // Human form as the other sizes; read-only.
    let h = env.zfs(&["get", "-H", "-o", "value", "logicalreferenced", "tank/fs"]).ok().stdout;
    assert!(h.trim().ends_with('M'), "{h}");
    env.zfs(&["set", "logicalused=1", "tank/fs"]).fails_with("'logicalused' is readonly");
    env.zpool(&["export", "tank"]).ok();
}
