#!/usr/bin/env bash
# bench/send.sh — snapshot and send/receive workloads of issue 10, Tarn against zfs-fuse
# (Debian's, pool version 23, in a private mount namespace), btrfs (subvolume snapshots,
# `btrfs send/receive`) and the raw directory, in one run.
#
#   sudo bash bench/send.sh [--size 2G] [--targets raw,tarn,zfs-fuse,btrfs] [--workdir DIR]
#
# Rows (each target that has the operation):
#   cold read / full send   MB/s of `tar -c tree > /dev/null` (raw) or of a full send of
#                           the snapshot holding the tree to /dev/null, after cold()
#   incremental send        after rewriting 1% of the tree in place: seconds and bytes,
#                           also as a fraction of the full send's
#   receive                 MB/s of receiving the saved full stream into a second pool
#   send|mbuffer|recv       seconds for the whole pipeline into the second pool, and
#                           `cp -a` of the same tree between the two mounts
#   snapshot latency        median and p90 of 20 snapshots, idle and under two writers (ms)
# It is run by hand, never by CI. Results also go to WORKDIR/send-results.tsv.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"

SIZE=${BENCH_SIZE:-2G}
TARGETS=raw,tarn,zfs-fuse,btrfs
WORK=${BENCH_DIR:-/var/tmp/tarn-send-bench}
while [ $# -gt 0 ]; do
    case $1 in
        --size) SIZE=$2; shift 2 ;;
        --targets) TARGETS=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1" ;;
    esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (drop_caches, loop devices, mounts)"
wants() { [[ ",$TARGETS," == *",$1,"* ]]; }
has mbuffer || apt_install mbuffer
has fio || apt_install fio
has fusermount || apt_install fuse
if wants btrfs; then has mkfs.btrfs || apt_install btrfs-progs; fi

size_bytes=$(numfmt --from=iec "$SIZE")
VDEV_SIZE=$(( size_bytes * 3 / 1024 / 1024 + 1024 ))M   # room for two copies and the change
mkdir -p "$WORK"
RESULTS=$WORK/send-results.tsv
: > "$RESULTS"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" | tee -a "$RESULTS" >&2; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now_ns() { date +%s%N; }
mbps() { awk -v b="$1" -v ns="$2" 'BEGIN { printf "%.1f", b / 1e6 / (ns / 1e9) }'; }
secs() { awk -v ns="$1" 'BEGIN { printf "%.2f", ns / 1e9 }'; }

# The source tree: SIZE of 4 MiB files of incompressible data, built once on the raw
# directory and copied into every target.
SRC=$WORK/src
if [ ! -d "$SRC" ] || [ "$(du -sb "$SRC" | cut -f1)" -lt $(( size_bytes * 9 / 10 )) ]; then
    rm -rf "$SRC"; mkdir -p "$SRC"
    log "writing $SIZE of source files"
    n=$(( size_bytes / (4 << 20) ))
    head -c $(( 64 << 20 )) /dev/urandom > "$WORK/seed"
    for i in $(seq 1 "$n"); do
        d=$SRC/d$(( i % 16 )); mkdir -p "$d"
        # 4 MiB slices of the seed at shifting offsets: no two files are equal.
        dd if="$WORK/seed" of="$d/f$i" bs=4M count=1 skip=$(( (i * 4099) % (60 << 20) )) iflag=skip_bytes status=none
    done
fi
src_bytes=$(du -sb "$SRC" | cut -f1)

# change_one_percent DIR: in every 25th file rewrite 1 MiB of its 4 MiB in place
# (4% of the files, a quarter of each: 1% of the bytes).
change_one_percent() {
    local i=0 f
    find "$1" -type f | sort | while read -r f; do
        i=$((i + 1))
        if [ $(( i % 25 )) -eq 0 ]; then
            dd if=/dev/urandom of="$f" bs=1M count=1 seek=1 conv=notrunc status=none
        fi
    done
    sync
}

