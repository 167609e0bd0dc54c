#!/usr/bin/env bash
# bench/fsyncab.sh — one fio job of 8 KiB (--bs) writes with an fsync after each (fio.sh's
# "fsync=1, 1 job" row, and the fsynced appender of bench/snaplat.sh) per build,
# alternating the builds round by round, with the daemon's CPU time per operation and
# the fsync latency's median and 99th percentile.
#
#   bash bench/fsyncab.sh --bins OLD/tarn,NEW/tarn [--rounds 4] [--runtime 10]
#                         [--rw write|randwrite] [--size 1G] [--bs 8k] [--work DIR]
#
# Each round and build: a new 2-way mirror of two 4 GiB files written full of zeros
# once (no intent-log device: the log blocks go to the mirror). `--rw write` appends
# to a new file (the appender: one record filling at a time, whole records written
# early); `--rw randwrite` first lays the file out (`--size`, 1 MiB writes, then an
# export and import with the host's page cache dropped) and then overwrites it at
# random, so every write dirties part of a record on disk (the txg syncs rewrite whole
# records, as in fio.sh). `--bs 128k` makes every write a whole record, which an
# fsync writes in place and logs by pointer. Prints per build and round: IOPS, daemon CPU µs per write
# and fsync, fsync p50 / p99 (µs); then each build's medians. Run by hand as root,
# never by CI; needs fio.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" rounds=4 runtime=10 rw=write size=1G bs=8k work=/var/tmp/tarn-fsyncab
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --runtime) runtime=$2; shift 2 ;;
        --rw) rw=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --bs) bs=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/fsyncab.sh --bins A[,B...] [--rounds N] [--runtime S] [--rw write|randwrite] [--size SIZE] [--bs SIZE] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
has fio || die "fio is missing: apt-get install fio"
[ "$(id -u)" -eq 0 ] || die "run as root (like every script here)"
case $rw in write | randwrite) ;; *) die "--rw is write or randwrite" ;; esac
ab_setup "$work"
out=$OUT
for r in $(seq 1 "$rounds"); do
    for i in "${!BINS[@]}"; do
        bin=$(readlink -f "${BINS[$i]}")
        ab_pool "$bin" fsab
        mkdir -p "$work/mnt/d"
        [ "$rw" = write ] || ab_cold_file "$bin" fsab "$work/mnt/d" "$size"
        sync
        pid=$(cat "$work/state/daemon.pid")
        c0=$(cpu_ms "$pid")
        fio --name=fsab --directory="$work/mnt/d" --filename=f.dat --rw="$rw" --bs="$bs" --size="$size" --fsync=1 \
            --runtime="$runtime" --time_based --percentile_list=50:99 --output-format=json > "$work/fio.json"
        c1=$(cpu_ms "$pid")
        python3 - "$work/fio.json" "$bin" "$r" "$i" "$(( c1 - c0 ))" >> "$out" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))['jobs'][0]
ops = job['write']['total_ios']
sync = job['sync']['lat_ns']
pct = sync.get('percentile', {})
print('\t'.join([f"bin{sys.argv[4]}", sys.argv[3], f"{job['write']['iops']:.0f}",
                 f"{int(sys.argv[5]) * 1000 / max(ops, 1):.1f}",
                 f"{pct.get('50.000000', 0) / 1000:.0f}", f"{pct.get('99.000000', 0) / 1000:.0f}"]))
PY
        tail -n 1 "$out" | awk -F'\t' -v b="$bin" '{ printf "%-40s round %s  %7s IOPS  daemon CPU %6s us/op  fsync p50 %5s us  p99 %6s us\n", b, $2, $3, $4, $5, $6 }'
        ab_teardown "$bin" fsab
    done
done
ab_medians "$out" "median IOPS:11:0,CPU us/op:9:1,fsync p50:9:0,fsync p99:9:0" "${BINS[@]}"
