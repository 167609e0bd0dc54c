//! # args — OpenZFS command-line syntax
//!
//! Theory: `zpool` and `zfs` use POSIX `getopt` with GNU permutation: single-letter
//! options, clustered (`-Hp`), an option's argument either attached (`-ofoo`) or the
//! next word (`-o foo`), options anywhere before `--`. [`getopt`] reproduces that and
//! reports the two OpenZFS errors ("invalid option 'x'", "missing argument for 'o'
//! option"), which the callers turn into usage text and exit status 2.
//!
//! The vdev grammar of `zpool create` and `zpool add` is parsed here too
//! ([`parse_vdev_words`]): a sequence of groups, each either a bare device or a type
//! word (`mirror`, `raidz`, `raidz1..3`) followed by its devices; the word `log`
//! (once) starts the separate intent-log section, where every following group is a
//! log vdev (single devices or mirrors, not raidz — OpenZFS `construct_spec`); the
//! word `spare` (once) is followed by hot spares, single devices only.
//! Nothing here touches the file system; path
//! resolution against the client's working directory is [`resolve_device`], pure too.
//! Dataset property values are checked by [`check_fs_prop`] so that bad input is refused
//! with OpenZFS wording before the pool is asked.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Options and operands after [`getopt`].
#[derive(Debug, Default, Clone)]
pub struct Parsed {
    /// Flags and their arguments in command-line order.
    pub opts: Vec<(char, Option<String>)>,
    /// Operands (everything that is not an option), in order.
    pub operands: Vec<String>,
}

impl Parsed {
    /// True when the flag was given.
    pub fn has(&self, c: char) -> bool {
        self.opts.iter().any(|(o, _)| *o == c)
    }
    /// Every argument of a repeated option (`-o a=b -o c=d`).
    pub fn all(&self, c: char) -> Vec<String> {
        self.opts.iter().filter(|(o, _)| *o == c).filter_map(|(_, a)| a.clone()).collect()
    }
    /// The last argument of an option.
    pub fn last(&self, c: char) -> Option<String> {
        self.all(c).pop()
    }
}

/// Parse `args` against `spec`, a getopt string ("fm:o:" = `-f`, `-m ARG`, `-o ARG`).
/// Errors carry the OpenZFS message.
pub fn getopt(args: &[String], spec: &str) -> Result<Parsed, String> {
    let mut parsed = Parsed::default();
    let takes_arg = |c: char| -> Option<bool> {
        let mut it = spec.chars().peekable();
        while let Some(x) = it.next() {
            let arg = it.peek() == Some(&':');
            if arg {
                it.next();
            }
            if x == c {
                return Some(arg);
            }
        }
        None
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            parsed.operands.extend(args[i + 1..].iter().cloned());
            break;
        }
        if a.len() > 1 && a.starts_with('-') {
            let chars: Vec<char> = a[1..].chars().collect();
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                match takes_arg(c) {
                    None => return Err(format!("invalid option '{c}'")),
                    Some(false) => parsed.opts.push((c, None)),
                    Some(true) => {
                        let rest: String = chars[j + 1..].iter().collect();
                        if !rest.is_empty() {
                            parsed.opts.push((c, Some(rest)));
                        } else if i + 1 < args.len() {
                            i += 1;
                            parsed.opts.push((c, Some(args[i].clone())));
                        } else {
                            return Err(format!("missing argument for '{c}' option"));
                        }
                        break;
                    }
                }
                j += 1;
            }
        } else {
            parsed.operands.push(a.clone());
        }
        i += 1;
    }
    Ok(parsed)
}

/// Split `prop=value`; error text as OpenZFS prints it.
pub fn split_prop(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((p, v)) if !p.is_empty() => Ok((p.to_string(), v.to_string())),
        _ => Err(format!("missing '=' for property=value argument '{s}'")),
    }
}

/// A top-level vdev as typed, before path resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VdevWords {
    /// A bare device.
    Leaf(String),
    /// `mirror a b ...`.
    Mirror(Vec<String>),
    /// `raidzN a b c ...`.
    Raidz(u8, Vec<String>),
}

