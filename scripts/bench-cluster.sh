#!/usr/bin/env bash
# Cluster benchmarks for docs/performance.md: `megastore dev` (release build) on
# loopback, and again with an emulated 80 ms round trip between every pair of sites;
# each scenario runs REPEATS times and the JSON lines go to OUT (one per run).
#   scripts/bench-cluster.sh [OUT] [REPEATS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/megastore-bench.jsonl}
repeats=${2:-3}
seconds=${3:-20}
source scripts/dev-cluster.sh
: > "$out"

run_cluster() { # name, extra config lines
    local name=$1
    start_dev "$2"
    local config=(--config "$DEV_DIR/cluster.toml")
    for r in $(seq "$repeats"); do
        scenario() { # label, bench args...
            local label=$1; shift
            echo "==> $name / $label (run $r)" >&2
            "$megastore" bench "${config[@]}" --duration "$seconds" --group-prefix "$name-$label-$r" "$@" 2>/dev/null |
                tail -1 | sed "s/^{/{\"network\":\"$name\",\"scenario\":\"$label\",/" >> "$out"
        }
        scenario commit-at-leader --site A --clients 1 --groups 10 --reads 0
        scenario commit-elsewhere --site A --site B --rotate-sites --clients 1 --groups 10 --reads 0
        scenario current-read --site A --clients 1 --groups 20 --reads 0.95
        scenario commits-1000-groups --clients 16 --groups 1000 --reads 0
    done
    stop_dev
}

run_cluster loopback ""
run_cluster wan80 "$(wan_links 80)"
echo "results: $out" >&2
