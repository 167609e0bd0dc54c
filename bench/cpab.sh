#!/usr/bin/env bash
# bench/cpab.sh — `cp -a` of a real tree into a fresh dataset, per build, alternating
# the builds round by round, with the daemon's CPU time and a copy into the raw
# directory in every round: the small-file path (CREATE, WRITE, SETATTR, LOOKUP and
# the txg syncs behind them) of two builds compared in one run.
#
#   bash bench/cpab.sh --bins OLD/tarn,NEW/tarn [--rounds 2] [--src /usr/share] [--work DIR]
#
# Each copy goes into a new 2-way mirror of two 4 GiB files written full of zeros once
# (so the host file system allocates nothing during the copy), with the source's page
# cache dropped first; the raw copy goes into WORK/raw on the same host file system.
# Prints seconds and daemon CPU seconds per build and round, the raw copy's seconds,
# then each build's median. Run by hand as root, never by CI.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" rounds=2 src=/usr/share work=/var/tmp/tarn-cpab
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --src) src=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/cpab.sh --bins A[,B...] [--rounds N] [--src DIR] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
[ -d "$src" ] || die "--src $src is not a directory"
[ "$(id -u)" -eq 0 ] || die "run as root (it drops the page cache)"
ab_setup "$work"
out=$OUT
for r in $(seq 1 "$rounds"); do
    for i in "${!BINS[@]}"; do
        bin=$(readlink -f "${BINS[$i]}")
        ab_pool "$bin" cpab
        "$bin" zfs create cpab/cp
        pid=$(cat "$work/state/daemon.pid")
        sync; echo 3 > /proc/sys/vm/drop_caches
        c0=$(cpu_ms "$pid"); t0=$EPOCHREALTIME
        cp -a "$src" "$work/mnt/cp/"
        t1=$EPOCHREALTIME; c1=$(cpu_ms "$pid")
        us=$(( ${t1/./} - ${t0/./} )); cpu_ms=$(( c1 - c0 ))
        printf 'bin%s\t%s\t%s\t%s\n' "$i" "$r" "$us" "$cpu_ms" >> "$out"
        awk -v b="$bin" -v r="$r" -v us="$us" -v c="$cpu_ms" 'BEGIN { printf "%-40s round %s  %.2f s  daemon CPU %.2f s\n", b, r, us / 1e6, c / 1000 }'
        ab_teardown "$bin" cpab
    done
    rm -rf "$work/raw"; mkdir -p "$work/raw"
    sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$EPOCHREALTIME; cp -a "$src" "$work/raw/"; t1=$EPOCHREALTIME
    us=$(( ${t1/./} - ${t0/./} ))
    printf 'raw\t%s\t%s\t0\n' "$r" "$us" >> "$out"
    awk -v r="$r" -v us="$us" 'BEGIN { printf "%-40s round %s  %.2f s\n", "raw directory", r, us / 1e6 }'
    rm -rf "$work/raw"
done
python3 - "$out" "${BINS[@]}" <<'PY'
import sys, statistics
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
med = lambda k, col: statistics.median(int(row[col]) for row in rows if row[0] == k)
raw = med('raw', 2) / 1e6
print(f"{'build':<40} {'median (s)':>10} {'CPU (s)':>8} {'raw/build':>9}")
for i, b in enumerate(sys.argv[2:]):
    s = med(f'bin{i}', 2) / 1e6
    print(f"{b:<40} {s:10.2f} {med(f'bin{i}', 3) / 1e3:8.2f} {raw / s:9.2f}")
print(f"{'raw directory':<40} {raw:10.2f}")
PY
