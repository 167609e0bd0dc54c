//! End-to-end: device repair commands (OpenZFS suite areas cli_root/zpool_attach,
//! zpool_detach, zpool_replace, zpool_offline, zpool_online, zpool_clear, and the hot
//! spare tests).
//!
//! How: each test starts a private daemon (see `common`) on 128 MiB sparse vdev files
//! and compares `zpool status` with OpenZFS's layout line by line — OFFLINE leaves
//! and their `status:`/`action:` text, `replacing-N` and `spare-N` nodes, the
//! "(resilvering)" annotation of a leaf that misses txgs while a resilver is pending,
//! and the `spares` section (AVAIL, INUSE "currently in use") — and checks the error
//! wording and exit status of bad requests, which must change nothing. Pools use
//! `-m none`: no FUSE needed. No resilver runs yet (the scan engine is separate), so
//! these tests check the tree and the wording, not copied data.

mod common;
use common::*;

const MB: u64 = 1 << 20;

/// One `zpool status` config line with zero counters: name padded to `w`.
fn row(indent: usize, name: &str, state: &str, w: usize, note: &str) -> String {
    let pad = w - indent;
    format!("\t{}{name:<pad$}  {state:<8}     0     0     0{note}\n", " ".repeat(indent))
}

fn header(w: usize) -> String {
    format!("\t{:<w$}  STATE     READ WRITE CKSUM\n", "NAME")
}

fn status_of(env: &Env, pool: &str) -> String {
    env.zpool(&["status", pool]).ok().stdout
}

#[test]
fn offline_online_and_spares_in_status() {
    let env = Env::new();
    let [a, b, s] = ["a", "b", "s"].map(|n| env.make_vdev(n, 128 * MB));
    env.zpool(&["create", "-m", "none", "tank", "mirror", &a, &b, "spare", &s]).ok();
    let w = (4 + a.len()).max(10);
    let spares = format!("\tspares\n\t  {:<w2$}  AVAIL   \n", s, w2 = w - 2);
    assert_eq!(
        status_of(&env, "tank"),
        format!(
            "  pool: tank\n state: ONLINE\nconfig:\n\n{}{}{}{}{}{spares}\nerrors: No known data errors\n",
            header(w),
            row(0, "tank", "ONLINE", w, ""),
            row(2, "mirror-0", "ONLINE", w, ""),
            row(4, &a, "ONLINE", w, ""),
            row(4, &b, "ONLINE", w, ""),
        )
    );
    env.zpool(&["offline", "tank", &a]).ok();
    let offline = format!(
        "  pool: tank\n state: DEGRADED\n\
         status: One or more devices has been taken offline by the administrator.\n\
         \tSufficient replicas exist for the pool to continue functioning in a\n\
         \tdegraded state.\n\
         action: Online the device using 'zpool online' or replace the device with\n\
         \t'zpool replace'.\n\
         config:\n\n{}{}{}{}{}{spares}\nerrors: No known data errors\n",
        header(w),
        row(0, "tank", "DEGRADED", w, ""),
        row(2, "mirror-0", "DEGRADED", w, ""),
        row(4, &a, "OFFLINE", w, ""),
        row(4, &b, "ONLINE", w, ""),
    );
    assert_eq!(status_of(&env, "tank"), offline);
    // The other side is the last copy.
    env.zpool(&["offline", "tank", &b])
        .fails_with(&format!("cannot offline {b}: no valid replicas"));
    env.zpool(&["offline", "tank", "v/nope"])
        .fails_with(&format!("cannot offline {}: no such device in pool", env.vdev("nope")));
    env.zpool(&["offline", "tank", &s])
        .fails_with(&format!("cannot offline {s}: device is reserved as a hot spare"));
    assert_eq!(status_of(&env, "tank"), offline);
    // Offline survives export/import (no -t).
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(status_of(&env, "tank"), offline);
    // Online: the leaf missed txgs, so it is resilvering. Reads of the source are
    // slowed so the resilver is still running when the status is taken (`online`
    // answers after its txg synced, and this pool's resilver takes milliseconds).
    env.tarn(&["zinject", "-d", &b, "-D", "1500", "-T", "read", "tank"]).ok();
    env.zpool(&["online", "tank", &a]).ok();
    let st = status_of(&env, "tank");
    assert!(st.contains(&row(4, &a, "ONLINE", w, "  (resilvering)")), "{st}");
    // Hot spare in use for an offline leaf.
    env.zpool(&["offline", "tank", &a]).ok();
    env.zpool(&["replace", "tank", &a, &s]).ok();
    let st = status_of(&env, "tank");
    let w6 = 6 + a.len();
    let tree = format!(
        "{}{}{}{}{}{}{}\tspares\n\t  {:<w2$}  INUSE     currently in use\n",
        header(w6),
        row(0, "tank", "DEGRADED", w6, ""),
        row(2, "mirror-0", "DEGRADED", w6, ""),
        row(4, "spare-0", "DEGRADED", w6, ""),
        row(6, &a, "OFFLINE", w6, ""),
        row(6, &s, "ONLINE", w6, "  (resilvering)"),
        row(4, &b, "ONLINE", w6, ""),
        s,
        w2 = w6 - 2
    );
    assert!(st.contains(&tree), "{st}\n---\n{tree}");
    env.zpool(&["remove", "tank", &s])
        .fails_with(&format!("cannot remove {s}: Pool busy; removal may already be in progress"));
    // Detaching the spare returns it to AVAIL.
    env.tarn(&["zinject", "-c", "all"]).ok();
    env.zpool(&["online", "tank", &a]).ok();
    env.zpool(&["detach", "tank", &s]).ok();
    assert!(status_of(&env, "tank").contains(&spares));
    env.zpool(&["remove", "tank", &s]).ok();
    assert!(!status_of(&env, "tank").contains("spares"));
    env.zpool(&["clear", "tank"]).ok();
    env.zpool(&["clear", "tank", "v/nope"])
        .fails_with(&format!("cannot clear errors for {}: no such device in pool", env.vdev("nope")));
}

