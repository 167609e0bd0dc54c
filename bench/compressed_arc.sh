#!/usr/bin/env bash
# Compressed ARC (issue 14): random 4 KiB reads of an lz4-compressed text file that
# is warm in the ARC, with `compressed_arc_enabled` 1 (the default: blocks kept
# compressed, a cache of recently decompressed blocks of c/32 in front) and 0
# (blocks kept decompressed), in one run. Prints IOPS and the ARC's `size`,
# `uncompressed_size` and `overhead_size` (the decompressed cache) per setting.
#
# Usage: bash bench/compressed_arc.sh [--size 256M] [--runtime 15] [--arc-max 4G]
#                                     [--workdir DIR]
#
# Per setting: a fresh single-file pool with compression=lz4 under --workdir, its own
# daemon (`tarn daemon --set arc_max=… compressed_arc_enabled=…` before any data is
# written), a --size file of numbered text lines, two sequential 1M reads to warm the
# ARC, then fio rw=randread bs=4k direct=1 for --runtime seconds. With the file
# larger than arc_max/32 the decompressed cache cannot hold it all and the hits pay
# a decompression each. Needs root (FUSE) and fio. Builds tarn with `cargo build
# --release -p tarn-cli` unless TARN_BIN names a binary. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
SIZE=256M
RUNTIME=15
ARC_MAX=4G
WORK=${BENCH_DIR:-/var/tmp/bench-carc}

usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case $1 in
        --size) SIZE=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --arc-max) ARC_MAX=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown option $1" >&2; usage 2 ;;
    esac
done
has fio || die "fio is needed"
[ "$(id -u)" = 0 ] || die "run as root (FUSE mount)"
SIZE_BYTES=$(numfmt --from=iec "$SIZE")
find_tarn
export TARN_SOCKET=$WORK/run/tarn.sock TARN_STATE_DIR=$WORK/state TARN_CACHEFILE=$WORK/tarn.cache
stat_of() { "$TARN" kstat arcstats | awk -v n="$1" '$1 == n { print $3 }'; }

declare -A IOPS SIZE_OF LOGICAL OVERHEAD
for on in 1 0; do
    "$TARN" daemon --stop >/dev/null 2>&1 || true
    rm -rf "$WORK"; mkdir -p "$WORK/run" "$WORK/state"; chmod 700 "$WORK/run"
    truncate -s $((SIZE_BYTES * 4 + (1 << 30))) "$WORK/leaf.img"
    "$TARN" zpool create -f -m "$WORK/mnt" -O compression=lz4 cbench "$WORK/leaf.img"
    "$TARN" daemon --set arc_max="$ARC_MAX" compressed_arc_enabled=$on
    python3 - "$WORK/mnt/f" "$SIZE_BYTES" <<'EOF'
import sys
path, size = sys.argv[1], int(sys.argv[2])
with open(path, "wb") as f:
    i = written = 0
    while written < size:
        line = b"line %d: the quick brown fox jumps over the lazy dog 0123456789\n" % i
        f.write(line[: size - written])
        written += len(line)
        i += 1
EOF
    "$TARN" zpool sync cbench
    fio --name=warm --filename="$WORK/mnt/f" --rw=read --bs=1M --direct=1 --size="$SIZE_BYTES" --loops=2 >/dev/null
    fio --name=r --filename="$WORK/mnt/f" --rw=randread --bs=4k --direct=1 --ioengine=psync --size="$SIZE_BYTES" \
        --time_based --runtime="$RUNTIME" --output-format=json >"$WORK/../carc-fio-$on.json"
    IOPS[$on]=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['jobs'][0]['read']['iops']))" "$WORK/../carc-fio-$on.json")
    SIZE_OF[$on]=$(stat_of size); LOGICAL[$on]=$(stat_of uncompressed_size); OVERHEAD[$on]=$(stat_of overhead_size)
    log "compressed_arc_enabled=$on: ${IOPS[$on]} IOPS, ARC size ${SIZE_OF[$on]}, uncompressed ${LOGICAL[$on]}, overhead ${OVERHEAD[$on]}"
    "$TARN" zpool destroy -f cbench
done
"$TARN" daemon --stop >/dev/null 2>&1 || true

printf '\n%-22s %8s %12s %18s %14s\n' setting IOPS size uncompressed_size overhead_size
for on in 1 0; do
    printf '%-22s %8s %12s %18s %14s\n' "compressed_arc=$on" "${IOPS[$on]}" "${SIZE_OF[$on]}" "${LOGICAL[$on]}" "${OVERHEAD[$on]}"
done
