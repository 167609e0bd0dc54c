#!/usr/bin/env bash
# bench/scrubcpu.sh — wall time and daemon CPU of a cold scrub, for one or more builds
# on the same pool, against a cold buffered read of the same leaf bytes.
#
#   bash bench/scrubcpu.sh --bins OLD/tarn,NEW/tarn [--rounds 3] [--data 2G] [--work DIR]
#
# The pool (a 2-way mirror of two sparse files of twice `--data`) is made once by the
# first build and filled with `bench/scangen.c` (incompressible files, 4 writers,
# seed 42), then exported. Each round, for each build: both leaves are read once
# with `dd` (so every build's scrub starts from the same host cache state: on this VM
# a buffered read leaves the host faster for the next one, a direct read does not),
# the page cache is dropped, the pool imported, and `zpool scrub -w` timed while the
# daemon's CPU time (utime + stime) is sampled around it; after the export, both
# leaves' allocated range is read cold with two parallel `dd bs=1M` (what a scrub of
# a mirror reads) and the ratio `dd / scrub` of wall times printed (1.0 = the scrub
# reads as fast as `dd`). Run by hand as root, never by CI.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
bins="" rounds=3 data=2G work=/var/tmp/tarn-scrubcpu
while [ $# -gt 0 ]; do
    case $1 in
        --bins) bins=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/scrubcpu.sh --bins A[,B...] [--rounds N] [--data SIZE] [--work DIR]" >&2; exit 2 ;;
    esac
done
tarn_bins "$bins"
bytes=$(numfmt --from=iec "$data")
export TARN_STATE_DIR=$work/state TARN_CACHEFILE=$work/state/tarn.cache TARN_SOCKET=$work/run/tarn.sock
first=$(readlink -f "${BINS[0]}")
"$first" zpool destroy scb >/dev/null 2>&1 || true
"$first" daemon --stop >/dev/null 2>&1 || true
rm -rf "$work"; mkdir -p "$work/vdev" "$work/state"
gcc -O2 -o "$work/scangen" "$REPO/bench/scangen.c" -lpthread -lm
truncate -s $((bytes * 2)) "$work/vdev/A" "$work/vdev/B"
"$first" zpool create -m "$work/mnt" scb mirror "$work/vdev/A" "$work/vdev/B"
"$work/scangen" "$work/mnt" "$bytes" 42 4
alloc=$("$first" zpool list -Hp -o alloc scb)
"$first" zpool export scb
"$first" daemon --stop >/dev/null 2>&1 || true
count=$(( (alloc + (1 << 20) - 1) >> 20 ))
echo "pool: $((alloc >> 20)) MiB allocated; dd reads ${count} MiB from each leaf"

now() { echo "$EPOCHREALTIME"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
read_leaves() {  # both leaves' allocated range, in parallel, buffered
    dd if="$work/vdev/A" of=/dev/null bs=1M count="$count" status=none &
    dd if="$work/vdev/B" of=/dev/null bs=1M count="$count" status=none
    wait
}
out=$work/results.tsv; : > "$out"
for r in $(seq 1 "$rounds"); do
    for i in "${!BINS[@]}"; do
        bin=$(readlink -f "${BINS[$i]}")
        drop; read_leaves
        "$bin" zpool import -d "$work/vdev" scb
        pid=$(cat "$TARN_STATE_DIR/daemon.pid")
        drop
        c0=$(awk '{print $14 + $15}' "/proc/$pid/stat"); t0=$(now)
        "$bin" zpool scrub -w scb
        c1=$(awk '{print $14 + $15}' "/proc/$pid/stat"); t1=$(now)
        "$bin" zpool export scb
        "$bin" daemon --stop >/dev/null 2>&1 || true
        drop; t2=$(now); read_leaves; t3=$(now)
        awk -v b="bin$i" -v r="$r" -v w="$(echo "$t1 - $t0" | bc)" -v c="$(( c1 - c0 ))" -v d="$(echo "$t3 - $t2" | bc)" -v m="$((alloc >> 20))" \
            'BEGIN { printf "%s\tround %s\tscrub %.2f s\t%.0f MiB/s read\tcpu %.2f s (%.2f cores)\tdd %.2f s\tdd/scrub %.2f\n", b, r, w, 2 * m / w, c / 100, c / 100 / w, d, d / w }' | tee -a "$out"
    done
done
echo "medians (scrub s, cpu s, dd/scrub):"
for i in "${!BINS[@]}"; do
    grep "^bin$i" "$out" | awk -F'\t' -v b="bin$i ${BINS[$i]}" '
        { split($3, s, " "); split($5, c, " "); split($7, q, " "); w[NR] = s[2]; u[NR] = c[2]; x[NR] = q[2] }
        function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        END { printf "%s\t%.2f\t%.2f\t%.2f\n", b, med(w, NR), med(u, NR), med(x, NR) }'
done
"$first" zpool destroy scb >/dev/null 2>&1 || { "$first" zpool import -d "$work/vdev" scb && "$first" zpool destroy scb; } >/dev/null 2>&1 || true
"$first" daemon --stop >/dev/null 2>&1 || true
rm -rf "$work/vdev" "$work/mnt"