# Snapshot latency: 20 snapshots, 0.2 s apart, each timed around the command alone
# ($EPOCHREALTIME, no fork for the clock), with three writers in DIR:
#   idle    no writer;
#   append  fio appending 8 KiB blocks to one file with an fsync after each (a log or
#           database writer; the sync-write workload of bench/fio.sh, sequential);
#   stream  `dd bs=1M count=64 conv=fsync` in a loop (64 MiB buffered, then fsync):
#           every snapshot must also write the up to 64 MiB acknowledged since the
#           last fsync, so this row measures the pool's write bandwidth more than the
#           snapshot itself.
# RUN is a command prefix that reaches DIR (zfs-fuse's mount namespace), or empty.
snapshot_latency() {  # snapshot_latency NAME DIR TAKE [RUN...]: TAKE lat<writer><i>
    local name=$1 dir=$2 take=$3; shift 3
    local run=("$@") writer kind flag i t0 t1 lat sorted
    for kind in idle append stream; do
        flag=$(mktemp)
        case $kind in
            idle) sleep infinity & ;;
            append) "${run[@]}" fio --name=append --directory="$dir" --filename=append.tmp --rw=write --bs=8k \
                        --size=1G --fsync=1 --time_based --runtime=600 --output=/dev/null & ;;
            stream) "${run[@]}" bash -c "while [ -e $flag ]; do dd if=/dev/zero of=$dir/writer.tmp bs=1M count=64 conv=fsync status=none 2>/dev/null || true; done" & ;;
        esac
        writer=$!
        sleep 2
        lat=()
        for i in $(seq 1 20); do
            t0=$EPOCHREALTIME; "$take" "lat$kind$i"; t1=$EPOCHREALTIME
            lat+=( $(( (${t1/./} - ${t0/./}) )) )
            sleep 0.2
        done
        rm -f "$flag"
        # The stream writer ends by itself (flag gone), so its dd never outlives the
        # mount; the others are killed (nsenter execs fio, so $writer is fio's pid).
        [ "$kind" = stream ] || kill "$writer" 2>/dev/null || true
        wait "$writer" 2>/dev/null || true
        "${run[@]}" rm -f "$dir/writer.tmp" "$dir/append.tmp"
        sorted=$(printf '%s\n' "${lat[@]}" | sort -n)
        record "$name" "snapshot latency, $kind writer, median (ms)" "$(echo "$sorted" | sed -n 10p | awk '{ printf "%.1f", $1 / 1000 }')"
        record "$name" "snapshot latency, $kind writer, p90 (ms)" "$(echo "$sorted" | sed -n 18p | awk '{ printf "%.1f", $1 / 1000 }')"
    done
}

# ---- raw ----------------------------------------------------------------------------------
if wants raw; then
    drop_caches
    # GNU tar skips reading file data when its output is /dev/null: go through a pipe.
    t0=$(now_ns); tar -cf - -C "$SRC" . | cat > /dev/null; t1=$(now_ns)
    record raw "cold read (MB/s)" "$(mbps "$src_bytes" $((t1 - t0)))"
    rm -rf "$WORK/rawcopy"
    t0=$(now_ns); cp -a "$SRC" "$WORK/rawcopy"; sync; t1=$(now_ns)
    record raw "cp -a (s)" "$(secs $((t1 - t0)))"
    rm -rf "$WORK/rawcopy"
fi

