#!/usr/bin/env bash
# Sync-write benchmark: what the intent log (ZIL) and a separate log device (SLOG) buy
# for fsync-heavy work. Runs the same four workloads against several configurations in
# one go and prints one table (a row per configuration) and the ratios between them.
#
# Usage: bash bench/sync.sh [--targets T1,T2,...] [--runtime 15] [--files 5000]
#                           [--filetime SECONDS] [--delay 8] [--size 1G]
#                           [--workdir DIR] [--logdir DIR] [--tarn-cache SIZE]
#
# Workloads (the same jobs for every target):
#   W1  fio rand write 8K, fsync after every write (--fsync=1), 1 job, time-based
#   W2  the same with 8 jobs (--numjobs=8 --group_reporting)
#   W3  bench/smallfiles.c: N files of 8 KiB, each create-write-fsync-close, 1 thread
#   W4  the same with 4 threads
#   W5  W2 with a file per job (--filename_format, size/8 each): not in the issue's
#       list; it shows group commit, which W2 cannot, because Linux's FUSE fsync holds
#       the inode lock for the whole FUSE_FSYNC round trip, so on one file the kernel
#       sends one write or fsync at a time whatever the file system does
#   (IOPS for W1/W2, files/s for W3/W4; a small-file run that has not finished after
#   --filetime seconds is stopped and rated by the files it completed, marked '*').
#   Every workload runs on a freshly created pool, so none inherits another's backlog.
#
# Targets (default: all, in this order):
#   raw-log           fio/smallfiles on a plain directory in the log device's directory
#                     (--logdir): the sustained sync rate of the raw log device
#   tarn-txg          Tarn, main pool = mirror of two files, each leaf slowed down with
#                     `zinject -D <delay>` (a 7,200 rpm disk), no log device, daemon run
#                     with TARN_ZIL=off: every fsync forces a txg sync (pre-ZIL baseline)
#   tarn-nolog        the same pool with the intent log on the main pool
#   tarn-slog         the same pool plus a log device: a plain file, no injected latency
#   tarn-txg-nolat, tarn-nolog-nolat, tarn-slog-nolat
#                     the same three without injected latency (comparable to zfs-fuse)
#   zfs-fuse          Debian's zfs-fuse, mirror of two files, private mount namespace,
#                     -o cachefile=none
#   zfs-fuse-slog     the same plus a log file (`... mirror A B log FILE`)
#
# --tarn-cache SIZE starts the Tarn daemons with TARN_CACHE_MAX=SIZE (per-pool memory
# budget; a quarter of it is the dirty-data limit that throttles writers). Default: unset,
# Tarn's own default (a quarter of physical memory, 256M..16G).
#
# Log devices (Tarn's and zfs-fuse's) are files written full of zeros before the pool is
# created, as the raw-log row's file is laid out by fio before it is timed: an SSD or
# NVRAM log device has no allocate-on-first-write cost, a sparse file on ext4 does.
#
# Needs root. Installs fio, fuse (never fuse3) and zfs-fuse with apt-get when they are
# missing and a chosen target needs them. Builds tarn with `cargo build --release -p
# tarn-cli` (honours CARGO_TARGET_DIR) unless TARN_BIN names a binary. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
ALL_TARGETS=raw-log,tarn-txg,tarn-nolog,tarn-slog,tarn-txg-nolat,tarn-nolog-nolat,tarn-slog-nolat,zfs-fuse,zfs-fuse-slog
TARGETS=$ALL_TARGETS
RUNTIME=${BENCH_RUNTIME:-15}
NFILES=${BENCH_FILES:-5000}
FILETIME=${BENCH_FILETIME:-}
DELAY_MS=${BENCH_DELAY_MS:-8}
SIZE=${BENCH_SIZE:-1G}
WORK=${BENCH_DIR:-/var/tmp/tarn-sync}
LOGDIR=${BENCH_LOGDIR:-}
TARN_CACHE=${BENCH_TARN_CACHE:-}
VDEV_SIZE=4G      # each main-pool leaf
LOG_SIZE=1G       # each log device file

