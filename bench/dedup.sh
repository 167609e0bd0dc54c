#!/usr/bin/env bash
# Dedup (issue 15, seed 004): a data set that is half duplicates — a VM-image-like
# file and a copy of it with small edits (one 4 KiB change in every 16th 128 KiB
# record) — written to Tarn with dedup=off and dedup=on, and to zfs-fuse with
# dedup=on (pool version 23), in one run. Per target: write MB/s (cp of both files
# plus a sync), the dedup ratio (`zpool list -o dedup`), and for Tarn the dedup
# table's entries and in-core bytes per entry (`zpool status -D`).
#
# Usage: bash bench/dedup.sh [--size 1G] [--targets tarn-off,tarn-on,zfs-fuse]
#                            [--workdir DIR]
#
# --size is the whole data set (two files of half of it each), made once from
# /dev/urandom under WORKDIR/data and read from the page cache. Each target gets a
# fresh single-file pool (sparse, 3 x --size + 1G). Tarn runs its own daemon (socket,
# state and cachefile under WORKDIR); zfs-fuse runs in a private mount namespace with
# cachefile=none. Needs root; installs fuse/zfs-fuse with apt-get when missing.
# Builds tarn with `cargo build --release -p tarn-cli` unless TARN_BIN names a
# binary. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
SIZE=1G
TARGETS=tarn-off,tarn-on,zfs-fuse
WORK=${BENCH_DIR:-/var/tmp/bench-dedup}

usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case $1 in
        --size) SIZE=$2; shift 2 ;;
        --targets) TARGETS=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown option $1" >&2; usage 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root (FUSE mounts)"
wants() { [[ ",$TARGETS," == *",$1,"* ]]; }
has fusermount || apt_install fuse
if wants zfs-fuse && ! has zfs-fuse; then apt_install zfs-fuse; fi

SIZE_BYTES=$(numfmt --from=iec "$SIZE")
HALF=$((SIZE_BYTES / 2))
VDEV_BYTES=$((3 * SIZE_BYTES + (1 << 30)))
mkdir -p "$WORK/data"
if [ "$(cat "$WORK/data/size" 2>/dev/null)" != "$SIZE_BYTES" ]; then
    log "making the data set: two files of $HALF bytes, the second the first with small edits"
    head -c "$HALF" /dev/urandom >"$WORK/data/image.raw"
    cp "$WORK/data/image.raw" "$WORK/data/image-edited.raw"
    python3 - "$WORK/data/image-edited.raw" <<'EOF'
import os, sys
f = open(sys.argv[1], "r+b")
size = os.path.getsize(sys.argv[1])
rec = 128 << 10
for off in range(0, size, 16 * rec):
    f.seek(off + 1000)
    f.write(os.urandom(4096))
EOF
    echo "$SIZE_BYTES" >"$WORK/data/size"
fi
cat "$WORK/data"/*.raw >/dev/null

now_ns() { date +%s%N; }
# "entries in-core-bytes" from `zpool status -D` ("0 -" without a table).
ddt_summary() { sed -n -e 's/.*DDT entries \([0-9]*\), size [^ ]* on disk, \([^ ]*\) in core.*/\1 \2/p' -e 's/.*no DDT entries.*/0 -/p' | head -n 1; }
mbps() { awk -v b="$1" -v ns="$2" 'BEGIN { printf "%.1f", b / 1e6 / (ns / 1e9) }'; }
declare -A MBS RATIO ENTRIES CORE

