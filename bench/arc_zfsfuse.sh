#!/usr/bin/env bash
# Random 8 KiB reads from the ARC, Tarn against zfs-fuse (issue 14): the same pool
# shape on the same backing files, the same working set, small enough for both ARCs,
# warmed by one pass, then fio random reads for --runtime seconds on each, in one run.
# No latency injection (zfs-fuse has none); the backing files sit in the host's page
# cache anyway, and after the warm pass every read should be an ARC hit, so this
# measures each system's hit path: FUSE, the file system layer, the ARC lookup.
#
# Usage: bash bench/arc_zfsfuse.sh [--set 512M] [--arc-max 1G] [--runtime 20]
#                                  [--jobs 1,4] [--workdir DIR]
#
# Pool: a 2-way mirror of two sparse files (--workdir/a.img, b.img, 2 x --set + 1G
# each), one file system with recordsize=8K, compression=off, atime=off, the working
# set one file of --set bytes from /dev/urandom (the same bytes on both, kept in
# --workdir/set.dat while the script runs). Tarn first: its own daemon (TARN_SOCKET,
# TARN_STATE_DIR, TARN_CACHEFILE under --workdir), `arc_max` --arc-max, mounted
# through FUSE; then the pool is destroyed, the files made again, and Debian's
# zfs-fuse (pool version 23) gets them, started with `--max-arc-size` --arc-max in a
# private mount namespace (`unshare --mount`; pools with cachefile=none), everything
# that touches its mount run inside through nsenter. zfs-fuse allows one daemon per
# host: the script refuses to run beside another.
# Warm: one sequential pass, fio rw=read bs=1M direct=1. Measure, per --jobs entry N:
# fio rw=randread bs=8k direct=1 ioengine=psync numjobs=N, --runtime seconds (IOPS).
# direct=1: FUSE would otherwise serve re-reads from the kernel's page cache. For Tarn
# the ARC's hit ratio over the measured part is printed too (`tarn kstat arcstats`),
# for zfs-fuse (no arcstats) the pool's read operations per second during it (`zpool
# iostat POOL RUNTIME 2`, its second report).
#
# Needs root (FUSE, namespaces), fio and zfs-fuse (installed with apt-get when
# missing). Builds tarn with `cargo build --release -p tarn-cli` unless TARN_BIN
# names a binary. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
SET=512M
ARC_MAX=1G
RUNTIME=20
JOBS=1,4
WORK=${BENCH_DIR:-/var/tmp/bench-arc-zfsfuse}

usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case $1 in
        --set) SET=$2; shift 2 ;;
        --arc-max) ARC_MAX=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown option $1" >&2; usage 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root (FUSE mounts, mount namespace)"
has fio || apt_install fio
has zfs-fuse || apt_install zfs-fuse
pgrep -x zfs-fuse >/dev/null && die "zfs-fuse is already running on this host; it allows one daemon per host"

bytes() { numfmt --from=iec "$1"; }
SET_BYTES=$(bytes "$SET")
ARC_BYTES=$(bytes "$ARC_MAX")
[ "$SET_BYTES" -lt "$ARC_BYTES" ] || die "--set ($SET) must fit in --arc-max ($ARC_MAX)"
LEAF_BYTES=$((2 * SET_BYTES + (1 << 30)))

find_tarn
export TARN_SOCKET=$WORK/run/tarn.sock TARN_STATE_DIR=$WORK/state TARN_CACHEFILE=$WORK/tarn.cache
ZNS=""; ZPID=""
teardown() {
    set +e
    "$TARN" zpool destroy -f tarnarc >/dev/null 2>&1
    "$TARN" daemon --stop >/dev/null 2>&1
    if [ -n "$ZNS" ]; then nsenter --target "$ZNS" --mount -- zpool destroy -f zfarc >/dev/null 2>&1; fi
    [ -n "$ZPID" ] && { kill -TERM "$ZPID" 2>/dev/null; wait_gone "$ZPID" 10; }
    [ -n "$ZNS" ] && { kill "$ZNS" 2>/dev/null; wait "$ZNS" 2>/dev/null; }
    rm -f "$WORK/a.img" "$WORK/b.img" "$WORK/set.dat" "$WORK/zfs-fuse.pid"
}
trap teardown EXIT

fresh_leaves() { rm -f "$WORK/a.img" "$WORK/b.img"; truncate -s "$LEAF_BYTES" "$WORK/a.img" "$WORK/b.img"; }
mkdir -p "$WORK/run" "$WORK/state"
chmod 700 "$WORK/run"
"$TARN" daemon --stop >/dev/null 2>&1 || true
log "making the working set ($SET)"
head -c "$SET_BYTES" /dev/urandom >"$WORK/set.dat"