usage() { sed -n '2,39p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case $1 in
        --targets) TARGETS=$2; shift 2 ;;
        --targets=*) TARGETS=${1#*=}; shift ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --runtime=*) RUNTIME=${1#*=}; shift ;;
        --files) NFILES=$2; shift 2 ;;
        --files=*) NFILES=${1#*=}; shift ;;
        --filetime) FILETIME=$2; shift 2 ;;
        --filetime=*) FILETIME=${1#*=}; shift ;;
        --delay) DELAY_MS=$2; shift 2 ;;
        --delay=*) DELAY_MS=${1#*=}; shift ;;
        --size) SIZE=$2; shift 2 ;;
        --size=*) SIZE=${1#*=}; shift ;;
        --workdir) WORK=$2; shift 2 ;;
        --workdir=*) WORK=${1#*=}; shift ;;
        --logdir) LOGDIR=$2; shift 2 ;;
        --logdir=*) LOGDIR=${1#*=}; shift ;;
        --tarn-cache) TARN_CACHE=$2; shift 2 ;;
        --tarn-cache=*) TARN_CACHE=${1#*=}; shift ;;
        -h|--help) usage 0 ;;
        *) echo "sync.sh: unknown option $1" >&2; usage 2 ;;
    esac
done
[ -n "$FILETIME" ] || FILETIME=$((RUNTIME * 2))
IFS=, read -r -a TARGET_LIST <<< "$TARGETS"

[ "$(id -u)" -eq 0 ] || die "run as root (FUSE mounts, zfs-fuse, mount namespaces)"
[[ $RUNTIME =~ ^[0-9]+$ && $RUNTIME -gt 0 ]] || die "--runtime must be a positive integer"
[[ $FILETIME =~ ^[0-9]+$ && $FILETIME -gt 0 ]] || die "--filetime must be a positive integer"
[[ $NFILES =~ ^[0-9]+$ && $NFILES -gt 0 ]] || die "--files must be a positive integer"
[[ $DELAY_MS =~ ^[0-9]+$ && $DELAY_MS -gt 0 ]] || die "--delay must be a positive integer (ms)"
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
[ -n "$LOGDIR" ] || LOGDIR=$WORK/logdev
mkdir -p "$LOGDIR"
LOGDIR=$(cd "$LOGDIR" && pwd)
RESULTS=$WORK/results.tsv
: > "$RESULTS"

# ---- packages ------------------------------------------------------------------------
wants_prefix() { [[ ",$TARGETS" == *",$1"* ]]; }

has fio || { log "installing fio"; apt_install fio; }
if wants_prefix tarn && ! has fusermount; then log "installing fuse"; apt_install fuse; fi
if wants_prefix zfs-fuse && ! has zfs-fuse; then log "installing zfs-fuse"; apt_install zfs-fuse; fi

SMALLFILES=$WORK/smallfiles
cc -O2 -pthread -o "$SMALLFILES" "$REPO/bench/smallfiles.c"

# Build (or find) tarn once, before any target runs.
TARN=""
if wants_prefix tarn; then find_tarn; fi

# ---- common helpers --------------------------------------------------------------------
DIR=""       # where the current target's workloads run
RUN=()       # command prefix for the current target (zfs-fuse: nsenter into its namespace)

# prefill FILE: a log device file of LOG_SIZE, every block written (see the header)
prefill() {
    rm -f "$1"
    dd if=/dev/zero of="$1" bs=1M count=$(( $(numfmt --from=iec "$LOG_SIZE") >> 20 )) conv=fsync status=none
}

# ---- target: raw-log -------------------------------------------------------------------
setup_raw_log() { mkdir -p "$LOGDIR/raw-log"; DIR=$LOGDIR/raw-log; }
teardown_raw_log() { rm -rf "$LOGDIR/raw-log"; }

