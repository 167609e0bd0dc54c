//! End-to-end: `tarn zfs send` and `tarn zfs recv` (OpenZFS suite areas
//! cli_root/zfs_send, zfs_receive, rsend).
//!
//! How: streams go through files and real pipes between `tarn` processes, exactly as
//! a shell redirects them; the client hands its descriptors to the daemon. Contents
//! are compared file by file through the FUSE mounts of source and copy. Damaged and
//! cut-off streams are refused and leave the copy as it was; a cut-off `-s` receive
//! resumes with `send -t` and ends with the same files. Refusals that need no data run
//! without FUSE; the rest is skipped, with a message, when FUSE is not usable here.

mod common;
use common::*;
use std::path::Path;
use std::process::Stdio;

/// `tarn ARGS > file`.
fn send_to(env: &Env, args: &[&str], file: &Path) -> Out {
    let mut c = env.command(args);
    c.stdout(std::fs::File::create(file).unwrap());
    run(c)
}

/// `tarn ARGS < file`.
fn recv_from(env: &Env, args: &[&str], file: &Path) -> Out {
    let mut c = env.command(args);
    c.stdin(std::fs::File::open(file).unwrap());
    run(c)
}

fn value(env: &Env, prop: &str, ds: &str) -> String {
    env.zfs(&["get", "-H", "-o", "value", prop, ds]).ok().stdout.trim().to_string()
}

fn snaps(env: &Env, fs: &str) -> String {
    env.zfs(&["list", "-H", "-t", "snapshot", "-o", "name", "-r", fs]).ok().stdout
}

fn data(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 13) as u8).collect()
}

/// The files a test writes, compared in both trees.
const FILES: [&str; 4] = ["big", "small", "dir/inner", "dir/deeper/leaf"];

fn same_files(a: &Path, b: &Path) {
    for f in FILES {
        let (x, y) = (std::fs::read(a.join(f)), std::fs::read(b.join(f)));
        match (x, y) {
            (Ok(x), Ok(y)) => assert!(x == y, "{f} differs between {} and {}", a.display(), b.display()),
            (Err(_), Err(_)) => {}
            (x, y) => panic!(
                "{f}: {} has {:?}, {} has {:?}",
                a.display(),
                x.map(|v| v.len()),
                b.display(),
                y.map(|v| v.len())
            ),
        }
    }
}

