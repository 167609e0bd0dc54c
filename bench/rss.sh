#!/usr/bin/env bash
# The daemon's resident memory against its bound (issue 14): RSS sampled every 0.2 s
# while a mixed workload runs over a data set several times the ARC, next to the ARC's
# own size (`tarn kstat arcstats`). The bound to check (tarn_cli::memory) is
#   arc_max + dirty-data limit + hdr_size + l2_hdr_size + 64 MiB + 32 MiB per mount;
# the script prints the largest RSS per phase, the ARC's size at the largest, what is
# left beyond arc_max + the dirty limit, the daemon's VmHWM, and the ratio of the
# largest RSS to the bound, then the fio results of each phase (MiB/s, IOPS).
#
#   sudo bash bench/rss.sh [--arc-max 256M] [--cache-max 512M] [--data 1G] [--runtime 20]
#
# --cache-max is TARN_CACHE_MAX (per-pool budget; its quarter is the pool's dirty-data
# limit, which the write throttle counts the open and the syncing txg against
# together). Workloads, one after the other, on one pool (a 4 GiB file leaf, one
# mounted file system): seq write of --data, export and import, cold seq read, 8K
# random read/write mix (4 jobs, 70% reads) for --runtime s, 5000 small files with 4
# threads.
# Needs root, fio. TARN_BIN picks the binary (default: cargo build --release).
set -euo pipefail
shopt -s inherit_errexit
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
ARC_MAX=256M; CACHE_MAX=512M; DATA=1G; RUNTIME=20
WORK=${BENCH_DIR:-/var/tmp/bench-rss}
while [ $# -gt 0 ]; do
    case $1 in
        --arc-max) ARC_MAX=$2; shift 2 ;;
        --cache-max) CACHE_MAX=$2; shift 2 ;;
        --data) DATA=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        *) die "unknown option $1" ;;
    esac
done
[ "$(id -u)" -eq 0 ] || die "run as root"
has fio || apt_install fio
find_tarn
tarn() { "$TARN" "$@"; }
rm -rf "$WORK"; mkdir -p "$WORK/state"
export TARN_STATE_DIR=$WORK/state TARN_CACHEFILE=$WORK/state/tarn.cache TARN_SOCKET=$WORK/run/tarn.sock
export TARN_CACHE_MAX=$CACHE_MAX
cleanup() {
    set +e
    [ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null
    tarn zpool destroy rsspool >/dev/null 2>&1
    tarn daemon --stop >/dev/null 2>&1
}
trap cleanup EXIT
(cd "$WORK" && tarn zpool create -o size=4G -m "$WORK/mnt" rsspool a.img)
tarn daemon --set arc_max="$ARC_MAX"
PID=$(cat "$WORK/state/daemon.pid")
: > "$WORK/samples"
phase() { echo "$1" > "$WORK/phase"; log "$2"; }
( while kill -0 "$PID" 2>/dev/null; do
      rss=$(awk '/^VmRSS/ { print $2 * 1024 }' "/proc/$PID/status")
      arc=$("$TARN" kstat arcstats 2>/dev/null | awk '$1 == "size" { s = $3 } $1 == "hdr_size" || $1 == "l2_hdr_size" { h += $3 } END { print s + 0, h + 0 }')
      echo "$rss ${arc:-0 0} $(cat "$WORK/phase" 2>/dev/null || echo setup)" >> "$WORK/samples"
      sleep 0.2
  done ) &
SAMPLER=$!
D=$WORK/mnt
phase seqwrite "seq write $DATA"
fio --name=w --filename="$D/data" --rw=write --bs=1M --size="$DATA" --end_fsync=1 --output-format=json --output="$WORK/fio-seqwrite.json"
phase reimport "export and import"
tarn zpool export rsspool; echo 3 > /proc/sys/vm/drop_caches; tarn zpool import -d "$WORK" rsspool
phase seqread "cold seq read"
fio --name=r --filename="$D/data" --rw=read --bs=1M --size="$DATA" --output-format=json --output="$WORK/fio-seqread.json"
phase randrw "8K random 70/30 read/write mix, 4 jobs, ${RUNTIME}s"
fio --name=m --filename="$D/data" --rw=randrw --rwmixread=70 --bs=8k --size="$DATA" --numjobs=4 \
    --runtime="$RUNTIME" --time_based --group_reporting --output-format=json --output="$WORK/fio-randrw.json"
phase smallfiles "5000 small files, 4 threads"
cc -O2 -pthread -o "$WORK/smallfiles" "$REPO/bench/smallfiles.c"
mkdir -p "$D/small"; SMALL=$("$WORK/smallfiles" "$D/small" 5000 4 8192)
kill "$SAMPLER"; SAMPLER=
HWM=$(awk '/^VmHWM/ { print $2 * 1024 }' "/proc/$PID/status")
to_b() { numfmt --from=iec "$1"; }
# The documented overhead (tarn_cli::memory::overhead_bytes): 64 MiB + 16 MiB per
# mounted file system; one is mounted here.
OVERHEAD=$(((64 + 16) << 20))
awk -v arcmax="$(to_b "$ARC_MAX")" -v cache="$(to_b "$CACHE_MAX")" -v hwm="$HWM" -v over="$OVERHEAD" '
    $1 > max { max = $1; arc = $2; at = $4 }
    $1 > pmax[$4] { pmax[$4] = $1 }
    $2 > arcpeak { arcpeak = $2 }
    $3 > hdrpeak { hdrpeak = $3 }
    END {
        dirty = cache / 4
        bound = arcmax + dirty + hdrpeak + over
        printf "samples: %d\n", NR
        for (p in pmax) printf "largest RSS during %-10s %8.1f MiB\n", p, pmax[p] / 1048576
        printf "largest RSS                  %8.1f MiB (during %s)\n", max / 1048576, at
        printf "VmHWM at the end             %8.1f MiB\n", hwm / 1048576
        printf "ARC size at that moment      %8.1f MiB (largest seen %.1f MiB; arc_max %.1f MiB)\n", arc / 1048576, arcpeak / 1048576, arcmax / 1048576
        printf "dirty-data limit             %8.1f MiB\n", dirty / 1048576
        printf "RSS - ARC at that moment     %8.1f MiB\n", (max - arc) / 1048576
        printf "RSS - arc_max - dirty limit  %8.1f MiB\n", (max - arcmax - dirty) / 1048576
        printf "bound                        %8.1f MiB (arc_max + dirty limit + hdr_size %.1f + overhead %.1f)\n", bound / 1048576, hdrpeak / 1048576, over / 1048576
        printf "VmHWM / bound                %8.2f\n", hwm / bound
    }' "$WORK/samples"
python3 - "$WORK" "$SMALL" <<'PY'
import json, sys
w = sys.argv[1]
def job(n): return json.load(open(f"{w}/fio-{n}.json"))["jobs"][0]
print("fio: seq write %.0f MiB/s, seq read %.0f MiB/s, randrw %.0f read + %.0f write IOPS; %s" % (
    job("seqwrite")["write"]["bw"] / 1024, job("seqread")["read"]["bw"] / 1024,
    job("randrw")["read"]["iops"], job("randrw")["write"]["iops"], sys.argv[2].strip()))
PY
