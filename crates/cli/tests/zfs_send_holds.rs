//! End-to-end: `zfs send` holds the snapshot it reads (a temporary hold, tag
//! `.send-PID-N`, as OpenZFS's send does) until the stream ends, so a destroy in the
//! middle is refused with "dataset is busy" instead of freeing blocks the stream still
//! has to read; once the stream is drained the hold is gone, the stream is whole and
//! the snapshot can be destroyed. Skipped, with a message, when FUSE is not usable.

mod common;
use common::*;
use std::io::Read;
use std::process::Stdio;

/// `tank/fs@a` holding `fs/big`: several MiB that do not compress, far more than a
/// pipe holds. Returns the mountpoint and the file's bytes.
fn snapshot_of_big_file(env: &Env) -> (std::path::PathBuf, Vec<u8>) {
    let m = env.mounted_pool(&[]);
    env.zfs(&["create", "tank/fs"]).ok();
    let data: Vec<u8> = (0..6_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    std::fs::write(m.join("fs/big"), &data).unwrap();
    env.zfs(&["snapshot", "tank/fs@a"]).ok();
    (m, data)
}

#[test]
fn send_holds_its_snapshot_until_the_stream_ends() {
    if !fuse_usable("send_holds_its_snapshot_until_the_stream_ends") {
        return;
    }
    let env = Env::new();
    let (m, data) = snapshot_of_big_file(&env);

    // A send whose reader does not read yet: the daemon blocks on the full pipe.
    let mut c = env.command(&["zfs", "send", "tank/fs@a"]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut tags = String::new();
    for _ in 0..100 {
        tags = env.zfs(&["holds", "-H", "tank/fs@a"]).ok().stdout;
        if tags.contains(".send-") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(tags.contains("tank/fs@a\t.send-"), "no temporary hold while sending: {tags:?}");
    assert_eq!(env.zfs(&["get", "-H", "-o", "value", "userrefs", "tank/fs@a"]).ok().stdout, "1\n");
    env.zfs(&["destroy", "tank/fs@a"]).fails_with("dataset is busy");

    // Drain: the stream is complete and the hold is released.
    let mut stream = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut stream).unwrap();
    assert!(child.wait().unwrap().success());
    let mut tags = String::new();
    for _ in 0..100 {
        tags = env.zfs(&["holds", "-H", "tank/fs@a"]).ok().stdout;
        if tags.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(tags, "", "the temporary hold outlived the send");
    let file = env.path().join("a.stream");
    std::fs::write(&file, &stream).unwrap();
    env.with_stdin(&["zfs", "recv", "tank/copy"], &file).ok();
    assert_eq!(std::fs::read(m.join("copy/big")).unwrap(), data);
    env.zfs(&["destroy", "tank/fs@a"]).ok();
    env.zpool(&["export", "tank"]).ok();
}

/// `zfs send -v`: the estimate lines first, then OpenZFS's progress table on standard
/// error (`TIME SENT SNAPSHOT name`, then `HH:MM:SS  bytes  name` about once a second
/// while the stream moves), the stream itself unchanged on standard output.
#[test]
fn send_verbose_prints_estimate_and_progress() {
    if !fuse_usable("send_verbose_prints_estimate_and_progress") {
        return;
    }
    let env = Env::new();
    let (m, data) = snapshot_of_big_file(&env);
    let mut c = env.command(&["zfs", "send", "-v", "tank/fs@a"]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    // Hold the pipe full for a while, so the sender is still sending a second later.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut stream = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut stream).unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(child.wait().unwrap().success(), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines[0].starts_with("full send of tank/fs@a estimated size is "), "{err}");
    assert!(lines[1].starts_with("total estimated size is "), "{err}");
    assert_eq!(lines[2], "TIME        SENT   SNAPSHOT tank/fs@a", "{err}");
    let progress: Vec<&&str> = lines[3..].iter().filter(|l| l.ends_with("tank/fs@a")).collect();
    assert!(!progress.is_empty(), "no progress line: {err}");
    for l in progress {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f.len(), 3, "{l}");
        assert_eq!(f[0].len(), 8, "time as HH:MM:SS: {l}");
        assert_eq!(f[0].matches(':').count(), 2, "{l}");
    }
    // The stream is whole: it is received into an identical file.
    let file = env.path().join("a.stream");
    std::fs::write(&file, &stream).unwrap();
    env.with_stdin(&["zfs", "recv", "tank/copy"], &file).ok();
    assert_eq!(std::fs::read(m.join("copy/big")).unwrap(), data);
    env.zpool(&["export", "tank"]).ok();
}