#[test]
fn refusals_without_data() {
    let env = Env::new();
    env.zpool(&["create", "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "-u", "tank/fs"]).ok();
    env.zfs(&["snapshot", "tank/fs@a"]).ok();
    env.zfs(&["create", "-u", "tank/other"]).ok();
    env.zfs(&["snapshot", "tank/other@x"]).ok();
    let f = env.path().join("s");
    send_to(&env, &["zfs", "send", "tank/fs"], &f).fails_with("argument must be a snapshot");
    send_to(&env, &["zfs", "send", "tank/fs@nope"], &f).fails_with("cannot open 'tank/fs@nope': dataset does not exist");
    send_to(&env, &["zfs", "send", "-i", "tank/other@x", "tank/fs@a"], &f).fails_with("incremental source must be in same filesystem");
    send_to(&env, &["zfs", "send", "-i", "@a", "tank/fs@a"], &f).fails_with("is not earlier than it");
    send_to(&env, &["zfs", "send", "-w", "tank/fs@a"], &f).fails_with("invalid option 'w'");
    send_to(&env, &["zfs", "send", "-t", "1-00-0-", "tank/fs@a"], &f).fails_with("too many arguments");
    send_to(&env, &["zfs", "send", "-t", "2-bogus"], &f).fails_with("cannot resume send");
    // Dry run with -v/-P prints the estimate and writes no stream.
    let est = env.zfs(&["send", "-nP", "tank/fs@a"]).ok().stdout;
    assert!(est.starts_with("full\ttank/fs@a\t") && est.contains("\nsize\t"), "{est}");
    // Garbage, an empty input and a receive without a stream are refused.
    std::fs::write(&f, b"this is not a stream at all").unwrap();
    recv_from(&env, &["zfs", "recv", "tank/r"], &f).fails_with("invalid stream (bad magic number)");
    std::fs::write(&f, b"").unwrap();
    recv_from(&env, &["zfs", "recv", "tank/r"], &f).fails_with("failed to read from stream");
    env.zfs(&["recv", "-A", "tank/fs"])
        .fails_with("does not have any resumable receive state to abort");
    env.zfs(&["recv", "-d", "-e", "tank/r"]).fails_with("mutually exclusive");
    env.zfs(&["set", "receive_resume_token=x", "tank/fs"])
        .fails_with("'receive_resume_token' is readonly");
    // A real stream: a full one lands once; again without -F it is refused.
    send_to(&env, &["zfs", "send", "tank/fs@a"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "tank/r"], &f).ok();
    assert_eq!(snaps(&env, "tank/r"), "tank/r@a\n");
    assert_eq!(value(&env, "guid", "tank/r@a"), value(&env, "guid", "tank/fs@a"));
    recv_from(&env, &["zfs", "recv", "-u", "tank/r"], &f).fails_with("destination 'tank/r' exists\nmust specify -F to overwrite it");
    // An incremental stream needs its base on the target.
    env.zfs(&["snapshot", "tank/fs@b"]).ok();
    send_to(&env, &["zfs", "send", "-i", "@a", "tank/fs@b"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "tank/nope"], &f).fails_with("destination 'tank/nope' does not exist");
    recv_from(&env, &["zfs", "recv", "-u", "tank/other"], &f).fails_with("does not\nmatch incremental source");
    assert_eq!(snaps(&env, "tank/other"), "tank/other@x\n");
    recv_from(&env, &["zfs", "recv", "-u", "tank/r"], &f).ok();
    assert_eq!(snaps(&env, "tank/r"), "tank/r@a\ntank/r@b\n");
    recv_from(&env, &["zfs", "recv", "-u", "tank/r"], &f).fails_with("cannot restore to tank/r@b: destination already exists");
    // -n reads and checks the stream and changes nothing; -e keeps the last name
    // component; -o sets a property on the created file system; -c -L streams land.
    send_to(&env, &["zfs", "send", "-c", "-L", "-e", "tank/fs@a"], &f).ok();
    let out = recv_from(&env, &["zfs", "recv", "-n", "-v", "tank/dry"], &f).ok().stdout;
    assert_eq!(out, "would receive full stream of tank/fs@a into tank/dry@a\n");
    env.zfs(&["list", "tank/dry"]).fails_with("dataset does not exist");
    env.zfs(&["create", "-u", "tank/e"]).ok();
    recv_from(&env, &["zfs", "recv", "-u", "-e", "-o", "compression=lz4", "tank/e"], &f).ok();
    assert_eq!(snaps(&env, "tank/e"), "tank/e/fs@a\n");
    assert_eq!(
        env.zfs(&["get", "-H", "-o", "value,source", "compression", "tank/e/fs"]).ok().stdout,
        "lz4\tlocal\n"
    );
    // -p carries local properties (received on the other side); -x leaves one out.
    env.zfs(&["set", "atime=off", "tank/fs"]).ok();
    env.zfs(&["set", "recordsize=64K", "tank/fs"]).ok();
    send_to(&env, &["zfs", "send", "-p", "tank/fs@a"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "-x", "recordsize", "tank/p"], &f).ok();
    assert_eq!(env.zfs(&["get", "-H", "-o", "value,source", "atime", "tank/p"]).ok().stdout, "off\treceived\n");
    assert_eq!(value(&env, "recordsize", "tank/p"), "128K");
}

/// Properties that come with a stream are received values: source `received`, shown
/// in the RECEIVED column, overridden by `zfs set`, hidden by `zfs inherit`, back with
/// `zfs inherit -S`, replaced by the next package, kept over export/import and sent
/// on by a further `send -p`.
#[test]
fn received_property_values() {
    let env = Env::new();
    env.zpool(&["create", "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "-u", "-o", "compression=lz4", "-o", "com.example:tag=one", "tank/src"])
        .ok();
    env.zfs(&["snapshot", "tank/src@a"]).ok();
    let f = env.path().join("s");
    send_to(&env, &["zfs", "send", "-p", "tank/src@a"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "-o", "atime=off", "tank/dst"], &f).ok();
    let get = |fields: &str, props: &str, ds: &str| env.zfs(&["get", "-H", "-o", fields, props, ds]).ok().stdout;
    assert_eq!(
        get("property,value,received,source", "compression,com.example:tag,atime", "tank/dst"),
        "compression\tlz4\tlz4\treceived\ncom.example:tag\tone\tone\treceived\natime\toff\t-\tlocal\n"
    );
    assert_eq!(
        env.zfs(&["get", "-H", "-s", "received", "-o", "property", "all", "tank/dst"]).ok().stdout,
        "compression\ncom.example:tag\n"
    );
    // A local value wins; the received one stays underneath.
    env.zfs(&["set", "compression=off", "tank/dst"]).ok();
    assert_eq!(get("value,received,source", "compression", "tank/dst"), "off\tlz4\tlocal\n");
    // inherit hides the received value too; inherit -S brings it back.
    env.zfs(&["inherit", "compression", "tank/dst"]).ok();
    assert_eq!(get("value,received,source", "compression", "tank/dst"), "off\tlz4\tdefault\n");
    env.zfs(&["inherit", "-S", "compression", "tank/dst"]).ok();
    assert_eq!(get("value,source", "compression", "tank/dst"), "lz4\treceived\n");
    // -S where nothing was received is a plain inherit.
    env.zfs(&["inherit", "-S", "atime", "tank/dst"]).ok();
    assert_eq!(get("value,source", "atime", "tank/dst"), "on\tdefault\n");
    // A child inherits a received value from its parent.
    env.zfs(&["create", "-u", "tank/dst/kid"]).ok();
    assert_eq!(get("value,source", "compression", "tank/dst/kid"), "lz4\tinherited from tank/dst\n");

    // The next package replaces the received set: a property it no longer carries
    // goes, a changed one changes; -x keeps one out.
    env.zfs(&["inherit", "compression", "tank/src"]).ok();
    env.zfs(&["set", "com.example:tag=two", "tank/src"]).ok();
    env.zfs(&["set", "com.example:other=x", "tank/src"]).ok();
    env.zfs(&["snapshot", "tank/src@b"]).ok();
    send_to(&env, &["zfs", "send", "-p", "-i", "@a", "tank/src@b"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "-x", "com.example:other", "tank/dst"], &f).ok();
    assert_eq!(
        get("property,value,source", "compression,com.example:tag,com.example:other", "tank/dst"),
        "compression\toff\tdefault\ncom.example:tag\ttwo\treceived\ncom.example:other\t-\t-\n"
    );

    // Received values travel on with send -p (a chain of backups) and survive import.
    env.zfs(&["snapshot", "tank/dst@c"]).ok();
    send_to(&env, &["zfs", "send", "-p", "tank/dst@c"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "tank/third"], &f).ok();
    assert_eq!(get("value,source", "com.example:tag", "tank/third"), "two\treceived\n");
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    assert_eq!(get("value,received,source", "com.example:tag", "tank/dst"), "two\ttwo\treceived\n");
}

#[test]
fn send_recv_through_mounts() {
    if !fuse_usable("send_recv_through_mounts") {
        return;
    }
    let env = Env::new();
    let m = env.path().join("mnt");
    let ms = m.display().to_string();
    env.zpool(&["create", "-m", &ms, "-o", "size=256M", "tank", "mirror", "v/a", "v/b"]).ok();
    env.zfs(&["create", "-o", "compression=lz4", "tank/fs"]).ok();
    env.zfs(&["create", "tank/fs/kid"]).ok();
    let fs = m.join("fs");
    std::fs::create_dir_all(fs.join("dir/deeper")).unwrap();
    std::fs::write(fs.join("big"), data(1, 6_000_000)).unwrap();
    std::fs::write(fs.join("small"), b"hello\n").unwrap();
    std::fs::write(fs.join("dir/inner"), data(2, 70_000)).unwrap();
    std::fs::write(fs.join("dir/deeper/leaf"), b"leaf").unwrap();
    std::fs::write(fs.join("kid/big"), data(3, 300_000)).unwrap();
    env.zfs(&["snapshot", "-r", "tank/fs@one"]).ok();

    // Full stream through a file.
    let s1 = env.path().join("s1");
    send_to(&env, &["zfs", "send", "tank/fs@one"], &s1).ok();
    let out = recv_from(&env, &["zfs", "recv", "-v", "tank/copy"], &s1).ok().stdout;
    assert!(out.starts_with("receiving full stream of tank/fs@one into tank/copy@one\nreceived "), "{out}");
    same_files(&fs, &m.join("copy"));
    assert_eq!(value(&env, "mounted", "tank/copy"), "yes");

    // The same full stream received as a clone of an unrelated snapshot (OpenZFS:
    // which snapshot does not matter): the stream's files, none of the origin's,
    // and the origin pinned by its new clone.
    env.zfs(&["create", "tank/other"]).ok();
    std::fs::write(m.join("other/small"), b"the origin's own small file").unwrap();
    std::fs::write(m.join("other/only-in-origin"), b"x").unwrap();
    env.zfs(&["snapshot", "tank/other@o"]).ok();
    recv_from(&env, &["zfs", "recv", "-o", "origin=tank/other@o", "tank/asclone"], &s1).ok();
    same_files(&fs, &m.join("asclone"));
    assert!(!m.join("asclone/only-in-origin").exists(), "a file of the origin survived the full stream");
    assert_eq!(value(&env, "origin", "tank/asclone"), "tank/other@o");
    assert_eq!(snaps(&env, "tank/asclone"), "tank/asclone@one\n");
    assert_eq!(value(&env, "guid", "tank/asclone@one"), value(&env, "guid", "tank/fs@one"));
    env.zfs(&["destroy", "tank/other@o"]).fails_with("snapshot has dependent clones");
    assert_eq!(std::fs::read(m.join("other/small")).unwrap(), b"the origin's own small file");
    env.zfs(&["destroy", "-R", "tank/other"]).ok();

    // An incremental stream carries the change, not the dataset.
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(fs.join("big")).unwrap();
        f.seek(SeekFrom::Start(1_000_000)).unwrap();
        f.write_all(&data(9, 100_000)).unwrap();
    }
    std::fs::remove_file(fs.join("small")).unwrap();
    std::fs::write(fs.join("dir/deeper/leaf"), b"leaf, changed").unwrap();
    std::fs::write(fs.join("kid/new"), b"kid's new file").unwrap();
    env.zfs(&["snapshot", "-r", "tank/fs@two"]).ok();
    let s2 = env.path().join("s2");
    let est = env.zfs(&["send", "-nv", "-i", "@one", "tank/fs@two"]).ok().stdout;
    assert!(est.starts_with("send from @one to tank/fs@two estimated size is "), "{est}");
    send_to(&env, &["zfs", "send", "-i", "tank/fs@one", "tank/fs@two"], &s2).ok();
    let (len1, len2) = (std::fs::metadata(&s1).unwrap().len(), std::fs::metadata(&s2).unwrap().len());
    assert!(len2 * 10 < len1, "incremental {len2} bytes vs full {len1}");
    // Reading the copy updates access times; -F rolls that back first.
    recv_from(&env, &["zfs", "recv", "-F", "tank/copy"], &s2).ok();
    same_files(&fs, &m.join("copy"));
    assert_eq!(snaps(&env, "tank/copy"), "tank/copy@one\ntank/copy@two\n");

    // A damaged stream is refused and the copy stays at @two, mounted.
    std::fs::write(fs.join("small"), b"back again\n").unwrap();
    std::fs::write(fs.join("big"), data(4, 3_000_000)).unwrap();
    env.zfs(&["snapshot", "-r", "tank/fs@three"]).ok();
    let s3 = env.path().join("s3");
    send_to(&env, &["zfs", "send", "-i", "@two", "tank/fs@three"], &s3).ok();
    let good = std::fs::read(&s3).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    let bad_file = env.path().join("bad");
    std::fs::write(&bad_file, &bad).unwrap();
    let before_copy: Vec<u8> = std::fs::read(m.join("copy/big")).unwrap();
    recv_from(&env, &["zfs", "recv", "-F", "tank/copy"], &bad_file).fails_with("checksum mismatch or incomplete stream");
    assert_eq!(snaps(&env, "tank/copy"), "tank/copy@one\ntank/copy@two\n");
    assert_eq!(std::fs::read(m.join("copy/big")).unwrap(), before_copy);
    assert_eq!(value(&env, "receive_resume_token", "tank/copy"), "-");

    // Cut off with -s: the partial state is kept (unmounted) with a token; send -t
    // resumes it and the copy ends with the same files.
    std::fs::write(&bad_file, &good[..good.len() / 2]).unwrap();
    let e = recv_from(&env, &["zfs", "recv", "-s", "-F", "tank/copy"], &bad_file).fails_with("Partially received snapshot is saved");
    let token = value(&env, "receive_resume_token", "tank/copy");
    assert!(token.starts_with("1-") && e.stderr.contains(&format!("zfs send -t {token}")), "{e:?}");
    assert_eq!(value(&env, "mounted", "tank/copy"), "no");
    env.zfs(&["mount", "tank/copy"]).fails_with("partially received");
    let rest = env.path().join("rest");
    send_to(&env, &["zfs", "send", "-t", &token], &rest).ok();
    assert!(std::fs::metadata(&rest).unwrap().len() < good.len() as u64);
    recv_from(&env, &["zfs", "recv", "-s", "tank/copy"], &rest).ok();
    same_files(&fs, &m.join("copy"));
    assert_eq!(value(&env, "receive_resume_token", "tank/copy"), "-");
    assert_eq!(value(&env, "guid", "tank/copy@three"), value(&env, "guid", "tank/fs@three"));

    // recv -A throws a saved partial state away: a full receive's dataset goes.
    std::fs::write(&bad_file, &std::fs::read(&s1).unwrap()[..len1 as usize / 2]).unwrap();
    recv_from(&env, &["zfs", "recv", "-s", "tank/half"], &bad_file).fails_with("Partially received snapshot is saved");
    assert!(value(&env, "receive_resume_token", "tank/half").starts_with("1-"));
    env.zfs(&["recv", "-A", "tank/half"]).ok();
    env.zfs(&["list", "tank/half"]).fails_with("dataset does not exist");

    // -R: the whole tree with its snapshots and local properties (received values on
    // the copy), through a real
    // pipe between two clients of the same daemon.
    let mut send = env.command(&["zfs", "send", "-R", "tank/fs@two"]);
    send.stdout(Stdio::piped());
    let mut sender = send.spawn().unwrap();
    let mut recv = env.command(&["zfs", "recv", "tank/rep"]);
    recv.stdin(Stdio::from(sender.stdout.take().unwrap()));
    let r = run(recv);
    assert!(sender.wait().unwrap().success());
    r.ok();
    assert_eq!(snaps(&env, "tank/rep"), "tank/rep@one\ntank/rep@two\ntank/rep/kid@one\ntank/rep/kid@two\n");
    assert_eq!(
        env.zfs(&["get", "-H", "-o", "value,source", "compression", "tank/rep"]).ok().stdout,
        "lz4\treceived\n"
    );
    assert_eq!(std::fs::read(m.join("rep/kid/new")).unwrap(), b"kid's new file");
    assert_eq!(std::fs::read(m.join("rep/kid/big")).unwrap(), data(3, 300_000));
    // -R -I keeps it in sync; streams it already has are skipped.
    let pkg = env.path().join("pkg");
    send_to(&env, &["zfs", "send", "-R", "-I", "@one", "tank/fs@three"], &pkg).ok();
    let out = recv_from(&env, &["zfs", "recv", "-v", "-F", "tank/rep"], &pkg).ok().stdout;
    assert!(out.contains("skipping (already present) incremental stream of tank/fs@two"), "{out}");
    same_files(&fs, &m.join("rep"));
    assert!(snaps(&env, "tank/rep").contains("tank/rep/kid@three\n"));

    // Into a pool of a second daemon (another socket and state: another host).
    let env2 = Env::new();
    let m2 = env2.path().join("mnt");
    env2.zpool(&["create", "-m", &m2.display().to_string(), "-o", "size=128M", "backup", "v/x"])
        .ok();
    recv_from(&env2, &["zfs", "recv", "-d", "backup"], &s1).ok();
    assert_eq!(std::fs::read(m2.join("fs/dir/inner")).unwrap(), data(2, 70_000));
    assert_eq!(snaps(&env2, "backup"), "backup/fs@one\n");
}

/// Start `zfs recv ARGS` fed with the first half of `stream`, wait until the daemon
/// has marked the target as being received (it is unmounted or listed), then kill the
/// daemon with SIGKILL while the receive waits for the rest.
fn kill_mid_receive(env: &Env, args: &[&str], stream: &[u8], target: &str) {
    use std::io::Write;
    let mut c = env.command(args);
    c.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(&stream[..stream.len() / 2]).unwrap();
    let t = std::time::Instant::now();
    loop {
        let o = env.zfs(&["get", "-H", "-o", "value", "mounted", target]);
        if o.code == 0 && o.stdout.trim() == "no" {
            break;
        }
        assert!(t.elapsed().as_secs() < 30, "receive into {target} never started: {o:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Let the first half of the records reach a synced txg.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    kill_9_daemon(env);
    drop(input);
    let _ = child.wait();
}

#[test]
fn kill_during_receive_leaves_it_done_or_gone() {
    if !fuse_usable("kill_during_receive_leaves_it_done_or_gone") {
        return;
    }
    let env = Env::new();
    let m = env.path().join("mnt");
    env.zpool(&["create", "-m", &m.display().to_string(), "-o", "size=256M", "tank", "v/a"]).ok();
    env.zfs(&["create", "tank/fs"]).ok();
    std::fs::write(m.join("fs/big"), data(5, 8_000_000)).unwrap();
    env.zfs(&["snapshot", "tank/fs@one"]).ok();
    std::fs::write(m.join("fs/big"), data(6, 8_000_000)).unwrap();
    env.zfs(&["snapshot", "tank/fs@two"]).ok();
    let (s1, s2) = (env.path().join("s1"), env.path().join("s2"));
    send_to(&env, &["zfs", "send", "tank/fs@one"], &s1).ok();
    send_to(&env, &["zfs", "send", "-i", "@one", "tank/fs@two"], &s2).ok();
    recv_from(&env, &["zfs", "recv", "tank/copy"], &s1).ok();

    // An incremental receive killed half way: the copy comes back at @one.
    kill_mid_receive(&env, &["zfs", "recv", "-s", "-F", "tank/copy"], &std::fs::read(&s2).unwrap(), "tank/copy");
    // The next daemon imports the pool from its cachefile.
    env.zpool(&["list", "tank"]).ok();
    assert_eq!(snaps(&env, "tank/copy"), "tank/copy@one\n");
    assert_eq!(value(&env, "receive_resume_token", "tank/copy"), "-");
    assert_eq!(value(&env, "mounted", "tank/copy"), "yes");
    assert_eq!(std::fs::read(m.join("copy/big")).unwrap(), data(5, 8_000_000));
    // It then receives the same stream whole.
    recv_from(&env, &["zfs", "recv", "-F", "tank/copy"], &s2).ok();
    assert_eq!(std::fs::read(m.join("copy/big")).unwrap(), data(6, 8_000_000));

    // A full receive killed half way leaves no dataset behind.
    kill_mid_receive(&env, &["zfs", "recv", "tank/new"], &std::fs::read(&s1).unwrap(), "tank/new");
    // The next daemon imports the pool from its cachefile.
    env.zpool(&["list", "tank"]).ok();
    env.zfs(&["list", "tank/new"]).fails_with("dataset does not exist");
    recv_from(&env, &["zfs", "recv", "tank/new"], &s1).ok();
    assert_eq!(std::fs::read(m.join("new/big")).unwrap(), data(5, 8_000_000));
}

#[test]
fn bookmarks_as_incremental_sources() {
    let env = Env::new();
    env.zpool(&["create", "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "-u", "tank/fs"]).ok();
    env.zfs(&["snapshot", "tank/fs@a"]).ok();
    env.zfs(&["bookmark", "tank/fs@a", "tank/fs#a"]).ok();
    env.zfs(&["bookmark", "tank/fs#a", "#copy"]).ok();
    env.zfs(&["bookmark", "tank/fs@a", "tank/fs#a"])
        .fails_with("cannot create bookmark 'tank/fs#a': bookmark already exists");
    env.zfs(&["bookmark", "tank/fs@nope", "tank/fs#x"]).fails_with("dataset does not exist");
    env.zfs(&["bookmark", "tank/fs@a", "tank/fs#bad!"])
        .fails_with("cannot create bookmark 'tank/fs#bad!'");
    env.zfs(&["bookmark", "tank/fs@a", "tank/other#x"]).fails_with("source is not an ancestor");
    assert_eq!(
        env.zfs(&["list", "-H", "-t", "bookmark", "-o", "name,type"]).ok().stdout,
        "tank/fs#a\tbookmark\ntank/fs#copy\tbookmark\n"
    );
    assert_eq!(
        env.zfs(&["list", "-H", "-t", "all", "-o", "name", "-r", "tank/fs"]).ok().stdout,
        "tank/fs\ntank/fs@a\ntank/fs#a\ntank/fs#copy\n"
    );
    assert_eq!(value(&env, "guid", "tank/fs#a"), value(&env, "guid", "tank/fs@a"));
    // Copy @a to tank/r, then drop @a on the source: the bookmark still serves as the
    // base of the next incremental stream.
    let f = env.path().join("s");
    send_to(&env, &["zfs", "send", "tank/fs@a"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "tank/r"], &f).ok();
    env.zfs(&["snapshot", "tank/fs@b"]).ok();
    env.zfs(&["destroy", "tank/fs@a"]).ok();
    let est = env.zfs(&["send", "-nv", "-i", "#a", "tank/fs@b"]).ok().stdout;
    assert!(est.starts_with("send from #a to tank/fs@b estimated size is "), "{est}");
    send_to(&env, &["zfs", "send", "-I", "#a", "tank/fs@b"], &f).fails_with("not a bookmark");
    send_to(&env, &["zfs", "send", "-i", "tank/fs#a", "tank/fs@b"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "tank/r"], &f).ok();
    assert_eq!(snaps(&env, "tank/r"), "tank/r@a\ntank/r@b\n");
    // Bookmarks survive export/import; destroy takes them one by one, and destroying
    // the file system takes the rest.
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    assert_eq!(env.zfs(&["destroy", "-nv", "tank/fs#copy"]).ok().stdout, "would destroy tank/fs#copy\n");
    env.zfs(&["destroy", "tank/fs#copy"]).ok();
    env.zfs(&["destroy", "tank/fs#copy"]).fails_with("bookmark does not exist");
    assert_eq!(env.zfs(&["list", "-H", "-t", "bookmark", "-o", "name"]).ok().stdout, "tank/fs#a\n");
    env.zfs(&["destroy", "-r", "tank/fs"]).ok();
    assert_eq!(env.zfs(&["list", "-H", "-t", "bookmark", "-o", "name"]).ok().stdout, "");
}

#[test]
fn promote_through_cli() {
    let env = Env::new();
    env.zpool(&["create", "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "-u", "tank/a"]).ok();
    env.zfs(&["snapshot", "tank/a@s1"]).ok();
    env.zfs(&["snapshot", "tank/a@s2"]).ok();
    env.zfs(&["clone", "tank/a@s1", "tank/c"]).ok();
    env.zfs(&["promote", "tank/a"]).fails_with("cannot promote 'tank/a': not a cloned filesystem");
    env.zfs(&["promote"]).fails_with("missing clone filesystem argument");
    env.zfs(&["promote", "tank/c"]).ok();
    assert_eq!(snaps(&env, "tank/c"), "tank/c@s1\n");
    assert_eq!(snaps(&env, "tank/a"), "tank/a@s2\n");
    assert_eq!(value(&env, "origin", "tank/a"), "tank/c@s1");
    assert_eq!(value(&env, "origin", "tank/c"), "-");
    assert_eq!(value(&env, "clones", "tank/c@s1"), "tank/a");
    // The old origin file system can now go, the promoted one stays.
    env.zfs(&["destroy", "-r", "tank/a"]).ok();
    assert_eq!(snaps(&env, "tank/c"), "tank/c@s1\n");
}

/// `zfs recv -o origin=snap`: an incremental stream lands in a new clone of its base
/// (`origin` shows it, the received snapshot keeps the sender's GUID and size); a
/// wrong base, a missing origin or an existing target (for a full stream too) are
/// refused and create nothing.
#[test]
fn receive_incremental_as_clone() {
    let env = Env::new();
    env.zpool(&["create", "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "-u", "tank/fs"]).ok();
    env.zfs(&["snapshot", "tank/fs@a"]).ok();
    env.zfs(&["create", "-u", "tank/fs/kid"]).ok(); // changes the parent's directory
    env.zfs(&["snapshot", "tank/fs@b"]).ok();
    let full = env.path().join("full");
    let inc = env.path().join("inc");
    send_to(&env, &["zfs", "send", "tank/fs@a"], &full).ok();
    send_to(&env, &["zfs", "send", "-i", "@a", "tank/fs@b"], &inc).ok();
    recv_from(&env, &["zfs", "recv", "-u", "tank/base"], &full).ok();
    env.zfs(&["snapshot", "tank/base@other"]).ok();
    let listing = || env.zfs(&["list", "-H", "-t", "all", "-o", "name"]).ok().stdout;
    let before = listing();
    recv_from(&env, &["zfs", "recv", "-u", "-o", "origin=tank/base@other", "tank/cl"], &inc).fails_with("does not\nmatch incremental source");
    recv_from(&env, &["zfs", "recv", "-u", "-o", "origin=tank/base@a", "tank/fs"], &full).fails_with("exists");
    recv_from(&env, &["zfs", "recv", "-u", "-o", "origin=tank/base@nope", "tank/cl"], &inc).fails_with("dataset does not exist");
    recv_from(&env, &["zfs", "recv", "-u", "-o", "origin=tank/base@a", "tank/fs"], &inc).fails_with("exists");
    assert_eq!(listing(), before);
    recv_from(&env, &["zfs", "recv", "-u", "-o", "origin=tank/base@a", "tank/cl"], &inc).ok();
    assert_eq!(value(&env, "origin", "tank/cl"), "tank/base@a");
    assert_eq!(snaps(&env, "tank/cl"), "tank/cl@b\n");
    assert_eq!(value(&env, "guid", "tank/cl@b"), value(&env, "guid", "tank/fs@b"));
    assert_eq!(value(&env, "clones", "tank/base@a"), "tank/cl");
    // The clone pins its origin, as any clone does.
    env.zfs(&["destroy", "tank/base@a"]).fails_with("snapshot has dependent clones");
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-N", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    assert_eq!(value(&env, "origin", "tank/cl"), "tank/base@a");
}

/// Properties reach an existing file system too: an incremental `-R` package carries
/// the sender's current local properties (native and user) and the receiver sets them
/// as `zfs set` would; `-o` on an incremental receive sets its value as well.
#[test]
fn incremental_replication_carries_property_changes() {
    let env = Env::new();
    env.zpool(&["create", "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "-u", "-o", "compression=lz4", "-o", "com.example:tier=gold", "tank/fs"])
        .ok();
    env.zfs(&["snapshot", "tank/fs@a"]).ok();
    let f = env.path().join("s");
    send_to(&env, &["zfs", "send", "-R", "tank/fs@a"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "tank/dst"], &f).ok();
    assert_eq!(value(&env, "compression", "tank/dst"), "lz4");
    assert_eq!(value(&env, "com.example:tier", "tank/dst"), "gold");
    env.zfs(&["set", "compression=off", "tank/fs"]).ok();
    env.zfs(&["set", "com.example:tier=silver", "tank/fs"]).ok();
    env.zfs(&["set", "atime=off", "tank/fs"]).ok();
    env.zfs(&["snapshot", "tank/fs@b"]).ok();
    send_to(&env, &["zfs", "send", "-R", "-I", "@a", "tank/fs@b"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "tank/dst"], &f).ok();
    assert_eq!(snaps(&env, "tank/dst"), "tank/dst@a\ntank/dst@b\n");
    assert_eq!(value(&env, "compression", "tank/dst"), "off");
    assert_eq!(value(&env, "com.example:tier", "tank/dst"), "silver");
    assert_eq!(value(&env, "atime", "tank/dst"), "off");
    // -o on a plain incremental receive into an existing file system.
    env.zfs(&["snapshot", "tank/fs@c"]).ok();
    send_to(&env, &["zfs", "send", "-i", "@b", "tank/fs@c"], &f).ok();
    recv_from(&env, &["zfs", "recv", "-u", "-o", "com.example:note=nightly", "tank/dst"], &f).ok();
    assert_eq!(value(&env, "com.example:note", "tank/dst"), "nightly");
    let src = env.zfs(&["get", "-H", "-o", "source", "com.example:note", "tank/dst"]).ok().stdout;
    assert_eq!(src, "local\n");
}
