#!/usr/bin/env bash
# Tarn end-to-end demo: build, create a raidz1 pool on four file vdevs, copy a real
# directory tree (100-300 MiB) into a dataset through FUSE, export, import, check with
# diff -r that every byte came back, export again and stop the daemon.
#
# Usage: bash scripts/demo.sh [SCRATCH_DIR]        (default: ./scratch)
#
# Needs: root, /dev/fuse, the Debian package `fuse` (for fusermount; installed here if
# missing), cargo. Everything it creates lives under SCRATCH_DIR: the vdev files, the
# mountpoint, and a private daemon (TARN_SOCKET / TARN_STATE_DIR point inside it), so
# it never touches /run/tarn or /var/lib/tarn.
#
# Environment:
#   DEMO_SRC       space-separated directories to copy instead of the automatic choice
#   DEMO_MIN_MIB   least data to copy (default 100)
#   DEMO_MAX_MIB   most data to copy (default 300)
#   CARGO_TARGET_DIR   honoured when locating the built binary
set -euo pipefail

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRATCH=$(realpath -m "${1:-./scratch}")
MNT=$SCRATCH/mnt
POOL=demo
MIN_MIB=${DEMO_MIN_MIB:-100}
MAX_MIB=${DEMO_MAX_MIB:-300}

[ "$(id -u)" -eq 0 ] || die "must run as root (FUSE mounts with allow_other, vdev locks)"
[ -c /dev/fuse ] || die "/dev/fuse is missing (load the fuse module or run the container with --device /dev/fuse)"
if ! command -v fusermount >/dev/null 2>&1; then
    say "installing the Debian package 'fuse' (for fusermount)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq fuse
fi

# ---- build --------------------------------------------------------------------------
say "building tarn (bash scripts/build.sh: cargo build --release -p tarn-cli, then the static client)"
TARN=$(bash "$REPO/scripts/build.sh" | tail -n 1)
[ -x "$TARN" ] || die "built binary not found at $TARN"
[ -x "$(dirname "$TARN")/tarnd" ] || die "the engine binary tarnd was not built beside $TARN"
# scripts/build.sh links the client statically: it must have no program interpreter.
if LC_ALL=C readelf -lW "$TARN" | grep -q 'Requesting program interpreter'; then
    die "$TARN is dynamically linked; scripts/build.sh should have linked it statically"
fi

