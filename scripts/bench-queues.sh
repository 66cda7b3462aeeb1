#!/usr/bin/env bash
# The queue benchmark for docs/performance.md: `megastore dev` (release build) on
# loopback, and again with an emulated 80 ms round trip between every pair of sites;
# `megastore bench --queues` (RUNS messages from site A, consumed at site B, delivered
# by the replicas) runs REPEATS times and the JSON lines go to OUT (one per repeat).
#   scripts/bench-queues.sh [OUT] [REPEATS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/megastore-bench-queues.jsonl}
repeats=${2:-3}
runs=${3:-200}
source scripts/dev-cluster.sh
: > "$out"

run_cluster() { # name, extra config lines
    local name=$1
    start_dev "$2"
    for r in $(seq "$repeats"); do
        echo "==> $name / queues (run $r)" >&2
        "$megastore" bench --config "$DEV_DIR/cluster.toml" --queues --runs "$runs" --site A --site B 2>/dev/null |
            tail -1 | sed "s/^{/{\"network\":\"$name\",\"run\":$r,/" >> "$out"
    done
    stop_dev
}

run_cluster loopback ""
run_cluster wan80 "$(wan80)"
echo "results: $out" >&2