# ---- tarn -----------------------------------------------------------------------------------
if wants tarn; then
    find_tarn
    T=$WORK/tarn
    cleanup_tarn() {
        "$TARN" daemon --stop >/dev/null 2>&1 || true
        for m in "$T"/mnt* ; do mountpoint -q "$m" 2>/dev/null && fusermount -u "$m"; done
        rm -rf "$T"
    }
    cleanup_tarn; mkdir -p "$T/state"
    export TARN_STATE_DIR=$T/state TARN_CACHEFILE=$T/state/tarn.cache TARN_SOCKET=$T/run/tarn.sock  # run/: made mode 0700 by the daemon
    (cd "$T" && "$TARN" zpool create -o size=$VDEV_SIZE -m "$T/mnt" src mirror a.img b.img)
    (cd "$T" && "$TARN" zpool create -o size=$VDEV_SIZE -m "$T/mnt2" dst mirror c.img d.img)
    trap cleanup_tarn EXIT
    "$TARN" zfs create src/fs
    log "tarn: copying the tree in"
    cp -a "$SRC/." "$T/mnt/fs/"
    "$TARN" zfs snapshot src/fs@a
    cold() { "$TARN" zpool export src; drop_caches; "$TARN" zpool import -d "$T" src; }
    cold
    t0=$(now_ns); "$TARN" zfs send src/fs@a > /dev/null; t1=$(now_ns)
    full_ns=$((t1 - t0))
    "$TARN" zfs send src/fs@a > "$WORK/full.stream"
    full_bytes=$(stat -c %s "$WORK/full.stream")
    record tarn "full send to /dev/null, cold (MB/s of tree)" "$(mbps "$src_bytes" $full_ns)"
    change_one_percent "$T/mnt/fs"
    "$TARN" zfs snapshot src/fs@b
    cold
    t0=$(now_ns); inc_bytes=$("$TARN" zfs send -i @a src/fs@b | wc -c); t1=$(now_ns)
    record tarn "incremental send after 1% change (s)" "$(secs $((t1 - t0)))"
    record tarn "incremental/full time" "$(awk -v a=$((t1 - t0)) -v b=$full_ns 'BEGIN { printf "%.3f", a / b }')"
    record tarn "incremental/full bytes" "$(awk -v a="$inc_bytes" -v b="$full_bytes" 'BEGIN { printf "%.3f", a / b }')"
    drop_caches
    t0=$(now_ns); "$TARN" zfs recv dst/r1 < "$WORK/full.stream"; t1=$(now_ns)
    record tarn "receive full stream (MB/s of tree)" "$(mbps "$src_bytes" $((t1 - t0)))"
    "$TARN" zfs destroy -r dst/r1
    cold
    t0=$(now_ns); "$TARN" zfs send src/fs@a | mbuffer -q -m 256M | "$TARN" zfs recv dst/r2; t1=$(now_ns)
    record tarn "send|mbuffer|recv (s)" "$(secs $((t1 - t0)))"
    "$TARN" zfs destroy -r dst/r2
    "$TARN" zfs create dst/cp
    cold
    t0=$(now_ns); cp -a "$T/mnt/fs/." "$T/mnt2/cp/"; sync; t1=$(now_ns)
    record tarn "cp -a between the pools (s)" "$(secs $((t1 - t0)))"
    snap_tarn() { "$TARN" zfs snapshot "src/fs@$1"; }
    snapshot_latency tarn "$T/mnt/fs" snap_tarn
    rm -f "$WORK/full.stream"
    cleanup_tarn; trap - EXIT
fi