# ---- targets: tarn-{txg,nolog,slog}[-nolat] ----------------------------------------------
# One private daemon per target (TARN_SOCKET / TARN_STATE_DIR under the target's
# directory), so that TARN_ZIL=off reaches exactly the txg targets and nothing is shared.
TARN_POOL=syncpool
TARN_DIR=""
tarn() {
    # Never let a stray call autostart a daemon on the default socket.
    [ -n "${TARN_SOCKET:-}" ] || die "tarn: TARN_SOCKET is not set"
    "$TARN" "$@"
}
setup_tarn() {  # setup_tarn MODE(txg|nolog|slog) LATENCY(1|0) NAME
    local mode=$1 lat=$2 d=$WORK/$3
    TARN_DIR=$d
    rm -rf "$d"; mkdir -p "$d/state"  # the daemon makes $d/run itself, mode 0700
    export TARN_STATE_DIR=$d/state TARN_CACHEFILE=$d/state/tarn.cache TARN_SOCKET=$d/run/tarn.sock
    if [ "$mode" = txg ]; then export TARN_ZIL=off; else unset TARN_ZIL; fi
    if [ -n "$TARN_CACHE" ]; then export TARN_CACHE_MAX=$TARN_CACHE; else unset TARN_CACHE_MAX; fi
    truncate -s $VDEV_SIZE "$d/a.img" "$d/b.img"
    local vdevs=(mirror "$d/a.img" "$d/b.img")
    if [ "$mode" = slog ]; then
        prefill "$LOGDIR/$3-log.img"
        vdevs+=(log "$LOGDIR/$3-log.img")
    fi
    log "$3: tarn zpool create -m $d/mnt $TARN_POOL ${vdevs[*]}${TARN_ZIL:+ (daemon with TARN_ZIL=$TARN_ZIL)}"
    tarn zpool create -m "$d/mnt" $TARN_POOL "${vdevs[@]}"
    mountpoint -q "$d/mnt" || die "tarn: $d/mnt is not mounted"
    if [ "$lat" = 1 ]; then
        # Main-pool leaves only; the log device stays fast.
        tarn zinject -q -d "$d/a.img" -D "$DELAY_MS" $TARN_POOL >/dev/null
        tarn zinject -q -d "$d/b.img" -D "$DELAY_MS" $TARN_POOL >/dev/null
        log "$3: injected ${DELAY_MS} ms (1 lane, reads, writes and flushes) on a.img and b.img"
    fi
    tarn zpool status $TARN_POOL | sed -n '/config:/,/errors:/p' | sed '/^$/d' >&2
    DIR=$d/mnt
}
teardown_tarn() {  # teardown_tarn NAME: tolerates a half-done setup
    local d=$WORK/$1
    [ -n "$TARN" ] && [ -n "$TARN_DIR" ] || return 0
    local pid=""
    [ -f "$d/state/daemon.pid" ] && pid=$(cat "$d/state/daemon.pid")
    if [ -S "$d/run/tarn.sock" ] && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        tarn zinject -c all >/dev/null 2>&1 || true
        tarn zpool destroy $TARN_POOL >/dev/null 2>&1 || tarn zpool export -f $TARN_POOL >/dev/null 2>&1 || true
        tarn daemon --stop >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    fi
    [ -n "$pid" ] && wait_gone "$pid" 30
    if mountpoint -q "$d/mnt" 2>/dev/null; then fusermount -u "$d/mnt" 2>/dev/null || umount -l "$d/mnt" || true; fi
    rm -rf "$d" "$LOGDIR/$1-log.img"
    TARN_DIR=""
}

