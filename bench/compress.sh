#!/usr/bin/env bash
# bench/compress.sh — compression algorithms of issue 15 on a real corpus: Tarn with each
# `compression` setting next to the raw directory and btrfs `compress=zstd`, in one run.
#
#   sudo bash bench/compress.sh [--size 600M] [--algs off,lz4,zle,gzip,zstd,zstd-19,zstd-fast]
#                               [--targets raw,tarn,btrfs] [--workdir DIR]
#
# The corpus is a copy of /usr/share plus part of /usr/lib (binaries, libraries, already
# compressed files), cut to --size, made once in WORKDIR/corpus. For each target:
#   write MB/s       `cp -a corpus` into the target plus a sync (`zpool sync`; `sync -f`)
#   cold read MB/s   `tar -c` of the copy to /dev/null after the caches are dropped (Tarn:
#                    the pool is exported and imported; btrfs: unmounted and mounted)
#   ratio            Tarn: `zfs get compressratio`; btrfs: apparent bytes of the copy over
#                    the data bytes btrfs allocated for it (`btrfs filesystem usage -b`
#                    before and after); raw: 1.00
# Every Tarn setting gets its own single-leaf pool (one file vdev), so cold reads and
# ratios are per algorithm. Tarn runs with its own daemon socket and state directory
# under WORKDIR. It is run by hand, never by CI. Results also go to
# WORKDIR/compress-results.tsv.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"

SIZE=${BENCH_SIZE:-600M}
ALGS=off,lz4,zle,gzip,zstd,zstd-19,zstd-fast
TARGETS=raw,tarn,btrfs
WORK=${BENCH_DIR:-/var/tmp/bench-comp}
while [ $# -gt 0 ]; do
    case $1 in
        --size) SIZE=$2; shift 2 ;;
        --algs) ALGS=$2; shift 2 ;;
        --targets) TARGETS=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1" ;;
    esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (drop_caches, loop devices, mounts)"
wants() { [[ ",$TARGETS," == *",$1,"* ]]; }
has fusermount || has fusermount3 || apt_install fuse
if wants btrfs; then has mkfs.btrfs || apt_install btrfs-progs; fi

size_bytes=$(numfmt --from=iec "$SIZE")
VDEV_SIZE=$(( size_bytes * 2 / 1024 / 1024 + 512 ))M
mkdir -p "$WORK"
RESULTS=$WORK/compress-results.tsv
: > "$RESULTS"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" | tee -a "$RESULTS" >&2; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now_ns() { date +%s%N; }
mbps() { awk -v b="$1" -v ns="$2" 'BEGIN { printf "%.1f", b / 1e6 / (ns / 1e9) }'; }

# ---- corpus ----------------------------------------------------------------------------------
C=$WORK/corpus
if [ "$(cat "$C.size" 2>/dev/null)" != "$size_bytes" ]; then
    rm -rf "$C"; mkdir -p "$C/share" "$C/lib"
    log "copying the corpus (/usr/share, then /usr/lib up to $SIZE)"
    share_max=$(( size_bytes * 6 / 10 ))
    # Regular files only, in name order, until the budget is spent (tar keeps the tree).
    pick() {  # pick DIR MAX_BYTES: file names under DIR, sizes summing to at most MAX
        (cd "$1" && find . -xdev -type f -size -64M -printf '%s\t%p\n' | sort -t$'\t' -k2 |
            awk -F'\t' -v max="$2" '{ if (t + $1 > max) exit; t += $1; print $2 }') || true  # SIGPIPE upstream of awk's exit
    }
    pick /usr/share $(( size_bytes * 6 / 10 )) | tar -C /usr/share -c --verbatim-files-from -T - -f - 2>/dev/null | tar -x -C "$C/share" || true
    have=$(du -sb "$C" | cut -f1)
    pick /usr/lib $(( size_bytes - have )) | tar -C /usr/lib -c --verbatim-files-from -T - -f - 2>/dev/null | tar -x -C "$C/lib" || true
    echo "$size_bytes" > "$C.size"
fi
src_bytes=$(du -sb --apparent-size "$C" | cut -f1)
nfiles=$(find "$C" -type f | wc -l)
log "corpus: $src_bytes bytes in $nfiles files"
row corpus "bytes / files" "$src_bytes" "$nfiles"
printf 'target\twrite MB/s\tcold read MB/s\tratio\n' | tee -a "$RESULTS" >&2

