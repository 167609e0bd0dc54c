#!/usr/bin/env bash
# Scrub and resilver speed: how fast Tarn's sorted scan repairs and verifies a mirror,
# against a sequential copy of the same bytes (dd), against its own naive block-order
# traversal, under a modelled hard disk, and against zfs-fuse. Everything is measured
# in one run; one table, the per-leaf I/O report and the ratios are printed at the end.
#
# Usage: bash bench/scan.sh [--quick] [--data 4G] [--hdd-data 512M] [--seek 15:1]
#                           [--parts big,hdd,zfs-fuse] [--writers 4] [--seed 42]
#                           [--workdir DIR] [--logdir DIR]
#
# Data: bench/scangen.c writes --data bytes of incompressible files, 4 KiB to 100 MiB,
# with --writers processes appending 128 KiB at a time to 4 files each plus one process
# writing small files (4-128 KiB) at the same time, so the blocks of every file are
# scattered over the device. The same generator with the same --seed writes the same
# files on Tarn and on zfs-fuse.
#
# Parts (default: all, in this order):
#   big       Tarn mirror of two file leaves (each 2 x --data) holding --data bytes.
#             dd: the pool's allocated bytes copied sequentially from leaf A's file to
#             a new file on the same file system (bs=1M, conv=fsync) -- the baseline
#             (and, for reference, the same read into /dev/null).
#             Then scrub (sorted), resilver (`zpool replace tank B C`, sorted), the
#             daemon restarted with TARN_SCAN_ORDER=naive, scrub and resilver (C -> B)
#             again. The per-leaf I/O counts come from the daemon log.
#   hdd       The same on a pool of --hdd-data bytes with every leaf slowed down by
#             `zinject -D seek:--seek` (one disk head, a seek cost proportional to the
#             distance; 15:1 is about a 7,200 rpm disk): scrub and resilver, sorted
#             and naive.
#   zfs-fuse  zfs-fuse mirror of two files of the same size with the same data, in a
#             private mount namespace, -o cachefile=none: scrub, then
#             `zpool replace pool z1 z2`.
# The page cache is dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every
# timed step. Resilver steps need `tarn zpool replace` (or `attach`); without either
# they are reported as not available.
#
# --quick: --data 512M --hdd-data 128M unless given: a smoke test of a few minutes.
# Results, daemon logs, zpool status snapshots and this output go to --logdir
# (default <workdir>/logs-<date>); vdev files are removed at the end.
#
# Needs root. Installs fuse (never fuse3) and zfs-fuse with apt-get when missing.
# Builds tarn with `cargo build --release -p tarn-cli` (honours CARGO_TARGET_DIR)
# unless TARN_BIN names a binary. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
ALL_PARTS=big,hdd,zfs-fuse
PARTS=$ALL_PARTS
DATA=${BENCH_DATA:-}
HDD_DATA=${BENCH_HDD_DATA:-}
SEEK=${BENCH_SEEK:-15:1}
WRITERS=${BENCH_WRITERS:-4}
SEED=${BENCH_SEED:-42}
WORK=${BENCH_DIR:-/var/tmp/tarn-scan}
LOGDIR=${BENCH_LOGDIR:-}
QUICK=0
POLL=0.2             # seconds between status polls
SCAN_TIMEOUT=3600    # a scan still running after this long fails the part

usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case $1 in
        --quick) QUICK=1; shift ;;
        --data) DATA=$2; shift 2 ;;
        --data=*) DATA=${1#*=}; shift ;;
        --hdd-data) HDD_DATA=$2; shift 2 ;;
        --hdd-data=*) HDD_DATA=${1#*=}; shift ;;
        --seek) SEEK=$2; shift 2 ;;
        --seek=*) SEEK=${1#*=}; shift ;;
        --parts) PARTS=$2; shift 2 ;;
        --parts=*) PARTS=${1#*=}; shift ;;
        --writers) WRITERS=$2; shift 2 ;;
        --writers=*) WRITERS=${1#*=}; shift ;;
        --seed) SEED=$2; shift 2 ;;
        --seed=*) SEED=${1#*=}; shift ;;
        --workdir) WORK=$2; shift 2 ;;
        --workdir=*) WORK=${1#*=}; shift ;;
        --logdir) LOGDIR=$2; shift 2 ;;
        --logdir=*) LOGDIR=${1#*=}; shift ;;
        -h|--help) usage 0 ;;
        *) echo "scan.sh: unknown option $1" >&2; usage 2 ;;
    esac