# ---- targets: zfs-fuse, zfs-fuse-slog ----------------------------------------------------
ZF_POOL=zfssync
ZF_NS_PID=""
ZF_PID=""
ZF_DIR=""
setup_zfs_fuse_any() {  # setup_zfs_fuse_any WITH_LOG(0|1) NAME
    local with_log=$1 d=$WORK/$2
    if pgrep -x zfs-fuse >/dev/null; then
        die "zfs-fuse is already running on this host (pid $(pgrep -x zfs-fuse | tr '\n' ' ')); it allows one daemon per host"
    fi
    ZF_DIR=$d
    rm -rf "$d"; mkdir -p "$d/mnt"
    truncate -s $VDEV_SIZE "$d/z0.img" "$d/z1.img"
    local vdevs=(mirror "$d/z0.img" "$d/z1.img")
    if [ "$with_log" = 1 ]; then
        prefill "$LOGDIR/$2-log.img"
        vdevs+=(log "$LOGDIR/$2-log.img")
    fi
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
    log "$2: zpool create -f -o cachefile=none -m $d/mnt $ZF_POOL ${vdevs[*]}"
    "${RUN[@]}" zpool create -f -o cachefile=none -m "$d/mnt" $ZF_POOL "${vdevs[@]}"
    "${RUN[@]}" zpool status $ZF_POOL | sed -n '/config:/,/errors:/p' | sed '/^$/d' >&2
    DIR=$d/mnt
}
teardown_zfs_fuse_any() {  # teardown_zfs_fuse_any NAME
    if [ -n "$ZF_NS_PID" ]; then
        "${RUN[@]}" zpool destroy -f $ZF_POOL 2>/dev/null || true
    fi
    if [ -n "$ZF_PID" ]; then
        kill -TERM "$ZF_PID" 2>/dev/null || true
        wait_gone "$ZF_PID" 30
    fi
    if [ -n "$ZF_NS_PID" ]; then kill "$ZF_NS_PID" 2>/dev/null || true; wait "$ZF_NS_PID" 2>/dev/null || true; fi
    ZF_NS_PID=""; ZF_PID=""; RUN=()
    [ -z "$ZF_DIR" ] || rm -rf "$ZF_DIR"
    ZF_DIR=""
    rm -f "$LOGDIR/$1-log.img"
}

# ---- target dispatch -------------------------------------------------------------------
describe() {
    case $1 in
        raw-log) echo "plain dir on the log device's fs" ;;
        tarn-txg) echo "TARN_ZIL=off, ${DELAY_MS}ms/IO main" ;;
        tarn-nolog) echo "ZIL on main pool, ${DELAY_MS}ms/IO" ;;
        tarn-slog) echo "ZIL on log file, ${DELAY_MS}ms/IO main" ;;
        tarn-txg-nolat) echo "TARN_ZIL=off, no latency" ;;
        tarn-nolog-nolat) echo "ZIL on main pool, no latency" ;;
        tarn-slog-nolat) echo "ZIL on log file, no latency" ;;
        zfs-fuse) echo "ZIL on main pool, no latency" ;;
        zfs-fuse-slog) echo "ZIL on log file, no latency" ;;
        *) echo "?" ;;
    esac
}
known_target() { case $1 in raw-log|tarn-txg|tarn-nolog|tarn-slog|tarn-txg-nolat|tarn-nolog-nolat|tarn-slog-nolat|zfs-fuse|zfs-fuse-slog) return 0 ;; esac; return 1; }
tarn_mode() { local m=${1#tarn-}; echo "${m%-nolat}"; }
tarn_lat() { case $1 in *-nolat) echo 0 ;; *) echo 1 ;; esac; }

setup_target() {
    case $1 in
        raw-log) setup_raw_log ;;
        tarn-*) setup_tarn "$(tarn_mode "$1")" "$(tarn_lat "$1")" "$1" ;;
        zfs-fuse) setup_zfs_fuse_any 0 "$1" ;;
        zfs-fuse-slog) setup_zfs_fuse_any 1 "$1" ;;
    esac
}
teardown_target() {
    case $1 in
        raw-log) teardown_raw_log ;;
        tarn-*) teardown_tarn "$1" ;;
        zfs-fuse|zfs-fuse-slog) teardown_zfs_fuse_any "$1" ;;
    esac
}

