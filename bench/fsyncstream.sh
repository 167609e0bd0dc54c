#!/usr/bin/env bash
# bench/fsyncstream.sh — fsynced streaming writes: `--files` files of 64 MiB, each
# copied with `dd bs=1M conv=fsync` (1 MiB writes, one fsync at the end, as a backup
# or a NAS client writing whole files does), on the raw directory and on a fresh pool
# of each build, alternating the targets round by round.
#
#   bash bench/fsyncstream.sh --bins OLD/tarn,NEW/tarn [--rounds 2] [--files 16] [--work DIR]
#
# Each Tarn pool is a 2-way mirror of two 4 GiB files written full of zeros once (as
# `bench/fio.sh --prefill` does), with its own daemon; the source is 64 MiB of random
# bytes in /dev/shm. Prints MiB/s for every target and round, then the medians and
# their ratio to raw. Run by hand as root, never by CI.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" rounds=2 files=16 work=/var/tmp/tarn-fsyncstream
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --files) files=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/fsyncstream.sh --bins A[,B...] [--rounds N] [--files N] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
mkdir -p "$work/raw"
src=/dev/shm/tarn-fsyncstream.src
[ -f "$src" ] || head -c 64M /dev/urandom > "$src"
for f in a b; do
    [ -f "$work/$f.img" ] || dd if=/dev/zero of="$work/$f.img" bs=1M count=4096 conv=fsync status=none
done
out=$work/results.tsv; : > "$out"

# copy_files DIR: the files, one dd each; prints MiB/s over the whole series.
copy_files() {
    local dir=$1 i t0 t1
    t0=$EPOCHREALTIME
    for i in $(seq 1 "$files"); do
        dd if="$src" of="$dir/f$i" bs=1M conv=fsync status=none
    done
    t1=$EPOCHREALTIME
    awk -v n="$files" -v us=$(( ${t1/./} - ${t0/./} )) 'BEGIN { printf "%.1f\n", n * 64 / (us / 1e6) }'
}

for r in $(seq 1 "$rounds"); do
    rm -f "$work"/raw/f*
    sync
    printf 'raw\t%s\t%s\n' "$r" "$(copy_files "$work/raw")" | tee -a "$out"
    rm -f "$work"/raw/f*
    for i in "${!BINS[@]}"; do
        bin=$(readlink -f "${BINS[$i]}")
        export TARN_STATE_DIR=$work/state TARN_CACHEFILE=$work/state/tarn.cache TARN_SOCKET=$work/run/tarn.sock
        rm -rf "$work/state" "$work/mnt"; mkdir -p "$work/state"
        (cd "$work" && "$bin" zpool create -f -m "$work/mnt" fss mirror a.img b.img >/dev/null)
        printf 'bin%s\t%s\t%s\n' "$i" "$r" "$(copy_files "$work/mnt")" | tee -a "$out"
        "$bin" zpool destroy fss >/dev/null 2>&1 || true
        "$bin" daemon --stop >/dev/null 2>&1 || true
    done
done
python3 - "$out" "${BINS[@]}" <<'PY'
import sys, statistics
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
med = lambda t: statistics.median(float(v) for k, _, v in rows if k == t)
raw = med('raw')
print(f"{'target':<40} {'MiB/s (median)':>15} {'/ raw':>7}")
print(f"{'raw directory':<40} {raw:15.1f} {1:7.2f}")
for i, b in enumerate(sys.argv[2:]):
    m = med(f'bin{i}')
    print(f"{b:<40} {m:15.1f} {m / raw:7.2f}")
PY