done
if [ $QUICK -eq 1 ]; then : "${DATA:=512M}" "${HDD_DATA:=128M}"; fi
: "${DATA:=4G}" "${HDD_DATA:=512M}"
IFS=, read -r -a PART_LIST <<< "$PARTS"

[ "$(id -u)" -eq 0 ] || die "run as root (FUSE mounts, drop_caches, zfs-fuse, mount namespaces)"
to_bytes() { numfmt --from=iec "$1" 2>/dev/null || die "bad size '$1' (e.g. 4G, 512M)"; }
DATA_B=$(to_bytes "$DATA")
HDD_B=$(to_bytes "$HDD_DATA")
[ "$DATA_B" -ge $((64 << 20)) ] || die "--data must be at least 64M"
[ "$HDD_B" -ge $((16 << 20)) ] || die "--hdd-data must be at least 16M"
[[ $SEEK =~ ^[0-9.]+(:[0-9.]+)?$ ]] || die "--seek must be MAX_MS[:MIN_MS]"
[[ $WRITERS =~ ^[0-9]+$ && $WRITERS -gt 0 ]] || die "--writers must be a positive integer"
[[ $SEED =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer"
for p in "${PART_LIST[@]}"; do case $p in big|hdd|zfs-fuse) ;; *) die "unknown part '$p'" ;; esac; done
# Leaves are twice the data (sparse files), at least 1 GiB.
leaf_size() { local b=$(( $1 * 2 )); [ $b -ge $((1 << 30)) ] || b=$((1 << 30)); echo $b; }
LEAF_B=$(leaf_size "$DATA_B")
HDD_LEAF_B=$(leaf_size "$HDD_B")

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
[ -n "$LOGDIR" ] || LOGDIR=$WORK/logs-$(date +%Y%m%d-%H%M%S)
mkdir -p "$LOGDIR"
LOGDIR=$(cd "$LOGDIR" && pwd)
RESULTS=$LOGDIR/results.tsv   # key, value
IOTSV=$LOGDIR/io.tsv          # part, scan, order, leaf, ios, bytes, average, ascending %
: > "$RESULTS"; : > "$IOTSV"
# Everything printed from here on is also kept in the log directory.
exec > >(tee -a "$LOGDIR/scan.out") 2> >(tee -a "$LOGDIR/scan.out" >&2)

# Need: the host file system must hold three leaves' worth of data plus the dd copy.
need=$(( DATA_B * 5 / 1024 ))
avail=$(df --output=avail -k "$WORK" | tail -n 1)
[ "$avail" -gt "$need" ] || die "$WORK has $((avail >> 20)) GiB free; about $((need >> 20)) GiB needed"

# ---- packages, binaries -------------------------------------------------------------
wants() { [[ ",$PARTS," == *",$1,"* ]]; }
if (wants big || wants hdd) && ! has fusermount; then log "installing fuse"; apt_install fuse; fi
if wants zfs-fuse && ! has zfs-fuse; then log "installing zfs-fuse"; apt_install zfs-fuse; fi

SCANGEN=$WORK/scangen
cc -O2 -o "$SCANGEN" "$REPO/bench/scangen.c" -lm

TARN=""
if wants big || wants hdd; then find_tarn; fi

# ---- common helpers -----------------------------------------------------------------
record() { printf '%s\t%s\n' "$1" "$2" >> "$RESULTS"; }
value_of() { awk -F'\t' -v k="$1" '$1 == k { v = $2 } END { print v }' "$RESULTS"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f\n", b - a }'; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
mib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }
# gen NAME DIR BYTES [PREFIX...]: write the data set, record its rate
gen() {
    local name=$1 dir=$2 bytes=$3 out; shift 3
    log "$name: scangen $dir $(mib "$bytes") MiB, seed $SEED, $WRITERS writers"
    out=$("$@" "$SCANGEN" "$dir" "$bytes" "$SEED" "$WRITERS")
    log "$name: $out"
    record "$name.write_s" "$(printf '%s\n' "$out" | sed -n 's/.*seconds=\([0-9.]*\).*/\1/p')"
    record "$name.files" "$(printf '%s\n' "$out" | sed -n 's/.*files=\([0-9]*\).*/\1/p')"
}

