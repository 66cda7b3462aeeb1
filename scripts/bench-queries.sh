#!/usr/bin/env bash
# The cross-group query benchmark for docs/performance.md: `megastore dev` (release
# build, the photo schema applied) on loopback, and again with an emulated 80 ms round
# trip between every pair of sites; `megastore bench --queries` runs REPEATS times
# (RUNS runs of each query) and the JSON lines go to OUT (one per repeat).
#   scripts/bench-queries.sh [OUT] [REPEATS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/megastore-bench-queries.jsonl}
repeats=${2:-3}
runs=${3:-50}
source scripts/dev-cluster.sh
: > "$out"

run_cluster() { # name, extra config lines
    local name=$1
    start_dev "$2"
    for r in $(seq "$repeats"); do
        echo "==> $name / queries (run $r)" >&2
        "$megastore" bench --config "$DEV_DIR/cluster.toml" --queries --runs "$runs" --site A 2>/dev/null |
            tail -1 | sed "s/^{/{\"network\":\"$name\",\"run\":$r,/" >> "$out"
    done
    stop_dev
}

run_cluster loopback ""
run_cluster wan80 "$(wan80)"
echo "results: $out" >&2
