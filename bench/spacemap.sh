#!/usr/bin/env bash
# Space-structure bytes written per txg against pool size and fragmentation (issue 12).
#
#   bash bench/spacemap.sh [--sizes-gib 64,256,1024,4096,16384] [--txgs 40] [--txg-mib 64] [--out DIR]
#
# Runs crates/metaslab/examples/sm_bytes.rs (the allocator and the space-map log in
# memory, driven as the txg sync drives them, no data I/O), writes DIR/sm_bytes.csv,
# prints a table of the median bytes per txg by phase and size, and plots
# DIR/sm_bytes.png with matplotlib (installed with pip when missing). No root needed.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/bench/lib.sh"
OUT=./spacemap-out
ARGS=()
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=$2; shift 2 ;;
        --sizes-gib|--txgs|--txg-mib) ARGS+=("$1" "$2"); shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done
mkdir -p "$OUT"
log "building and running sm_bytes ${ARGS[*]:-}"
(cd "$REPO" && cargo run --release -q -p tarn-metaslab --example sm_bytes -- "${ARGS[@]}") > "$OUT/sm_bytes.csv"
python3 - "$OUT" <<'PY'
import csv, statistics, sys, os
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "sm_bytes.csv"))))
by = {}
for r in rows:
    by.setdefault((r["phase"], int(r["size_gib"])), []).append((int(r["txg"]), int(r["bytes"]), int(r["frag_pct"])))
print("| phase | vdev size | median bytes/txg | max bytes/txg | FRAG |")
print("|---|---:|---:|---:|---:|")
for (phase, g), v in sorted(by.items(), key=lambda k: (k[0][0] != "fresh", k[0][1])):
    b = [x[1] for x in v]
    print(f"| {phase} | {g} GiB | {int(statistics.median(b)):,} | {max(b):,} | {v[-1][2]}% |")
PY
if ! python3 -c "import matplotlib" 2>/dev/null; then
    log "installing matplotlib with pip"
    pip install -q matplotlib 2>/dev/null || pip install -q --break-system-packages matplotlib || { log "matplotlib unavailable: no plot"; exit 0; }
fi
python3 - "$OUT" <<'PY'
import csv, statistics, sys, os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "sm_bytes.csv"))))
fig, ax = plt.subplots(figsize=(7, 4.5))
for phase, mark in (("fresh", "o-"), ("fragmented", "s-")):
    pts = {}
    for r in rows:
        if r["phase"] == phase:
            pts.setdefault(int(r["size_gib"]), []).append(int(r["bytes"]))
    xs = sorted(pts)
    ax.plot(xs, [statistics.median(pts[x]) / 1024 for x in xs], mark, label=f"{phase}: median")
    ax.plot(xs, [max(pts[x]) / 1024 for x in xs], mark.replace("-", ":"), alpha=0.5, label=f"{phase}: max")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("top-level vdev size (GiB)")
ax.set_ylabel("space-structure KiB written per txg")
ax.set_title("Tarn: space-map bytes per txg (64 MiB of 128 KiB writes per txg)")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
fig.tight_layout()
fig.savefig(os.path.join(out, "sm_bytes.png"), dpi=110)
print(f"plot: {os.path.join(out, 'sm_bytes.png')}")
PY
