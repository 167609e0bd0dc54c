#!/usr/bin/env bash
# Scan resistance of the ARC: a random-read hot set and a sequential scan read at the
# same time, on Tarn with its ARC and with the FIFO block cache Tarn had before (and a
# plain LRU), all in one run against one pool. One table: hot-set IOPS, scan MiB/s and
# the ARC's hit ratios per policy, then the ratios against FIFO.
#
# Usage: bash bench/arc.sh [--arc-max 256M] [--hot 128M] [--scan 1G] [--warm 20]
#                          [--runtime 20] [--delay 1] [--policies arc,lru,fifo]
#                          [--workdir DIR]
#
# Pool: one file leaf (sparse, 4 x --scan + 1G) under --workdir, its own daemon
# (TARN_SOCKET, TARN_STATE_DIR and TARN_CACHEFILE under --workdir), mounted through
# FUSE. Every read of the leaf is slowed by `tarn zinject -D --delay` (ms, one lane
# per request as zinject's default; 0 for none), so a cache miss costs what a fast
# disk would; the leaf file itself sits in the host's page cache.
# Files: hot/hot.dat (--hot bytes, by default half of --arc-max, in a file system with
# recordsize=8K so every 8K read is its own block) and scan/scan.dat (--scan bytes,
# by default 4 x --arc-max, recordsize 128K), written from /dev/urandom, then
# `zpool sync`.
# For each policy: `tarn daemon --set arc_policy=P arc_max=--arc-max` (a policy change
# empties the cache), two sequential 1M passes over hot.dat and --warm seconds of the
# hot job alone, then --runtime seconds of
# both jobs together:
#   hot:  fio rw=randread bs=8k direct=1 on hot.dat, 1 job (IOPS)
#   scan: fio rw=read bs=1M direct=1 on scan.dat, looping (MiB/s)
# direct=1: FUSE would otherwise serve re-reads from the kernel's page cache and the
# ARC would never see them. The ARC counters (`tarn kstat arcstats`) are read before
# and after the measured part: hit% = hits / (hits + misses), dd-hit% the same for
# demand data only.
#
# ARC_DEBUG=1 prints the ARC's sizes, p and ghost hits before and after each
# measured part (stderr).
#
# Needs root (FUSE mount) and fio. Builds tarn with `cargo build --release -p
# tarn-cli` unless TARN_BIN names a binary. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
ARC_MAX=256M
HOT=
SCAN=
WARM=20
RUNTIME=20
DELAY=1
POLICIES=arc,lru,fifo
WORK=${BENCH_DIR:-/var/tmp/bench-arc}

usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case $1 in
        --arc-max) ARC_MAX=$2; shift 2 ;;
        --hot) HOT=$2; shift 2 ;;
        --scan) SCAN=$2; shift 2 ;;
        --warm) WARM=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --delay) DELAY=$2; shift 2 ;;
        --policies) POLICIES=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown option $1" >&2; usage 2 ;;
    esac
done
has fio || die "fio is needed"
[ "$(id -u)" = 0 ] || die "run as root (FUSE mount)"

bytes() { numfmt --from=iec "$1"; }
ARC_BYTES=$(bytes "$ARC_MAX")
[ -n "$SCAN" ] || SCAN=$((4 * ARC_BYTES))
SCAN_BYTES=$(bytes "$SCAN")
[ -n "$HOT" ] || HOT=$((ARC_BYTES / 2))
HOT_BYTES=$(bytes "$HOT")
LEAF_BYTES=$((4 * SCAN_BYTES + (1 << 30)))

find_tarn
export TARN_SOCKET=$WORK/run/tarn.sock TARN_STATE_DIR=$WORK/state TARN_CACHEFILE=$WORK/tarn.cache
POOL=arcbench
MNT=$WORK/mnt

teardown() {
    "$TARN" zinject -c all >/dev/null 2>&1 || true
    "$TARN" zpool destroy -f $POOL >/dev/null 2>&1 || true
    "$TARN" daemon --stop >/dev/null 2>&1 || true
    rm -f "$WORK/leaf.img"
}
trap teardown EXIT

