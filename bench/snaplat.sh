#!/usr/bin/env bash
# bench/snaplat.sh — `zfs snapshot` latency of two Tarn builds in one run, alternating
# (A B A B ...), each on its own fresh 2-way mirror of file leaves, idle and under the
# two writers of bench/send.sh (an fsynced 8 KiB appender; a 64 MiB dd stream).
#
#   bash bench/snaplat.sh --a OLD_BIN --b NEW_BIN [--rounds 2] [--snaps 20] [--work DIR]
#
# Prints, per build and writer, the median and p90 over all rounds (ms), and the
# ratio b/a of the medians. Each snapshot is timed around the command alone
# ($EPOCHREALTIME). Then the writers' own rates while the snapshots were taken (the
# appender's fsynced writes per second, the stream's MiB/s of completed 64 MiB
# files): a faster writer leaves more dirty data for each snapshot's txg, so compare
# latencies together with these. Run by hand, never by CI; needs fio.
set -euo pipefail
A="" B="" rounds=2 snaps=20 work=/var/tmp/tarn-snaplat
while [ $# -gt 0 ]; do
    case $1 in
        --a) A=$(readlink -f "$2"); shift 2 ;;
        --b) B=$(readlink -f "$2"); shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --snaps) snaps=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: bash bench/snaplat.sh --a OLD_BIN --b NEW_BIN [--rounds N] [--snaps N] [--work DIR]" >&2; exit 2 ;;
    esac
done
[ -x "$A" ] && [ -x "$B" ] || { echo "--a and --b must name tarn binaries" >&2; exit 2; }
command -v fio >/dev/null || { echo "fio is missing: apt-get install fio" >&2; exit 1; }
mkdir -p "$work"
out=$work/samples.tsv; : > "$out"
rates=$work/rates.tsv; : > "$rates"

one() {  # one LABEL BIN: a fresh pool, then snapshots idle / append / stream
    local label=$1 bin=$2 T=$work/$1 kind flag writer i t0 t1 w0 w1 n
    rm -rf "$T"; mkdir -p "$T/state"
    export TARN_STATE_DIR=$T/state TARN_CACHEFILE=$T/state/tarn.cache TARN_SOCKET=$T/run/tarn.sock
    (cd "$T" && "$bin" zpool create -o size=2G -m "$T/mnt" src mirror a.img b.img >/dev/null)
    "$bin" zfs create src/fs
    for kind in idle append stream; do
        flag=$(mktemp)
        : > "$T/done"
        w0=$EPOCHREALTIME
        case $kind in
            idle) sleep infinity & ;;
            append) fio --name=append --directory="$T/mnt/fs" --filename=append.tmp --rw=write --bs=8k \
                        --size=1G --fsync=1 --time_based --runtime=600 --output-format=terse \
                        --output="$T/fio.terse" & ;;
            stream) bash -c "while [ -e $flag ]; do dd if=/dev/zero of=$T/mnt/fs/writer.tmp bs=1M count=64 conv=fsync status=none 2>/dev/null && echo >> $T/done || true; done" & ;;
        esac
        writer=$!
        sleep 2
        for i in $(seq 1 "$snaps"); do
            t0=$EPOCHREALTIME; "$bin" zfs snapshot "src/fs@$kind$i"; t1=$EPOCHREALTIME
            printf '%s\t%s\t%s\n' "$label" "$kind" $(( ${t1/./} - ${t0/./} )) >> "$out"
            sleep 0.2
        done
        rm -f "$flag"
        # fio writes its report when terminated; the stream ends after its file.
        [ "$kind" = stream ] || kill "$writer" 2>/dev/null || true
        wait "$writer" 2>/dev/null || true
        w1=$EPOCHREALTIME
        case $kind in
            append) n=$(awk -F';' 'NF > 100 { print $49 }' "$T/fio.terse" 2>/dev/null) ;;
            stream) n=$(awk -v s=$(( ${w1/./} - ${w0/./} )) 'END { printf "%.1f", NR * 64 / (s / 1e6) }' "$T/done") ;;
            *) n= ;;
        esac
        [ -z "$n" ] || printf '%s\t%s\t%s\n' "$label" "$kind" "$n" >> "$rates"
        rm -f "$T/mnt/fs/writer.tmp" "$T/mnt/fs/append.tmp"
    done
    "$bin" daemon --stop >/dev/null 2>&1 || true
    rm -rf "$T"
}

for r in $(seq 1 "$rounds"); do
    one a "$A"
    one b "$B"
done
python3 - "$out" "$rates" <<'PY'
import sys, statistics
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
def q(v, p): v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
print(f"{'writer':<8} {'a median':>9} {'a p90':>8} {'b median':>9} {'b p90':>8} {'b/a':>6}   (ms)")
for kind in ('idle', 'append', 'stream'):
    s = {lab: [int(us) / 1000 for l, k, us in rows if l == lab and k == kind] for lab in 'ab'}
    ma, mb = statistics.median(s['a']), statistics.median(s['b'])
    print(f"{kind:<8} {ma:9.1f} {q(s['a'], .9):8.1f} {mb:9.1f} {q(s['b'], .9):8.1f} {mb / ma:6.2f}")
rates = [l.split('\t') for l in open(sys.argv[2]).read().split('\n') if l]
print("writer rates while snapshotting (median over rounds):")
for kind, unit in (('append', 'fsynced writes/s'), ('stream', 'MiB/s')):
    r = {lab: [float(v) for l, k, v in rates if l == lab and k == kind] for lab in 'ab'}
    if r['a'] and r['b']:
        ra, rb = statistics.median(r['a']), statistics.median(r['b'])
        print(f"{kind:<8} a {ra:9.1f}  b {rb:9.1f}  b/a {rb / ra:5.2f}  ({unit})")
PY