# measure LABEL RUN... : warm once, then one fio per --jobs entry, run through RUN
# (nothing for Tarn, nsenter for zfs-fuse); IOPS into IOPS[LABEL-N].
declare -A IOPS HIT ZREADS
measure() {
    local label=$1 file=$2; shift 2
    log "$label: warming (one sequential pass)"
    "$@" fio --name=warm --filename="$file" --rw=read --bs=1M --direct=1 --ioengine=psync --size="$SET_BYTES" --output=/dev/null
    for n in ${JOBS//,/ }; do
        local h0 m0 h1 m1
        local watch=""
        if [ "$label" = tarn ]; then
            read -r h0 m0 <<<"$(arc_hits)"
        else
            "${ZR[@]}" zpool iostat zfarc "$RUNTIME" 2 >"$WORK/iostat-$n" &
            watch=$!
        fi
        log "$label: random 8K reads, $n job(s), ${RUNTIME}s"
        "$@" fio --name=rr --filename="$file" --rw=randread --bs=8k --direct=1 --ioengine=psync --size="$SET_BYTES" \
            --numjobs="$n" --group_reporting --time_based --runtime="$RUNTIME" --output-format=json >"$WORK/fio-$label-$n.json"
        IOPS[$label-$n]=$(python3 -c 'import json, sys; print("%.0f" % json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"])' "$WORK/fio-$label-$n.json")
        if [ "$label" = tarn ]; then
            read -r h1 m1 <<<"$(arc_hits)"
            HIT[$n]=$(awk -v h=$((h1 - h0)) -v m=$((m1 - m0)) 'BEGIN { printf "%.1f", (h + m) ? 100 * h / (h + m) : 0 }')
        else
            wait "$watch"
            ZREADS[$n]=$(awk '$1 == "zfarc" { r = $4 } END { print r }' "$WORK/iostat-$n")
        fi
    done
}
arc_hits() { "$TARN" kstat arcstats | awk '$1 == "hits" { h = $3 } $1 == "misses" { m = $3 } END { print h, m }'; }

# ---- Tarn -------------------------------------------------------------------------------
fresh_leaves
"$TARN" zpool create -f -m "$WORK/mnt" tarnarc mirror "$WORK/a.img" "$WORK/b.img"
"$TARN" daemon --set arc_max="$ARC_MAX"
"$TARN" zfs create -o recordsize=8K -o compression=off -o atime=off tarnarc/fs
cp "$WORK/set.dat" "$WORK/mnt/fs/set.dat"
"$TARN" zpool sync tarnarc
measure tarn "$WORK/mnt/fs/set.dat"
"$TARN" zpool destroy -f tarnarc
"$TARN" daemon --stop >/dev/null

# ---- zfs-fuse ---------------------------------------------------------------------------
fresh_leaves
unshare --mount --propagation private sleep infinity &
ZNS=$!
ZR=(nsenter --target "$ZNS" --mount --)
wait_for 5 in_new_namespace "$ZNS"
rm -f "$WORK/zfs-fuse.pid"  # zfs-fuse will not start over an old one
"${ZR[@]}" zfs-fuse --pidfile "$WORK/zfs-fuse.pid" --max-arc-size $((ARC_BYTES >> 20))
wait_for 10 test -s "$WORK/zfs-fuse.pid"
ZPID=$(cat "$WORK/zfs-fuse.pid")
wait_for 10 "${ZR[@]}" zpool list
"${ZR[@]}" zpool create -f -o cachefile=none -m "$WORK/zmnt" zfarc mirror "$WORK/a.img" "$WORK/b.img"
"${ZR[@]}" zfs create -o recordsize=8K -o compression=off -o atime=off zfarc/fs
"${ZR[@]}" cp "$WORK/set.dat" "$WORK/zmnt/fs/set.dat"
"${ZR[@]}" sync
measure zfs-fuse "$WORK/zmnt/fs/set.dat" "${ZR[@]}"

echo
echo "ARC random 8K reads: working set $SET (recordsize 8K, 2-way mirror), arc_max $ARC_MAX on both, warmed by one pass, ${RUNTIME}s each"
printf '%-6s %12s %14s %8s %12s %18s\n' jobs "tarn IOPS" "zfs-fuse IOPS" ratio "tarn hit%" "zfs-fuse pool rd/s"
for n in ${JOBS//,/ }; do
    awk -v n="$n" -v t="${IOPS[tarn-$n]}" -v z="${IOPS[zfs-fuse-$n]}" -v h="${HIT[$n]}" -v r="${ZREADS[$n]}" \
        'BEGIN { printf "%-6s %12s %14s %7.2fx %12s %18s\n", n, t, z, z ? t / z : 0, h, r }'
done
