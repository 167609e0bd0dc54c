#!/usr/bin/env bash
# bench/snaplist.sh — what `zfs list` costs the daemon when snapshots have big dead
# lists, for one or more Tarn builds in turn.
#
#   bash bench/snaplist.sh --bins A/tarn[,B/tarn...] [--snaps 20] [--size-mib 64]
#                          [--recordsize 8K] [--work DIR]
#
# Per build: a fresh pool (2-way mirror of sparse 4 GiB file leaves), a file system with
# the given recordsize, and SNAPS rounds of "rewrite a SIZE_MIB file with random bytes
# (fsynced), take a snapshot": every snapshot's successor then has a dead list of
# SIZE_MIB / recordsize entries. Then a resident Python client sends each listing 15
# times straight to the socket (no process start) and prints the median in µs:
# `zfs list -t snapshot -o name,used`, `zfs list -o name,used,usedbysnapshots` and
# `zfs list -t all -o name,used,refer,written`. Run by hand as root, never by CI;
# needs python3.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" snaps=20 size_mib=64 recordsize=8K work=/var/tmp/tarn-snaplist
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --snaps) snaps=$2; shift 2 ;;
        --size-mib) size_mib=$2; shift 2 ;;
        --recordsize) recordsize=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/snaplist.sh --bins A/tarn[,B/tarn...] [--snaps N] [--size-mib N] [--recordsize SIZE] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
has python3 || die "python3 is missing: apt-get install python3"
[ "$(id -u)" -eq 0 ] || die "run as root (like every script here)"
bin=""
trap '[ -z "$bin" ] || "$bin" daemon --stop >/dev/null 2>&1 || true' EXIT
for i in "${!BINS[@]}"; do
    bin=$(readlink -f "${BINS[$i]}")
    rm -rf "$work"; mkdir -p "$work/state"
    export TARN_STATE_DIR=$work/state TARN_CACHEFILE=$work/state/tarn.cache TARN_SOCKET=$work/run/tarn.sock
    (cd "$work" && "$bin" zpool create -o size=4G -m "$work/mnt" sl mirror a.img b.img >/dev/null)
    "$bin" zfs create -o recordsize="$recordsize" sl/fs
    for s in $(seq 1 "$snaps"); do
        dd if=/dev/urandom of="$work/mnt/fs/f" bs=1M count="$size_mib" conv=notrunc,fsync status=none
        "$bin" zfs snapshot "sl/fs@s$s"
    done
    python3 - "$REPO/bench" "$TARN_SOCKET" "bin$i" <<'PY'
import statistics, sys, time
sys.dont_write_bytecode = True  # no __pycache__ in the tree
sys.path.insert(0, sys.argv[1])
from tarnsock import request
for what, argv in [("snapshots", ["zfs", "list", "-H", "-t", "snapshot", "-o", "name,used"]),
                   ("filesystems", ["zfs", "list", "-H", "-o", "name,used,usedbysnapshots"]),
                   ("all", ["zfs", "list", "-H", "-t", "all", "-o", "name,used,refer,written"])]:
    times = []
    for _ in range(15):
        t, answer = request(sys.argv[2], argv)
        times.append(t)
        rows = answer["stdout"].count("\n")
        time.sleep(0.05)
    print(f"{sys.argv[3]:<6} {what:<12} rows {rows:>5}  median {statistics.median(times):>9.0f} us")
PY
    "$bin" daemon --stop >/dev/null
    bin=""
done
for i in "${!BINS[@]}"; do echo "bin$i = ${BINS[$i]}"; done