#[test]
fn attach_detach_replace_wording_and_tree() {
    let env = Env::new();
    let [a, b, c, d, e, f] = ["a", "b", "c", "d", "e", "f"].map(|n| env.make_vdev(n, 128 * MB));
    let small = env.make_vdev("small", 96 * MB);
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    let w = (4 + a.len()).max(10);
    // Slow reads of the source so that each resilver is still running when the
    // status below is taken (a real resilver of this tiny pool takes milliseconds).
    env.tarn(&["zinject", "-d", &a, "-D", "1500", "-T", "read", "tank"]).ok();
    env.zpool(&["attach", "tank", &a, &b]).ok();
    let st = status_of(&env, "tank");
    let tree = format!(
        "{}{}{}{}{}",
        header(w),
        row(0, "tank", "ONLINE", w, ""),
        row(2, "mirror-0", "ONLINE", w, ""),
        row(4, &a, "ONLINE", w, ""),
        row(4, &b, "ONLINE", w, "  (resilvering)"),
    );
    assert!(st.contains(&tree), "{st}");
    // Replace a side: replacing-0 in its place.
    env.zpool(&["replace", "tank", &a, &c]).ok();
    let st = status_of(&env, "tank");
    let w6 = 6 + a.len();
    let tree = format!(
        "{}{}{}{}{}{}{}",
        header(w6),
        row(0, "tank", "ONLINE", w6, ""),
        row(2, "mirror-0", "ONLINE", w6, ""),
        row(4, "replacing-0", "ONLINE", w6, ""),
        row(6, &a, "ONLINE", w6, ""),
        row(6, &c, "ONLINE", w6, "  (resilvering)"),
        row(4, &b, "ONLINE", w6, "  (resilvering)"),
    );
    assert!(st.contains(&tree), "{st}");
    env.zpool(&["replace", "tank", &a, &d]).fails_with(&format!(
        "cannot replace {a} with {d}: already in replacing/spare config; wait for completion or use 'zpool detach'"
    ));
    // Cancel the replace by detaching the new device.
    env.zpool(&["detach", "tank", &c]).ok();
    assert!(status_of(&env, "tank").contains(&row(4, &a, "ONLINE", w, "")));
    // The only complete copy cannot go.
    env.zpool(&["detach", "tank", &a]).fails_with(&format!("cannot detach {a}: no valid replicas"));
    env.zpool(&["attach", "tank", &a, &small])
        .fails_with(&format!("cannot attach {small} to {a}: device is too small"));
    env.zpool(&["attach", "tank", "v/nope", &d])
        .fails_with(&format!("cannot attach {d} to {}: no such device in pool", env.vdev("nope")));
    env.zpool(&["attach", "tank", &a, &b]).fails_with(&format!("{b} is part of active pool 'tank'"));
    env.zpool(&["attach", "tank", &a]).fails_with("missing <new_device> specification");
    env.zpool(&["detach", "nopool", &a]).fails_with("cannot open 'nopool': no such pool");
    // raidz children take no attach; a lone top-level disk takes no detach.
    env.zpool(&["create", "-m", "none", "rz", "raidz", &d, &e, &f]).ok();
    env.zpool(&["attach", "rz", &d, &c])
        .fails_with(&format!("cannot attach {c} to {d}: can only attach to mirrors and top-level disks"));
    env.zpool(&["detach", "rz", &d])
        .fails_with(&format!("cannot detach {d}: only applicable to mirror and replacing vdevs"));
    env.tarn(&["zinject", "-d", &d, "-D", "1500", "-T", "read", "rz"]).ok();
    env.zpool(&["replace", "rz", &e, &c]).ok();
    let st = status_of(&env, "rz");
    let wz = w6;
    let tree = format!(
        "{}{}{}{}{}{}{}",
        row(2, "raidz1-0", "ONLINE", wz, ""),
        row(4, &d, "ONLINE", wz, ""),
        row(4, "replacing-1", "ONLINE", wz, ""),
        row(6, &e, "ONLINE", wz, ""),
        row(6, &c, "ONLINE", wz, "  (resilvering)"),
        row(4, &f, "ONLINE", wz, ""),
        "\n"
    );
    assert!(st.contains(&tree), "{st}");
    assert!(st.contains("status: One or more devices is currently being resilvered."), "{st}");
    // Export stops the resilver; import resumes it, and when it is done the old
    // leaf leaves the tree.
    env.tarn(&["zinject", "-c", "all"]).ok();
    env.zpool(&["export", "rz"]).ok();
    env.zpool(&["import", "-d", "v", "rz"]).ok();
    let done = format!(
        "{}{}{}{}",
        row(2, "raidz1-0", "ONLINE", w, ""),
        row(4, &d, "ONLINE", w, ""),
        row(4, &c, "ONLINE", w, ""),
        row(4, &f, "ONLINE", w, ""),
    );
    let t = std::time::Instant::now();
    let mut st = status_of(&env, "rz");
    while !st.contains(&done) {
        assert!(t.elapsed().as_secs() < 30, "resilver never completed:\n{st}");
        std::thread::sleep(std::time::Duration::from_millis(100));
        st = status_of(&env, "rz");
    }
    assert!(st.contains("  scan: resilvered ") && st.contains(" with 0 errors on "), "{st}");
}