/// Is `w` a vdev type keyword (and which)?
fn vdev_keyword(w: &str) -> Option<Result<VdevKind, String>> {
    match w {
        "mirror" => Some(Ok(VdevKind::Mirror)),
        "raidz" | "raidz1" => Some(Ok(VdevKind::Raidz(1))),
        "raidz2" => Some(Ok(VdevKind::Raidz(2))),
        "raidz3" => Some(Ok(VdevKind::Raidz(3))),
        "log" => Some(Ok(VdevKind::Log)),
        "spare" => Some(Ok(VdevKind::Spare)),
        "cache" => Some(Ok(VdevKind::Cache)),
        "special" | "dedup" => Some(Err(format!("invalid vdev specification: '{w}' vdevs are not supported yet"))),
        _ if w.starts_with("raidz") || w.starts_with("draid") => Some(Err(format!("invalid vdev specification: unknown vdev type '{w}'"))),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy)]
enum VdevKind {
    Mirror,
    Raidz(u8),
    Log,
    Spare,
    Cache,
}

/// The vdev words of `zpool create` / `zpool add`, grouped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VdevSpecWords {
    /// Normal top-level vdevs.
    pub normal: Vec<VdevWords>,
    /// Separate intent-log vdevs (after `log`).
    pub logs: Vec<VdevWords>,
    /// Hot spares (after `spare`): single devices.
    pub spares: Vec<String>,
    /// Cache devices (after `cache`, the L2ARC): single devices.
    pub caches: Vec<String>,
}

/// Parse the vdev words of `zpool create` / `zpool add` into groups, checking device
/// counts and the log section. Errors are OpenZFS's messages.
pub fn parse_vdev_words(words: &[String]) -> Result<VdevSpecWords, String> {
    if words.is_empty() {
        return Err("missing vdev specification".into());
    }
    let mut spec = VdevSpecWords::default();
    let mut seen_log = false;
    let mut seen_spare = false;
    let mut seen_cache = false;
    let mut i = 0;
    while i < words.len() {
        let out = if seen_log { &mut spec.logs } else { &mut spec.normal };
        match vdev_keyword(&words[i]) {
            Some(Err(e)) => return Err(e),
            Some(Ok(k @ (VdevKind::Spare | VdevKind::Cache))) => {
                // Both take single devices up to the next section (OpenZFS
                // `construct_spec`).
                let (word, seen, list) = match k {
                    VdevKind::Spare => ("spare", &mut seen_spare, &mut spec.spares),
                    _ => ("cache", &mut seen_cache, &mut spec.caches),
                };
                if *seen {
                    return Err(format!("invalid vdev specification: '{word}' can be specified only once"));
                }
                *seen = true;
                i += 1;
                while i < words.len() && vdev_keyword(&words[i]).is_none() {
                    list.push(words[i].clone());
                    i += 1;
                }
                if list.is_empty() {
                    return Err(format!("invalid vdev specification: {word} requires at least 1 device"));
                }
                if let Some(w) = words.get(i).filter(|w| !matches!(w.as_str(), "log" | "spare" | "cache")) {
                    return Err(format!("invalid vdev specification: unsupported '{word}' device: {w}"));
                }
            }
            Some(Ok(VdevKind::Log)) => {
                if seen_log {
                    return Err("invalid vdev specification: 'log' can be specified only once".into());
                }
                seen_log = true;
                i += 1;
            }
            Some(Ok(VdevKind::Raidz(_))) if seen_log => {
                return Err("invalid vdev specification: unsupported 'log' device: raidz".into());
            }
            Some(Ok(kind)) => {
                let type_word = words[i].clone();
                let mut devs = Vec::new();
                i += 1;
                while i < words.len() && vdev_keyword(&words[i]).is_none() {
                    devs.push(words[i].clone());
                    i += 1;
                }
                match kind {
                    VdevKind::Mirror => {
                        if devs.len() < 2 {
                            return Err("invalid vdev specification: mirror requires at least 2 devices".into());
                        }
                        out.push(VdevWords::Mirror(devs));
                    }
                    VdevKind::Raidz(p) => {
                        let min = p as usize + 1;
                        if devs.len() < min {
                            let name = if type_word == "raidz" { "raidz".to_string() } else { format!("raidz{p}") };
                            return Err(format!("invalid vdev specification: {name} requires at least {min} devices"));
                        }
                        out.push(VdevWords::Raidz(p, devs));
                    }
                    VdevKind::Log | VdevKind::Spare | VdevKind::Cache => unreachable!("handled above"),
                }
            }
            None => {
                out.push(VdevWords::Leaf(words[i].clone()));
                i += 1;
            }
        }
    }
    if seen_log && spec.logs.is_empty() {
        return Err("invalid vdev specification: log requires at least 1 device".into());
    }
    Ok(spec)
}