# ---- raw ---------------------------------------------------------------------------------------
if wants raw; then
    R=$WORK/raw; rm -rf "$R"
    drop_caches
    t0=$(now_ns); cp -a "$C" "$R"; sync -f "$R"; t1=$(now_ns)
    w=$(mbps "$src_bytes" $((t1 - t0)))
    drop_caches
    t0=$(now_ns); tar -C "$R" -cf - . | cat > /dev/null; t1=$(now_ns)
    row raw "$w" "$(mbps "$src_bytes" $((t1 - t0)))" "1.00"
    rm -rf "$R"
fi

# ---- tarn --------------------------------------------------------------------------------------
if wants tarn; then
    find_tarn
    T=$WORK/tarn
    cleanup_tarn() {
        "$TARN" daemon --stop >/dev/null 2>&1 || true
        rm -rf "$T"
    }
    cleanup_tarn; mkdir -p "$T/state"
    export TARN_STATE_DIR=$T/state TARN_CACHEFILE=$T/state/tarn.cache TARN_SOCKET=$T/run/tarn.sock
    trap cleanup_tarn EXIT
    IFS=, read -r -a algs <<< "$ALGS"
    for a in "${algs[@]}"; do
        p=c$(echo "$a" | tr -c 'a-z0-9\n' 'x')
        (cd "$T" && "$TARN" zpool create -o size=$VDEV_SIZE -m "$T/$p" -O "compression=$a" "$p" "$p.img")
        drop_caches
        t0=$(now_ns); cp -a "$C" "$T/$p/c"; "$TARN" zpool sync "$p"; t1=$(now_ns)
        w=$(mbps "$src_bytes" $((t1 - t0)))
        ratio=$("$TARN" zfs get -H -o value compressratio "$p")
        "$TARN" zpool export "$p"; drop_caches; "$TARN" zpool import -d "$T" "$p"
        t0=$(now_ns); tar -C "$T/$p/c" -cf - . | cat > /dev/null; t1=$(now_ns)
        row "tarn compression=$a" "$w" "$(mbps "$src_bytes" $((t1 - t0)))" "$ratio"
        "$TARN" zpool destroy "$p"
        rm -f "$T/$p.img"
    done
    cleanup_tarn; trap - EXIT
fi

# ---- btrfs ---------------------------------------------------------------------------------------
if wants btrfs; then
    B=$WORK/btrfs
    LOOP=
    cleanup_btrfs() {
        mountpoint -q "$B/mnt" 2>/dev/null && umount "$B/mnt"
        [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null || true
        rm -rf "$B"
    }
    rm -rf "$B"; mkdir -p "$B/mnt"
    trap cleanup_btrfs EXIT
    truncate -s $VDEV_SIZE "$B/a.img"
    LOOP=$(losetup -f --show "$B/a.img")
    mkfs.btrfs -q -f "$LOOP" >/dev/null
    mount -o compress=zstd "$LOOP" "$B/mnt"
    data_used() { btrfs filesystem usage -b "$B/mnt" 2>/dev/null | awk '/^Data,/ { for (i = 1; i <= NF; i++) if ($i ~ /^Used:/) { sub("Used:", "", $i); print $i } }'; }
    u0=$(data_used)
    drop_caches
    t0=$(now_ns); cp -a "$C" "$B/mnt/c"; sync -f "$B/mnt"; t1=$(now_ns)
    w=$(mbps "$src_bytes" $((t1 - t0)))
    u1=$(data_used)
    umount "$B/mnt"; drop_caches; mount -o compress=zstd "$LOOP" "$B/mnt"
    t0=$(now_ns); tar -C "$B/mnt/c" -cf - . | cat > /dev/null; t1=$(now_ns)
    row "btrfs compress=zstd" "$w" "$(mbps "$src_bytes" $((t1 - t0)))" "$(awk -v a="$src_bytes" -v u=$((u1 - u0)) 'BEGIN { printf "%.2fx", a / u }')"
    cleanup_btrfs; trap - EXIT
fi
log "results in $RESULTS"
