# Helpers shared by the benchmark scripts (fio.sh, sync.sh, scan.sh); source it after
# setting REPO. Defines log, die, apt_install, has, in_new_namespace, wait_for,
# wait_gone, find_tarn, tarn_bins, on_signal, cpu_ms and the helpers of the scripts
# that compare builds (ab_setup, ab_pool, ab_cold_file, ab_teardown, ab_medians).
# Nothing here runs on its own.

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# apt_install PKG...: install without starting services (zfs-fuse ships an init
# script): a policy-rc.d only when the machine has none, removing only the one made.
APT_UPDATED=0
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    if [ $APT_UPDATED -eq 0 ]; then apt-get update -qq; APT_UPDATED=1; fi
    local made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    local rc=0
    apt-get install -y -qq "$@" || rc=$?
    [ $made_policy -eq 1 ] && rm -f /usr/sbin/policy-rc.d
    return $rc
}
has() { command -v "$1" >/dev/null 2>&1; }

in_new_namespace() { [ "$(readlink "/proc/$1/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]; }
wait_for() {  # wait_for SECONDS COMMAND...: retry COMMAND until it succeeds
    local t=$1; shift
    for _ in $(seq 1 $((t * 10))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    "$@"
}
wait_gone() {  # wait_gone PID SECONDS: wait for a process to exit, SIGKILL it after that
    local pid=$1 t=$2
    for _ in $(seq 1 $((t * 10))); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    log "pid $pid still alive after ${t}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

# find_tarn: set TARN to $TARN_BIN, or build with scripts/build.sh (the release
# binaries, the client linked statically; honours CARGO_TARGET_DIR) and use that binary.
find_tarn() {
    if [ -n "${TARN_BIN:-}" ]; then
        TARN=$TARN_BIN
    else
        log "building tarn (bash scripts/build.sh)"
        TARN=$(bash "$REPO/scripts/build.sh" -q | tail -n 1)
    fi
    [ -x "$TARN" ] || die "no tarn binary at $TARN"
}

# tarn_bins LIST: the comma-separated tarn binaries of a `--bins` option into the array
# BINS, each checked to be executable (dies otherwise).
tarn_bins() {
    [ -n "$1" ] || die "--bins names one or more tarn binaries"
    IFS=, read -r -a BINS <<< "$1"
    local b
    for b in "${BINS[@]}"; do [ -x "$b" ] || die "not a tarn binary: $b"; done
}

# ab_setup WORK: for the scripts that compare builds on one 2-way mirror of WORK/a.img
# and WORK/b.img (4 GiB each, written full of zeros once, so the host file system
# allocates nothing during a run): make them, point the TARN_* variables at WORK's
# private daemon, and empty WORK/results.tsv (path in OUT).
ab_setup() {
    local work=$1 f
    mkdir -p "$work"
    for f in a b; do
        [ -f "$work/$f.img" ] || dd if=/dev/zero of="$work/$f.img" bs=1M count=4096 conv=fsync status=none
    done
    export TARN_STATE_DIR=$work/state TARN_CACHEFILE=$work/state/tarn.cache TARN_SOCKET=$work/run/tarn.sock
    OUT=$work/results.tsv; : > "$OUT"
    AB_WORK=$work
}

# ab_pool BIN NAME: after ab_setup, a fresh daemon state and a new pool NAME on the
# mirror of AB_WORK/a.img and b.img, mounted at AB_WORK/mnt (BIN starts the daemon).
ab_pool() {
    rm -rf "$AB_WORK/state" "$AB_WORK/run"; mkdir -p "$AB_WORK/state"
    (cd "$AB_WORK" && "$1" zpool create -f -m "$AB_WORK/mnt" "$2" mirror a.img b.img >/dev/null)
}

# ab_cold_file BIN NAME DIR SIZE: lay out DIR/f.dat (SIZE, 1 MiB writes, end_fsync) in
# pool NAME, then export it, drop the host's page cache and import it, so what follows
# starts with nothing of the file cached (the daemon keeps running).
ab_cold_file() {
    fio --name=layout --directory="$3" --filename=f.dat --rw=write --bs=1M --size="$4" \
        --end_fsync=1 --output=/dev/null
    "$1" zpool export "$2"
    sync; echo 3 > /proc/sys/vm/drop_caches
    "$1" zpool import -d "$AB_WORK" "$2" >/dev/null
}

# ab_teardown BIN NAME: destroy pool NAME and stop the daemon (errors ignored).
ab_teardown() {
    "$1" zpool destroy "$2" >/dev/null 2>&1 || true
    "$1" daemon --stop >/dev/null 2>&1 || true
}

# ab_medians OUT COLUMNS BIN...: each build's medians over the rounds in OUT (rows
# `binI<TAB>round<TAB>value...`, as the *ab.sh scripts write them), one line per build
# of BIN... under a heading. COLUMNS describes the values in order, comma-separated,
# each `heading:width:decimals[:divisor]` (the median is divided by divisor).
ab_medians() {
    python3 - "$@" <<'PY'
import sys, statistics
out, spec, bins = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = [l.split('\t') for l in open(out).read().split('\n') if l]
cols = [c.split(':') for c in spec.split(',')]
print(f"{'build':<40}" + ''.join(f" {c[0]:>{c[1]}}" for c in cols))
for i, b in enumerate(bins):
    line = f"{b:<40}"
    for j, c in enumerate(cols):
        m = statistics.median(float(r[2 + j]) for r in rows if r[0] == f'bin{i}')
        line += f" {m / float(c[3] if len(c) > 3 else 1):{c[1]}.{c[2]}f}"
    print(line)
PY
}

# cpu_ms PID: user + system CPU time of a process so far, milliseconds.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ print int(($14 + $15) * 1000 / hz) }' "/proc/$1/stat"; }

# on_signal: the INT/TERM trap of a script that runs each part in the background in its
# own process group, pid in CHILD: stop that whole group, let its EXIT trap tear down.
on_signal() {
    trap '' INT TERM
    log "interrupted; tearing down${CHILD:+ (pid $CHILD)}"
    if [ -n "$CHILD" ]; then kill -TERM -- "-$CHILD" 2>/dev/null || true; wait "$CHILD" 2>/dev/null || true; fi
    exit 130
}
