//! End-to-end: the data-reduction properties through the `tarn` binary (issue 15):
//! `compression`, `checksum` and `copies` are set, inherited and shown as OpenZFS
//! shows them; bad values are refused with OpenZFS's wording and change nothing; and,
//! when FUSE is usable here, a corpus of real files copied into datasets of several
//! algorithms reads back identical after property changes and an export/import, with
//! `compressratio` reflecting what each algorithm achieved.

mod common;
use common::*;

fn get(env: &Env, prop: &str, ds: &str) -> String {
    env.zfs(&["get", "-H", "-o", "value,source", prop, ds]).ok().stdout
}

#[test]
fn properties_are_set_shown_and_refused_as_openzfs() {
    let env = Env::new();
    let alt = env.path().join("alt").display().to_string();
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"])
        .ok();
    env.zfs(&["create", "-u", "tank/x"]).ok();
    assert_eq!(get(&env, "compression", "tank/x"), "off\tdefault\n");
    assert_eq!(get(&env, "checksum", "tank/x"), "on\tdefault\n");
    assert_eq!(get(&env, "copies", "tank/x"), "1\tdefault\n");
    env.zfs(&[
        "create",
        "-u",
        "-o",
        "compression=zstd-fast-500",
        "-o",
        "checksum=sha512",
        "-o",
        "copies=3",
        "tank/y",
    ])
    .ok();
    assert_eq!(get(&env, "compression", "tank/y"), "zstd-fast-500\tlocal\n");
    assert_eq!(get(&env, "checksum", "tank/y"), "sha512\tlocal\n");
    assert_eq!(get(&env, "copies", "tank/y"), "3\tlocal\n");
    env.zfs(&["set", "compress=gzip-9", "tank"]).ok();
    assert_eq!(get(&env, "compression", "tank/x"), "gzip-9\tinherited from tank\n");
    let list = env.zfs(&["list", "-o", "name,compress,checksum,copies", "tank/y"]).ok().stdout;
    assert!(
        list.starts_with("NAME") && list.contains("COMPRESS") && list.contains("CHECKSUM") && list.contains("COPIES"),
        "{list}"
    );
    assert!(list.contains("zstd-fast-500") && list.contains("sha512"), "{list}");
    env.zfs(&["snapshot", "tank/x@s"]).ok();
    let cases: &[(&[&str], &str)] = &[
        (
            &["set", "compression=foo", "tank/x"],
            "cannot set property for 'tank/x': 'compression' must be one of 'on | off | gzip | gzip-[1-9] | zle | lz4 | zstd | zstd-[1-19] | zstd-fast | zstd-fast-[1-10,20,30,40,50,60,70,80,90,100,500,1000]'",
        ),
        (&["set", "compression=zstd-20", "tank/x"], "'compression' must be one of"),
        (&["set", "checksum=skein", "tank/x"], "cannot set property for 'tank/x': 'checksum' must be one of 'on | off | fletcher4 | sha256 | sha512 | blake3'"),
        (&["set", "copies=4", "tank/x"], "cannot set property for 'tank/x': 'copies' must be one of '1 | 2 | 3'"),
        (&["set", "checksum=off", "tank/x@s"], "this property can not be modified for snapshots"),
        (&["create", "-u", "-o", "copies=4", "tank/z"], "'copies' must be one of '1 | 2 | 3'"),
        (&["create", "-u", "-o", "compression=lzjb", "tank/z"], "'compression' must be one of"),
    ];
    let before = env
        .zfs(&["get", "-H", "-r", "-o", "name,property,value,source", "compression,checksum,copies", "tank"])
        .ok()
        .stdout;
    for (args, msg) in cases {
        env.zfs(args).fails_with(msg);
    }
    let after = env
        .zfs(&["get", "-H", "-r", "-o", "name,property,value,source", "compression,checksum,copies", "tank"])
        .ok()
        .stdout;
    assert_eq!(after, before);
    assert!(!env.zfs(&["list", "-H", "-o", "name"]).ok().stdout.contains("tank/z"));
}

/// Real files (text, binaries, gzip files) copied into datasets of several
/// algorithms read back identical after the property changes and the pool is
/// exported and imported; text-heavy data shows a compressratio above 1 for every
/// algorithm and exactly 1.00x-ish for `off`.
#[test]
fn real_files_round_trip_across_algorithms() {
    if !fuse_usable("real_files_round_trip_across_algorithms") {
        return;
    }
    let env = Env::new();
    let m = env.mounted_pool(&[]);
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for dir in ["/usr/share/common-licenses", "/usr/share/doc/gzip", "/usr/lib/x86_64-linux-gnu/gconv"] {
        let Ok(rd) = std::fs::read_dir(dir) else { continue };
        let mut ents: Vec<_> = rd.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        ents.sort();
        for p in ents.into_iter().take(8) {
            if let Ok(b) = std::fs::read(&p) {
                files.push((p.file_name().unwrap().to_string_lossy().into_owned(), b));
            }
        }
    }
    assert!(!files.is_empty());
    let algs = ["off", "lz4", "zle", "gzip", "zstd", "zstd-19", "zstd-fast-100"];
    for a in algs {
        env.zfs(&["create", "-o", &format!("compression={a}"), "-o", "checksum=sha256", &format!("tank/{a}")])
            .ok();
        for (n, b) in &files {
            std::fs::write(m.join(a).join(n), b).unwrap();
        }
        // New blocks with another algorithm next to the old ones.
        env.zfs(&["set", "compression=gzip-1", &format!("tank/{a}")]).ok();
        std::fs::write(m.join(a).join("after"), &files[0].1).unwrap();
    }
    env.zpool(&["sync", "tank"]).ok();
    let ratio = |ds: &str| -> f64 { env.zfs(&["get", "-Hp", "-o", "value", "compressratio", ds]).ok().stdout.trim().parse().unwrap() };
    for a in algs {
        let r = ratio(&format!("tank/{a}"));
        if a == "off" {
            assert!(r >= 1.0, "off: {r}");
        } else {
            assert!(r > 1.2, "{a}: compressratio {r}");
        }
    }
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    for a in algs {
        for (n, b) in &files {
            assert_eq!(&std::fs::read(m.join(a).join(n)).unwrap(), b, "{a}/{n}");
        }
        assert_eq!(std::fs::read(m.join(a).join("after")).unwrap(), files[0].1);
    }
}
