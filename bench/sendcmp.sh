#!/usr/bin/env bash
# bench/sendcmp.sh — cold full send to /dev/null of two Tarn builds taking turns on the
# same pool (a 1 GiB tree of 4 MiB files on a two-file mirror), beside a cold `cat` of
# the same files: the before/after of a send change in one run. Needs root.
#
#   sudo OLD_BIN=path/to/old/tarn NEW_BIN=path/to/new/tarn bash bench/sendcmp.sh
set -euo pipefail
W=${BENCH_DIR:-/var/tmp/sendcmp}; NEW=${NEW_BIN:?set NEW_BIN}; OLD=${OLD_BIN:?set OLD_BIN}
rm -rf $W; mkdir -p $W/state $W/raw
export TARN_STATE_DIR=$W/state TARN_CACHEFILE=$W/state/c TARN_SOCKET=$W/run/s
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
head -c $((64<<20)) /dev/urandom > $W/seed
for i in $(seq 1 256); do dd if=$W/seed of=$W/raw/f$i bs=4M count=1 skip=$(( (i*4099) % (60<<20) )) iflag=skip_bytes status=none; done
cd "$W"; $NEW zpool create -o size=3G -m $W/mnt src mirror a.img b.img
$NEW zfs create src/fs; cp -a $W/raw/. $W/mnt/fs/; $NEW zfs snapshot src/fs@a; $NEW zpool export src; $NEW daemon --stop
bytes=$(du -sb $W/raw | cut -f1)
t() { local t0 t1; t0=$(date +%s%N); "$@"; t1=$(date +%s%N); awk -v b=$bytes -v ns=$((t1-t0)) 'BEGIN{printf "%.0f MB/s\n", b/1e6/(ns/1e9)}'; }
for round in 1 2; do
  drop; printf "raw cat: "; t sh -c "cat $W/raw/* > /dev/null"
  for b in OLD NEW; do bin=${!b}
    $bin zpool import -d $W src; $bin zpool export src; drop; $bin zpool import -d $W src
    printf "%s send: " $b; t sh -c "$bin zfs send src/fs@a > /dev/null"
    $bin zpool export src; $bin daemon --stop
  done
done
rm -rf $W
