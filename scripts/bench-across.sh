#!/usr/bin/env bash
# The cross-group benchmarks for docs/performance.md: `megastore dev` (release build)
# on loopback, and again with an emulated 80 ms round trip between every pair of
# sites; `megastore bench --MODE` runs REPEATS times and the JSON lines go to OUT (one
# per repeat, with the network and the run).
#   scripts/bench-across.sh MODE [OUT] [REPEATS] [RUNS]
# MODE: queries (the photo schema's cross-group queries from site A, RUNS runs of each;
#       default 50), queues (RUNS messages from site A consumed at site B, delivered by
#       the replicas; default 200), two-phase (RUNS transactions across two groups and
#       RUNS in one group, from site A; default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?"give the mode: queries, queues or two-phase"}
case "$mode" in
    queries) default_runs=50 sites=(--site A) ;;
    queues) default_runs=200 sites=(--site A --site B) ;;
    two-phase) default_runs=100 sites=(--site A) ;;
    *) echo "unknown mode $mode: queries, queues or two-phase" >&2; exit 2 ;;
esac
out=${2:-/tmp/megastore-bench-$mode.jsonl}
repeats=${3:-3}
runs=${4:-$default_runs}
source scripts/dev-cluster.sh
: > "$out"

run_cluster() { # name, extra config lines
    local name=$1
    start_dev "$2"
    for r in $(seq "$repeats"); do
        echo "==> $name / $mode (run $r)" >&2
        "$megastore" bench --config "$DEV_DIR/cluster.toml" "--$mode" --runs "$runs" "${sites[@]}" 2>/dev/null |
            tail -1 | sed "s/^{/{\"network\":\"$name\",\"run\":$r,/" >> "$out"
    done
    stop_dev
}

run_cluster loopback ""
run_cluster wan80 "$(wan_links 80)"
echo "results: $out" >&2
