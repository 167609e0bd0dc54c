#!/usr/bin/env bash
# bench/sfab.sh — small files with fsync (fio.sh's "files 8K+fsync" rows, the seeds'
# 5,000-files experiment: create, write 8 KiB, fsync, close) per build, alternating the
# builds round by round, with the daemon's CPU time and context switches per file.
#
#   bash bench/sfab.sh --bins OLD/tarn,NEW/tarn [--rounds 4] [--files 5000] [--threads 4] [--work DIR]
#
# Each round and build: a new 2-way mirror of two 4 GiB files written full of zeros
# once, then `bench/smallfiles.c` makes --files files in one directory on --threads
# threads. Prints files/s, daemon CPU µs per file and the voluntary context switches
# per file of the FUSE workers (`fuser-*` threads) and of the I/O pool (`vdev_io*`),
# per build and round, then each build's medians. Run by hand as root, never by CI;
# needs a C compiler.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" rounds=4 files=5000 threads=4 work=/var/tmp/tarn-sfab
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --files) files=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/sfab.sh --bins A[,B...] [--rounds N] [--files N] [--threads N] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
has cc || die "a C compiler is missing: apt-get install gcc"
[ "$(id -u)" -eq 0 ] || die "run as root (like every script here)"
[ "$files" -ge 1 ] && [ "$threads" -ge 1 ] || die "--files and --threads must be at least 1"
ab_setup "$work"
out=$OUT
cc -O2 -pthread -o "$work/smallfiles" "$REPO/bench/smallfiles.c"
# switches PID PATTERN: voluntary context switches of PID's threads whose name matches.
switches() {
    local t n=0 v
    for t in /proc/"$1"/task/*; do
        grep -qE "$2" "$t/comm" 2>/dev/null || continue
        v=$(awk '/^voluntary_ctxt_switches/ { print $2 }' "$t/status" 2>/dev/null) || continue
        n=$(( n + ${v:-0} ))
    done
    echo "$n"
}
for r in $(seq 1 "$rounds"); do
    for i in "${!BINS[@]}"; do
        bin=$(readlink -f "${BINS[$i]}")
        ab_pool "$bin" sfab
        mkdir -p "$work/mnt/d"
        sync
        pid=$(cat "$work/state/daemon.pid")
        c0=$(cpu_ms "$pid"); f0=$(switches "$pid" '^fuser-'); v0=$(switches "$pid" '^vdev_io')
        rate=$("$work/smallfiles" "$work/mnt/d" "$files" "$threads" 8192 | sed -n 's/.*files_per_s=\([0-9.]*\).*/\1/p')
        c1=$(cpu_ms "$pid"); f1=$(switches "$pid" '^fuser-'); v1=$(switches "$pid" '^vdev_io')
        [ -n "$rate" ] || die "smallfiles printed no result"
        printf 'bin%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$r" "$rate" "$(( (c1 - c0) * 1000 / files ))" \
            "$(( (f1 - f0) * 100 / files ))" "$(( (v1 - v0) * 100 / files ))" >> "$out"
        awk -v b="$bin" -v r="$r" -v f="$rate" -v us="$(( (c1 - c0) * 1000 / files ))" \
            -v fs="$(( (f1 - f0) * 100 / files ))" -v vs="$(( (v1 - v0) * 100 / files ))" \
            'BEGIN { printf "%-40s round %s  %8.1f files/s  daemon CPU %d us/file  switches/file: FUSE %.2f, I/O pool %.2f\n", b, r, f, us, fs / 100, vs / 100 }'
        ab_teardown "$bin" sfab
    done
done
ab_medians "$out" "median files/s:14:1,CPU us/file:11:0,FUSE sw/file:12:2:100,I/O sw/file:11:2:100" "${BINS[@]}"
