#!/usr/bin/env bash
# Run the same fio workloads against several storage targets in one go and print one
# table: a row per workload, a column per target, each value with its ratio to `raw`.
#
# Usage: bash bench/fio.sh [--targets raw,tarn,zfs-fuse,btrfs] [--size 1G]
#                          [--runtime 20] [--files 5000] [--workdir DIR]
#                          [--workloads seqwrite,seqread,randread,randwrite,...]
#                          [--prefill]
# (--prefill writes every vdev file of tarn, zfs-fuse and btrfs full of zeros before
# the pool is made, as fio lays out raw's file: without it the files are sparse and
# every first write to a region also allocates it in the host file system, which an
# fsync then has to commit; a disk has no such cost.)
# (the eleven-metrics keys csrl,srl,csr,sr,swl,sw,syncw,crr,rr,fc run only when named:
# bench/eleven.sh)
# (--workloads: keys of the WORKLOADS table below, default all; the file the
# single-file workloads use is always laid out by the seq write and read cold.)
#
# Targets (each is three functions below: setup_<t>, cold_<t>, teardown_<t>):
#   raw       a plain directory on the file system that holds the vdev files
#   tarn      a Tarn mount: `zpool create benchpool mirror a.img b.img` (4 GiB files)
#             with a private daemon (TARN_SOCKET / TARN_STATE_DIR under the workdir)
#   tarn-slog the same plus `log slog.img` (a 1 GiB plain file on the same disk)
#   zfs-fuse  Debian's zfs-fuse daemon in a private mount namespace, a mirror of two
#             4 GiB files, pool created with -o cachefile=none
#   btrfs     btrfs raid1 (data and metadata) over two loop devices on 4 GiB files
#   fuse-null the FUSE ceiling: crates/fuse/examples/fuse_null.rs, a minimal `fuser`
#             file system with Tarn's mount options and 16 threads; reads are zeros
#             from memory, writes are discarded ($FUSE_NULL_BIN, or built with cargo)
#   fuse-null-uring  the same over FUSE-over-io_uring (`fuse_null --uring`: a ring
#             and a pinned thread per CPU); turns on the fuse module's enable_uring
#             parameter for the run and puts it back after
#   passthrough  the same program forwarding every request to a plain directory on
#             the file system of `raw` (FUSE's cost over raw)
#
# Needs root. Installs fio, fuse (never fuse3), zfs-fuse and btrfs-progs with apt-get
# when they are missing and the chosen targets need them. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
TARGETS=raw,tarn,zfs-fuse,btrfs
SIZE=${BENCH_SIZE:-1G}
RUNTIME=${BENCH_RUNTIME:-20}
NFILES=${BENCH_FILES:-5000}
WORK=${BENCH_DIR:-/var/tmp/tarn-bench}
ONLY=all
VDEV_SIZE=4G
PREFILL=0

usage() { sed -n '2,36p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
# vdev_files SIZE FILE...: sparse files of SIZE, or written full with --prefill.
vdev_files() {
    local size=$1 f; shift
    for f in "$@"; do
        if [ "$PREFILL" = 1 ]; then
            dd if=/dev/zero of="$f" bs=1M count=$(( $(numfmt --from=iec "$size") >> 20 )) conv=fsync status=none
        else
            truncate -s "$size" "$f"
        fi
    done
}
while [ $# -gt 0 ]; do
    case $1 in
        --targets) TARGETS=$2; shift 2 ;;
        --targets=*) TARGETS=${1#*=}; shift ;;
        --size) SIZE=$2; shift 2 ;;
        --size=*) SIZE=${1#*=}; shift ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --runtime=*) RUNTIME=${1#*=}; shift ;;
        --files) NFILES=$2; shift 2 ;;
        --files=*) NFILES=${1#*=}; shift ;;
        --workdir) WORK=$2; shift 2 ;;
        --workloads) ONLY=$2; shift 2 ;;
        --workloads=*) ONLY=${1#*=}; shift ;;
        --prefill) PREFILL=1; shift ;;
        --workdir=*) WORK=${1#*=}; shift ;;
        -h|--help) usage 0 ;;
        *) echo "fio.sh: unknown option $1" >&2; usage 2 ;;
    esac