# ---- Tarn ---------------------------------------------------------------------------
POOL=tank
T_DIR=""       # the current part's directory (vdev/, mnt/, run/)
DLOG=""        # its daemon's log
RESILVER=""    # replace | attach | "" (neither)
tarn() {
    # Never let a stray call autostart a daemon on the default socket.
    [ -n "${TARN_SOCKET:-}" ] || die "tarn: TARN_SOCKET is not set"
    "$TARN" "$@"
}
daemon_pid() { cat "$TARN_STATE_DIR/daemon.pid" 2>/dev/null || true; }
# daemon_start ORDER(sorted|naive): a private daemon, autostarted by the first command
daemon_start() {
    if [ "$1" = naive ]; then export TARN_SCAN_ORDER=naive; else unset TARN_SCAN_ORDER; fi
    tarn zpool list >/dev/null
    local pid; pid=$(daemon_pid)
    [ -n "$pid" ] || die "no daemon pid in $TARN_STATE_DIR"
    if [ "$1" = naive ]; then
        tr '\0' '\n' < "/proc/$pid/environ" | grep -qx TARN_SCAN_ORDER=naive || die "daemon $pid lacks TARN_SCAN_ORDER=naive"
    elif tr '\0' '\n' < "/proc/$pid/environ" | grep -q '^TARN_SCAN_ORDER='; then
        die "daemon $pid has TARN_SCAN_ORDER set"
    fi
    log "daemon $pid started, scan order $1"
}
daemon_stop() {
    local pid; pid=$(daemon_pid)
    tarn daemon --stop >/dev/null 2>&1 || { [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; } || true
    [ -z "$pid" ] || wait_gone "$pid" 30
}
# tarn_setup PART BYTES LEAF_BYTES: daemon, pool `tank` = mirror A B, data written
tarn_setup() {
    local part=$1 bytes=$2 leaf=$3
    T_DIR=$WORK/$part
    rm -rf "$T_DIR"; mkdir -p "$T_DIR/vdev"  # the daemon makes run/ itself, mode 0700
    export TARN_STATE_DIR=$LOGDIR/$part-state TARN_CACHEFILE=$LOGDIR/$part-state/tarn.cache TARN_SOCKET=$T_DIR/run/tarn.sock
    unset TARN_SCAN_ORDER
    mkdir -p "$TARN_STATE_DIR"
    DLOG=$TARN_STATE_DIR/daemon.log
    daemon_start sorted
    local out
    out=$(tarn zpool replace 2>&1 || true)
    if [[ $out != *"unrecognized command"* ]]; then
        RESILVER=replace
    else
        out=$(tarn zpool attach 2>&1 || true)
        if [[ $out != *"unrecognized command"* ]]; then RESILVER=attach; else RESILVER=""; fi
    fi
    log "$part: resilver by: ${RESILVER:-nothing (no zpool replace or attach): resilver steps skipped}"
    truncate -s "$leaf" "$T_DIR/vdev/A" "$T_DIR/vdev/B"
    log "$part: tarn zpool create -m $T_DIR/mnt $POOL mirror A B ($(mib "$leaf") MiB files)"
    tarn zpool create -m "$T_DIR/mnt" $POOL mirror "$T_DIR/vdev/A" "$T_DIR/vdev/B"
    mountpoint -q "$T_DIR/mnt" || die "tarn: $T_DIR/mnt is not mounted"
    gen "$part.tarn" "$T_DIR/mnt" "$bytes"
    # Everything on disk, and a fresh import, before anything is timed.
    tarn zpool export $POOL
    tarn zpool import -d "$T_DIR/vdev" $POOL
    local alloc; alloc=$(tarn zpool list -Hp -o alloc $POOL)
    record "$part.tarn.alloc" "$alloc"
    log "$part: allocated $alloc bytes ($(mib "$alloc") MiB)"
}
tarn_teardown() {  # tolerates a half-done setup
    [ -n "$T_DIR" ] || return 0
    local pid; pid=$(daemon_pid)
    if [ -S "$TARN_SOCKET" ] && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        tarn zpool status $POOL > "$LOGDIR/$(basename "$T_DIR")-status-final.txt" 2>&1 || true
        tarn zinject -c all >/dev/null 2>&1 || true
        tarn zpool destroy $POOL >/dev/null 2>&1 || tarn zpool export -f $POOL >/dev/null 2>&1 || true
        daemon_stop
    fi
    if mountpoint -q "$T_DIR/mnt" 2>/dev/null; then fusermount -u "$T_DIR/mnt" 2>/dev/null || umount -l "$T_DIR/mnt" || true; fi
    rm -rf "$T_DIR"
    T_DIR=""
}
# tarn_reopen ORDER: the pool exported, the daemon restarted with that scan order,
# the pool imported again (injections are cleared first: a pool with handlers is busy)
tarn_reopen() {
    tarn zinject -c all >/dev/null
    tarn zpool export $POOL
    daemon_stop
    daemon_start "$1"
    tarn zpool import -d "$T_DIR/vdev" $POOL
}
inject_seek() {  # inject_seek LEAF...: the seek model on each leaf
    local l
    for l in "$@"; do tarn zinject -q -d "$l" -D "seek:$SEEK" $POOL >/dev/null; done
}
log_mark() { stat -c %s "$DLOG" 2>/dev/null || echo 0; }
# scan_io PART SCAN(Scrub|Resilver) ORDER MARK: the daemon's per-leaf I/O lines for the
# scan that finished after MARK, into io.tsv
scan_io() {
    local part=$1 kind=$2 order=$3 mark=$4 lines=""
    for _ in $(seq 1 50); do
        lines=$(tail -c +$((mark + 1)) "$DLOG" | sed 's/\x1b\[[0-9;]*m//g' |
            sed -n "s|.*pool $POOL: $kind I/O on \(.*\): \([0-9]*\) I/Os, \([0-9]*\) bytes, average \([0-9]*\) bytes, \([0-9.]*\)% ascending.*|\1\t\2\t\3\t\4\t\5|p")
        [ -z "$lines" ] || break
        sleep 0.1
    done
    if [ -z "$lines" ]; then log "$part: no '$kind I/O on' lines in $DLOG"; return 0; fi
    printf '%s\n' "$lines" | while IFS=$'\t' read -r leaf ios bytes avg asc; do
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$part" "$kind" "$order" "$(basename "$leaf")" "$ios" "$bytes" "$avg" "$asc" >> "$IOTSV"
        log "$part: $kind $order I/O on $(basename "$leaf"): $ios I/Os, average $avg bytes, $asc% ascending"
    done
}
# tarn_scrub PART ORDER: a timed `zpool scrub -w`
tarn_scrub() {
    local part=$1 order=$2 mark t0 dt
    mark=$(log_mark)
    drop_caches
    log "$part: scrub ($order)"
    t0=$(now)
    tarn zpool scrub -w $POOL
    dt=$(since "$t0")
    record "$part.tarn.scrub.$order" "$dt"
    tarn zpool status $POOL > "$LOGDIR/$part-status-scrub-$order.txt"
    log "$part: scrub ($order) ${dt}s: $(sed -n 's/^ *scan: //p' "$LOGDIR/$part-status-scrub-$order.txt")"
    scan_io "$part" Scrub "$order" "$mark"
}
scan_line() { tarn zpool status $POOL | sed -n 's/^ *scan: //p'; }
# tarn_resilver PART ORDER KEEP OLD NEW [seek]: replace OLD by a new empty file NEW
# (KEEP, the other side of the mirror, is the source), timed until the scan line says
# the resilver finished; with "seek", NEW gets the seek model as soon as it is in the pool
tarn_resilver() {
    local part=$1 order=$2 keep=$3 old=$4 new=$5 seek=${6:-} before line mark t0 dt deadline
    if [ -z "$RESILVER" ]; then
        log "$part: resilver ($order) skipped: no zpool replace or attach"
        record "$part.tarn.resilver.$order" "n/a"
        return 0
    fi
    rm -f "$new"; truncate -s "$(stat -c %s "$keep")" "$new"
    before=$(scan_line)
    mark=$(log_mark)
    drop_caches
    log "$part: resilver ($order): $RESILVER $(basename "$old") -> $(basename "$new")"
    t0=$(now)
    if [ "$RESILVER" = replace ]; then
        tarn zpool replace $POOL "$old" "$new"
    else
        tarn zpool attach $POOL "$keep" "$new"
    fi
    [ -z "$seek" ] || inject_seek "$new"
    deadline=$(( $(date +%s) + SCAN_TIMEOUT ))
    while :; do
        line=$(scan_line)
        if [[ $line =~ ^resilvered\ .*\ with\ [0-9]+\ errors\ on ]] && [ "$line" != "$before" ]; then break; fi
        [ "$(date +%s)" -lt "$deadline" ] || die "$part: resilver still running after ${SCAN_TIMEOUT}s: $line"
        sleep "$POLL"
    done
    dt=$(since "$t0")
    record "$part.tarn.resilver.$order" "$dt"
    tarn zpool status $POOL > "$LOGDIR/$part-status-resilver-$order.txt"
    log "$part: resilver ($order) ${dt}s: $line"
    [[ $line =~ with\ 0\ errors ]] || log "$part: WARNING: the resilver reported errors"
    scan_io "$part" Resilver "$order" "$mark"
    if [ "$RESILVER" = attach ]; then
        # attach leaves a three-way mirror: drop the old side when detach exists
        tarn zpool detach $POOL "$old" || log "$part: could not detach $(basename "$old"); the mirror keeps it"
    fi
    # The old side is out of the pool now: its file goes (it becomes the next NEW).
    grep -q "$old" <(tarn zpool status $POOL) || rm -f "$old"
}

# ---- part: big ----------------------------------------------------------------------
part_big() {
    local v=$T_DIR alloc count t0 dt
    tarn_setup big "$DATA_B" "$LEAF_B"
    v=$T_DIR/vdev
    alloc=$(value_of big.tarn.alloc)
    count=$(( (alloc + (1 << 20) - 1) >> 20 ))
    # What dd reads: how much of leaf A's first `alloc` bytes hold data (not holes).
    if has python3; then
        python3 - "$v/A" "$alloc" <<'EOF' | { read -r d; record big.dd.data_bytes "$d"; log "big: leaf A holds $(mib "$d") MiB of data in the range dd copies"; }
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); lim = int(sys.argv[2]); off = 0; n = 0
while off < lim:
    try: d = os.lseek(fd, off, os.SEEK_DATA)
    except OSError: break
    if d >= lim: break
    h = os.lseek(fd, d, os.SEEK_HOLE); n += min(h, lim) - d; off = h
print(n)
EOF
    fi
    drop_caches
    log "big: dd if=A of=dd.out bs=1M count=$count conv=fsync"
    t0=$(now)
    dd if="$v/A" of="$WORK/big/dd.out" bs=1M count="$count" conv=fsync status=none
    dt=$(since "$t0")
    record big.dd "$dt"
    rm -f "$WORK/big/dd.out"
    log "big: dd ${dt}s"
    # For reference: the read half alone.
    drop_caches
    t0=$(now)
    dd if="$v/A" of=/dev/null bs=1M count="$count" status=none
    dt=$(since "$t0")
    record big.dd_read "$dt"
    log "big: dd of=/dev/null (read only) ${dt}s"
    tarn_scrub big sorted
    tarn_resilver big sorted "$v/A" "$v/B" "$v/C"
    tarn_reopen naive
    tarn_scrub big naive
    tarn_resilver big naive "$v/A" "$v/C" "$v/B"
}
teardown_big() { tarn_teardown; }

