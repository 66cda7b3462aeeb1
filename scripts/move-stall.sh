#!/usr/bin/env bash
# How long writes stall while a range moves (issue 17, docs/performance.md "A range
# move under load"): the default topology plus a second server `a2` for replica a at
# site A (release build, `megastore cluster up`), with [[wan]] links of RTT ms between
# its four sites. `megastore bench` runs CLIENTS closed-loop clients at sites A and B
# (half writes, half current reads, over GROUPS groups) for SECONDS with a timeline of
# 100 ms intervals; MOVE_AT seconds in, `megastore range move 0 --replica a --to a2`
# moves replica a's slot of the only range (every group) to a2. One JSON line per run
# goes to OUT: the move's steps (ms from its start), and the writes per interval and
# slowest write before the move, during it, in the 2 s after it and later. Then a
# table of them.
#   scripts/move-stall.sh [OUT] [RTTS] [RUNS] [SECONDS] [MOVE_AT] [CLIENTS] [GROUPS]
# RTTS is a comma-separated list (default "0,80"); RUNS runs of each.
# MEGASTORE_BIN=path runs that binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/megastore-move-stall.jsonl}
rtts=${2:-0,80}
runs=${3:-2}
seconds=${4:-30}
move_at=${5:-10}
clients=${6:-16}
groups=${7:-1000}
warmup=3

# The release build (or MEGASTORE_BIN) and wan_links; its `megastore dev` is not used.
source scripts/dev-cluster.sh

dir=""
stop_cluster() {
    if [ -n "$dir" ]; then
        "$megastore" cluster down --config "$dir/cluster.toml" > /dev/null 2>&1 || true
        rm -rf "$dir"
        dir=""
    fi
}
trap stop_cluster EXIT
trap 'exit 143' INT TERM

: > "$out"
for rtt in ${rtts//,/ }; do
    for run in $(seq 1 "$runs"); do
        echo "==> RTT $rtt ms, run $run" >&2
        dir=$(mktemp -d)
        cp crates/config/cluster.example.toml "$dir/cluster.toml"
        cat >> "$dir/cluster.toml" <<'TOML'

[[servers]]
name = "a2"
id = 11
replica = "a"
address = "127.0.0.1:7111"
coordinator_address = "127.0.0.1:7211"
data_dir = "data/a2"
TOML
        if [ "$rtt" != 0 ]; then printf '%b' "$(wan_links "$rtt")" >> "$dir/cluster.toml"; fi
        "$megastore" cluster up --config "$dir/cluster.toml" > "$dir/up.log" 2>&1 \
            || { cat "$dir/up.log" >&2; exit 1; }
        "$megastore" bench --config "$dir/cluster.toml" --groups "$groups" --reads 0.5 \
            --clients "$clients" --site A --site B --duration "$seconds" --warmup "$warmup" \
            --timeline 100 --group-prefix stall > "$dir/bench.out" 2> "$dir/bench.err" &
        bench=$!
        sleep $((warmup + move_at))
        # Each line of the move's progress, stamped with the wall clock (ms).
        moved=0
        "$megastore" range move 0 --replica a --to a2 --config "$dir/cluster.toml" 2>&1 \
            | while IFS= read -r line; do printf '%s %s\n' "$(date +%s%3N)" "$line"; done \
            > "$dir/move.log" || moved=$?
        wait "$bench" || { cat "$dir/bench.err" >&2; exit 1; }
        python3 - "$dir/bench.out" "$dir/move.log" "$rtt" "$moved" >> "$out" <<'PY'
import json, statistics, sys
report = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
steps = []
for line in open(sys.argv[2]):
    at, _, text = line.rstrip("\n").partition(" ")
    steps.append((int(at), text))
if not steps:
    sys.exit("the move printed nothing")
timeline = report["timeline"]
start, end = steps[0][0], steps[-1][0]
width = timeline["width_ms"]
def at(i):
    return timeline["from_unix_ms"] + i["at_ms"]
# Before the move, during it, the two seconds after it (the target's first writes),
# and the rest.
SETTLE_MS = 2000
intervals = timeline["intervals"]
before = [i for i in intervals if at(i) + width <= start]
during = [i for i in intervals if at(i) + width > start and at(i) <= end]
settling = [i for i in intervals if end < at(i) <= end + SETTLE_MS]
after = [i for i in intervals if at(i) > end + SETTLE_MS]
def phase(intervals):
    if not intervals:
        return None
    writes = [i["writes"] for i in intervals]
    # The longest run of intervals in which no write completed.
    longest = run = 0
    for w in writes:
        run = run + 1 if w == 0 else 0
        longest = max(longest, run)
    slowest = max(intervals, key=lambda i: i["write_max_us"])
    return {
        "intervals": len(intervals),
        "writes_per_interval_median": statistics.median(writes),
        "writes_per_interval_min": min(writes),
        "no_write_ms_longest": longest * width,
        "write_max_ms": slowest["write_max_us"] / 1000,
        # Where the slowest write completed, in ms from the move's start.
        "write_max_at_ms": at(slowest) - start,
        "failed": sum(i["failed"] for i in intervals),
    }
frozen = next((at for at, text in steps if "froze" in text), None)
write = next(k for k in report["kinds"] if k["kind"] == "write")
print(json.dumps({
    "rtt_ms": int(sys.argv[3]),
    "move_exit": int(sys.argv[4]),
    "move_ms": end - start,
    # From the source's freeze to the move's end (its writes go to the other voters).
    "frozen_ms": None if frozen is None else end - frozen,
    "move_steps": [[at - start, text] for at, text in steps],
    "clients": report["clients"],
    "writes": write["count"],
    "write_p50_ms": write["p50_us"] / 1000,
    "write_p99_ms": write["p99_us"] / 1000,
    "write_errors": write["errors"],
    "before": phase(before),
    "during": phase(during),
    "settling": phase(settling),
    "after": phase(after),
}))
PY
        stop_cluster
    done
done

python3 - "$out" <<'PY'
import json, sys
print("| RTT ms | move (frozen) ms | writes per 100 ms: before (median) / during (median, min) / 2 s after (min) | longest with no write, ms: during / 2 s after | slowest write ms: before / during / 2 s after | failed |")
print("|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    b, d, s = r["before"], r["during"], r["settling"]
    failed = sum(p["failed"] for p in (b, d, s, r["after"]) if p)
    print(f"| {r['rtt_ms']} | {r['move_ms']} ({r['frozen_ms']}) | {b['writes_per_interval_median']} / "
          f"{d['writes_per_interval_median']}, {d['writes_per_interval_min']} / {s['writes_per_interval_min']} | "
          f"{d['no_write_ms_longest']} / {s['no_write_ms_longest']} | "
          f"{b['write_max_ms']:.0f} / {d['write_max_ms']:.0f} / {s['write_max_ms']:.0f} | {failed} |")
PY
echo "results: $out" >&2