# ---- workloads ---------------------------------------------------------------------------
WORKLOADS=(
    "W1|rand write 8K fsync=1, 1 job|IOPS"
    "W2|rand write 8K fsync=1, 8 jobs|IOPS"
    "W3|${NFILES} files 8K+fsync, 1 thread|files/s"
    "W4|${NFILES} files 8K+fsync, 4 threads|files/s"
    "W5|rand write 8K fsync=1, 8 jobs, a file each|IOPS"
)

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >> "$RESULTS"; }

# fio_sync NAME NUMJOBS [per-job]: W1/W2/W5; prints the write IOPS (terse v3 field 49).
# With "per-job", every job gets a file of its own (SIZE split between them).
fio_sync() {
    local name=$1 jobs=$2 out files=(--filename="$DIR/bench.dat" --size="$SIZE")
    if [ "${3:-}" = per-job ]; then
        files=(--directory="$DIR" --filename_format="$name.\$jobnum" --size=$(( $(numfmt --from=iec "$SIZE") / jobs )))
    fi
    out=$("${RUN[@]}" fio --name="$name" "${files[@]}" --ioengine=psync \
        --rw=randwrite --bs=8k --fsync=1 --numjobs="$jobs" --group_reporting \
        --runtime="$RUNTIME" --time_based --output-format=terse --terse-version=3)
    printf '%s\n' "$out" | awk -F';' \
        '$1 == "3" { printf "%.1f\n", $49; found = 1 } END { if (!found) exit 1 }'
}

# small_files THREADS: W3/W4; prints "RATE" or "RATE *" when stopped after FILETIME
small_files() {
    local threads=$1 sd=$DIR/small$1 out rc=0 n
    "${RUN[@]}" mkdir -p "$sd"
    out=$("${RUN[@]}" timeout -s TERM "$FILETIME" "$SMALLFILES" "$sd" "$NFILES" "$threads" 8192) || rc=$?
    if [ $rc -eq 0 ]; then
        out=$(printf '%s\n' "$out" | sed -n 's/.*files_per_s=\([0-9.]*\).*/\1/p')
        [ -n "$out" ] || die "smallfiles printed no result"
        echo "$out"
    elif [ $rc -eq 124 ]; then
        # Stopped: each thread may have had one file created but not yet fsynced, so
        # count those as not done.
        n=$("${RUN[@]}" find "$sd" -maxdepth 1 -type f | wc -l)
        awk -v n="$n" -v t="$threads" -v s="$FILETIME" \
            'BEGIN { d = n - t; if (d < 0) d = 0; printf "%.1f *\n", d / s }'
    else
        die "smallfiles failed (exit $rc)"
    fi
}

run_workload() {  # run_workload TARGET KEY: one workload, recorded in results.tsv
    local t=$1 key=$2 v threads
    case $key in
        W1|W2)
            local jobs=1; [ "$key" = W2 ] && jobs=8
            log "$t: $key rand write 8K fsync=1 x$jobs (${RUNTIME}s)"
            v=$(fio_sync "$key" "$jobs"); record "$t" "$key" "$v"; log "$t: $key = $v IOPS" ;;
        W5)
            log "$t: $key rand write 8K fsync=1 x8, a file per job (${RUNTIME}s)"
            v=$(fio_sync "$key" 8 per-job); record "$t" "$key" "$v"; log "$t: $key = $v IOPS" ;;
        W3|W4)
            threads=1; [ "$key" = W4 ] && threads=4
            log "$t: $key $NFILES small files, $threads thread(s) (at most ${FILETIME}s)"
            v=$(small_files "$threads")
            record "$t" "$key" "${v% \*}" "$([[ $v == *'*' ]] && echo capped)"
            log "$t: $key = $v files/s" ;;
    esac
}

