#!/usr/bin/env bash
# The seed's pool (issue 12, seed 004): a 19-wide raidz3 of sparse 1 TiB file leaves
# with a mirrored log, holding a copied real tree and 1,000,000 small files; timed
# export, cache-less import (`-d` scan of the leaves), scrub, and a diff of the tree.
#
#   sudo bash bench/seedpool.sh [--files N] [--tree DIR] [--work DIR]
#
# Needs root, /dev/fuse and about (files × 4 KiB × 22/19) of disk for the sparse
# leaves' data. TARN_BIN picks the binary (default: scripts/build.sh). Prints one
# line per step with its time; exits non-zero if any step or the diff fails or the
# scrub finds errors.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/bench/lib.sh"
FILES=1000000
TREE=/usr/include
WORK=/var/tmp/tarn-seedpool
while [ $# -gt 0 ]; do
    case $1 in
        --files) FILES=$2; shift 2 ;;
        --tree) TREE=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done
[ "$(id -u)" -eq 0 ] || die "run as root"
has fusermount || apt_install fuse
find_tarn
mkdir -p "$WORK"
mkdir -p "$WORK/run" && chmod 700 "$WORK/run"
export TARN_STATE_DIR=$WORK/state TARN_SOCKET=$WORK/run/tarn.sock TARN_CACHEFILE=$WORK/state/tarn.cache
mkdir -p "$TARN_STATE_DIR"
MNT=$WORK/mnt
cleanup() {
    "$TARN" zpool destroy -f seed >/dev/null 2>&1 || true
    "$TARN" daemon --stop >/dev/null 2>&1 || true
    rm -f "$WORK"/leaf*.img "$WORK"/log*.img
}
trap cleanup EXIT
cleanup
t() {  # t LABEL CMD...: run and print the seconds it took
    local label=$1; shift
    local s; s=$(date +%s.%N)
    "$@"
    printf '%-40s %8.2f s\n' "$label" "$(echo "$(date +%s.%N) - $s" | bc)"
}
leaves=()
for i in $(seq 0 18); do truncate -s 1T "$WORK/leaf$i.img"; leaves+=("$WORK/leaf$i.img"); done
truncate -s 4G "$WORK/log0.img" "$WORK/log1.img"
t "create raidz3 x19 (1 TiB leaves) + log" "$TARN" zpool create -o cachefile=none -m "$MNT" seed raidz3 "${leaves[@]}" log mirror "$WORK/log0.img" "$WORK/log1.img"
"$TARN" zpool list seed
t "cp -a $TREE" cp -a "$TREE" "$MNT/tree"
# Four writer processes, each making every fourth directory (the creation is not what
# is measured; one Python process took 741 s for a million files).
small_files() {
    local j
    mkdir -p "$MNT/small"
    for j in 0 1 2 3; do
        python3 - "$MNT/small" "$FILES" "$j" 4 <<'PY' &
import os, sys
root, n, me, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
per = 1000
for d in range(me, (n + per - 1) // per, jobs):
    dp = os.path.join(root, f"d{d:04d}")
    os.mkdir(dp)
    for i in range(min(per, n - d * per)):
        with open(os.path.join(dp, f"f{i:04d}"), "wb") as f:
            f.write((b"%d/%d " % (d, i)) * (1 + (d * per + i) % 400))
PY
    done
    wait
}
t "create $FILES small files (4 processes)" small_files
"$TARN" zpool list seed
t "zpool sync (what the copy left dirty)" "$TARN" zpool sync seed
t "zpool export" "$TARN" zpool export seed
t "zpool import -d (no cachefile)" "$TARN" zpool import -o cachefile=none -d "$WORK" seed
t "zpool scrub -w" "$TARN" zpool scrub -w seed
"$TARN" zpool status seed
"$TARN" zpool status -x seed | grep -q "is healthy" || die "scrub found problems"
t "diff -r $TREE" diff -r "$TREE" "$MNT/tree"
count=$(find "$MNT/small" -type f | wc -l)
[ "$count" -eq "$FILES" ] || die "$count files of $FILES after import"
log "all $FILES small files present after export/import; tree identical; scrub clean"
