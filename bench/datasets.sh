#!/usr/bin/env bash
# bench/datasets.sh — `zfs create` and `zfs list` cost against the number of datasets
# (issue 12: flat per operation with 10,000 datasets, because each change writes a few
# MOS records instead of a whole directory).
#
#   sudo bash bench/datasets.sh [--count 10000] [--workdir DIR]
#
# Creates COUNT datasets (`zfs create -u`, unmounted), in batches of 1,000; after each
# batch it records the mean milliseconds per create over the batch, and the
# milliseconds of `zfs list -H -o name` of everything and of `zfs get -H -o value used`
# of one dataset. Prints a table and writes
# WORKDIR.tsv (beside the work directory, which is removed at the end). Run by hand, never by CI.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"

COUNT=10000
WORK=${BENCH_DIR:-/var/tmp/tarn-datasets-bench}
while [ $# -gt 0 ]; do
    case $1 in
        --count) COUNT=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1" ;;
    esac
done
find_tarn
rm -rf "$WORK"; mkdir -p "$WORK/state"
export TARN_STATE_DIR=$WORK/state TARN_CACHEFILE=$WORK/state/tarn.cache TARN_SOCKET=$WORK/run/tarn.sock  # run/: made mode 0700 by the daemon
cleanup() { "$TARN" daemon --stop >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
(cd "$WORK" && "$TARN" zpool create -O canmount=noauto -o size=2G -m none dsb a.img)
now_ns() { date +%s%N; }
ms() { awk -v ns="$1" -v n="${2:-1}" 'BEGIN { printf "%.2f", ns / 1e6 / n }'; }
RESULTS=${WORK%/}.tsv
printf 'datasets\tcreate ms/op\tlist ms\tget ms\n' > "$RESULTS"
made=0
while [ $made -lt "$COUNT" ]; do
    batch=$(( COUNT - made < 1000 ? COUNT - made : 1000 ))
    t0=$(now_ns)
    for i in $(seq $((made + 1)) $((made + batch))); do
        "$TARN" zfs create -u "dsb/d$i"
    done
    t1=$(now_ns)
    made=$((made + batch))
    create=$(ms $((t1 - t0)) "$batch")
    t0=$(now_ns); n=$("$TARN" zfs list -H -o name | wc -l); t1=$(now_ns)
    [ "$n" -eq $((made + 1)) ] || die "zfs list shows $n datasets, expected $((made + 1))"
    list=$(ms $((t1 - t0)))
    t0=$(now_ns); "$TARN" zfs get -H -o value used "dsb/d$made" >/dev/null; t1=$(now_ns)
    get=$(ms $((t1 - t0)))
    printf '%s\t%s\t%s\t%s\n' "$made" "$create" "$list" "$get" | tee -a "$RESULTS" >&2
done
column -t -s $'\t' "$RESULTS"