/// Lexically normalize a path (remove `.`, fold `..`), without touching the disk.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Resolve a device word the way OpenZFS does: absolute paths as they are; a word
/// containing '/' relative to the client's `cwd`; a bare name is `/dev/NAME`, unless
/// it does not exist there and does exist relative to `cwd` (or will be created with
/// `-o size`: `create_missing`), in which case it is a file in `cwd`.
pub fn resolve_device(word: &str, cwd: &Path, create_missing: bool) -> PathBuf {
    let p = Path::new(word);
    if p.is_absolute() {
        return normalize(p);
    }
    if word.contains('/') {
        return normalize(&cwd.join(p));
    }
    let dev = Path::new("/dev").join(word);
    if dev.exists() {
        return dev;
    }
    let local = cwd.join(word);
    if local.exists() || create_missing {
        return normalize(&local);
    }
    dev
}

/// The dataset properties the CLI knows, in `zfs get all` order.
pub const FS_PROPS: [&str; 14] = [
    "recordsize",
    "mountpoint",
    "checksum",
    "compression",
    "atime",
    "readonly",
    "snapdir",
    "canmount",
    "copies",
    "sync",
    "logbias",
    "primarycache",
    "secondarycache",
    "dedup",
];

/// Short column header of a dataset property for `zfs list -o`.
pub fn fs_prop_header(p: &str) -> String {
    match p {
        "used" => "USED".into(),
        "available" | "avail" => "AVAIL".into(),
        "referenced" | "refer" => "REFER".into(),
        "recordsize" => "RECSIZE".into(),
        "compression" => "COMPRESS".into(),
        "readonly" => "RDONLY".into(),
        "usedbysnapshots" => "USEDSNAP".into(),
        "usedbydataset" => "USEDDS".into(),
        "usedbychildren" => "USEDCHILD".into(),
        "usedbyrefreservation" => "USEDREFRESERV".into(),
        other => other.to_ascii_uppercase(),
    }
}

/// Canonical name of a property alias (`avail` → `available`, `recsize` → `recordsize`).
pub fn canonical_fs_prop(p: &str) -> &str {
    match p {
        "avail" => "available",
        "refer" => "referenced",
        "recsize" => "recordsize",
        "usedsnap" => "usedbysnapshots",
        "usedds" => "usedbydataset",
        "usedchild" => "usedbychildren",
        "usedrefreserv" => "usedbyrefreservation",
        "compress" => "compression",
        "rdonly" => "readonly",
        other => other,
    }
}

/// Check a dataset property assignment: the short name (`recsize`, `compress`, …)
/// becomes the full one and the pool layer's rules ([`tarn_spa::check_dataset_prop`],
/// the only copy) give the value to store or OpenZFS's reason.
pub fn check_fs_prop(prop: &str, value: &str) -> Result<(String, String), String> {
    let prop = if tarn_spa::is_user_prop(prop) { prop } else { canonical_fs_prop(prop) };
    tarn_spa::check_dataset_prop(prop, value).map(|v| (prop.to_string(), v))
}

/// Check every `-o prop=value` of `zfs create`.
pub fn check_fs_props(opts: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for o in opts {
        let (p, v) = split_prop(o)?;
        let (p, v) = check_fs_prop(&p, &v)?;
        if out.insert(p.clone(), v).is_some() {
            return Err(format!("property '{p}' specified multiple times"));
        }
    }
    Ok(out)
}

/// The lines of a family's usage text that describe subcommand `sub` (all of it when
/// none match), as OpenZFS prints after a usage error.
pub fn usage_of(usage: &str, sub: &str) -> String {
    let lines: Vec<&str> = usage.lines().filter(|l| l.trim_start().starts_with(sub)).collect();
    if lines.is_empty() {
        usage.to_string()
    } else {
        format!("usage:\n{}\n", lines.join("\n"))
    }
}