# ---- part: hdd ----------------------------------------------------------------------
part_hdd() {
    local v
    tarn_setup hdd "$HDD_B" "$HDD_LEAF_B"
    v=$T_DIR/vdev
    log "hdd: zinject -D seek:$SEEK on every leaf"
    inject_seek "$v/A" "$v/B"
    tarn_scrub hdd sorted
    tarn_resilver hdd sorted "$v/A" "$v/B" "$v/C" seek
    tarn_reopen naive
    if [ -n "$RESILVER" ]; then inject_seek "$v/A" "$v/C"; else inject_seek "$v/A" "$v/B"; fi
    tarn_scrub hdd naive
    tarn_resilver hdd naive "$v/A" "$v/C" "$v/B" seek
    tarn zinject -c all >/dev/null
}
teardown_hdd() { tarn_teardown; }

# ---- part: zfs-fuse -----------------------------------------------------------------
ZF_POOL=zscan
ZF_NS_PID=""
ZF_PID=""
ZF_DIR=""
ZRUN=()
zf_status() { "${ZRUN[@]}" zpool status $ZF_POOL; }
# zf_wait WORDS KEY: poll zpool status until "WORDS completed after" shows
zf_wait() {
    local words=$1 key=$2 t0=$3 deadline dt
    deadline=$(( $(date +%s) + SCAN_TIMEOUT ))
    until zf_status | grep -q "$words completed after"; do
        [ "$(date +%s)" -lt "$deadline" ] || die "zfs-fuse: $words still running after ${SCAN_TIMEOUT}s"
        sleep "$POLL"
    done
    dt=$(since "$t0")
    record "$key" "$dt"
    zf_status > "$LOGDIR/zfs-fuse-status-$words.txt"
    log "zfs-fuse: $words ${dt}s: $(grep -E "(scan|scrub):" "$LOGDIR/zfs-fuse-status-$words.txt" | sed 's/^ *//')"
}
part_zfs_fuse() {
    local d=$WORK/zfs-fuse t0
    if pgrep -x zfs-fuse >/dev/null; then
        die "zfs-fuse is already running on this host (pid $(pgrep -x zfs-fuse | tr '\n' ' ')); it allows one daemon per host"
    fi
    ZF_DIR=$d
    rm -rf "$d"; mkdir -p "$d/vdev" "$d/mnt"
    truncate -s "$LEAF_B" "$d/vdev/z0" "$d/vdev/z1"
    # A private mount namespace keeps zfs-fuse's mounts away from the host.
    unshare --mount --propagation private sleep infinity &
    ZF_NS_PID=$!
    ZRUN=(nsenter --target "$ZF_NS_PID" --mount --)
    wait_for 5 in_new_namespace "$ZF_NS_PID"
    "${ZRUN[@]}" zfs-fuse --pidfile "$d/zfs-fuse.pid"
    wait_for 10 test -s "$d/zfs-fuse.pid"
    ZF_PID=$(cat "$d/zfs-fuse.pid")
    wait_for 10 "${ZRUN[@]}" zpool list
    log "zfs-fuse: zpool create -f -o cachefile=none -m $d/mnt $ZF_POOL mirror z0 z1 ($(mib "$LEAF_B") MiB files)"
    "${ZRUN[@]}" zpool create -f -o cachefile=none -m "$d/mnt" $ZF_POOL mirror "$d/vdev/z0" "$d/vdev/z1"
    gen big.zfs-fuse "$d/mnt" "$DATA_B" "${ZRUN[@]}"
    "${ZRUN[@]}" zpool export $ZF_POOL
    "${ZRUN[@]}" zpool import -o cachefile=none -d "$d/vdev" $ZF_POOL
    record big.zfs-fuse.alloc "$("${ZRUN[@]}" zpool list -H -o alloc $ZF_POOL)"
    log "zfs-fuse: allocated $(value_of big.zfs-fuse.alloc)"
    drop_caches
    log "zfs-fuse: scrub"
    t0=$(now)
    "${ZRUN[@]}" zpool scrub $ZF_POOL
    zf_wait scrub big.zfs-fuse.scrub "$t0"
    truncate -s "$LEAF_B" "$d/vdev/z2"
    drop_caches
    log "zfs-fuse: zpool replace $ZF_POOL z1 z2"
    t0=$(now)
    "${ZRUN[@]}" zpool replace $ZF_POOL "$d/vdev/z1" "$d/vdev/z2"
    zf_wait resilver big.zfs-fuse.resilver "$t0"
}
teardown_zfs_fuse() {
    if [ -n "$ZF_NS_PID" ]; then "${ZRUN[@]}" zpool destroy -f $ZF_POOL 2>/dev/null || true; fi
    if [ -n "$ZF_PID" ]; then kill -TERM "$ZF_PID" 2>/dev/null || true; wait_gone "$ZF_PID" 30; fi
    if [ -n "$ZF_NS_PID" ]; then kill "$ZF_NS_PID" 2>/dev/null || true; wait "$ZF_NS_PID" 2>/dev/null || true; fi
    ZF_NS_PID=""; ZF_PID=""; ZRUN=()
    [ -z "$ZF_DIR" ] || rm -rf "$ZF_DIR"
    ZF_DIR=""
}