if wants tarn-off || wants tarn-on; then
    find_tarn
    export TARN_SOCKET=$WORK/run/tarn.sock TARN_STATE_DIR=$WORK/state TARN_CACHEFILE=$WORK/tarn.cache
    mkdir -p "$WORK/run" "$WORK/state"
    chmod 700 "$WORK/run"
    for mode in off on; do
        wants "tarn-$mode" || continue
        "$TARN" daemon --stop >/dev/null 2>&1 || true
        rm -f "$WORK/tarn.img"
        truncate -s "$VDEV_BYTES" "$WORK/tarn.img"
        "$TARN" zpool create -f -m "$WORK/mnt" -O dedup="$mode" ddbench "$WORK/tarn.img"
        t0=$(now_ns)
        cp "$WORK/data/image.raw" "$WORK/data/image-edited.raw" "$WORK/mnt/"
        "$TARN" zpool sync ddbench
        t1=$(now_ns)
        MBS[tarn-$mode]=$(mbps "$SIZE_BYTES" $((t1 - t0)))
        RATIO[tarn-$mode]=$("$TARN" zpool list -H -o dedup ddbench)
        read -r ENTRIES[tarn-$mode] CORE[tarn-$mode] <<<"$("$TARN" zpool status -D ddbench | ddt_summary)"
        cmp "$WORK/data/image-edited.raw" "$WORK/mnt/image-edited.raw" || die "tarn-$mode: the copy differs"
        "$TARN" zpool destroy -f ddbench
        log "tarn dedup=$mode: ${MBS[tarn-$mode]} MB/s, ${RATIO[tarn-$mode]}, ${ENTRIES[tarn-$mode]} entries"
    done
    "$TARN" daemon --stop >/dev/null 2>&1 || true
    rm -f "$WORK/tarn.img"
fi

if wants zfs-fuse; then
    pgrep -x zfs-fuse >/dev/null && die "zfs-fuse is already running on this host; it allows one daemon per host"
    d=$WORK/zfs-fuse
    rm -rf "$d"; mkdir -p "$d/mnt"
    truncate -s "$VDEV_BYTES" "$d/z.img"
    unshare --mount --propagation private sleep infinity &
    NS=$!
    RUN=(nsenter --target "$NS" --mount --)
    wait_for 5 in_new_namespace "$NS"
    "${RUN[@]}" zfs-fuse --pidfile "$d/zfs-fuse.pid"
    wait_for 10 test -s "$d/zfs-fuse.pid"
    ZF=$(cat "$d/zfs-fuse.pid")
    wait_for 10 "${RUN[@]}" zpool list
    "${RUN[@]}" zpool create -f -o cachefile=none -O dedup=on -m "$d/mnt" zfbench "$d/z.img"
    t0=$(now_ns)
    "${RUN[@]}" cp "$WORK/data/image.raw" "$WORK/data/image-edited.raw" "$d/mnt/"
    "${RUN[@]}" sync
    "${RUN[@]}" zpool export zfbench
    "${RUN[@]}" zpool import -o cachefile=none -d "$d" zfbench
    t1=$(now_ns)
    MBS[zfs-fuse]=$(mbps "$SIZE_BYTES" $((t1 - t0)))
    RATIO[zfs-fuse]=$("${RUN[@]}" zpool list -H -o dedup zfbench)
    read -r ENTRIES[zfs-fuse] CORE[zfs-fuse] <<<"$("${RUN[@]}" zpool status -D zfbench | ddt_summary)"
    "${RUN[@]}" zpool destroy -f zfbench
    kill -TERM "$ZF" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$ZF" 2>/dev/null || break; sleep 0.1; done
    kill "$NS" 2>/dev/null || true
    rm -rf "$d"
    log "zfs-fuse dedup=on: ${MBS[zfs-fuse]} MB/s, ${RATIO[zfs-fuse]}"
fi

printf '\n%-9s %9s %7s %9s %12s\n' target "write MB/s" dedup entries "in core/entry"
for t in tarn-off tarn-on zfs-fuse; do
    wants "$t" || continue
    printf '%-9s %9s %7s %9s %12s\n' "$t" "${MBS[$t]}" "${RATIO[$t]}" "${ENTRIES[$t]:--}" "${CORE[$t]:--}"
done
if wants tarn-off && wants tarn-on; then
    awk -v a="${MBS[tarn-on]}" -v b="${MBS[tarn-off]}" 'BEGIN { printf "\ntarn dedup=on / dedup=off write speed: %.2f\n", a / b }'
fi
if wants tarn-on && wants zfs-fuse; then
    awk -v a="${MBS[tarn-on]}" -v b="${MBS[zfs-fuse]}" 'BEGIN { printf "tarn dedup=on / zfs-fuse dedup=on write speed: %.2f\n", a / b }'
fi
