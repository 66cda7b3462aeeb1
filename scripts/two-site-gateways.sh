#!/usr/bin/env bash
# One hot entity group written through the public gRPC API at two sites at once
# (docs/performance.md, "One hot group", "Gateways at two sites"): a `megastore dev`
# cluster (release build) with [[wan]] links of RTT ms between its four sites, and
# WRITERS blind writers (`Begin { blind }`, Write, Commit; up to 8 attempts each) at
# site A's replica and as many at site B's, all on one group, SECONDS per run after
# 3 s of warm-up. The two replicas' gateways race for the group's positions. One JSON
# line per site and run goes to OUT, then a table of commits/s, latency and give-ups.
#   scripts/two-site-gateways.sh [OUT] [RTT] [SECONDS] [WRITERS...]
# MEGASTORE_BIN=path runs that binary instead of building one (an A/B of two builds).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/megastore-two-site-gateways.jsonl}
rtt=${2:-80}
seconds=${3:-15}
writer_counts=(4 32)
if [ $# -gt 3 ]; then shift 3; writer_counts=("$@"); fi

source scripts/dev-cluster.sh
: > "$out"
wan=""
if [ "$rtt" != 0 ]; then wan=$(wan_links "$rtt"); fi
results=$(mktemp -d)

for writers in "${writer_counts[@]}"; do
    echo "==> $writers writer(s) at each of sites A and B" >&2
    # A fresh cluster per run: the group's position leader starts unnamed each time.
    start_dev "$wan"
    pids=()
    for site in A B; do
        "$megastore" bench --config "$DEV_DIR/cluster.toml" --groups 1 --reads 0 \
            --value-size 256 --clients "$writers" --site "$site" --duration "$seconds" \
            --warmup 3 --group-prefix "gateways-$writers" --grpc --blind 2>/dev/null \
            | tail -1 > "$results/$site.json" &
        pids+=($!)
    done
    wait "${pids[@]}"
    stop_dev
    for site in A B; do
        python3 - "$results/$site.json" "$site" "$writers" "$rtt" <<'PY' >> "$out"
import json, sys
report = json.loads(open(sys.argv[1]).read())
report["site"] = sys.argv[2]
report["writers_per_site"] = int(sys.argv[3])
report["rtt_ms"] = int(sys.argv[4])
print(json.dumps(report))
PY
    done
done
rm -rf "$results"

python3 - "$out" <<'PY'
import json, sys
print("| writers per site | site | commits/s | p50 / p90 / p99 ms | give-ups |")
print("|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    w = next(k for k in r["kinds"] if k["kind"] == "write")
    print(f"| {r['writers_per_site']} | {r['site']} | {w['per_second']:.1f} | "
          f"{w['p50_us'] / 1000:.0f} / {w['p90_us'] / 1000:.0f} / {w['p99_us'] / 1000:.0f} | "
          f"{r['conflicts']} |")
PY