# ---- run ----------------------------------------------------------------------------
run_part() {  # in a subshell: teardown always runs, a failure does not stop the others
    local p=${1//-/_}
    trap "set +e; teardown_$p" EXIT
    trap 'exit 143' TERM INT
    log "=== $1"
    "part_$p"
    log "=== $1: done"
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)
CHILD=""
trap on_signal INT TERM
FAILED=()
for p in "${PART_LIST[@]}"; do
    # In the background in its own process group (an interrupt stops all of it) and
    # waited for, so that `set -e` stays in force inside.
    set -m
    ( run_part "$p" ) < /dev/null &
    CHILD=$!
    set +m
    if ! wait "$CHILD"; then log "=== $p: FAILED"; FAILED+=("$p"); fi
    CHILD=""
done
ELAPSED=$(( $(date +%s) - START ))

# ---- report -------------------------------------------------------------------------
fmt_s() { [ -n "$1" ] && [ "$1" != n/a ] && echo "$1" || echo "${1:--}"; }
rate() {  # rate BYTES SECONDS -> MiB/s
    if [[ -n $1 && -n $2 && $2 != n/a ]]; then awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", b / 1048576 / s; else print "-" }'; else echo -; fi
}
row() { printf '%-46s %10s %10s\n' "$1" "$(fmt_s "$2")" "$(rate "$3" "$2")"; }
BIG_ALLOC=$(value_of big.tarn.alloc)
HDD_ALLOC=$(value_of hdd.tarn.alloc)
ZF_ALLOC=$(value_of big.zfs-fuse.alloc)
ZF_ALLOC_B=""   # zfs-fuse prints sizes rounded (e.g. 4.01G)
[ -z "$ZF_ALLOC" ] || ZF_ALLOC_B=$(numfmt --from=iec "$ZF_ALLOC" 2>/dev/null || true)
echo
echo "scan benchmark: --data $DATA (big), --hdd-data $HDD_DATA with zinject -D seek:$SEEK, seed $SEED, $WRITERS writers"
BIG_FILES=$(value_of big.tarn.files); [ -n "$BIG_FILES" ] || BIG_FILES=$(value_of big.zfs-fuse.files)
echo "big: ${BIG_FILES:-?} files, tarn allocated ${BIG_ALLOC:-?} bytes, leaves $(mib "$LEAF_B") MiB; zfs-fuse allocated $(value_of big.zfs-fuse.alloc)"
echo "hdd: $(value_of hdd.tarn.files) files, tarn allocated ${HDD_ALLOC:-?} bytes, leaves $(mib "$HDD_LEAF_B") MiB"
echo "workdir $WORK on $(df --output=source "$WORK" | tail -n 1); tarn ${TARN:-not used}"
echo "$(uname -r), $(nproc) CPUs, load average before $LOAD_BEFORE, after $(cut -d' ' -f1-3 /proc/loadavg), ${ELAPSED}s"
echo "page cache dropped before every timed step; MiB/s = the pool's allocated bytes / time (zfs-fuse: its own, rounded)"
echo
printf '%-46s %10s %10s\n' "step" "seconds" "MiB/s"
row "big: write data, tarn (scangen)" "$(value_of big.tarn.write_s)" "$DATA_B"
row "big: write data, zfs-fuse (scangen)" "$(value_of big.zfs-fuse.write_s)" "$DATA_B"
row "big: dd alloc bytes, leaf A -> new file" "$(value_of big.dd)" "$BIG_ALLOC"
row "big: dd alloc bytes, leaf A -> /dev/null" "$(value_of big.dd_read)" "$BIG_ALLOC"
row "big: tarn scrub, sorted" "$(value_of big.tarn.scrub.sorted)" "$BIG_ALLOC"
row "big: tarn scrub, naive" "$(value_of big.tarn.scrub.naive)" "$BIG_ALLOC"
row "big: tarn resilver, sorted" "$(value_of big.tarn.resilver.sorted)" "$BIG_ALLOC"
row "big: tarn resilver, naive" "$(value_of big.tarn.resilver.naive)" "$BIG_ALLOC"
row "big: zfs-fuse scrub" "$(value_of big.zfs-fuse.scrub)" "$ZF_ALLOC_B"
row "big: zfs-fuse resilver (replace)" "$(value_of big.zfs-fuse.resilver)" "$ZF_ALLOC_B"
row "hdd (seek:$SEEK): tarn scrub, sorted" "$(value_of hdd.tarn.scrub.sorted)" "$HDD_ALLOC"
row "hdd (seek:$SEEK): tarn scrub, naive" "$(value_of hdd.tarn.scrub.naive)" "$HDD_ALLOC"
row "hdd (seek:$SEEK): tarn resilver, sorted" "$(value_of hdd.tarn.resilver.sorted)" "$HDD_ALLOC"
row "hdd (seek:$SEEK): tarn resilver, naive" "$(value_of hdd.tarn.resilver.naive)" "$HDD_ALLOC"
echo "  n/a: no zpool replace or attach in this tarn; -: not measured (part not run or failed)"

echo
echo "Tarn scan I/O per leaf (from the daemon log; A/B/C are the mirror's files):"
printf '%-5s %-9s %-7s %-5s %9s %12s %10s %11s\n' part scan order leaf "I/Os" "MiB" "avg KiB" "ascending"
sort -t$'\t' -k1,1 -k2,2r -k3,3r -k4,4 "$IOTSV" | while IFS=$'\t' read -r part kind order leaf ios bytes avg asc; do
    printf '%-5s %-9s %-7s %-5s %9s %12s %10s %10s%%\n' "$part" "$kind" "$order" "$leaf" "$ios" "$(mib "$bytes")" \
        "$(awk -v a="$avg" 'BEGIN { printf "%.1f", a / 1024 }')" "$asc"
done

# ratio_line A_KEY B_KEY LABEL GOAL(e.g. "<=1.5", ">=3" or -)
ratio_line() {
    local a b r verdict=""
    a=$(value_of "$1"); b=$(value_of "$2")
    if [[ -n $a && -n $b && $a != n/a && $b != n/a ]] && awk -v b="$b" 'BEGIN { exit !(b > 0) }'; then
        r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')
        if [ "$4" != - ]; then
            if awk -v r="$r" -v g="${4:2}" -v op="${4:0:2}" 'BEGIN { exit !(op == "<=" ? r <= g : r >= g) }'; then
                verdict="[goal $4: met]"
            else
                verdict="[goal $4: NOT met]"
            fi
        fi
        printf '%-58s %8sx  %s\n' "$3" "$r" "$verdict"
    else
        [ "$4" = - ] || verdict="[goal $4: not measured]"
        printf '%-58s %9s  %s\n' "$3" "-" "$verdict"
    fi
}
echo
echo "ratios of wall times:"
ratio_line big.tarn.resilver.sorted big.dd "tarn resilver (sorted) / dd of the allocated bytes" "<=1.5"
ratio_line hdd.tarn.scrub.naive hdd.tarn.scrub.sorted "hdd: tarn scrub naive / sorted" ">=3"
ratio_line hdd.tarn.resilver.naive hdd.tarn.resilver.sorted "hdd: tarn resilver naive / sorted" ">=3"
ratio_line big.tarn.scrub.naive big.tarn.scrub.sorted "big (no latency model): tarn scrub naive / sorted" -
ratio_line big.tarn.resilver.naive big.tarn.resilver.sorted "big (no latency model): tarn resilver naive / sorted" -
ratio_line big.tarn.scrub.sorted big.zfs-fuse.scrub "tarn scrub / zfs-fuse scrub (< 1: Tarn faster)" -
ratio_line big.tarn.resilver.sorted big.zfs-fuse.resilver "tarn resilver / zfs-fuse resilver (< 1: Tarn faster)" -
ratio_line big.tarn.resilver.sorted big.dd_read "tarn resilver (sorted) / dd read only (reference)" -
ratio_line big.tarn.scrub.sorted big.dd "tarn scrub (sorted, reads both leaves) / dd" -
echo "logs, results.tsv, io.tsv, daemon logs and zpool status snapshots: $LOGDIR"
[ ${#FAILED[@]} -eq 0 ] || { log "parts that failed: ${FAILED[*]}"; exit 1; }