# ---- zfs-fuse -------------------------------------------------------------------------------
# Debian's zfs-fuse (pool version 23) in a private mount namespace, pools made with
# cachefile=none; everything that touches its mounts runs inside through nsenter.
if wants zfs-fuse; then
    has zfs-fuse || apt_install zfs-fuse
    if pgrep -x zfs-fuse >/dev/null; then die "zfs-fuse is already running on this host; it allows one daemon per host"; fi
    Z=$WORK/zfs-fuse
    ZNS=""; ZPID=""
    cleanup_zfs_fuse() {
        if [ -n "$ZNS" ]; then
            nsenter --target "$ZNS" --mount -- zpool destroy -f zsrc 2>/dev/null || true
            nsenter --target "$ZNS" --mount -- zpool destroy -f zdst 2>/dev/null || true
        fi
        [ -n "$ZPID" ] && { kill -TERM "$ZPID" 2>/dev/null || true; wait_gone "$ZPID" 10; }
        [ -n "$ZNS" ] && { kill "$ZNS" 2>/dev/null || true; wait "$ZNS" 2>/dev/null || true; }
        rm -rf "$Z"
    }
    rm -rf "$Z"; mkdir -p "$Z/src" "$Z/dst"
    trap cleanup_zfs_fuse EXIT
    truncate -s $VDEV_SIZE "$Z/src/a.img" "$Z/src/b.img" "$Z/dst/c.img" "$Z/dst/d.img"
    unshare --mount --propagation private sleep infinity &
    ZNS=$!
    ZR=(nsenter --target "$ZNS" --mount --)
    wait_for 5 in_new_namespace "$ZNS"
    "${ZR[@]}" zfs-fuse --pidfile "$Z/zfs-fuse.pid"
    wait_for 10 test -s "$Z/zfs-fuse.pid"
    ZPID=$(cat "$Z/zfs-fuse.pid")
    wait_for 10 "${ZR[@]}" zpool list
    "${ZR[@]}" zpool create -f -o cachefile=none -m "$Z/mnt" zsrc mirror "$Z/src/a.img" "$Z/src/b.img"
    # zfs-fuse refuses to destroy a just-received file system ("dataset is busy"), so
    # the receives land beside each other: zdst holds three copies (VDEV_SIZE allows).
    "${ZR[@]}" zpool create -f -o cachefile=none -m "$Z/mnt2" zdst mirror "$Z/dst/c.img" "$Z/dst/d.img"
    "${ZR[@]}" zfs create zsrc/fs
    log "zfs-fuse: copying the tree in"
    "${ZR[@]}" cp -a "$SRC/." "$Z/mnt/fs/"
    "${ZR[@]}" zfs snapshot zsrc/fs@a
    cold() { "${ZR[@]}" zpool export zsrc; drop_caches; "${ZR[@]}" zpool import -o cachefile=none -d "$Z/src" zsrc; }
    cold
    t0=$(now_ns); "${ZR[@]}" zfs send zsrc/fs@a > /dev/null; t1=$(now_ns)
    full_ns=$((t1 - t0))
    "${ZR[@]}" zfs send zsrc/fs@a > "$WORK/full.zfs"
    full_bytes=$(stat -c %s "$WORK/full.zfs")
    record zfs-fuse "full send to /dev/null, cold (MB/s of tree)" "$(mbps "$src_bytes" $full_ns)"
    "${ZR[@]}" bash -c "$(declare -f change_one_percent); change_one_percent $Z/mnt/fs"
    "${ZR[@]}" zfs snapshot zsrc/fs@b
    cold
    t0=$(now_ns); inc_bytes=$("${ZR[@]}" zfs send -i @a zsrc/fs@b | wc -c); t1=$(now_ns)
    record zfs-fuse "incremental send after 1% change (s)" "$(secs $((t1 - t0)))"
    record zfs-fuse "incremental/full time" "$(awk -v a=$((t1 - t0)) -v b=$full_ns 'BEGIN { printf "%.3f", a / b }')"
    record zfs-fuse "incremental/full bytes" "$(awk -v a="$inc_bytes" -v b="$full_bytes" 'BEGIN { printf "%.3f", a / b }')"
    drop_caches
    t0=$(now_ns); "${ZR[@]}" zfs recv zdst/r1 < "$WORK/full.zfs"; t1=$(now_ns)
    record zfs-fuse "receive full stream (MB/s of tree)" "$(mbps "$src_bytes" $((t1 - t0)))"
    cold
    t0=$(now_ns); "${ZR[@]}" zfs send zsrc/fs@a | mbuffer -q -m 256M | "${ZR[@]}" zfs recv zdst/r2; t1=$(now_ns)
    record zfs-fuse "send|mbuffer|recv (s)" "$(secs $((t1 - t0)))"
    "${ZR[@]}" zfs create zdst/cp
    cold
    t0=$(now_ns); "${ZR[@]}" cp -a "$Z/mnt/fs/." "$Z/mnt2/cp/"; "${ZR[@]}" sync; t1=$(now_ns)
    record zfs-fuse "cp -a between the pools (s)" "$(secs $((t1 - t0)))"
    snap_zfs_fuse() { "${ZR[@]}" zfs snapshot "zsrc/fs@$1"; }
    # The writers run inside the namespace to see the mount.
    snapshot_latency zfs-fuse "$Z/mnt/fs" snap_zfs_fuse "${ZR[@]}"
    rm -f "$WORK/full.zfs"
    cleanup_zfs_fuse; trap - EXIT
fi