run_target() {  # in a subshell: teardown always runs, a failure does not stop the others
    local t=$1 key
    trap "set +e; teardown_target $t" EXIT
    trap 'exit 143' TERM INT
    # A fresh pool (and daemon) for every workload: otherwise the dirty data one workload
    # leaves behind is still being written to the slow main pool while the next runs,
    # and the write throttle makes the second pay for the first.
    for key in W1 W2 W3 W4 W5; do
        log "=== $t: setup for $key"
        setup_target "$t"
        # One fsync before measuring: a new intent-log chain costs a txg sync once per
        # pool, which would otherwise land in the first measured operation.
        "${RUN[@]}" dd if=/dev/zero of="$DIR/warmup" bs=8k count=1 conv=fsync status=none
        run_workload "$t" "$key"
        log "=== $t: teardown"
        set +e; teardown_target "$t"; set -e
    done
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)
# On Ctrl-C or SIGTERM: stop the running target's whole process group (fio, smallfiles)
# and let its EXIT trap tear it down before leaving.
CHILD=""
trap on_signal INT TERM
FAILED=()
for t in "${TARGET_LIST[@]}"; do
    if ! known_target "$t"; then log "unknown target '$t'"; FAILED+=("$t"); continue; fi
    # Started in the background (in its own process group, so that an interrupt can
    # stop all of it) and waited for, so that `set -e` stays in force inside (bash
    # ignores it in a subshell that is the condition of an `if`).
    set -m
    ( run_target "$t" ) < /dev/null &
    CHILD=$!
    set +m
    if ! wait "$CHILD"; then
        log "=== $t: FAILED; its row shows '-'"
        FAILED+=("$t")
    fi
    CHILD=""
done
ELAPSED=$(( $(date +%s) - START ))

# ---- table -----------------------------------------------------------------------------
value_of() { awk -F'\t' -v t="$1" -v w="$2" '$1 == t && $2 == w { print $3 }' "$RESULTS"; }
capped() { awk -F'\t' -v t="$1" -v w="$2" '$1 == t && $2 == w && $4 == "capped" { f = 1 } END { exit !f }' "$RESULTS"; }

echo
echo "sync-write benchmark: fio size=$SIZE runtime=${RUNTIME}s, $NFILES files (at most ${FILETIME}s), injected latency ${DELAY_MS} ms/IO"
echo "workdir $WORK on $(df --output=source "$WORK" | tail -n 1), log devices in $LOGDIR on $(df --output=source "$LOGDIR" | tail -n 1)"
echo "tarn: $( [ -n "$TARN" ] && echo "$TARN" || echo "not used"), TARN_CACHE_MAX=${TARN_CACHE:-default (a quarter of memory; dirty-data limit a sixteenth)}"
echo "$(uname -r), $(nproc) CPUs, load average before $LOAD_BEFORE, after $(cut -d' ' -f1-3 /proc/loadavg), ${ELAPSED}s"
echo
printf '%-18s %-34s' "target" "configuration"
for row in "${WORKLOADS[@]}"; do IFS='|' read -r key _ unit <<< "$row"; printf ' %12s' "$key $unit"; done
printf '\n'
for t in "${TARGET_LIST[@]}"; do
    printf '%-18s %-34s' "$t" "$(describe "$t")"
    for row in "${WORKLOADS[@]}"; do
        IFS='|' read -r key _ _ <<< "$row"
        v=$(value_of "$t" "$key")
        if [ -z "$v" ]; then cell="-"; else cell=$v; capped "$t" "$key" && cell="$v*"; fi
        printf ' %12s' "$cell"
    done
    printf '\n'