done
IFS=, read -r -a TARGET_LIST <<< "$TARGETS"

[ "$(id -u)" -eq 0 ] || die "run as root (drop_caches, loop devices, FUSE)"
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
RESULTS=$WORK/results.tsv
: > "$RESULTS"

# ---- packages ------------------------------------------------------------------------
wants() { [[ ",$TARGETS," == *",$1,"* ]]; }

has fio || { log "installing fio"; apt_install fio; }
if wants tarn && ! has fusermount; then log "installing fuse"; apt_install fuse; fi
if wants zfs-fuse && ! has zfs-fuse; then log "installing zfs-fuse"; apt_install zfs-fuse; fi
if wants btrfs && ! has mkfs.btrfs; then log "installing btrfs-progs"; apt_install btrfs-progs; fi

SMALLFILES=$WORK/smallfiles
cc -O2 -pthread -o "$SMALLFILES" "$REPO/bench/smallfiles.c"

# ---- common helpers --------------------------------------------------------------------
DIR=""       # where the current target's workloads run
RUN=()       # command prefix for the current target (zfs-fuse: nsenter into its namespace)

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# ---- target: raw ---------------------------------------------------------------------------
setup_raw() { mkdir -p "$WORK/raw"; DIR=$WORK/raw; }
cold_raw() { drop_caches; }
teardown_raw() { rm -rf "$WORK/raw"; }

# ---- target: tarn --------------------------------------------------------------------------
TARN_POOL=benchpool
tarn() { "$TARN" "$@"; }
setup_tarn() {  # setup_tarn [EXTRA VDEV SPEC...]
    find_tarn
    local d=$WORK/tarn
    rm -rf "$d"; mkdir -p "$d/state"  # the daemon makes $d/run itself, mode 0700
    export TARN_STATE_DIR=$d/state TARN_CACHEFILE=$d/state/tarn.cache TARN_SOCKET=$d/run/tarn.sock
    local a
    for a in "$@"; do case $a in *.img) vdev_files 1G "$d/$a" ;; esac; done  # extra vdevs: 1 GiB files
    vdev_files $VDEV_SIZE "$d/a.img" "$d/b.img"
    (cd "$d" && tarn zpool create -m "$d/mnt" $TARN_POOL mirror a.img b.img "$@")
    mountpoint -q "$d/mnt" || die "tarn: $d/mnt is not mounted"
    DIR=$d/mnt
}
setup_tarn_slog() { setup_tarn log slog.img; }  # in the pool's directory, so import -d finds it
cold_tarn_slog() { cold_tarn; }
teardown_tarn_slog() { teardown_tarn; }
cold_tarn() {
    tarn zpool export $TARN_POOL
    drop_caches
    tarn zpool import -d "$WORK/tarn" $TARN_POOL
    mountpoint -q "$DIR" || die "tarn: $DIR is not mounted after import"
}
teardown_tarn() {
    [ -n "${TARN:-}" ] || return 0
    tarn zpool destroy $TARN_POOL 2>/dev/null || tarn zpool export $TARN_POOL 2>/dev/null || true
    local pidfile=$WORK/tarn/state/daemon.pid pid
    if [ -f "$pidfile" ]; then
        pid=$(cat "$pidfile")
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    mountpoint -q "$WORK/tarn/mnt" 2>/dev/null && fusermount -u "$WORK/tarn/mnt"
    rm -rf "$WORK/tarn"
}

