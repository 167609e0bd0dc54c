#!/usr/bin/env bash
# Build the release binaries: `tarnd` (the engine) and `tarn` (the client), both in
# $CARGO_TARGET_DIR/release (default target/release), and print the client's path.
#
#   bash scripts/build.sh [-q]
#
# Two steps. `cargo build --release -p tarn-cli --features fuse` builds both binaries;
# then `cargo rustc … --bin tarn -- -C target-feature=+crt-static` links the client
# again as a static PIE. A static client has no program interpreter: no ld.so, no
# libc.so or libgcc_s.so to map and relocate at every command, which saves about
# 0.4 ms of each `tarn zfs …`/`tarn zpool …` command on this machine (bench/README,
# "A static client"). The client calls no NSS function (no user or group lookups),
# so static glibc gives it nothing to load at run time. The engine stays dynamic: it
# resolves users and groups for the socket's access checks (`getpwuid_r`,
# `getgrouplist`), which static glibc cannot do without the shared NSS modules of its
# own version. A dynamic client from a plain `cargo build` works the same, only
# starts slower. -q passes --quiet to cargo.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
quiet=()
[ "${1:-}" = -q ] && quiet=(-q)
cd "$REPO"
cargo build --release "${quiet[@]}" -p tarn-cli --features fuse
cargo rustc --release "${quiet[@]}" -p tarn-cli --features fuse --bin tarn -- -C target-feature=+crt-static
target_dir=${CARGO_TARGET_DIR:-$REPO/target}
case $target_dir in /*) ;; *) target_dir=$REPO/$target_dir ;; esac
echo "$target_dir/release/tarn"
