#!/usr/bin/env bash
# contrib/systemd/test-under-systemd.sh — run the shipped units under a real systemd.
#
#   bash contrib/systemd/test-under-systemd.sh [--tarn PATH]     (root; default target/release/tarn, with tarnd beside it)
#
# systemd runs as PID 1 of its own PID, mount and cgroup namespaces (a private /run
# and /tmp, its own name=systemd cgroup hierarchy, every unit the default dependencies
# would start masked, /etc/systemd/system holding only tarn.service,
# tarn-import.service and a target), with the tarn binary bind-mounted at the units'
# /usr/local/bin/tarn and private /var/lib/tarn and /etc/tarn, so nothing of the host's
# changes. Then, through `systemctl` inside:
#   1. `systemctl start tarn` returns only after the daemon sent READY=1 (Type=notify);
#      a pool is made on file leaves, a file system mounted and a file written;
#   2. the daemon is killed with SIGKILL: systemd restarts it (Restart=on-failure) and
#      the pool, its mount and the file are back with no tarn command typed;
#   3. `systemctl stop tarn` exports the pool (unmounted, cachefile kept);
#      `systemctl start tarn` imports and mounts it again;
#   4. the pool is exported by hand (`zpool export`, which drops it from the
#      cachefile); `systemctl start tarn-import` (zpool import -a -N, zfs mount -a)
#      finds it by scanning and mounts it.
# Each step prints PASS or FAIL; the exit status is the number of failures.
# Needs systemd (Debian's `systemd` package) and util-linux's unshare and nsenter.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TARN=$here/../../target/release/tarn
while [ $# -gt 0 ]; do
    case $1 in
        --tarn) TARN=$2; shift 2 ;;
        *) echo "usage: bash contrib/systemd/test-under-systemd.sh [--tarn PATH]" >&2; exit 2 ;;
    esac
done
TARN=$(readlink -f "$TARN")
[ "$(id -u)" -eq 0 ] || { echo "needs root" >&2; exit 2; }
[ -x "$TARN" ] || { echo "no tarn binary at $TARN (cargo build --release -p tarn-cli --features fuse)" >&2; exit 2; }
TARND=$(dirname "$TARN")/tarnd
[ -x "$TARND" ] || { echo "no tarnd (the engine) beside $TARN (cargo build --release -p tarn-cli --features fuse)" >&2; exit 2; }
[ -x /lib/systemd/systemd ] || { echo "systemd is missing: apt-get install systemd" >&2; exit 2; }
placeholders=()
for f in /usr/local/bin/tarn /usr/local/bin/tarnd; do [ -e "$f" ] || placeholders+=("$f"); done
W=$(mktemp -d /var/tmp/tarn-systemd.XXXXXX)
mkdir -p "$W/units" "$W/state" "$W/etc" "$W/vdevs" "$W/mnt"
cp "$here/tarn.service" "$here/tarn-import.service" "$W/units/"
# Drop-ins (the shipped units unchanged): the daemon's and the import's output to files.
for u in tarn tarn-import; do
    mkdir -p "$W/units/$u.service.d"
    printf '[Service]\nStandardOutput=append:%s\nStandardError=append:%s\n' "$W/$u.log" "$W/$u.log" > "$W/units/$u.service.d/log.conf"