# ---- private daemon environment ------------------------------------------------------
mkdir -p "$SCRATCH"
# Keep the scratch directory out of git when it sits inside the repository.
[ -e "$SCRATCH/.gitignore" ] || printf '*\n' > "$SCRATCH/.gitignore"
export TARN_STATE_DIR=$SCRATCH/state
export TARN_SOCKET=$SCRATCH/run/tarn.sock
export TARN_CACHEFILE=$SCRATCH/state/tarn.cache
# A Unix socket path must fit in 108 bytes; fall back to a short private directory.
if [ ${#TARN_SOCKET} -gt 100 ]; then
    TARN_SOCKET=$(mktemp -d /tmp/tarn-demo.XXXXXX)/tarn.sock
fi
# The daemon makes the socket's directory itself (mode 0700: it refuses one others can enter).
mkdir -p "$TARN_STATE_DIR"
PIDFILE=$TARN_STATE_DIR/daemon.pid

tarn() { echo "+ tarn $*"; "$TARN" "$@"; }

stop_daemon() {
    local pid
    [ -f "$PIDFILE" ] || return 0
    pid=$(cat "$PIDFILE")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 300); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "demo: daemon $pid did not exit after SIGTERM" >&2
            return 1
        fi
    fi
    rm -f "$PIDFILE"
}

unmount_leftovers() {
    # Mounts left below the scratch mountpoint by an earlier, interrupted run.
    local m
    awk -v root="$MNT" '$2 == root || index($2, root "/") == 1 { print $2 }' /proc/mounts |
        sort -r | while read -r m; do
            fusermount -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done
}

on_exit() {
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo >&2
        echo "demo: FAILED (exit $rc)" >&2
        if [ -f "$TARN_STATE_DIR/daemon.log" ]; then
            echo "---- last lines of $TARN_STATE_DIR/daemon.log ----" >&2
            tail -n 30 "$TARN_STATE_DIR/daemon.log" >&2 || true
        fi
        stop_daemon || true
        unmount_leftovers
    fi
    exit $rc
}
trap on_exit EXIT

# ---- clean up what an earlier run may have left ----------------------------------------
stop_daemon
unmount_leftovers
rm -f "$SCRATCH"/d0.img "$SCRATCH"/d1.img "$SCRATCH"/d2.img "$SCRATCH"/d3.img
rm -f "$TARN_STATE_DIR/known_dirs" "$TARN_STATE_DIR/daemon.log"
if [ -d "$MNT" ]; then
    rmdir "$MNT/home" 2>/dev/null || true
    rmdir "$MNT" 2>/dev/null || die "$MNT is not empty; remove it or choose another scratch directory"
fi

# ---- choose what to copy --------------------------------------------------------------
mib_of() { du -sm "$1" 2>/dev/null | awk '{print $1}'; }
SOURCES=()
TOTAL=0
if [ -n "${DEMO_SRC:-}" ]; then
    for d in $DEMO_SRC; do
        [ -d "$d" ] || die "DEMO_SRC entry $d is not a directory"
        SOURCES+=("$d"); TOTAL=$((TOTAL + $(mib_of "$d")))
    done
else
    # Trees found on a Debian machine with Rust installed: C headers (many small files),
    # the Rust standard libraries (fewer, large files), then general fallbacks.
    SYSROOT_LIB=$(rustc --print sysroot 2>/dev/null)/lib/rustlib
    for d in /usr/include "$SYSROOT_LIB" /usr/share/locale /usr/share/doc /usr/lib/python3; do
        [ "$TOTAL" -ge "$MIN_MIB" ] && break
        [ -d "$d" ] || continue
        m=$(mib_of "$d")
        [ -n "$m" ] || continue
        [ $((TOTAL + m)) -le "$MAX_MIB" ] || continue
        SOURCES+=("$d"); TOTAL=$((TOTAL + m))
    done
fi
[ "$TOTAL" -ge "$MIN_MIB" ] || die "found only ${TOTAL} MiB to copy (need ${MIN_MIB}); set DEMO_SRC"
echo "will copy ${TOTAL} MiB from: ${SOURCES[*]}"

# ---- the demo --------------------------------------------------------------------------
cd "$SCRATCH"
say "create a raidz1 pool of four 512 MiB file vdevs"
tarn zpool create -o size=512M -m "$MNT" "$POOL" raidz1 d0.img d1.img d2.img d3.img
tarn zfs create "$POOL/home"
mountpoint -q "$MNT/home" || die "$MNT/home is not mounted after zfs create"

say "copy ${TOTAL} MiB into $MNT/home"
DESTS=()
i=0
for src in "${SOURCES[@]}"; do
    dst=$MNT/home/$i-$(basename "$src")
    DESTS+=("$dst")
    echo "+ cp -dR --preserve=mode,ownership,timestamps,links $src $dst"
    start=$(date +%s.%N)
    cp -dR --preserve=mode,ownership,timestamps,links "$src" "$dst"
    end=$(date +%s.%N)
    awk -v s="$start" -v e="$end" -v m="$(mib_of "$src")" \
        'BEGIN { t = e - s; printf "  %d MiB in %.1f s (%.1f MiB/s)\n", m, t, (t > 0 ? m / t : 0) }'
    i=$((i + 1))
done
sync -f "$MNT/home"

say "pool and datasets"
tarn zpool status "$POOL"
tarn zpool list
tarn zfs list

say "export, then import from $SCRATCH"
tarn zpool export "$POOL"
mountpoint -q "$MNT/home" && die "$MNT/home still mounted after export"
tarn zpool import -d "$SCRATCH" "$POOL"
mountpoint -q "$MNT/home" || die "$MNT/home is not mounted after import"

say "compare every file with its source (diff -r)"
for i in "${!SOURCES[@]}"; do
    echo "+ diff -r --no-dereference ${SOURCES[$i]} ${DESTS[$i]}"
    diff -r --no-dereference "${SOURCES[$i]}" "${DESTS[$i]}"
done
echo "identical"

say "status after import"
tarn zpool status "$POOL"
tarn zfs list

say "export and stop the daemon"
tarn zpool export "$POOL"
stop_daemon
echo
echo "demo: OK — ${TOTAL} MiB survived export/import on raidz1 (files in $SCRATCH)"
