#!/usr/bin/env bash
# bench/clilat.sh — where the time of a `tarn zfs …` command goes: the client's own
# process (start, connect, print, exit) against the daemon's share, idle and beside the
# fsynced 8 KiB appender of bench/snaplat.sh, for one or more client builds in turn.
#
#   bash bench/clilat.sh --bins A/tarn[,B/tarn...] [--count 30] [--work DIR]
#
# One daemon (the engine of the first build) and one pool (a 2-way mirror of sparse
# 2 GiB file leaves, dataset POOL/fs). For each writer (idle, append) and each of COUNT
# rounds: every build's client runs `zfs list -H -o name POOL` and `zfs snapshot`
# (each timed around the command alone, $EPOCHREALTIME, 0.1 s apart), then a resident
# Python client sends the same snapshot request straight to the socket (no process
# start: the daemon's share, from connect to the answer read). Prints each median in
# µs. Clients of any build speak the same protocol, so each is measured against the
# same daemon, alternating. Run by hand as root, never by CI; needs fio and python3.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" count=30 work=/var/tmp/tarn-clilat
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --count) count=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/clilat.sh --bins A/tarn[,B/tarn...] [--count N] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
has fio || die "fio is missing: apt-get install fio"
has python3 || die "python3 is missing: apt-get install python3"
[ "$(id -u)" -eq 0 ] || die "run as root (like every script here)"
rm -rf "$work"; mkdir -p "$work/state"
export TARN_STATE_DIR=$work/state TARN_CACHEFILE=$work/state/tarn.cache TARN_SOCKET=$work/run/tarn.sock
first=$(readlink -f "${BINS[0]}")
(cd "$work" && "$first" zpool create -o size=2G -m "$work/mnt" cl mirror a.img b.img >/dev/null)
"$first" zfs create cl/fs
writer=""
trap '[ -z "$writer" ] || kill "$writer" 2>/dev/null || true; "$first" daemon --stop >/dev/null 2>&1 || true' EXIT
out=$work/samples.tsv; : > "$out"
for kind in idle append; do
    if [ "$kind" = append ]; then
        fio --name=append --directory="$work/mnt/fs" --filename=append.tmp --rw=write --bs=8k --size=1G \
            --fsync=1 --time_based --runtime=3600 --output=/dev/null >/dev/null 2>&1 &
        writer=$!
        sleep 2
    fi
    for r in $(seq 1 "$count"); do
        for i in "${!BINS[@]}"; do
            bin=$(readlink -f "${BINS[$i]}")
            name=cl/fs@$kind-$i-$r
            t0=$EPOCHREALTIME; "$bin" zfs list -H -o name cl >/dev/null; t1=$EPOCHREALTIME
            printf '%s\tbin%s list\t%s\n' "$kind" "$i" $(( ${t1/./} - ${t0/./} )) >> "$out"
            sleep 0.1
            t0=$EPOCHREALTIME; "$bin" zfs snapshot "$name"; t1=$EPOCHREALTIME
            printf '%s\tbin%s snapshot\t%s\n' "$kind" "$i" $(( ${t1/./} - ${t0/./} )) >> "$out"
            sleep 0.1
        done
        python3 - "$REPO/bench" "$TARN_SOCKET" "cl/fs@$kind-sock-$r" "$kind" >> "$out" <<'PY'
import sys
sys.dont_write_bytecode = True  # no __pycache__ in the tree
sys.path.insert(0, sys.argv[1])
from tarnsock import request
us, _ = request(sys.argv[2], ["zfs", "snapshot", sys.argv[3]])
print(f"{sys.argv[4]}\tdaemon snapshot\t{us:.0f}")
PY
        sleep 0.1
    done
    if [ "$kind" = append ]; then kill "$writer" 2>/dev/null || true; wait "$writer" 2>/dev/null || true; writer=""; fi
done
for i in "${!BINS[@]}"; do echo "bin$i = ${BINS[$i]}"; done
python3 - "$out" <<'PY'
import statistics, sys
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
keys = sorted({(r[0], r[1]) for r in rows}, key=lambda k: (k[0] != 'idle', k[1]))
print(f"{'writer':<8} {'what':<22} {'median us':>10} {'samples':>8}")
for k in keys:
    v = [int(r[2]) for r in rows if (r[0], r[1]) == k]
    print(f"{k[0]:<8} {k[1]:<22} {statistics.median(v):>10.0f} {len(v):>8}")
PY