/// A usage error: `msg`, then the usage of `sub`; exit code 2.
pub fn bad_usage(usage: &str, sub: &str, msg: &str) -> crate::proto::Response {
    crate::proto::Response::usage(format!("{msg}\n{}", usage_of(usage, sub)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn getopt_clusters_and_arguments() {
        let p = getopt(&s(&["-fo", "ashift=9", "-osize=1G", "tank", "-m", "/mnt", "mirror", "a", "b"]), "fm:o:O:R:").unwrap();
        assert!(p.has('f'));
        assert_eq!(p.all('o'), vec!["ashift=9", "size=1G"]);
        assert_eq!(p.last('m').as_deref(), Some("/mnt"));
        assert_eq!(p.operands, s(&["tank", "mirror", "a", "b"]));
        assert_eq!(getopt(&s(&["-x"]), "f").unwrap_err(), "invalid option 'x'");
        assert_eq!(getopt(&s(&["-o"]), "o:").unwrap_err(), "missing argument for 'o' option");
        let p = getopt(&s(&["-H", "--", "-weird"]), "H").unwrap();
        assert_eq!(p.operands, s(&["-weird"]));
    }

    fn normal(w: &[&str]) -> Vec<VdevWords> {
        parse_vdev_words(&s(w)).unwrap().normal
    }

    #[test]
    fn vdev_grammar() {
        assert_eq!(
            normal(&["mirror", "a", "b", "mirror", "c", "d"]),
            vec![VdevWords::Mirror(s(&["a", "b"])), VdevWords::Mirror(s(&["c", "d"]))]
        );
        assert_eq!(normal(&["raidz2", "a", "b", "c"]), vec![VdevWords::Raidz(2, s(&["a", "b", "c"]))]);
        assert_eq!(normal(&["a", "b"]), vec![VdevWords::Leaf("a".into()), VdevWords::Leaf("b".into())]);
        assert_eq!(
            parse_vdev_words(&s(&["mirror", "a"])).unwrap_err(),
            "invalid vdev specification: mirror requires at least 2 devices"
        );
        assert_eq!(
            parse_vdev_words(&s(&["raidz2", "a", "b"])).unwrap_err(),
            "invalid vdev specification: raidz2 requires at least 3 devices"
        );
        assert_eq!(
            parse_vdev_words(&s(&["raidz", "a"])).unwrap_err(),
            "invalid vdev specification: raidz requires at least 2 devices"
        );
        assert_eq!(
            parse_vdev_words(&s(&["raidz4", "a", "b", "c", "d", "e"])).unwrap_err(),
            "invalid vdev specification: unknown vdev type 'raidz4'"
        );
        assert!(parse_vdev_words(&[]).is_err());
    }

    #[test]
    fn log_section_grammar() {
        let g = parse_vdev_words(&s(&["mirror", "a", "b", "log", "e", "mirror", "c", "d", "mirror", "f", "g", "h"])).unwrap();
        assert_eq!(g.normal, vec![VdevWords::Mirror(s(&["a", "b"]))]);
        assert_eq!(
            g.logs,
            vec![
                VdevWords::Leaf("e".into()),
                VdevWords::Mirror(s(&["c", "d"])),
                VdevWords::Mirror(s(&["f", "g", "h"]))
            ]
        );
        // `log a b`: two striped log vdevs; `zpool add pool log x`: logs only.
        let g = parse_vdev_words(&s(&["log", "a", "b"])).unwrap();
        assert!(g.normal.is_empty());
        assert_eq!(g.logs, vec![VdevWords::Leaf("a".into()), VdevWords::Leaf("b".into())]);
        assert_eq!(
            parse_vdev_words(&s(&["a", "log"])).unwrap_err(),
            "invalid vdev specification: log requires at least 1 device"
        );
        assert_eq!(
            parse_vdev_words(&s(&["a", "log", "raidz", "b", "c"])).unwrap_err(),
            "invalid vdev specification: unsupported 'log' device: raidz"
        );
        assert_eq!(
            parse_vdev_words(&s(&["a", "log", "b", "log", "c"])).unwrap_err(),
            "invalid vdev specification: 'log' can be specified only once"
        );
        assert_eq!(
            parse_vdev_words(&s(&["a", "log", "mirror", "b"])).unwrap_err(),
            "invalid vdev specification: mirror requires at least 2 devices"
        );
        // A mirror's device list ends at the next keyword, `log` included.
        let g = parse_vdev_words(&s(&["mirror", "a", "b", "log", "c"])).unwrap();
        assert_eq!((g.normal.len(), g.logs.len()), (1, 1));
    }

    #[test]
    fn spare_section_grammar() {
        let g = parse_vdev_words(&s(&["mirror", "a", "b", "spare", "c", "d", "log", "e"])).unwrap();
        assert_eq!((g.normal.len(), g.logs.len(), g.spares.clone()), (1, 1, s(&["c", "d"])));
        let g = parse_vdev_words(&s(&["a", "log", "b", "spare", "c"])).unwrap();
        assert_eq!((g.logs.len(), g.spares.clone()), (1, s(&["c"])));
        let g = parse_vdev_words(&s(&["spare", "c"])).unwrap();
        assert!(g.normal.is_empty() && g.spares == s(&["c"]));
        assert_eq!(
            parse_vdev_words(&s(&["a", "spare"])).unwrap_err(),
            "invalid vdev specification: spare requires at least 1 device"
        );
        assert_eq!(
            parse_vdev_words(&s(&["a", "spare", "b", "mirror", "c", "d"])).unwrap_err(),
            "invalid vdev specification: unsupported 'spare' device: mirror"
        );
    }

    #[test]
    fn cache_section_grammar() {
        let g = parse_vdev_words(&s(&["mirror", "a", "b", "cache", "c", "d", "spare", "e", "log", "f"])).unwrap();
        assert_eq!(
            (g.normal.len(), g.logs.len(), g.spares.clone(), g.caches.clone()),
            (1, 1, s(&["e"]), s(&["c", "d"]))
        );
        let g = parse_vdev_words(&s(&["cache", "c"])).unwrap();
        assert!(g.normal.is_empty() && g.caches == s(&["c"]));
        assert_eq!(
            parse_vdev_words(&s(&["a", "cache"])).unwrap_err(),
            "invalid vdev specification: cache requires at least 1 device"
        );
        assert_eq!(
            parse_vdev_words(&s(&["a", "cache", "b", "cache", "c"])).unwrap_err(),
            "invalid vdev specification: 'cache' can be specified only once"
        );
        assert_eq!(
            parse_vdev_words(&s(&["a", "cache", "b", "mirror", "c", "d"])).unwrap_err(),
            "invalid vdev specification: unsupported 'cache' device: mirror"
        );
    }

    #[test]
    fn device_resolution() {
        let cwd = Path::new("/work/x");
        assert_eq!(resolve_device("/srv/a", cwd, false), PathBuf::from("/srv/a"));
        assert_eq!(resolve_device("./v/a", cwd, false), PathBuf::from("/work/x/v/a"));
        assert_eq!(resolve_device("../v/./a", cwd, false), PathBuf::from("/work/v/a"));
        assert_eq!(resolve_device("null", cwd, false), PathBuf::from("/dev/null"));
        assert_eq!(resolve_device("nosuchdisk-xyz", cwd, false), PathBuf::from("/dev/nosuchdisk-xyz"));
        assert_eq!(resolve_device("nosuchdisk-xyz", cwd, true), PathBuf::from("/work/x/nosuchdisk-xyz"));
    }

    #[test]
    fn fs_prop_checks() {
        assert_eq!(check_fs_prop("recordsize", "131072").unwrap().1, "128K");
        assert_eq!(check_fs_prop("recsize", "512").unwrap(), ("recordsize".into(), "512".into()));
        assert!(check_fs_prop("recordsize", "3K").is_err());
        assert!(check_fs_prop("recordsize", "2M").is_err());
        assert_eq!(check_fs_prop("atime", "yes").unwrap_err(), "'atime' must be one of 'on | off'");
        assert_eq!(check_fs_prop("mountpoint", "/a/./b/").unwrap().1, "/a/b");
        assert!(check_fs_prop("mountpoint", "rel").is_err());
        assert_eq!(
            check_fs_prop("mountpoint", "/a/../b").unwrap_err(),
            "'mountpoint' must not contain '..' components"
        );
        assert_eq!(check_fs_prop("mountpoint", "/..").unwrap_err(), "'mountpoint' must not contain '..' components");
        assert_eq!(check_fs_prop("mountpoint", "/a/..b").unwrap().1, "/a/..b");
        assert_eq!(check_fs_prop("compression", "on").unwrap().1, "on");
        assert_eq!(check_fs_prop("canmount", "noauto").unwrap().1, "noauto");
        assert_eq!(check_fs_prop("snapdir", "visible").unwrap().1, "visible");
        assert_eq!(check_fs_prop("snapdir", "bogus").unwrap_err(), "'snapdir' must be one of 'hidden | visible'");
        assert_eq!(check_fs_prop("foo", "bar").unwrap_err(), "invalid property 'foo'");
        assert_eq!(check_fs_prop("used", "1").unwrap_err(), "'used' is readonly");
        assert!(check_fs_props(&s(&["atime=off", "atime=on"])).is_err());
        assert!(check_fs_props(&s(&["atime"])).is_err());
    }
}