# ---- targets: fuse-null, passthrough -------------------------------------------------
FN_PID=""
find_fuse_null() {
    if [ -n "${FUSE_NULL_BIN:-}" ]; then
        FUSE_NULL=$FUSE_NULL_BIN
    else
        local target_dir
        log "building fuse_null (cargo build --release -p tarn-fuse --example fuse_null)"
        (cd "$REPO" && cargo build --release -q -p tarn-fuse --example fuse_null)
        target_dir=${CARGO_TARGET_DIR:-$REPO/target}
        case $target_dir in /*) ;; *) target_dir=$REPO/$target_dir ;; esac
        FUSE_NULL=$target_dir/release/examples/fuse_null
    fi
    [ -x "$FUSE_NULL" ] || die "no fuse_null binary at $FUSE_NULL"
}
start_fuse_null() {  # start_fuse_null NAME [--passthrough DIR]
    local d=$WORK/$1; shift
    find_fuse_null
    mkdir -p "$d/mnt"
    "$FUSE_NULL" "$@" "$d/mnt" &
    FN_PID=$!
    wait_for 10 mountpoint -q "$d/mnt"
    DIR=$d/mnt
}
stop_fuse_null() {
    local d=$WORK/$1
    mountpoint -q "$d/mnt" 2>/dev/null && fusermount -u "$d/mnt"
    [ -n "$FN_PID" ] && wait_gone "$FN_PID" 10
    FN_PID=""
    rm -rf "$d"
}
setup_fuse_null() { rm -rf "$WORK/fuse-null"; start_fuse_null fuse-null; }
cold_fuse_null() { drop_caches; }
teardown_fuse_null() { stop_fuse_null fuse-null; }
setup_passthrough() {
    rm -rf "$WORK/passthrough"; mkdir -p "$WORK/passthrough/dir"
    start_fuse_null passthrough --passthrough "$WORK/passthrough/dir"
}
cold_passthrough() { drop_caches; }
teardown_passthrough() { stop_fuse_null passthrough; }
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_WAS=""
setup_fuse_null_uring() {
    [ -w "$URING_PARAM" ] || die "this kernel has no FUSE over io_uring ($URING_PARAM missing: CONFIG_FUSE_IO_URING)"
    URING_WAS=$(cat "$URING_PARAM")
    echo Y > "$URING_PARAM"
    rm -rf "$WORK/fuse-null-uring"; start_fuse_null fuse-null-uring --uring
}
cold_fuse_null_uring() { drop_caches; }
teardown_fuse_null_uring() {
    # The parameter first (a connection that has io_uring keeps it), so that a stop
    # that goes wrong cannot leave it on.
    [ -n "$URING_WAS" ] && echo "$URING_WAS" > "$URING_PARAM"
    URING_WAS=""
    stop_fuse_null fuse-null-uring
}

# ---- target: zfs-fuse ----------------------------------------------------------------------
ZF_POOL=zfsbench
ZF_NS_PID=""
ZF_PID=""
setup_zfs_fuse() {
    if pgrep -x zfs-fuse >/dev/null; then
        die "zfs-fuse is already running on this host (pid $(pgrep -x zfs-fuse | tr '\n' ' ')); it allows one daemon per host"
    fi
    local d=$WORK/zfs-fuse
    rm -rf "$d"; mkdir -p "$d/mnt"
    vdev_files $VDEV_SIZE "$d/z0.img" "$d/z1.img"
    # A private mount namespace keeps zfs-fuse's mounts away from the host; everything
    # that touches them (zpool, fio, smallfiles) runs inside it through nsenter.
    unshare --mount --propagation private sleep infinity &
    ZF_NS_PID=$!
    RUN=(nsenter --target "$ZF_NS_PID" --mount --)
    wait_for 5 in_new_namespace "$ZF_NS_PID"
    "${RUN[@]}" zfs-fuse --pidfile "$d/zfs-fuse.pid"
    wait_for 10 test -s "$d/zfs-fuse.pid"
    ZF_PID=$(cat "$d/zfs-fuse.pid")
    wait_for 10 "${RUN[@]}" zpool list
    "${RUN[@]}" zpool create -f -o cachefile=none -m "$d/mnt" $ZF_POOL mirror "$d/z0.img" "$d/z1.img"
    DIR=$d/mnt
}
cold_zfs_fuse() {
    "${RUN[@]}" zpool export $ZF_POOL
    drop_caches
    "${RUN[@]}" zpool import -o cachefile=none -d "$WORK/zfs-fuse" $ZF_POOL
}
teardown_zfs_fuse() {
    if [ -n "$ZF_NS_PID" ]; then
        "${RUN[@]}" zpool destroy -f $ZF_POOL 2>/dev/null || true
    fi
    if [ -n "$ZF_PID" ]; then
        kill -TERM "$ZF_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$ZF_PID" 2>/dev/null || break; sleep 0.1; done
    fi
    if [ -n "$ZF_NS_PID" ]; then kill "$ZF_NS_PID" 2>/dev/null || true; wait "$ZF_NS_PID" 2>/dev/null || true; fi
    ZF_NS_PID=""; ZF_PID=""; RUN=()
    rm -rf "$WORK/zfs-fuse"
}

# ---- target: btrfs -------------------------------------------------------------------------
BT_LOOPS=()
setup_btrfs() {
    local d=$WORK/btrfs
    rm -rf "$d"; mkdir -p "$d/mnt"
    vdev_files $VDEV_SIZE "$d/b0.img" "$d/b1.img"
    BT_LOOPS=("$(losetup -f --show "$d/b0.img")")
    BT_LOOPS+=("$(losetup -f --show "$d/b1.img")")
    mkfs.btrfs -q -f -d raid1 -m raid1 "${BT_LOOPS[@]}" >/dev/null
    mount -o "device=${BT_LOOPS[0]},device=${BT_LOOPS[1]}" "${BT_LOOPS[0]}" "$d/mnt"
    DIR=$d/mnt
}
cold_btrfs() {
    umount "$DIR"
    drop_caches
    mount -o "device=${BT_LOOPS[0]},device=${BT_LOOPS[1]}" "${BT_LOOPS[0]}" "$DIR"
}
teardown_btrfs() {
    mountpoint -q "$WORK/btrfs/mnt" 2>/dev/null && umount "$WORK/btrfs/mnt"
    local l
    for l in "${BT_LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    BT_LOOPS=()
    rm -rf "$WORK/btrfs"
}

# ---- workloads ---------------------------------------------------------------------------
# Each row: key, label, unit. fio results come from terse v3 output: field 7/8 are read
# KiB/s / IOPS, fields 48/49 write KiB/s / IOPS.
WORKLOADS=(
    "seqwrite|seq write 1M, end_fsync|MiB/s"
    "seqread|seq read 1M (cold)|MiB/s"
    "randread|rand read 8K, 4 jobs (cold)|IOPS"
    "randwrite|rand write 8K, 4 jobs, buffered|IOPS"
    "fsync1|rand write 8K, fsync=1, 1 job|IOPS"
    "fsync8|rand write 8K, fsync=1, 8 jobs|IOPS"
    "fsync8f|rand write 8K, fsync=1, 8 jobs, a file each|IOPS"
    "small1|5k files 8K+fsync, 1 thread|files/s"
    "small4|5k files 8K+fsync, 4 threads|files/s"
    "cpshare|cp -a /usr/share, cold source|MB/s"
    "cprust|cp -a lib/rustlib, cold source|MB/s"
    # Seed 003's eleven metrics (filebench on a Sun Storage 7000), scaled to this
    # machine: --size is the whole working set; 20-thread sets are 20 files of size/20,
    # the sync-write set 128 files of size/128. `bench/eleven.sh` runs these.
    "csrl|Cold Stream Read light (1 thread)|MiB/s"
    "srl|Stream Read light (1 thread, cached)|MiB/s"
    "csr|Cold Stream Read (20 threads)|MiB/s"
    "sr|Stream Read (10 threads, cached)|MiB/s"
    "swl|Stream Write light (1 thread)|MiB/s"
    "sw|Stream Write (20 threads)|MiB/s"
    "syncw|Sync write 8K (128 threads)|IOPS"
    "crr|Cold Random Read 8K (20 threads)|IOPS"
    "rr|Random Read 8K (128 threads)|IOPS"
    "fc|Filecreate 8K (8 threads)|files/s"
)
ELEVEN=(csrl srl csr sr swl sw syncw crr rr fc)

record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$RESULTS"; }

# fio_run FIELD DIVISOR NAME [fio args...]: run fio, print FIELD of its terse line / DIVISOR
fio_run() {
    local field=$1 div=$2 name=$3; shift 3
    local out
    out=$("${RUN[@]}" fio --name="$name" --filename="$DIR/bench.dat" --ioengine=psync \
        --group_reporting --output-format=terse --terse-version=3 "$@")
    printf '%s\n' "$out" | awk -F';' -v f="$field" -v d="$div" \
        '$1 == "3" { printf "%.1f\n", $f / d; found = 1 } END { if (!found) exit 1 }'
}

want() {
    if [ "$ONLY" = all ]; then [[ " ${ELEVEN[*]} " != *" $1 "* ]]; else [[ ",$ONLY," == *",$1,"* ]]; fi
}

# fio_dir FIELD DIVISOR NAME [fio args...]: like fio_run, but each job has its own file
# $DIR/eleven/NAME.<job number> (jobs of the same NAME in later runs reuse the files).
fio_dir() {
    local field=$1 div=$2 name=$3; shift 3
    local out
    "${RUN[@]}" mkdir -p "$DIR/eleven"
    out=$("${RUN[@]}" fio --name="$name" --directory="$DIR/eleven" --filename_format='$jobname.$jobnum' \
        --ioengine=psync --group_reporting --output-format=terse --terse-version=3 "$@")
    printf '%s\n' "$out" | awk -F';' -v f="$field" -v d="$div" \
        '$1 == "3" { printf "%.1f\n", $f / d; found = 1 } END { if (!found) exit 1 }'
}

# The eleven-metrics workloads (seed 003), in an order where each reuses the files
# and the cache state the previous ones left.
run_eleven() {
    local t=$1 cold=$2 v
    local mib; mib=$(numfmt --from=iec "$SIZE"); mib=$((mib >> 20))
    local any=0 k
    for k in "${ELEVEN[@]}"; do want "$k" && any=1; done
    [ $any -eq 1 ] || return 0
    log "$t: eleven metrics, working set ${mib} MiB"
    v=$(fio_dir 48 1024 one --rw=write --bs=1M --size="${mib}m" --end_fsync=1); want swl && record "$t" swl "$v"
    $cold
    v=$(fio_dir 7 1024 one --rw=read --bs=1M --size="${mib}m"); want csrl && record "$t" csrl "$v"
    v=$(fio_dir 7 1024 one --rw=read --bs=1M --size="${mib}m"); want srl && record "$t" srl "$v"
    "${RUN[@]}" rm -f "$DIR/eleven/one.0"
    v=$(fio_dir 48 1024 twenty --rw=write --bs=1M --size="$((mib / 20))m" --numjobs=20 --end_fsync=1)
    want sw && record "$t" sw "$v"
    $cold
    v=$(fio_dir 7 1024 twenty --rw=read --bs=1M --size="$((mib / 20))m" --numjobs=20); want csr && record "$t" csr "$v"
    v=$(fio_dir 7 1024 twenty --rw=read --bs=1M --size="$((mib / 20))m" --numjobs=10); want sr && record "$t" sr "$v"
    $cold
    v=$(fio_dir 8 1 twenty --rw=randread --bs=8k --size="$((mib / 20))m" --numjobs=20 \
        --runtime="$RUNTIME" --time_based); want crr && record "$t" crr "$v"
    "${RUN[@]}" rm -f "$DIR"/eleven/twenty.*
    v=$(fio_dir 49 1 db --rw=randwrite --bs=8k --size="$((mib / 128))m" --numjobs=128 --sync=1 \
        --runtime="$RUNTIME" --time_based); want syncw && record "$t" syncw "$v"
    v=$(fio_dir 8 1 db --rw=randread --bs=8k --size="$((mib / 128))m" --numjobs=128 \
        --runtime="$RUNTIME" --time_based); want rr && record "$t" rr "$v"
    "${RUN[@]}" rm -rf "$DIR/eleven"
    if want fc; then
        "${RUN[@]}" mkdir -p "$DIR/fc"
        v=$("${RUN[@]}" env SMALLFILES_FSYNC=0 "$SMALLFILES" "$DIR/fc" "$NFILES" 8 8192 |
            sed -n 's/.*files_per_s=\([0-9.]*\).*/\1/p')
        [ -n "$v" ] || die "$t: smallfiles printed no result"
        record "$t" fc "$v"
        "${RUN[@]}" rm -rf "$DIR/fc"
    fi
}

