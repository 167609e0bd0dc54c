//! End-to-end: `tarn zfs diff` (OpenZFS suite area cli_root/zfs_diff): files added,
//! removed, modified and renamed through the FUSE mount between two snapshots, and
//! between a snapshot and the live file system, in OpenZFS's output format (`-F`,
//! `-H`, `-t`). Skipped, with a message, when FUSE is not usable here.

mod common;
use common::*;

#[test]
fn diff_between_snapshots_and_live() {
    if !fuse_usable("diff_between_snapshots_and_live") {
        return;
    }
    let env = Env::new();
    let m = env.path().join("mnt");
    let ms = m.display().to_string();
    env.zpool(&["create", "-m", &ms, "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "tank/fs"]).ok();
    let fs = m.join("fs");
    std::fs::create_dir(fs.join("dir")).unwrap();
    std::fs::write(fs.join("dir/keep"), b"same").unwrap();
    std::fs::write(fs.join("change"), b"v1").unwrap();
    std::fs::write(fs.join("gone"), b"bye").unwrap();
    std::fs::write(fs.join("old name"), b"moves").unwrap();
    env.zfs(&["snapshot", "tank/fs@a"]).ok();
    std::fs::write(fs.join("change"), b"v2, longer").unwrap();
    std::fs::remove_file(fs.join("gone")).unwrap();
    std::fs::rename(fs.join("old name"), fs.join("dir/new")).unwrap();
    std::fs::write(fs.join("added"), b"hi").unwrap();
    env.zfs(&["snapshot", "tank/fs@b"]).ok();

    let out = env.zfs(&["diff", "tank/fs@a", "tank/fs@b"]).ok().stdout;
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    let want = [
        format!("+\t{ms}/fs/added"),
        format!("-\t{ms}/fs/gone"),
        format!("M\t{ms}/fs/"),
        format!("M\t{ms}/fs/change"),
        format!("M\t{ms}/fs/dir"),
        format!("R\t{ms}/fs/old\\0040name -> {ms}/fs/dir/new"),
    ];
    let mut want: Vec<&str> = want.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(lines, want, "{out}");
    // Unchanged files never show up.
    assert!(!out.contains("keep"), "{out}");
    // -F adds the type, -H a tab for renames; -t the change time first.
    let f = env.zfs(&["diff", "-FH", "tank/fs@a", "@b"]).ok().stdout;
    assert!(f.contains(&format!("+\tF\t{ms}/fs/added\n")), "{f}");
    assert!(f.contains(&format!("M\t/\t{ms}/fs/dir\n")), "{f}");
    assert!(f.contains(&format!("R\tF\t{ms}/fs/old\\0040name\t{ms}/fs/dir/new\n")), "{f}");
    let t = env.zfs(&["diff", "-t", "tank/fs@a", "tank/fs@b"]).ok().stdout;
    let first = t.lines().next().unwrap();
    let (stamp, rest) = first.split_once('\t').unwrap();
    assert!(stamp.contains('.') && stamp.replace('.', "").chars().all(|c| c.is_ascii_digit()), "{first}");
    assert!(rest.starts_with(['M', '+', '-', 'R']), "{first}");
    // Against the live file system (the default second operand).
    std::fs::write(fs.join("later"), b"after b").unwrap();
    let live = env.zfs(&["diff", "tank/fs@b"]).ok().stdout;
    assert!(live.contains(&format!("+\t{ms}/fs/later\n")), "{live}");
    assert!(!live.contains("added"), "{live}");
    // Bad operands.
    env.zfs(&["diff", "tank/fs"]).fails_with("Badly formed snapshot name tank/fs");
    env.zfs(&["diff", "tank/fs@b", "tank/fs@a"]).fails_with("is not an earlier snapshot");
    env.zfs(&["diff", "tank/fs@nope"]).fails_with("dataset does not exist");
    env.zfs(&["diff", "-x", "tank/fs@a"]).fails_with("invalid option 'x'");
}
