#!/usr/bin/env bash
# fuzz/campaign.sh — the long fuzzing campaign of issue 11: every decoder target for a
# fixed number of executions (default 10,000,000) under libFuzzer with AddressSanitizer,
# `-rss_limit_mb=512 -malloc_limit_mb=64`, starting from the committed corpus.
#
#   bash fuzz/campaign.sh [--runs N] [--max-time S] [--targets t1,t2] [--out DIR]
#
# --max-time caps each target's wall time (libFuzzer -max_total_time; 0 = none): a
# slow target stops there, short of N, and its line says how many it ran.
# New inputs libFuzzer keeps go to OUT/corpus/<target> (the committed corpus is only
# read), crashes to OUT/artifacts/<target>, each target's log to OUT/<target>.log, and
# one line per target to OUT/summary.tsv: target, executions, seconds, exec/s, the last
# `cov:` and `ft:` figures, and the number of crash/timeout/oom artifacts. Needs the
# nightly toolchain and `cargo install cargo-fuzz`. Not run by CI (CI replays the
# corpus: crates/fuzzing/tests/corpus_replay.rs). The image target is not a decoder and
# is left out by default (about a case per second; see README.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
runs=10000000
max_time=0
out=/var/tmp/tarn-fuzz-campaign
targets=blkptr,decompress,dnode,l2arc,label_config,pool_records,send_record,space_map,uberblock,zap,zil,znode
while [ $# -gt 0 ]; do
    case $1 in
        --runs) runs=$2; shift 2 ;;
        --max-time) max_time=$2; shift 2 ;;
        --targets) targets=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "usage: bash fuzz/campaign.sh [--runs N] [--max-time S] [--targets t1,t2] [--out DIR]" >&2; exit 2 ;;
    esac
done
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2; exit 1; }
cargo +nightly fuzz build -O >/dev/null
mkdir -p "$out"
printf 'target\texecutions\tseconds\texec_per_s\tcov\tft\tcrashes\n' > "$out/summary.tsv"
for t in ${targets//,/ }; do
    mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
    start=$(date +%s)
    rc=0
    cargo +nightly fuzz run -O "$t" "$out/corpus/$t" "corpus/$t" -- \
        -runs="$runs" -max_total_time="$max_time" -rss_limit_mb=512 -malloc_limit_mb=64 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/$t/" > "$out/$t.log" 2>&1 || rc=$?
    secs=$(( $(date +%s) - start ))
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$out/$t.log" | tail -n 1 || true)
    execs=$(grep -E '^stat::number_of_executed_units:' "$out/$t.log" | awk '{print $2}' | tail -n 1)
    cov=$(echo "$done_line" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$done_line" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    crashes=$(find "$out/artifacts/$t" -type f | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "${execs:-0}" "$secs" "$(( ${execs:-0} / (secs > 0 ? secs : 1) ))" \
        "${cov:--}" "${ft:--}" "$crashes" >> "$out/summary.tsv"
    [ "$rc" -eq 0 ] || echo "$t: libFuzzer exited $rc (see $out/$t.log)" >&2
done
column -t -s$'\t' "$out/summary.tsv"