run_workloads() {
    local t=$1 cold=cold_${1//-/_} v
    if want seqwrite || want seqread || want randread || want randwrite || want fsync1 || want fsync8; then
        log "$t: seq write ($SIZE)"
        v=$(fio_run 48 1024 seqwrite --rw=write --bs=1M --size="$SIZE" --end_fsync=1)
        want seqwrite && record "$t" seqwrite "$v"
        $cold
    fi
    if want seqread; then
        log "$t: seq read ($SIZE, cold)"
        v=$(fio_run 7 1024 seqread --rw=read --bs=1M --size="$SIZE"); record "$t" seqread "$v"
        $cold
    fi
    if want randread; then
        log "$t: rand read 8K x4 (${RUNTIME}s, cold)"
        v=$(fio_run 8 1 randread --rw=randread --bs=8k --size="$SIZE" --numjobs=4 \
            --runtime="$RUNTIME" --time_based); record "$t" randread "$v"
    fi
    if want randwrite; then
        log "$t: rand write 8K x4 buffered (${RUNTIME}s + end_fsync)"
        v=$(fio_run 49 1 randwrite --rw=randwrite --bs=8k --size="$SIZE" --numjobs=4 \
            --runtime="$RUNTIME" --time_based --end_fsync=1); record "$t" randwrite "$v"
    fi
    if want fsync1; then
        log "$t: rand write 8K fsync=1 x1 (${RUNTIME}s)"
        v=$(fio_run 49 1 fsync1 --rw=randwrite --bs=8k --size="$SIZE" --numjobs=1 --fsync=1 \
            --runtime="$RUNTIME" --time_based); record "$t" fsync1 "$v"
    fi
    if want fsync8; then
        log "$t: rand write 8K fsync=1 x8 (${RUNTIME}s)"
        v=$(fio_run 49 1 fsync8 --rw=randwrite --bs=8k --size="$SIZE" --numjobs=8 --fsync=1 \
            --runtime="$RUNTIME" --time_based); record "$t" fsync8 "$v"
    fi
    "${RUN[@]}" rm -f "$DIR/bench.dat"
    if want fsync8f; then
        # Eight jobs, each with its own file of SIZE/8 (laid out and fsynced first, so
        # the timed jobs only overwrite): no kernel inode lock is shared, so their
        # fsyncs can meet in one log commit (issue 13's one-file-per-job variant).
        log "$t: rand write 8K fsync=1 x8, a file each (${RUNTIME}s)"
        local per_job_mib=$(( $(numfmt --from=iec "$SIZE") / 8 >> 20 ))
        "${RUN[@]}" rm -rf "$DIR/eleven"
        fio_dir 48 1024 f8 --rw=write --bs=1M --size="${per_job_mib}m" --numjobs=8 --end_fsync=1 >/dev/null
        v=$(fio_dir 49 1 f8 --rw=randwrite --bs=8k --size="${per_job_mib}m" --numjobs=8 --fsync=1 \
            --runtime="$RUNTIME" --time_based); record "$t" fsync8f "$v"
        "${RUN[@]}" rm -rf "$DIR/eleven"
    fi
    local threads
    for threads in 1 4; do
        want "small$threads" || continue
        log "$t: $NFILES small files, $threads thread(s)"
        "${RUN[@]}" mkdir -p "$DIR/small$threads"
        v=$("${RUN[@]}" "$SMALLFILES" "$DIR/small$threads" "$NFILES" "$threads" 8192 |
            sed -n 's/.*files_per_s=\([0-9.]*\).*/\1/p')
        [ -n "$v" ] || die "$t: smallfiles printed no result"
        record "$t" "small$threads" "$v"
        "${RUN[@]}" rm -rf "$DIR/small$threads"
    done
    run_copies "$t"
    run_eleven "$t" "$cold"
}

# The source tree of a copy workload; fails when this machine has none.
copy_source() {
    case $1 in
        cpshare) [ -d /usr/share ] && echo /usr/share ;;
        cprust) local root; root=$(rustc --print sysroot 2>/dev/null) && [ -d "$root/lib/rustlib" ] && echo "$root/lib/rustlib" ;;
    esac
}