done
for row in "${WORKLOADS[@]}"; do IFS='|' read -r key label unit <<< "$row"; printf '  %s: %s (%s)\n' "$key" "$label" "$unit"; done
echo "  * stopped after ${FILETIME}s before all $NFILES files were done; rate = completed files / ${FILETIME}s"

# ---- ratios ----------------------------------------------------------------------------
# ratio NUM DEN GOAL NOTE: one line, the ratio per workload and whether GOAL (a minimum,
# or "-" for none) is met
ratio_line() {
    local num=$1 den=$2 goal=$3 note=$4 key a b cell verdict="" all_ok=1 any=0
    # Only comparisons whose two targets were both asked for.
    [[ ",$TARGETS," == *",$num,"* && ",$TARGETS," == *",$den,"* ]] || return 0
    printf '%-36s' "$num / $den"
    for row in "${WORKLOADS[@]}"; do
        IFS='|' read -r key _ _ <<< "$row"
        a=$(value_of "$num" "$key"); b=$(value_of "$den" "$key")
        if [ -n "$a" ] && [ -n "$b" ] && awk -v b="$b" 'BEGIN { exit !(b > 0) }'; then
            cell=$(awk -v a="$a" -v b="$b" 'BEGIN { r = a / b; printf (r >= 10 ? "%.0fx" : r >= 0.1 ? "%.2fx" : "%.3fx"), r }')
            any=1
            # W5 is not one of the issue's workloads: shown, never judged.
            if [ "$goal" != - ] && [ "$key" != W5 ] && ! awk -v a="$a" -v b="$b" -v g="$goal" 'BEGIN { exit !(a / b >= g) }'; then
                all_ok=0; cell="$cell!"
            fi
        else
            cell="-"
        fi
        printf ' %9s' "$cell"
    done
    if [ "$goal" = - ]; then verdict=""
    elif [ $any -eq 0 ]; then verdict="goal >= ${goal}x: not measured"
    elif [ $all_ok -eq 1 ]; then verdict="goal >= ${goal}x: met"
    else verdict="goal >= ${goal}x: NOT met where marked !"
    fi
    printf '  %s%s\n' "$note" "${verdict:+ [$verdict]}"
}
echo
printf '%-36s' "ratio (higher = first is faster)"
for row in "${WORKLOADS[@]}"; do IFS='|' read -r key _ _ <<< "$row"; printf ' %9s' "$key"; done
printf '\n'
echo "-- Tarn against itself, main pool at ${DELAY_MS} ms/IO (the seeds' slow-disk setup):"
ratio_line tarn-slog tarn-nolog 20 "log device vs intent log on the slow main pool"
ratio_line tarn-slog raw-log 0.5 "log device vs the raw log device's own rate"
ratio_line tarn-nolog tarn-txg - "intent log vs a txg sync per fsync"
echo "-- like for like (same backing file system, 2-way mirror of files, no injected latency):"
ratio_line tarn-nolog-nolat zfs-fuse - "Tarn vs zfs-fuse, intent log on the main pool"
ratio_line tarn-slog-nolat zfs-fuse-slog - "Tarn vs zfs-fuse, with a log file"
ratio_line tarn-txg-nolat zfs-fuse - "Tarn without its ZIL vs zfs-fuse (not like for like)"
echo "-- no injected latency, for reference:"
ratio_line tarn-slog-nolat tarn-nolog-nolat - "log device vs intent log on the main pool"
ratio_line tarn-nolog-nolat tarn-txg-nolat - "intent log vs a txg sync per fsync"
ratio_line zfs-fuse-slog zfs-fuse - "zfs-fuse: log file vs none"
echo "Only the Tarn-vs-zfs-fuse rows compare two implementations on equal terms; the latency"
echo "rows compare Tarn configurations under a modelled ${DELAY_MS} ms/IO disk that zfs-fuse cannot have."
echo "raw results: $RESULTS"
[ ${#FAILED[@]} -eq 0 ] || { log "targets that failed: ${FAILED[*]}"; exit 1; }