mkdir -p "$WORK/run" "$WORK/state"
chmod 700 "$WORK/run"
"$TARN" daemon --stop >/dev/null 2>&1 || true
rm -f "$WORK/leaf.img"
truncate -s "$LEAF_BYTES" "$WORK/leaf.img"
"$TARN" zpool create -f -m "$MNT" $POOL "$WORK/leaf.img"
"$TARN" zfs create -o recordsize=8K $POOL/hot
"$TARN" zfs create $POOL/scan
log "writing hot.dat ($HOT) and scan.dat ($SCAN)"
head -c "$HOT_BYTES" /dev/urandom >"$MNT/hot/hot.dat"
head -c "$SCAN_BYTES" /dev/urandom >"$MNT/scan/scan.dat"
"$TARN" zpool sync $POOL
[ "$DELAY" = 0 ] || "$TARN" zinject -q -d "$WORK/leaf.img" -D "$DELAY" -T read $POOL >/dev/null

stat_of() { "$TARN" kstat arcstats | awk -v n="$1" '$1 == n { print $3 }'; }
snap() { for n in hits misses demand_data_hits demand_data_misses; do printf '%s ' "$(stat_of $n)"; done; }

hot_job="--name=hot --filename=$MNT/hot/hot.dat --rw=randread --bs=8k --direct=1 --ioengine=psync --size=$HOT_BYTES --time_based"
scan_job="--name=scan --filename=$MNT/scan/scan.dat --rw=read --bs=1M --direct=1 --ioengine=psync --size=$SCAN_BYTES --time_based"

declare -A IOPS MBS HIT DHIT
for p in ${POLICIES//,/ }; do
    log "policy $p: arc_max=$ARC_MAX, warm $WARM s, measure $RUNTIME s"
    "$TARN" daemon --set arc_policy="$p" arc_max="$ARC_MAX"
    # Warm: two sequential passes (every hot block read twice: MFU), then random reads.
    fio --name=warm --filename="$MNT/hot/hot.dat" --rw=read --bs=1M --direct=1 --ioengine=psync --size="$HOT_BYTES" --loops=2 >/dev/null
    # shellcheck disable=SC2086
    fio $hot_job --runtime="$WARM" >/dev/null
    [ -z "${ARC_DEBUG:-}" ] || "$TARN" kstat arcstats | grep -E "^(p|c|size|mru_size|mfu_size|mru_ghost_size|mfu_ghost_size|mru_ghost_hits|mfu_ghost_hits|hits|misses|deleted|evicted) " | tr -s ' ' | paste -sd' ' >&2
    read -r h0 m0 dh0 dm0 <<<"$(snap)"
    # shellcheck disable=SC2086
    fio --output-format=json $hot_job --runtime="$RUNTIME" $scan_job --runtime="$RUNTIME" >"$WORK/fio-$p.json"
    read -r h1 m1 dh1 dm1 <<<"$(snap)"
    [ -z "${ARC_DEBUG:-}" ] || "$TARN" kstat arcstats | grep -E "^(p|c|size|mru_size|mfu_size|mru_ghost_size|mfu_ghost_size|mru_ghost_hits|mfu_ghost_hits|hits|misses|deleted|evicted) " | tr -s ' ' | paste -sd' ' >&2
    read -r IOPS[$p] MBS[$p] < <(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
jobs = {x["jobname"]: x for x in j["jobs"]}
print("%.0f %.1f" % (jobs["hot"]["read"]["iops"], jobs["scan"]["read"]["bw"] / 1024))' "$WORK/fio-$p.json")
    HIT[$p]=$(awk -v h=$((h1 - h0)) -v m=$((m1 - m0)) 'BEGIN { printf "%.1f", (h + m) ? 100 * h / (h + m) : 0 }')
    DHIT[$p]=$(awk -v h=$((dh1 - dh0)) -v m=$((dm1 - dm0)) 'BEGIN { printf "%.1f", (h + m) ? 100 * h / (h + m) : 0 }')
done

echo
echo "ARC scan resistance: arc_max=$ARC_MAX hot=$HOT (8K random reads) scan=$SCAN (1M sequential), read delay ${DELAY} ms, $RUNTIME s"
printf '%-8s %12s %12s %8s %10s\n' policy "hot IOPS" "scan MiB/s" "hit%" "dd-hit%"
for p in ${POLICIES//,/ }; do
    printf '%-8s %12s %12s %8s %10s\n' "$p" "${IOPS[$p]}" "${MBS[$p]}" "${HIT[$p]}" "${DHIT[$p]}"
done
if [ -n "${IOPS[fifo]:-}" ] && [ "${IOPS[fifo]}" != 0 ]; then
    for p in ${POLICIES//,/ }; do
        [ "$p" = fifo ] && continue
        awk -v p="$p" -v a="${IOPS[$p]}" -v f="${IOPS[fifo]}" 'BEGIN { printf "hot IOPS %s / fifo: %.2fx\n", p, a / f }'
    done
fi
