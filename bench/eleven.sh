#!/usr/bin/env bash
# Seed 003's "11 metrics" (the filebench set the Sun Storage 7000 was judged by; the
# seed tables ten of them) as fio jobs scaled to this machine, on every system in one
# run: raw directory, Tarn, Tarn with a log file, zfs-fuse and btrfs.
#
#   sudo bash bench/eleven.sh [--size 2G] [--runtime 20] [--files 5000] [--targets ...]
#
# --size is the working set (default 2G; the cached rows read what the previous row
# left in the cache, the cold rows run after an export/import or remount and
# drop_caches); threads are the seed's (1, 10, 20 and 128; 8 for file creates).
# The jobs are the `csrl … fc` workloads of bench/fio.sh, which this calls; its table
# has one row per metric under the seed's names and a column per system.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ARGS=(--targets raw,tarn,tarn-slog,zfs-fuse,btrfs --size 2G)
exec bash "$REPO/bench/fio.sh" "${ARGS[@]}" --workloads csrl,srl,csr,sr,swl,sw,syncw,crr,rr,fc "$@"
