#!/usr/bin/env bash
# bench/space.sh — space efficiency of raidz: allocated / logical bytes (issue 12).
#
#   sudo bash bench/space.sh [--targets tarn,zfs-fuse] [--workdir DIR]
#
# For each layout — raidz1 of 4 leaves and raidz3 of 19 leaves, sparse 1 GiB files,
# compression off — and each corpus — a copy of /usr/include (thousands of small
# files) and four 64 MiB files of random bytes (large files) — it creates a fresh
# pool, copies the corpus in, syncs, and records the raw bytes the pool allocated for
# it (`zpool list -Hp -o allocated` after the copy minus the same right after create;
# parity and skip sectors included, as OpenZFS's ALLOC counts them). Beside each it
# prints what OpenZFS's allocation formula gives for the corpus's data blocks alone
# (vdev_raidz_asize: data sectors plus parity per row, rounded up to a multiple of
# nparity + 1; one block of roundup(size, 512) for a file up to the 128 KiB recordsize,
# else 128 KiB records) at ashift 12, the sector size of both systems here (Debian's
# zfs-fuse defaults file vdevs to ashift 12 too). The ratio column is allocated / logical (apparent file
# bytes). Metadata (dnodes, directories, indirect blocks) is the difference between a
# measured figure and its formula line.
#
# Needs root; installs zfs-fuse with apt-get when that target is asked for and missing
# (it runs in a private mount namespace, pool made with cachefile=none). Run by hand.
set -euo pipefail
shopt -s inherit_errexit
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"

TARGETS=tarn,zfs-fuse
WORK=${BENCH_DIR:-/var/tmp/tarn-space-bench}
while [ $# -gt 0 ]; do
    case $1 in
        --targets) TARGETS=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1" ;;
    esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (loop-free, but zfs-fuse and FUSE mounts need it)"
wants() { [[ ",$TARGETS," == *",$1,"* ]]; }
wants tarn && find_tarn
if wants zfs-fuse && ! has zfs-fuse; then log "installing zfs-fuse"; apt_install zfs-fuse; fi

