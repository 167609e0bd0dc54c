#!/usr/bin/env bash
# Build the release binaries: `tarnd` (the engine) and `tarn` (the client), both in
# $CARGO_TARGET_DIR/release (default target/release), and print the client's path.
#
#   bash scripts/build.sh [-q]
#
# `cargo build --release -p tarn-cli --features fuse` builds both binaries; then the
# client is built again as a static executable and put in place of the first one:
#
#   1. for the musl target (`x86_64-unknown-linux-musl`, added with `rustup target add`
#      when missing and rustup can fetch it), from the package `tarn-client`, which
#      holds the same source (crates/cli/src/main.rs) and depends on the protocol
#      crate alone, so none of the engine is compiled for that target;
#   2. otherwise statically against glibc (`cargo rustc … --bin tarn -- -C
#      target-feature=+crt-static`).
#
# Why: every `tarn zfs …`/`tarn zpool …` is a process start. A static client has no
# program interpreter (no ld.so, no libc.so or libgcc_s.so to map and relocate), and
# musl's start-up does not probe the CPU's caches with `cpuid` as glibc's does (each
# `cpuid` traps to the hypervisor on a VM). Measured here (`perf stat -r 300 tarn zfs
# list`, bench/README "A static client"): 1.59 ms per command dynamic, 1.46 static
# glibc, 0.85 static musl, the daemon's share included. The client calls no NSS
# function (no user or group lookups), so a static libc changes nothing it does. The
# engine stays dynamic: it resolves users and groups for the socket's access checks
# (`getpwuid_r`, `getgrouplist`), which static glibc cannot do without the shared NSS
# modules of its own version. A client from a plain `cargo build` works the same, it
# only starts slower. -q passes --quiet to cargo and silences this script's own lines.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
quiet=()
[ "${1:-}" = -q ] && quiet=(-q)
say() { [ ${#quiet[@]} -gt 0 ] || echo "build.sh: $*" >&2; }
cd "$REPO"
target_dir=${CARGO_TARGET_DIR:-$REPO/target}
case $target_dir in /*) ;; *) target_dir=$REPO/$target_dir ;; esac
cargo build --release "${quiet[@]}" -p tarn-cli --features fuse
musl=x86_64-unknown-linux-musl
have_musl() {
    command -v rustup >/dev/null 2>&1 || return 1
    rustup target list --installed 2>/dev/null | grep -qx "$musl" && return 0
    say "adding the Rust target $musl (rustup target add $musl)"
    timeout 300 rustup target add "$musl" >/dev/null 2>&1
}
if [ "$(uname -m)" = x86_64 ] && have_musl && cargo build --release "${quiet[@]}" --target "$musl" -p tarn-client; then
    # A new file, not a write through cargo's hard link to its own copy in deps/.
    rm -f "$target_dir/release/tarn"
    cp "$target_dir/$musl/release/tarn-client" "$target_dir/release/tarn"
    say "client: static, musl"
else
    say "no musl target: linking the client statically against glibc"
    cargo rustc --release "${quiet[@]}" -p tarn-cli --features fuse --bin tarn -- -C target-feature=+crt-static
fi
echo "$target_dir/release/tarn"
