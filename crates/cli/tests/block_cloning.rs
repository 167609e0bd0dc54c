//! End-to-end: block cloning through a mount. `cp --reflink=auto` reaches the daemon
//! as `copy_file_range(2)`, whose whole records are shared rather than copied: the
//! pool's `bcloneused`/`bclonesaved`/`bcloneratio` show it, the pool's allocated
//! space does not grow by the copy, both files read right after export and import,
//! an incremental send taken after the copy carries the cloned file to another pool,
//! and removing both files gives the space back.

mod common;
use common::*;
use std::path::Path;

const MB: u64 = 1 << 20;

fn pool_prop(env: &Env, prop: &str) -> u64 {
    env.zpool(&["get", "-Hp", "-o", "value", prop, "tank"]).ok().stdout.trim().parse().unwrap()
}

fn cp(from: &Path, to: &Path) {
    let o = std::process::Command::new("cp").arg("--reflink=auto").arg(from).arg(to).output().unwrap();
    assert!(o.status.success(), "cp: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn cp_shares_blocks_and_an_incremental_send_carries_them() {
    let env = Env::new();
    if !fuse_usable("cp_shares_blocks_and_an_incremental_send_carries_them") {
        return;
    }
    let a = env.make_vdev("a", 256 * MB);
    let b = env.make_vdev("b", 256 * MB);
    let mnt = env.path().join("mnt");
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "tank", &a]).ok();
    assert_eq!(pool_prop(&env, "bcloneused"), 0);
    let ratio = env.zpool(&["get", "-H", "-o", "value", "bcloneratio", "tank"]).ok().stdout;
    assert_eq!(ratio, "1.00x\n");
    let data = xorshift_bytes((16 * MB) as usize, 5);
    std::fs::write(mnt.join("src"), &data).unwrap();
    env.zpool(&["sync", "tank"]).ok();
    env.zfs(&["snapshot", "tank@before"]).ok();
    let alloc0 = pool_prop(&env, "allocated");
    cp(&mnt.join("src"), &mnt.join("dst"));
    assert_eq!(std::fs::read(mnt.join("dst")).unwrap(), data);
    env.zpool(&["sync", "tank"]).ok();
    let (used, saved) = (pool_prop(&env, "bcloneused"), pool_prop(&env, "bclonesaved"));
    assert!(used >= 16 * MB && saved >= 16 * MB, "bcloneused {used}, bclonesaved {saved}");
    assert_eq!(env.zpool(&["get", "-H", "-o", "value", "bcloneratio", "tank"]).ok().stdout, "2.00x\n");
    let grown = pool_prop(&env, "allocated") - alloc0;
    assert!(grown < 4 * MB, "the copy allocated {grown} bytes");
    // Incremental send after the copy: the clone is new in the target.
    env.zfs(&["snapshot", "tank@after"]).ok();
    let full = env.path().join("full.zstream");
    let incr = env.path().join("incr.zstream");
    let mut c = env.command(&["zfs", "send", "tank@before"]);
    c.stdout(std::fs::File::create(&full).unwrap());
    assert_eq!(run(c).code, 0);
    let mut c = env.command(&["zfs", "send", "-i", "@before", "tank@after"]);
    c.stdout(std::fs::File::create(&incr).unwrap());
    assert_eq!(run(c).code, 0);
    let mnt2 = env.path().join("mnt2");
    env.zpool(&["create", "-m", mnt2.to_str().unwrap(), "backup", &b]).ok();
    for (file, args) in [(&full, ["zfs", "recv", "backup/copy"]), (&incr, ["zfs", "recv", "backup/copy"])] {
        let out = env.with_stdin(&args, file);
        assert_eq!(out.code, 0, "{out:?}");
    }
    assert_eq!(std::fs::read(mnt2.join("copy/dst")).unwrap(), data);
    // Both files survive export and import.
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(std::fs::read(mnt.join("src")).unwrap(), data);
    assert_eq!(std::fs::read(mnt.join("dst")).unwrap(), data);
    assert!(pool_prop(&env, "bcloneused") >= 16 * MB);
    // Both gone (and the snapshots that name them): the space comes back.
    env.zfs(&["destroy", "tank@after"]).ok();
    env.zfs(&["destroy", "tank@before"]).ok();
    std::fs::remove_file(mnt.join("src")).unwrap();
    env.zpool(&["sync", "tank"]).ok();
    assert!(pool_prop(&env, "allocated") > 12 * MB, "the shared blocks went with one reference left");
    std::fs::remove_file(mnt.join("dst")).unwrap();
    for _ in 0..6 {
        env.zpool(&["sync", "tank"]).ok();
    }
    assert_eq!(pool_prop(&env, "bcloneused"), 0);
    assert!(pool_prop(&env, "allocated") < 8 * MB, "space not back: {}", pool_prop(&env, "allocated"));
}