done
# Mask what the units' default dependencies would pull in (sysinit.target's
# tmpfiles would empty the host's /tmp, sysctl would reapply the host's settings, udev
# settle would wait for devices): only the Tarn units may run here.
for d in sysinit basic sockets timers paths local-fs remote-fs multi-user; do
    for f in /usr/lib/systemd/system/$d.target.wants/* /lib/systemd/system/$d.target.wants/*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        ln -sf /dev/null "$W/units/$(basename "$f")"
    done
done
for u in systemd-udev-settle.service systemd-remount-fs.service; do ln -sf /dev/null "$W/units/$u"; done
cat > "$W/units/tarn-test.target" <<'UNIT'
[Unit]
Description=Target of the Tarn unit test (nothing started by default)
UNIT

# The namespace's init script: private mounts, then systemd as PID 1.
cat > "$W/init.sh" <<INIT
#!/bin/bash
set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /sys/fs/cgroup
mkdir -p /sys/fs/cgroup/systemd
mount -t cgroup -o none,name=systemd,xattr cgroup /sys/fs/cgroup/systemd
mount --bind "$W/units" /etc/systemd/system
mkdir -p /var/lib/tarn /etc/tarn
mount --bind "$W/state" /var/lib/tarn
mount --bind "$W/etc" /etc/tarn
mount --bind "$TARN" /usr/local/bin/tarn 2>/dev/null || { touch /usr/local/bin/tarn; mount --bind "$TARN" /usr/local/bin/tarn; }
mount --bind "$TARND" /usr/local/bin/tarnd 2>/dev/null || { touch /usr/local/bin/tarnd; mount --bind "$TARND" /usr/local/bin/tarnd; }
exec /lib/systemd/systemd --system --unit=tarn-test.target --log-target=kmsg --log-level=info
INIT
chmod +x "$W/init.sh"

cg=/sys/fs/cgroup/systemd/tarn-systemd-test.$$
mkdir -p "$cg"
( echo "$BASHPID" > "$cg/cgroup.procs"; exec unshare --pid --fork --mount --cgroup --uts --ipc --mount-proc "$W/init.sh" ) &
launcher=$!
SD=""
for _ in $(seq 1 100); do
    SD=$(pgrep -f -n -- "--unit=tarn-test.target" || true)
    [ -n "$SD" ] && nsenter -t "$SD" -m -p systemctl is-system-running >/dev/null 2>&1 && break
    sleep 0.2
done
fails=0
pass() { echo "PASS $*"; }
fail() {
    echo "FAIL $*"; fails=$((fails + 1))
    "${IN[@]}" systemctl status --no-pager tarn.service tarn-import.service 2>&1 | sed 's/^/    /' | head -n 30
    "${IN[@]}" grep -h "$W" /proc/self/mounts | sed 's/^/    mount: /'
    tail -n 15 "$W"/tarn*.log 2>/dev/null | sed 's/^/    /'
}
IN=(nsenter -t "$SD" -m -p)
T=(env TARN_SOCKET=/run/tarn/tarn.sock TARN_STATE_DIR=/var/lib/tarn TARN_CACHEFILE=/etc/tarn/tarn.cache /usr/local/bin/tarn)
cleanup() {
    "${IN[@]}" systemctl stop tarn.service >/dev/null 2>&1 || true
    # The empty files init.sh made as bind targets, if they were not there before.
    for f in "${placeholders[@]}"; do [ -f "$f" ] && [ ! -s "$f" ] && rm -f "$f"; done
    [ -n "$SD" ] && kill -KILL "$SD" 2>/dev/null
    wait "$launcher" 2>/dev/null
    rmdir "$cg" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
[ -n "$SD" ] || { echo "FAIL systemd did not come up"; exit 1; }
echo "systemd $("${IN[@]}" systemctl --version | head -n 1 | cut -d' ' -f2) is PID 1 of its namespace (host pid $SD)"
active() { [ "$("${IN[@]}" systemctl is-active "$1")" = active ]; }
mounted_with_file() { "${IN[@]}" sh -c "mountpoint -q $W/mnt/fs && cmp -s $W/mnt/fs/data $W/data"; }

# 1. Type=notify start, pool, mount, file.
head -c 3M /dev/urandom > "$W/data"
if "${IN[@]}" systemctl start tarn.service && active tarn.service; then pass "systemctl start tarn: active after READY=1"; else fail "systemctl start tarn"; fi
"${IN[@]}" "${T[@]}" zpool create -o size=256M -m "$W/mnt" tank mirror "$W/vdevs/a.img" "$W/vdevs/b.img"
"${IN[@]}" "${T[@]}" zfs create tank/fs
# sync(1) of a file fsyncs it (a plain sync never reaches a FUSE daemon: the
# kernel sends FUSE_SYNCFS only to virtiofs).
"${IN[@]}" sh -c "cp $W/data $W/mnt/fs/data && sync $W/mnt/fs/data"
if mounted_with_file; then pass "pool made, tank/fs mounted, file written"; else fail "pool/mount/file setup"; fi

# 2. SIGKILL: systemd restarts the daemon, which imports from the cachefile and mounts.
old=$("${IN[@]}" systemctl show -p MainPID --value tarn.service)
"${IN[@]}" systemctl kill -s KILL tarn.service
for _ in $(seq 1 150); do
    new=$("${IN[@]}" systemctl show -p MainPID --value tarn.service)
    if [ "$new" != 0 ] && [ "$new" != "$old" ] && active tarn.service && mounted_with_file; then break; fi
    sleep 0.2
done
if [ "$new" != "$old" ] && active tarn.service && mounted_with_file; then
    pass "kill -9: restarted by systemd (pid $old -> $new), pool imported and mounted, file intact, no command typed"
else
    fail "kill -9 recovery (pid $old -> $new, state $("${IN[@]}" systemctl is-active tarn.service))"
fi

# 3. stop exports (cachefile kept), start brings the pool back.
"${IN[@]}" systemctl stop tarn.service
if ! "${IN[@]}" mountpoint -q "$W/mnt/fs" && [ -s "$W/etc/tarn.cache" ]; then pass "systemctl stop: unmounted, cachefile kept"; else fail "systemctl stop"; fi
"${IN[@]}" systemctl start tarn.service
if active tarn.service && mounted_with_file; then pass "systemctl start: pool imported from the cachefile and mounted"; else fail "start after stop"; fi

# 4. A pool exported by hand is found by tarn-import.service's scan.
"${IN[@]}" "${T[@]}" zpool export tank
if "${IN[@]}" "${T[@]}" zpool list tank >/dev/null 2>&1; then fail "zpool export"; fi
# tarn-import scans /dev by default; point it at the leaves' directory for this test.
sed -i "s|zpool import -a -N|zpool import -d $W/vdevs -a -N|" "$W/units/tarn-import.service"
"${IN[@]}" systemctl daemon-reload
if "${IN[@]}" systemctl start tarn-import.service && mounted_with_file; then pass "tarn-import.service: exported pool found by scan, imported, mounted"; else fail "tarn-import.service"; fi
"${IN[@]}" "${T[@]}" zpool status tank | sed -n '1,12p'
echo "services that ran:"; "${IN[@]}" systemctl list-units --type=service --state=active,activating,failed --no-legend --plain | sed 's/^/    /'
echo "failures: $fails"
exit "$fails"
