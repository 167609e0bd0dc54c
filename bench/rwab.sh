#!/usr/bin/env bash
# bench/rwab.sh — buffered 8 KiB random writes into a laid-out file, per build,
# alternating the builds round by round, with the daemon's CPU time per write: the
# deferred fill and the txg sync behind `fio.sh`'s "rand write 8K x4, buffered" row,
# of two builds compared in one run.
#
#   bash bench/rwab.sh --bins OLD/tarn,NEW/tarn [--rounds 3] [--runtime 15] [--rw randwrite|write]
#                      [--jobs 4] [--work DIR]
#
# Each round and build: a new 2-way mirror of two 4 GiB files written full of zeros
# once; fio lays out a 1 GiB file (1 MiB writes, end_fsync); the pool is exported, the
# page cache dropped and the pool imported (cold, as fio.sh's row); then fio
# `rw=randwrite bs=8k numjobs=4 end_fsync=1`, time-based (`--rw write --jobs 1`: the
# file rewritten in order, 8 KiB at a time, a record's pieces landing one by one).
# Prints IOPS and daemon CPU per write for each build and round, then each build's
# median. Run by hand as root, never by CI; needs fio.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" rounds=3 runtime=15 rw=randwrite jobs=4 work=/var/tmp/tarn-rwab
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --runtime) runtime=$2; shift 2 ;;
        --rw) rw=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/rwab.sh --bins A[,B...] [--rounds N] [--runtime S] [--rw randwrite|write] [--jobs N] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
case $rw in randwrite | write) ;; *) die "--rw must be randwrite or write" ;; esac
has fio || die "fio is missing: apt-get install fio"
[ "$(id -u)" -eq 0 ] || die "run as root (it drops the page cache)"
ab_setup "$work"
out=$OUT
for r in $(seq 1 "$rounds"); do
    for i in "${!BINS[@]}"; do
        bin=$(readlink -f "${BINS[$i]}")
        ab_pool "$bin" rwab
        ab_cold_file "$bin" rwab "$work/mnt" 1G
        pid=$(cat "$work/state/daemon.pid")
        c0=$(cpu_ms "$pid")
        iops=$(fio --name=rw --directory="$work/mnt" --filename=f.dat --rw="$rw" --bs=8k --size=1G \
            --numjobs="$jobs" --time_based --runtime="$runtime" --end_fsync=1 --output-format=terse |
            awk -F';' '{ s += $49 } END { print s }')
        c1=$(cpu_ms "$pid")
        us_per_write=$(( (c1 - c0) * 1000 / (iops * runtime > 0 ? iops * runtime : 1) ))
        printf 'bin%s\t%s\t%s\t%s\n' "$i" "$r" "$iops" "$us_per_write" >> "$out"
        printf '%-40s round %s  %6s IOPS  daemon CPU %4s us per write\n' "$bin" "$r" "$iops" "$us_per_write"
        ab_teardown "$bin" rwab
    done
done
ab_medians "$out" "median IOPS:11:0,us/write:8:0" "${BINS[@]}"