# Copying real trees (issue 13): `cp -a` of a directory of this machine into the
# target, the source's page cache dropped first, timed until cp exits (nothing is
# synced after it, on any target: what a user waits for). MB/s of the source's bytes
# (apparent sizes of everything in it). A copy that fails leaves its cell empty.
run_copies() {
    local t=$1 key src bytes t0 t1
    for key in cpshare cprust; do
        want "$key" || continue
        if ! src=$(copy_source "$key"); then log "$t: no source tree for $key, skipped"; continue; fi
        bytes=$(du -sb --apparent-size "$src" | cut -f1)
        drop_caches
        log "$t: cp -a $src ($((bytes >> 20)) MiB)"
        t0=$EPOCHREALTIME
        if ! "${RUN[@]}" cp -a "$src" "$DIR/$key"; then
            log "$t: cp -a $src failed"
        else
            t1=$EPOCHREALTIME
            record "$t" "$key" "$(awk -v b="$bytes" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f", b / 1e6 / (z - a) }')"
        fi
        "${RUN[@]}" rm -rf "$DIR/$key"
    done
}

run_target() {  # in a subshell: teardown always runs, a failure does not stop the others
    local t=$1 id=${1//-/_}
    trap "set +e; teardown_$id" EXIT
    log "=== $t: setup"
    "setup_$id"
    run_workloads "$t"
    log "=== $t: teardown"
}

FAILED=()
for t in "${TARGET_LIST[@]}"; do
    id=${t//-/_}
    if ! declare -F "setup_$id" >/dev/null; then
        log "unknown target '$t' (no setup_$id function)"; FAILED+=("$t"); continue
    fi
    # Started in the background and waited for, so that `set -e` stays in force inside
    # (bash ignores it in a subshell that is the condition of an `if`).
    ( run_target "$t" ) &
    if ! wait $!; then
        log "=== $t: FAILED; its column shows '-'"
        FAILED+=("$t")
    fi
done

# ---- table ---------------------------------------------------------------------------------
value_of() { awk -F'\t' -v t="$1" -v w="$2" '$1 == t && $2 == w { print $3 }' "$RESULTS"; }
echo
echo "fio size=$SIZE runtime=${RUNTIME}s files=$NFILES; workdir $WORK on $(df --output=source "$WORK" | tail -n 1) ($(uname -r), $(nproc) CPUs)"
printf '%-36s %-8s' "workload" "unit"
for t in "${TARGET_LIST[@]}"; do printf ' %20s' "$t"; done
printf '\n'
for row in "${WORKLOADS[@]}"; do
    IFS='|' read -r key label unit <<< "$row"
    want "$key" || continue
    case $key in small*) label=${label/5k/$NFILES} ;; esac
    printf '%-36s %-8s' "$label" "$unit"
    base=$(value_of raw "$key")
    for t in "${TARGET_LIST[@]}"; do
        v=$(value_of "$t" "$key")
        if [ -z "$v" ]; then
            cell="-"
        elif [ -n "$base" ] && awk -v b="$base" 'BEGIN { exit !(b > 0) }'; then
            cell=$(awk -v v="$v" -v b="$base" 'BEGIN { r = v / b; printf (r >= 0.1 ? "%.1f (%.2fx)" : "%.1f (%.3fx)"), v, r }')
        else
            cell=$(awk -v v="$v" 'BEGIN { printf "%.1f", v }')
        fi
        printf ' %20s' "$cell"
    done
    printf '\n'
done
echo "(ratio = value / raw; higher is better for every row)"
# Tarn against the FUSE ceiling of the same run.
for ceiling in fuse-null passthrough; do
    wants tarn && wants "$ceiling" || continue
    echo
    echo "tarn as a fraction of $ceiling:"
    for row in "${WORKLOADS[@]}"; do
        IFS='|' read -r key label unit <<< "$row"
        case $key in small*) label=${label/5k/$NFILES} ;; esac
        v=$(value_of tarn "$key"); c=$(value_of "$ceiling" "$key")
        [ -n "$v" ] && [ -n "$c" ] || continue
        printf '%-36s %-8s %s\n' "$label" "$unit" "$(awk -v v="$v" -v c="$c" 'BEGIN { if (c > 0) printf "%.3f (%.1f / %.1f)", v / c, v, c }')"
    done
done
echo "raw results: $RESULTS"
[ ${#FAILED[@]} -eq 0 ] || { log "targets that failed: ${FAILED[*]}"; exit 1; }
