//! End-to-end check of the FUSE adapter: mount a MemStore-backed file system on a
//! temporary directory and drive it through `std::fs` (create, write, read back,
//! mkdir, rename, symlink, hard link, truncate, readdir, unlink, unlinked-but-open,
//! statfs), then unmount. Skipped, with a message, without /dev/fuse or root.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use tarn_dmu::mem::MemStore;
use tarn_fuse::{mount, MountOptions};
use tarn_zpl::{Fs, NoSnapshots, SnapDir, Vfs, ZplOptions};

fn can_mount() -> bool {
    if !std::path::Path::new("/dev/fuse").exists() {
        println!("skipping: /dev/fuse is missing");
        return false;
    }
    if unsafe { libc::geteuid() } != 0 {
        println!("skipping: not root");
        return false;
    }
    true
}

/// A MemStore-backed file system mounted with two threads on a new temporary
/// directory: the temporary directory (kept alive), the mountpoint, the file system
/// and the mount.
fn mem_mount(fsname: &str) -> (tempfile::TempDir, std::path::PathBuf, Arc<Fs>, tarn_fuse::Mount) {
    let zfs = Fs::open(Arc::new(MemStore::new()), ZplOptions::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let opts = MountOptions {
        fsname: fsname.into(),
        threads: 2,
        ..Default::default()
    };
    let m = mount(Vfs::new(zfs.clone(), Arc::new(NoSnapshots), SnapDir::Hidden), &mnt, &opts).unwrap();
    (tmp, mnt, zfs, m)
}

#[test]
fn mount_and_use() {
    if !can_mount() {
        return;
    }
    let store = Arc::new(MemStore::new());
    let zfs = Fs::open(store.clone(), ZplOptions::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let opts = MountOptions {
        fsname: "tank/test".into(),
        threads: 2,
        ..Default::default()
    };
    let m = mount(Vfs::new(zfs.clone(), Arc::new(NoSnapshots), SnapDir::Hidden), &mnt, &opts).unwrap();
    assert_eq!(m.mountpoint(), mnt);

    let root = fs::metadata(&mnt).unwrap();
    assert!(root.is_dir());
    assert_eq!(root.ino(), 1);
    // Every mount has .zfs, hidden from listings by default; no snapshots here.
    assert!(fs::read_dir(&mnt).unwrap().next().is_none());
    assert!(mnt.join(".zfs/snapshot").is_dir());
    assert!(fs::read_dir(mnt.join(".zfs/snapshot")).unwrap().next().is_none());

    // create / write / read back
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    fs::write(mnt.join("hello.txt"), b"hello, tarn\n").unwrap();
    fs::write(mnt.join("big.bin"), &data).unwrap();
    assert_eq!(fs::read(mnt.join("hello.txt")).unwrap(), b"hello, tarn\n");
    assert_eq!(fs::read(mnt.join("big.bin")).unwrap(), data);
    assert_eq!(fs::metadata(mnt.join("big.bin")).unwrap().len(), 3_000_000);
    {
        let mut f = fs::OpenOptions::new().append(true).open(mnt.join("hello.txt")).unwrap();
        f.write_all(b"more\n").unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(fs::read_to_string(mnt.join("hello.txt")).unwrap(), "hello, tarn\nmore\n");

    // mkdir / rename across directories / symlink / hard link
    fs::create_dir(mnt.join("a")).unwrap();
    fs::create_dir_all(mnt.join("b/c")).unwrap();
    fs::rename(mnt.join("hello.txt"), mnt.join("a/hello.txt")).unwrap();
    assert!(!mnt.join("hello.txt").exists());
    fs::rename(mnt.join("b/c"), mnt.join("a/c")).unwrap();
    assert!(mnt.join("a/c").is_dir());
    assert_eq!(fs::metadata(mnt.join("a")).unwrap().nlink(), 3);
    std::os::unix::fs::symlink("hello.txt", mnt.join("a/link")).unwrap();
    assert_eq!(fs::read_link(mnt.join("a/link")).unwrap().to_str(), Some("hello.txt"));
    assert_eq!(fs::read_to_string(mnt.join("a/link")).unwrap(), "hello, tarn\nmore\n");
    fs::hard_link(mnt.join("a/hello.txt"), mnt.join("b/hard")).unwrap();
    assert_eq!(fs::metadata(mnt.join("b/hard")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(mnt.join("b/hard")).unwrap().ino(),
        fs::metadata(mnt.join("a/hello.txt")).unwrap().ino()
    );
    assert_eq!(fs::create_dir(mnt.join("a")).unwrap_err().raw_os_error(), Some(libc::EEXIST));
    assert_eq!(fs::remove_dir(mnt.join("a")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));

    // truncate down and up (sparse)
    let f = fs::OpenOptions::new().write(true).open(mnt.join("big.bin")).unwrap();
    f.set_len(1000).unwrap();
    f.set_len(5000).unwrap();
    drop(f);
    let got = fs::read(mnt.join("big.bin")).unwrap();
    assert_eq!(&got[..1000], &data[..1000]);
    assert!(got[1000..].iter().all(|&b| b == 0));
    assert_eq!(got.len(), 5000);

    // readdir
    for i in 0..300 {
        fs::write(mnt.join(format!("b/f{i:03}")), format!("{i}")).unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(mnt.join("b"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 301);
    assert_eq!(names[0], "f000");
    assert_eq!(names[300], "hard");
    let kinds: Vec<_> = fs::read_dir(mnt.join("a"))
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().into_string().unwrap(), e.file_type().unwrap().is_dir()))
        .collect();
    assert!(kinds.contains(&("c".to_string(), true)));
    assert!(kinds.contains(&("hello.txt".to_string(), false)));

    // unlink while open: still readable through the open handle
    let before = store.object_count();
    let mut f = fs::File::open(mnt.join("b/hard")).unwrap();
    fs::remove_file(mnt.join("b/hard")).unwrap();
    fs::remove_file(mnt.join("a/hello.txt")).unwrap();
    assert!(!mnt.join("a/hello.txt").exists());
    let mut s = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello, tarn\nmore\n");
    drop(f);
    // The release is asynchronous in the kernel; give it a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while store.object_count() != before - 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(store.object_count(), before - 1, "unlinked file freed after last close");

    // rmdir, statfs
    fs::remove_dir(mnt.join("a/c")).unwrap();
    let c = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_bsize, 4096);
    assert_eq!(st.f_namemax, 255);
    assert!(st.f_blocks > 0 && st.f_bavail > 0 && st.f_bavail <= st.f_blocks);
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    assert!(mounts.lines().any(|l| l.starts_with("tank/test ") && l.contains(" fuse")), "{mounts}");

    m.unmount().unwrap();
    assert!(!fs::read_to_string("/proc/mounts").unwrap().contains(mnt.to_str().unwrap()));
    // The file system is still consistent and holds what was written.
    assert_eq!(zfs.read(zfs.lookup(zfs.root(), b"big.bin").unwrap().ino, 0, 10).unwrap(), &data[..10]);
}

#[test]
fn readonly_mount_refuses_writes() {
    if !can_mount() {
        return;
    }
    let store = Arc::new(MemStore::new());
    let zfs = Fs::open(store, ZplOptions::default()).unwrap();
    let f = zfs.create(zfs.root(), b"f", 0o644, 0, 0).unwrap();
    zfs.write(f.ino, 0, b"ro").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("ro");
    let m = mount(
        Vfs::new(zfs, Arc::new(NoSnapshots), SnapDir::Hidden),
        &mnt,
        &MountOptions {
            readonly: true,
            threads: 1,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"ro");
    assert_eq!(fs::write(mnt.join("g"), b"x").unwrap_err().raw_os_error(), Some(libc::EROFS));
    m.unmount().unwrap();
}

/// The mountinfo line of `mnt`: (per-mount options, source).
fn mountinfo(mnt: &std::path::Path) -> Option<(String, String)> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = mnt.to_str().unwrap().replace(' ', "\\040");
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let dash = f.iter().position(|x| *x == "-")?;
        (f[4] == want).then(|| (f[5].to_string(), f[dash + 2].to_string()))
    })
}

/// A dataset name from a crafted pool cannot add mount options: `t,suid,dev` mounted
/// through fusermount (`auto_unmount`, as the daemon mounts) is one source name, and
/// the mount is nosuid,nodev.
#[test]
fn crafted_fsname_cannot_inject_options() {
    if !can_mount() {
        return;
    }
    if tarn_fuse::find_fusermount(std::env::var_os("PATH").as_deref()).is_none() {
        println!("skipping: fusermount is missing");
        return;
    }
    let store = Arc::new(MemStore::new());
    let zfs = Fs::open(store, ZplOptions::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let opts = MountOptions {
        fsname: "t,suid,dev".into(),
        allow_other: true,
        auto_unmount: true,
        threads: 1,
        ..Default::default()
    };
    let m = mount(Vfs::new(zfs, Arc::new(NoSnapshots), SnapDir::Hidden), &mnt, &opts).unwrap();
    let (options, source) = mountinfo(&mnt).expect("mounted");
    m.unmount().unwrap();
    let options: Vec<&str> = options.split(',').collect();
    assert!(options.contains(&"nosuid") && options.contains(&"nodev"), "{options:?}");
    assert_eq!(source, "t_suid_dev");
    assert!(mountinfo(&mnt).is_none());
}

/// `fallocate(1)` through the kernel: a punched range reads as zeros and the size
/// stays; mode 0 grows a file without writing it; what the kernel's FUSE client or
/// OpenZFS refuses (collapse, insert) fails with "Operation not supported" and changes
/// nothing. `-z` (zero range) is checked against whatever the kernel allows: it either
/// zeroes the range or is refused before reaching the file system, never half done.
#[test]
fn fallocate_through_the_kernel() {
    if !can_mount() {
        return;
    }
    if std::process::Command::new("fallocate").arg("--version").output().is_err() {
        println!("skipping: fallocate(1) (util-linux) is missing");
        return;
    }
    let (_tmp, mnt, _zfs, m) = mem_mount("tank/falloc");
    let run = |args: &[&str]| {
        let o = std::process::Command::new("fallocate").args(args).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
    };
    let f = mnt.join("f");
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8 + 1).collect();
    fs::write(&f, &data).unwrap();
    let fp = f.to_str().unwrap();

    let (ok, err) = run(&["-p", "-o", "100000", "-l", "300000", fp]);
    assert!(ok, "punch: {err}");
    let mut want = data.clone();
    want[100_000..400_000].fill(0);
    assert_eq!(fs::read(&f).unwrap(), want);
    assert_eq!(fs::metadata(&f).unwrap().len(), 1_000_000);

    let g = mnt.join("g");
    let (ok, err) = run(&["-l", "2MiB", g.to_str().unwrap()]);
    assert!(ok, "mode 0: {err}");
    assert_eq!(fs::metadata(&g).unwrap().len(), 2 << 20);
    assert!(fs::read(&g).unwrap().iter().all(|&b| b == 0));

    for flag in ["-c", "-i"] {
        let (ok, err) = run(&[flag, "-o", "0", "-l", "4096", fp]);
        assert!(!ok && err.contains("Operation not supported"), "{flag}: {err}");
    }
    let (ok, err) = run(&["-z", "-o", "500000", "-l", "10000", fp]);
    if ok {
        want[500_000..510_000].fill(0);
    } else {
        assert!(err.contains("Operation not supported"), "-z: {err}");
    }
    assert_eq!(fs::read(&f).unwrap(), want);
    drop(m);
}

/// `copy_file_range(2)` through the kernel reaches the file system and copies inside
/// it: whole files, a range into the middle of another file, a short copy at the
/// source's end; overlapping ranges of one file are refused (EINVAL), as on Linux.
#[test]
fn copy_file_range_through_the_kernel() {
    use std::os::fd::AsRawFd;
    if !can_mount() {
        return;
    }
    let (_tmp, mnt, _zfs, m) = mem_mount("tank/cfr");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    fs::write(mnt.join("src"), &data).unwrap();
    fs::write(mnt.join("dst"), vec![b'x'; 1_000_000]).unwrap();
    let src = fs::File::open(mnt.join("src")).unwrap();
    let dst = fs::OpenOptions::new().write(true).open(mnt.join("dst")).unwrap();
    let copy = |off_in: i64, off_out: i64, len: usize| -> isize {
        let (mut a, mut b) = (off_in, off_out);
        // SAFETY: both descriptors are open; the offsets are locals.
        unsafe { libc::copy_file_range(src.as_raw_fd(), &mut a, dst.as_raw_fd(), &mut b, len, 0) }
    };
    // A range into the middle of dst, then a copy that runs into src's end.
    let calls = tarn_zpl::vfs::copy_file_range_calls();
    assert_eq!(copy(100_000, 200_000, 500_000), 500_000);
    assert!(tarn_zpl::vfs::copy_file_range_calls() > calls, "the kernel copied by itself");
    let tail = copy(2_900_000, 1_500_000, 1_000_000);
    assert_eq!(tail, 100_000, "a copy stops at the source's end");
    let mut want = vec![b'x'; 1_000_000];
    want[200_000..700_000].copy_from_slice(&data[100_000..600_000]);
    want.resize(1_500_000, 0);
    want.extend_from_slice(&data[2_900_000..]);
    assert_eq!(fs::read(mnt.join("dst")).unwrap(), want);
    // The whole file, as cp does it.
    let whole = fs::OpenOptions::new().write(true).create(true).truncate(true).open(mnt.join("whole")).unwrap();
    let (mut a, mut b) = (0i64, 0i64);
    let mut copied = 0usize;
    while copied < data.len() {
        // SAFETY: as above.
        let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut a, whole.as_raw_fd(), &mut b, data.len() - copied, 0) };
        assert!(n > 0, "copy_file_range: {}", std::io::Error::last_os_error());
        copied += n as usize;
    }
    assert_eq!(fs::read(mnt.join("whole")).unwrap(), data);
    // Overlapping ranges of one file.
    let same = fs::OpenOptions::new().read(true).write(true).open(mnt.join("whole")).unwrap();
    let (mut a, mut b) = (0i64, 1000i64);
    // SAFETY: as above.
    let r = unsafe { libc::copy_file_range(same.as_raw_fd(), &mut a, same.as_raw_fd(), &mut b, 10_000, 0) };
    assert_eq!(r, -1);
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EINVAL));
    drop((src, dst, whole, same));
    // cp: --reflink=always needs FICLONE, which Linux does not pass to a FUSE file
    // system; --reflink=auto falls back to copy_file_range, served here.
    let cp = |mode: &str, to: &str| {
        let o = std::process::Command::new("cp")
            .arg(mode)
            .arg(mnt.join("src"))
            .arg(mnt.join(to))
            .output()
            .unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
    };
    let (ok, err) = cp("--reflink=always", "clone");
    assert!(!ok, "cp --reflink=always succeeded");
    assert!(err.contains("not supported") || err.contains("Invalid"), "{err}");
    let calls = tarn_zpl::vfs::copy_file_range_calls();
    let (ok, err) = cp("--reflink=auto", "copy");
    assert!(ok, "{err}");
    assert_eq!(fs::read(mnt.join("copy")).unwrap(), data);
    assert!(tarn_zpl::vfs::copy_file_range_calls() > calls, "cp did not use copy_file_range");
    drop(m);
}
