//! End-to-end: user properties (zfsprops(7) "User Properties"; OpenZFS suite area
//! cli_root/zfs_set user_property_*): `zfs set/get/inherit/list` of `module:name`
//! properties on file systems and snapshots, `zfs create/clone/snapshot -o`, carried
//! by `zfs send -p` into `zfs recv`, refused with OpenZFS's words when the name or
//! value breaks the rules, and kept across export/import.

mod common;
use common::*;

fn get(env: &Env, prop: &str, ds: &str) -> (String, String) {
    let out = env.zfs(&["get", "-H", "-o", "value,source", prop, ds]).ok().stdout;
    let mut f = out.trim_end().split('\t');
    (f.next().unwrap_or("").to_string(), f.next().unwrap_or("").to_string())
}

fn pair(v: &str, s: &str) -> (String, String) {
    (v.to_string(), s.to_string())
}

#[test]
fn user_properties() {
    let env = Env::new();
    env.zpool(&["create", "-O", "canmount=off", "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "-u", "-o", "com.example:owner=alice", "tank/fs"]).ok();
    env.zfs(&["create", "-u", "tank/fs/kid"]).ok();
    // Local on the parent, inherited by the child, "-" where set nowhere.
    assert_eq!(get(&env, "com.example:owner", "tank/fs"), pair("alice", "local"));
    assert_eq!(get(&env, "com.example:owner", "tank/fs/kid"), pair("alice", "inherited from tank/fs"));
    assert_eq!(get(&env, "com.example:owner", "tank"), pair("-", "-"));
    // Any string is a value, spaces and '=' included.
    env.zfs(&["set", "org.backup:note=weekly run = yes", "tank/fs/kid"]).ok();
    assert_eq!(get(&env, "org.backup:note", "tank/fs/kid"), pair("weekly run = yes", "local"));
    // `zfs list -o` shows them as columns; `get all` lists them after the native ones.
    let out = env.zfs(&["list", "-H", "-r", "-o", "name,com.example:owner", "tank"]).ok().stdout;
    assert_eq!(out, "tank\t-\ntank/fs\talice\ntank/fs/kid\talice\n");
    let all = env.zfs(&["get", "-H", "-o", "property", "all", "tank/fs/kid"]).ok().stdout;
    let props: Vec<&str> = all.lines().collect();
    let first_user = props.iter().position(|p| p.contains(':')).expect("user properties in get all");
    assert!(props[first_user..].iter().all(|p| p.contains(':')), "{all}");
    assert!(props.contains(&"org.backup:note") && props.contains(&"com.example:owner"), "{all}");

    // Snapshots: taken with -o, set and inherited (from their file system) too.
    env.zfs(&["snapshot", "-o", "com.example:tier=gold", "tank/fs@s1"]).ok();
    assert_eq!(get(&env, "com.example:tier", "tank/fs@s1"), pair("gold", "local"));
    assert_eq!(get(&env, "com.example:owner", "tank/fs@s1"), pair("alice", "inherited from tank/fs"));
    env.zfs(&["set", "com.example:tier=silver", "tank/fs@s1"]).ok();
    assert_eq!(get(&env, "com.example:tier", "tank/fs@s1"), pair("silver", "local"));
    env.zfs(&["inherit", "com.example:tier", "tank/fs@s1"]).ok();
    assert_eq!(get(&env, "com.example:tier", "tank/fs@s1"), pair("-", "-"));
    // A clone starts with the -o properties given to it.
    env.zfs(&["clone", "-o", "com.example:role=scratch", "tank/fs@s1", "tank/c"]).ok();
    assert_eq!(get(&env, "com.example:role", "tank/c"), pair("scratch", "local"));

    // Refusals, each changing nothing.
    let before = env.zfs(&["get", "-H", "all", "tank/fs"]).ok().stdout;
    env.zfs(&["set", "Com.Example:x=1", "tank/fs"]).fails_with("invalid property 'Com.Example:x'");
    let long_name = format!("a:{}", "b".repeat(300));
    env.zfs(&["set", &format!("{long_name}=1"), "tank/fs"])
        .fails_with(&format!("property name '{long_name}' is too long"));
    let long_value = "v".repeat(9000);
    env.zfs(&["set", &format!("com.example:big={long_value}"), "tank/fs"]).fails_with("is too long");
    env.zfs(&["set", "compression=lz4", "tank/fs@s1"])
        .fails_with("cannot set property for 'tank/fs@s1': this property can not be modified for snapshots");
    env.zfs(&["snapshot", "-o", "compression=lz4", "tank/fs@s2"])
        .fails_with("cannot create snapshot 'tank/fs@s2': this property can not be modified for snapshots");
    assert_eq!(env.zfs(&["get", "-H", "all", "tank/fs"]).ok().stdout, before);
    env.zfs(&["list", "tank/fs@s2"]).fails_with("dataset does not exist");

    // inherit removes the local value; the child falls back to its parent's.
    env.zfs(&["inherit", "org.backup:note", "tank/fs/kid"]).ok();
    assert_eq!(get(&env, "org.backup:note", "tank/fs/kid"), pair("-", "-"));
    env.zfs(&["inherit", "-r", "com.example:owner", "tank/fs"]).ok();
    assert_eq!(get(&env, "com.example:owner", "tank/fs/kid"), pair("-", "-"));

    // Kept across export/import.
    env.zfs(&["set", "com.example:owner=bob", "tank/fs"]).ok();
    env.zfs(&["set", "com.example:tier=bronze", "tank/fs@s1"]).ok();
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-N", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    assert_eq!(get(&env, "com.example:owner", "tank/fs"), pair("bob", "local"));
    assert_eq!(get(&env, "com.example:tier", "tank/fs@s1"), pair("bronze", "local"));

    // send -p carries local user properties (received values on the other side);
    // recv -x leaves one out.
    env.zfs(&["snapshot", "tank/fs@s3"]).ok();
    let stream = env.path().join("s.stream");
    let mut c = env.command(&["zfs", "send", "-p", "tank/fs@s3"]);
    c.stdout(std::fs::File::create(&stream).unwrap());
    run(c).ok();
    env.with_stdin(&["zfs", "recv", "-u", "tank/copy"], &stream).ok();
    assert_eq!(get(&env, "com.example:owner", "tank/copy"), pair("bob", "received"));
    env.with_stdin(&["zfs", "recv", "-u", "-x", "com.example:owner", "tank/copy2"], &stream).ok();
    assert_eq!(get(&env, "com.example:owner", "tank/copy2"), pair("-", "-"));
}
