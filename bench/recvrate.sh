#!/usr/bin/env bash
# bench/recvrate.sh — `zfs recv` of one saved full stream into a fresh pool, per build,
# alternating the builds round by round: what a writer whose only limit is the device
# does at the early writer's pace (the backlog mark, `EARLY_BACKLOG_RECORDS`).
#
#   bash bench/recvrate.sh --bins OLD/tarn,NEW/tarn [--rounds 3] [--work DIR]
#
# The stream (a snapshot of two 512 MiB files of random bytes) is made once with the
# first build and kept in WORK. Each receive goes into a 2-way mirror of two 3 GiB
# files written full of zeros once, with its own daemon; the stream file is read from
# the page cache. Prints seconds and MiB/s per build and round, then each build's
# median. Run by hand as root, never by CI.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" rounds=3 work=/var/tmp/tarn-recvrate
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/recvrate.sh --bins A[,B...] [--rounds N] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
mkdir -p "$work"
stream=$work/full.stream
# use_state NAME: the daemon and pool state of one pool under WORK.
use_state() {
    export TARN_STATE_DIR=$work/$1/state TARN_CACHEFILE=$work/$1/state/tarn.cache TARN_SOCKET=$work/$1/run/tarn.sock
    rm -rf "$work/$1"; mkdir -p "$work/$1/state"
}
if [ ! -s "$stream" ]; then
    first=$(readlink -f "${BINS[0]}")
    use_state src
    (cd "$work/src" && "$first" zpool create -o size=3G -m "$work/src/mnt" rrsrc mirror a.img b.img >/dev/null)
    "$first" zfs create rrsrc/fs
    for i in 1 2; do dd if=/dev/urandom of="$work/src/mnt/fs/f$i" bs=1M count=512 status=none; done
    "$first" zfs snapshot rrsrc/fs@a
    "$first" zfs send rrsrc/fs@a > "$stream.part" && mv "$stream.part" "$stream"
    "$first" zpool destroy rrsrc
    "$first" daemon --stop >/dev/null 2>&1 || true
    rm -rf "$work/src"
fi
for f in a b; do
    [ -f "$work/$f.img" ] || dd if=/dev/zero of="$work/$f.img" bs=1M count=3072 conv=fsync status=none
done
mib=$(( $(stat -c %s "$stream") >> 20 ))
out=$work/results.tsv; : > "$out"
for r in $(seq 1 "$rounds"); do
    for i in "${!BINS[@]}"; do
        bin=$(readlink -f "${BINS[$i]}")
        use_state dst
        (cd "$work" && "$bin" zpool create -f -m "$work/dst/mnt" rrdst mirror a.img b.img >/dev/null)
        t0=$EPOCHREALTIME
        "$bin" zfs recv rrdst/r < "$stream"
        t1=$EPOCHREALTIME
        us=$(( ${t1/./} - ${t0/./} ))
        printf 'bin%s\t%s\t%s\n' "$i" "$r" "$us" >> "$out"
        awk -v b="$bin" -v r="$r" -v us="$us" -v mib="$mib" 'BEGIN { printf "%-40s round %s  %.2f s  %.0f MiB/s\n", b, r, us / 1e6, mib / (us / 1e6) }'
        "$bin" zpool destroy rrdst >/dev/null 2>&1 || true
        "$bin" daemon --stop >/dev/null 2>&1 || true
    done
done
python3 - "$out" "${BINS[@]}" <<'PY'
import sys, statistics
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
print(f"{'build':<40} {'median (s)':>10}")
for i, b in enumerate(sys.argv[2:]):
    print(f"{b:<40} {statistics.median(int(v) for k, _, v in rows if k == f'bin{i}') / 1e6:10.2f}")
PY