rm -rf "$WORK"; mkdir -p "$WORK/corpus"
ZF_NS_PID=""; ZF_PID=""
cleanup() {
    if [ -n "${TARN:-}" ]; then "$TARN" daemon --stop >/dev/null 2>&1 || true; fi
    if [ -n "$ZF_NS_PID" ]; then
        nsenter --target "$ZF_NS_PID" --mount -- zpool destroy -f spacebench 2>/dev/null || true
        [ -n "$ZF_PID" ] && { kill -TERM "$ZF_PID" 2>/dev/null || true; wait_gone "$ZF_PID" 10; }
        kill "$ZF_NS_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# The corpora, copied once so every target reads the same bytes.
log "preparing corpora"
cp -a /usr/include "$WORK/corpus/small"
mkdir -p "$WORK/corpus/large"
for i in 1 2 3 4; do head -c $((64 << 20)) /dev/urandom > "$WORK/corpus/large/f$i"; done

# formula CORPUS PARITY WIDTH ASHIFT: OpenZFS's raidz asize summed over the corpus's
# data blocks, compression off, recordsize 128 KiB.
formula() {
    find "$1" -type f -printf '%s\n' | awk -v p="$2" -v w="$3" -v a="$4" '
        function asize(psize,   s, sect) {
            sect = 2 ^ a
            s = int((psize - 1) / sect) + 1
            s += p * int((s + w - p - 1) / (w - p))
            s = int((s + p) / (p + 1)) * (p + 1)
            return s * sect
        }
        {
            size = $1
            if (size == 0) next
            if (size <= 131072) { total += asize(int((size + 511) / 512) * 512) }
            else { total += int((size + 131071) / 131072) * asize(131072) }
        }
        END { printf "%d\n", total }'
}
logical() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d\n", s }'; }

RESULTS=()
record() {  # record TARGET LAYOUT CORPUS ALLOC_BYTES LOGICAL_BYTES
    RESULTS+=("$(printf '%s\t%s\t%s\t%s\t%s' "$@")")
}

# ---- tarn ---------------------------------------------------------------------------------
run_tarn() {  # run_tarn PARITY WIDTH CORPUS
    local p=$1 w=$2 c=$3 d=$WORK/tarn leaves=() i before after
    rm -rf "$d"; mkdir -p "$d/state"
    for i in $(seq 1 "$w"); do leaves+=("l$i.img"); done
    export TARN_STATE_DIR=$d/state TARN_CACHEFILE=$d/state/tarn.cache TARN_SOCKET=$d/run/tarn.sock
    (cd "$d" && "$TARN" zpool create -o size=1G -O compression=off -m "$d/mnt" spacebench "raidz$p" "${leaves[@]}")
    "$TARN" zpool sync spacebench
    before=$("$TARN" zpool list -Hp -o allocated spacebench)
    cp -a "$WORK/corpus/$c" "$d/mnt/"
    "$TARN" zpool sync spacebench
    after=$("$TARN" zpool list -Hp -o allocated spacebench)
    record tarn "raidz$p x$w" "$c" $((after - before)) "$(logical "$WORK/corpus/$c")"
    "$TARN" zpool destroy spacebench
    "$TARN" daemon --stop >/dev/null 2>&1 || true
    rm -rf "$d"
}

# ---- zfs-fuse -------------------------------------------------------------------------------
run_zfs_fuse() {  # run_zfs_fuse PARITY WIDTH CORPUS
    local p=$1 w=$2 c=$3 d=$WORK/zfs-fuse leaves=() i before after
    if pgrep -x zfs-fuse >/dev/null; then die "zfs-fuse is already running on this host; it allows one daemon per host"; fi
    rm -rf "$d"; mkdir -p "$d/mnt"
    for i in $(seq 1 "$w"); do truncate -s 1G "$d/l$i.img"; leaves+=("$d/l$i.img"); done
    unshare --mount --propagation private sleep infinity &
    ZF_NS_PID=$!
    local RUN=(nsenter --target "$ZF_NS_PID" --mount --)
    wait_for 5 in_new_namespace "$ZF_NS_PID"
    "${RUN[@]}" zfs-fuse --pidfile "$d/zfs-fuse.pid"
    wait_for 10 test -s "$d/zfs-fuse.pid"
    ZF_PID=$(cat "$d/zfs-fuse.pid")
    wait_for 10 "${RUN[@]}" zpool list
    "${RUN[@]}" zpool create -f -o cachefile=none -O compression=off -m "$d/mnt" spacebench "raidz$p" "${leaves[@]}"
    # zfs-fuse has no `zpool sync`: an export and import commits everything.
    zf_settle() { "${RUN[@]}" zpool export spacebench; "${RUN[@]}" zpool import -o cachefile=none -d "$d" spacebench; }
    zf_settle
    before=$("${RUN[@]}" zpool list -H -o allocated spacebench)
    "${RUN[@]}" cp -a "$WORK/corpus/$c" "$d/mnt/"
    zf_settle
    after=$("${RUN[@]}" zpool list -H -o allocated spacebench)
    # zfs-fuse's zpool list has no -p: convert its human figures (1024-based).
    to_bytes() { numfmt --from=iec "$1"; }
    record zfs-fuse "raidz$p x$w" "$c" $(( $(to_bytes "$after") - $(to_bytes "$before") )) "$(logical "$WORK/corpus/$c")"
    "${RUN[@]}" zpool destroy -f spacebench
    kill -TERM "$ZF_PID" 2>/dev/null || true; wait_gone "$ZF_PID" 10; ZF_PID=""
    kill "$ZF_NS_PID" 2>/dev/null || true; wait "$ZF_NS_PID" 2>/dev/null || true; ZF_NS_PID=""
    rm -rf "$d"
}

for layout in "1 4" "3 19"; do
    read -r p w <<< "$layout"
    for c in small large; do
        if wants tarn; then log "tarn raidz$p x$w $c"; run_tarn "$p" "$w" "$c"; fi
        if wants zfs-fuse; then log "zfs-fuse raidz$p x$w $c"; run_zfs_fuse "$p" "$w" "$c"; fi
        lg=$(logical "$WORK/corpus/$c")
        record "formula ashift 12" "raidz$p x$w" "$c" "$(formula "$WORK/corpus/$c" "$p" "$w" 12)" "$lg"
    done
done

printf '\n| layout | corpus | system | allocated (MiB) | logical (MiB) | allocated / logical |\n|---|---|---|---:|---:|---:|\n'
for r in "${RESULTS[@]}"; do
    IFS=$'\t' read -r t l c a g <<< "$r"
    awk -v t="$t" -v l="$l" -v c="$c" -v a="$a" -v g="$g" \
        'BEGIN { printf "| %s | %s | %s | %.1f | %.1f | %.3f |\n", l, c, t, a / 1048576, g / 1048576, a / g }'
done
