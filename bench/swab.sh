#!/usr/bin/env bash
# bench/swab.sh — streaming writers (eleven.sh's "Stream Write (20 threads)": fio, one
# file per job, 1 MiB writes, end_fsync) per build, alternating the builds round by
# round, on a fresh pool and right after a 1 GiB file was written, read and deleted
# (the order eleven.sh runs its rows in), with the daemon's CPU time.
#
#   bash bench/swab.sh --bins OLD/tarn,NEW/tarn [--rounds 2] [--jobs 20] [--size 1G] [--work DIR]
#
# Each round, build and case: a new 2-way mirror of two 4 GiB files written full of
# zeros once. "after delete": fio writes one --size file (1 MiB writes, end_fsync), the
# pool is exported, the page cache dropped, the pool imported, the file read twice and
# removed; then both cases run `--jobs` writers of --size/jobs each. Prints MiB/s and
# daemon CPU seconds per build, round and case, then each build's medians. Run by hand
# as root, never by CI; needs fio.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" rounds=2 jobs=20 size=1G work=/var/tmp/tarn-swab
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/swab.sh --bins A[,B...] [--rounds N] [--jobs N] [--size S] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
has fio || die "fio is missing: apt-get install fio"
[ "$(id -u)" -eq 0 ] || die "run as root (it drops the page cache)"
mib=$(( $(numfmt --from=iec "$size") >> 20 ))
[ "$jobs" -ge 1 ] && [ "$mib" -ge "$jobs" ] || die "--size must give each of the --jobs writers at least 1 MiB"
ab_setup "$work"
out=$OUT
FIO=(--directory="$work/mnt/e" --filename_format='$jobname.$jobnum' --ioengine=psync --group_reporting
     --output-format=terse --terse-version=3)
for r in $(seq 1 "$rounds"); do
    for case in fresh after-delete; do
        for i in "${!BINS[@]}"; do
            bin=$(readlink -f "${BINS[$i]}")
            ab_pool "$bin" swab
            mkdir -p "$work/mnt/e"
            if [ "$case" = after-delete ]; then
                fio --name=one "${FIO[@]}" --rw=write --bs=1M --size="${mib}m" --end_fsync=1 >/dev/null
                "$bin" zpool export swab
                sync; echo 3 > /proc/sys/vm/drop_caches
                "$bin" zpool import -d "$work" swab
                fio --name=one "${FIO[@]}" --rw=read --bs=1M --size="${mib}m" >/dev/null
                fio --name=one "${FIO[@]}" --rw=read --bs=1M --size="${mib}m" >/dev/null
                rm -f "$work/mnt/e/one.0"
            fi
            pid=$(cat "$work/state/daemon.pid")
            c0=$(cpu_ms "$pid")
            kib=$(fio --name=many "${FIO[@]}" --rw=write --bs=1M --size="$(( mib / jobs ))m" --numjobs="$jobs" \
                --end_fsync=1 | awk -F';' '$1 == "3" { print $48 }')
            c1=$(cpu_ms "$pid")
            printf 'bin%s\t%s\t%s\t%s\t%s\n' "$i" "$case" "$r" "$kib" "$(( c1 - c0 ))" >> "$out"
            awk -v b="$bin" -v c="$case" -v r="$r" -v k="$kib" -v ms="$(( c1 - c0 ))" \
                'BEGIN { printf "%-40s %-12s round %s  %7.1f MiB/s  daemon CPU %.2f s\n", b, c, r, k / 1024, ms / 1000 }'
            ab_teardown "$bin" swab
        done
    done
done
python3 - "$out" "${BINS[@]}" <<'PY'
import sys, statistics
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
med = lambda k, case, col: statistics.median(int(row[col]) for row in rows if row[0] == k and row[1] == case)
print(f"{'build':<40} {'case':<12} {'median MiB/s':>12} {'CPU s':>6}")
for i, b in enumerate(sys.argv[2:]):
    for case in ('fresh', 'after-delete'):
        print(f"{b:<40} {case:<12} {med(f'bin{i}', case, 3) / 1024:12.1f} {med(f'bin{i}', case, 4) / 1000:6.2f}")
PY
