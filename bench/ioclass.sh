#!/usr/bin/env bash
# bench/ioclass.sh — how much a stream of large I/O slows small synchronous writes on
# this machine's disk, by the stream's request size and depth: the measurement behind
# the I/O classes of `crates/zio/src/queue.rs` (no Tarn involved).
#
#   bash bench/ioclass.sh [--runtime 6] [--work DIR]
#
# Two files in --work (1 GiB and 2 GiB, written full of zeros once): fio writes 8 KiB
# at random into the first with O_DIRECT and an fdatasync after each, first alone, then
# beside a second job streaming into (or reading) the other file with libaio at each
# size and depth below. Prints the synchronous writer's IOPS and the stream's MiB/s.
# Run by hand as root, never by CI; needs fio.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/bench/lib.sh"
runtime=6 work=/var/tmp/tarn-ioclass
while [ $# -gt 0 ]; do
    case $1 in
        --runtime) runtime=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/ioclass.sh [--runtime S] [--work DIR]" >&2; exit 2 ;;
    esac
done
has fio || die "fio is missing: apt-get install fio"
mkdir -p "$work"
[ -f "$work/x.img" ] || dd if=/dev/zero of="$work/x.img" bs=1M count=1024 conv=fsync status=none
[ -f "$work/y.img" ] || dd if=/dev/zero of="$work/y.img" bs=1M count=2048 conv=fsync status=none
sync_job=(--name=sync --filename="$work/x.img" --rw=randwrite --bs=8k --size=1G --fdatasync=1
    --runtime="$runtime" --time_based --ioengine=psync --direct=1)
# Terse v3: field 49 is write IOPS; 48 write KiB/s and 7 read KiB/s.
alone=$(fio "${sync_job[@]}" --output-format=terse --terse-version=3 | awk -F';' '{print $49}')
printf '%-22s %10s %12s\n' "beside" "sync IOPS" "stream MiB/s"
printf '%-22s %10s %12s\n' "nothing" "$alone" "-"
for spec in "write 1M 2" "write 1M 1" "write 256k 1" "write 128k 2" "write 128k 1" "write 64k 1" \
    "read 1M 2" "read 128k 2" "read 128k 1"; do
    read -r rw bs depth <<< "$spec"
    fio "${sync_job[@]}" --output-format=terse --terse-version=3 \
        --name=stream --filename="$work/y.img" --rw="$rw" --bs="$bs" --size=2G --direct=1 \
        --ioengine=libaio --iodepth="$depth" --runtime="$runtime" --time_based |
        awk -F';' -v s="$rw $bs x$depth" 'NR == 1 { a = $49 } NR == 2 { b = ($48 + $7) / 1024 }
            END { printf "%-22s %10s %12.1f\n", s, a, b }'
done