# ---- btrfs ----------------------------------------------------------------------------------
if wants btrfs; then
    B=$WORK/btrfs
    LOOPS=()
    cleanup_btrfs() {
        local m l
        for m in "$B/mnt" "$B/mnt2"; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
        for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
        rm -rf "$B"
    }
    rm -rf "$B"; mkdir -p "$B/mnt" "$B/mnt2"
    trap cleanup_btrfs EXIT
    truncate -s $VDEV_SIZE "$B/a.img" "$B/b.img" "$B/c.img" "$B/d.img"
    for f in a b c d; do LOOPS+=("$(losetup -f --show "$B/$f.img")"); done
    mkfs.btrfs -q -f -d raid1 -m raid1 "${LOOPS[0]}" "${LOOPS[1]}" >/dev/null
    mkfs.btrfs -q -f -d raid1 -m raid1 "${LOOPS[2]}" "${LOOPS[3]}" >/dev/null
    mnt1() { mount -o "device=${LOOPS[0]},device=${LOOPS[1]}" "${LOOPS[0]}" "$B/mnt"; }
    mnt1
    mount -o "device=${LOOPS[2]},device=${LOOPS[3]}" "${LOOPS[2]}" "$B/mnt2"
    btrfs subvolume create -q "$B/mnt/fs" 2>/dev/null || btrfs subvolume create "$B/mnt/fs" >/dev/null
    log "btrfs: copying the tree in"
    cp -a "$SRC/." "$B/mnt/fs/"
    btrfs subvolume snapshot -r "$B/mnt/fs" "$B/mnt/a" >/dev/null
    cold() { umount "$B/mnt"; drop_caches; mnt1; }
    cold
    t0=$(now_ns); btrfs send -q "$B/mnt/a" > /dev/null; t1=$(now_ns)
    full_ns=$((t1 - t0))
    btrfs send -q "$B/mnt/a" > "$WORK/full.btrfs"
    full_bytes=$(stat -c %s "$WORK/full.btrfs")
    record btrfs "full send to /dev/null, cold (MB/s of tree)" "$(mbps "$src_bytes" $full_ns)"
    change_one_percent "$B/mnt/fs"
    btrfs subvolume snapshot -r "$B/mnt/fs" "$B/mnt/b" >/dev/null
    cold
    t0=$(now_ns); inc_bytes=$(btrfs send -q -p "$B/mnt/a" "$B/mnt/b" | wc -c); t1=$(now_ns)
    record btrfs "incremental send after 1% change (s)" "$(secs $((t1 - t0)))"
    record btrfs "incremental/full time" "$(awk -v a=$((t1 - t0)) -v b=$full_ns 'BEGIN { printf "%.3f", a / b }')"
    record btrfs "incremental/full bytes" "$(awk -v a="$inc_bytes" -v b="$full_bytes" 'BEGIN { printf "%.3f", a / b }')"
    drop_caches
    t0=$(now_ns); btrfs receive -q "$B/mnt2" < "$WORK/full.btrfs"; sync; t1=$(now_ns)
    record btrfs "receive full stream (MB/s of tree)" "$(mbps "$src_bytes" $((t1 - t0)))"
    btrfs subvolume delete -c "$B/mnt2/a" >/dev/null
    mkdir -p "$B/mnt2/r2"
    cold
    t0=$(now_ns); btrfs send -q "$B/mnt/a" | mbuffer -q -m 256M | btrfs receive -q "$B/mnt2/r2"; sync; t1=$(now_ns)
    record btrfs "send|mbuffer|recv (s)" "$(secs $((t1 - t0)))"
    btrfs subvolume delete -c "$B/mnt2/r2/a" >/dev/null
    cold
    t0=$(now_ns); cp -a "$B/mnt/fs/." "$B/mnt2/"; sync; t1=$(now_ns)
    record btrfs "cp -a between the file systems (s)" "$(secs $((t1 - t0)))"
    snap_btrfs() { btrfs subvolume snapshot -r "$B/mnt/fs" "$B/mnt/$1" >/dev/null; }
    snapshot_latency btrfs "$B/mnt/fs" snap_btrfs
    rm -f "$WORK/full.btrfs"
    cleanup_btrfs; trap - EXIT
fi

log "results (also in $RESULTS):"
column -t -s $'\t' "$RESULTS"
