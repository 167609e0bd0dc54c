#!/usr/bin/env bash
# Hybrid pool (issue 14, seed 003): a slow main leaf, a fast cache device, and a
# random-read working set twice the ARC. Random 8K read IOPS in three phases of one
# run, against one pool:
#   none:     no cache device (the ARC alone holds half the working set);
#   l2arc:    after `zpool add POOL cache`, once the feed thread has copied the set;
#   imported: right after `zpool export` + `zpool import` (persistent L2ARC: the
#             headers are rebuilt from the cache device, nothing is read first).
# Prints IOPS, ARC and L2ARC hit ratios per phase, then l2arc/none and imported/none.
#
# Usage: bash bench/l2arc.sh [--arc-max 64M] [--set 128M] [--cache 512M] [--delay 2]
#                            [--runtime 30] [--workdir DIR]
#
# Pool: one file leaf and one cache file under --workdir, its own daemon
# (TARN_SOCKET, TARN_STATE_DIR and TARN_CACHEFILE under --workdir), mounted through
# FUSE. Every read of the main leaf is slowed by `tarn zinject -D --delay` (ms, one
# lane per request), so a miss costs what a disk would; the cache file is not slowed
# (an SSD next to it). The working set is hot/hot.dat (--set bytes, default twice
# --arc-max) in a file system with recordsize=8K, written from /dev/urandom.
# Random reads: fio rw=randread bs=8k direct=1 (FUSE would otherwise serve re-reads
# from the page cache), one job, --runtime seconds. Before the l2arc phase the set is
# read sequentially until the L2ARC holds 90% of it (at most 6 passes). Counters from
# `tarn kstat arcstats`, before and after each measured part: ARC hit% =
# hits / (hits + misses), L2 hit% = l2_hits / (l2_hits + l2_misses).
#
# Needs root (FUSE mount) and fio. Builds tarn with `cargo build --release -p
# tarn-cli` unless TARN_BIN names a binary. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
ARC_MAX=64M
SET=
CACHE=512M
DELAY=2
RUNTIME=30
WORK=${BENCH_DIR:-/var/tmp/bench-l2arc}

usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case $1 in
        --arc-max) ARC_MAX=$2; shift 2 ;;
        --set) SET=$2; shift 2 ;;
        --cache) CACHE=$2; shift 2 ;;
        --delay) DELAY=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown option $1" >&2; usage 2 ;;
    esac
done
has fio || die "fio is needed"
[ "$(id -u)" = 0 ] || die "run as root (FUSE mount)"

bytes() { numfmt --from=iec "$1"; }
ARC_BYTES=$(bytes "$ARC_MAX")
[ -n "$SET" ] || SET=$((2 * ARC_BYTES))
SET_BYTES=$(bytes "$SET")
CACHE_BYTES=$(bytes "$CACHE")
LEAF_BYTES=$((4 * SET_BYTES + (1 << 30)))

find_tarn
export TARN_SOCKET=$WORK/run/tarn.sock TARN_STATE_DIR=$WORK/state TARN_CACHEFILE=$WORK/tarn.cache
POOL=l2bench
MNT=$WORK/mnt

teardown() {
    "$TARN" zinject -c all >/dev/null 2>&1 || true
    "$TARN" zpool destroy -f $POOL >/dev/null 2>&1 || true
    "$TARN" daemon --stop >/dev/null 2>&1 || true
    rm -f "$WORK/v/leaf.img" "$WORK/v/cache.img"
}
trap teardown EXIT

mkdir -p "$WORK/run" "$WORK/state" "$WORK/v"
chmod 700 "$WORK/run"
"$TARN" daemon --stop >/dev/null 2>&1 || true
rm -f "$WORK/v/leaf.img" "$WORK/v/cache.img"
truncate -s "$LEAF_BYTES" "$WORK/v/leaf.img"
truncate -s "$CACHE_BYTES" "$WORK/v/cache.img"
"$TARN" zpool create -f -m "$MNT" $POOL "$WORK/v/leaf.img"
"$TARN" daemon --set arc_max="$ARC_MAX" arc_min=32M
"$TARN" zfs create -o recordsize=8K $POOL/hot
log "writing hot.dat ($SET_BYTES bytes)"
head -c "$SET_BYTES" /dev/urandom >"$MNT/hot/hot.dat"
"$TARN" zpool sync $POOL

stat_of() { "$TARN" kstat arcstats | awk -v n="$1" '$1 == n { print $3 }'; }
snap() { for n in hits misses l2_hits l2_misses; do printf '%s ' "$(stat_of $n)"; done; }
slow() { [ "$DELAY" = 0 ] || "$TARN" zinject -q -d "$WORK/v/leaf.img" -D "$DELAY" -T read $POOL >/dev/null; }
job="--name=hot --filename=$MNT/hot/hot.dat --rw=randread --bs=8k --direct=1 --ioengine=psync --size=$SET_BYTES --time_based --runtime=$RUNTIME"

declare -A IOPS HIT L2HIT
measure() {  # measure PHASE
    local h0 m0 l0 n0 h1 m1 l1 n1
    read -r h0 m0 l0 n0 <<<"$(snap)"
    # shellcheck disable=SC2086
    fio --output-format=json $job >"$WORK/fio-$1.json"
    read -r h1 m1 l1 n1 <<<"$(snap)"
    IOPS[$1]=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['jobs'][0]['read']['iops']))" "$WORK/fio-$1.json")
    HIT[$1]=$(awk -v h=$((h1 - h0)) -v m=$((m1 - m0)) 'BEGIN { printf "%.1f", h + m ? 100 * h / (h + m) : 0 }')
    L2HIT[$1]=$(awk -v h=$((l1 - l0)) -v m=$((n1 - n0)) 'BEGIN { printf "%.1f", h + m ? 100 * h / (h + m) : 0 }')
    log "$1: ${IOPS[$1]} IOPS, ARC hit ${HIT[$1]}%, L2 hit ${L2HIT[$1]}%"
}

slow
log "phase none: one sequential pass, then $RUNTIME s of random reads"
fio --name=warm --filename="$MNT/hot/hot.dat" --rw=read --bs=1M --direct=1 --ioengine=psync --size="$SET_BYTES" >/dev/null
measure none

"$TARN" zpool add $POOL cache "$WORK/v/cache.img"
for pass in 1 2 3 4 5 6; do
    fio --name=fill --filename="$MNT/hot/hot.dat" --rw=read --bs=1M --direct=1 --ioengine=psync --size="$SET_BYTES" >/dev/null
    sleep 2
    have=$(stat_of l2_size)
    log "fill pass $pass: l2_size $have of $SET_BYTES"
    [ "$have" -lt $((SET_BYTES * 9 / 10)) ] || break
done
measure l2arc

"$TARN" zinject -c all >/dev/null
"$TARN" zpool export $POOL
r0=$(stat_of l2_rebuild_bufs)
"$TARN" zpool import -d "$WORK/v" $POOL
log "imported: l2_rebuild_bufs +$(( $(stat_of l2_rebuild_bufs) - r0 ))"
slow
measure imported

printf '\n%-9s %8s %8s %8s\n' phase IOPS "ARC-hit%" "L2-hit%"
for p in none l2arc imported; do
    printf '%-9s %8s %8s %8s\n' "$p" "${IOPS[$p]}" "${HIT[$p]}" "${L2HIT[$p]}"
done
awk -v n="${IOPS[none]}" -v l="${IOPS[l2arc]}" -v i="${IOPS[imported]}" \
    'BEGIN { printf "\nl2arc/none %.1fx, imported/none %.1fx\n", l / n, i / n }'
