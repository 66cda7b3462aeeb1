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
target=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -p megastore-cli
megastore="$target/release/megastore"
: > "$out"

run_cluster() { # name, extra config lines
    local name=$1 wan=$2 dir
    dir=$(mktemp -d)
    cp crates/config/cluster.example.toml "$dir/cluster.toml"
    printf '%b' "$wan" >> "$dir/cluster.toml"
    "$megastore" dev --no-demo --data-dir "$dir" > "$dir/dev.log" 2>&1 &
    local dev=$!
    until grep -q "runs until Ctrl-C" "$dir/dev.log"; do sleep 0.2; done
    local config=(--config "$dir/cluster.toml")
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
    kill -INT "$dev"; wait "$dev" || true
    rm -rf "$dir"
}

run_cluster loopback ""
wan=""
for pair in "A B" "A C" "A D" "B C" "B D" "C D"; do
    set -- $pair
    wan+="\n[[wan]]\nbetween = [\"$1\", \"$2\"]\nrtt_ms = 80\n"
done
run_cluster wan80 "$wan"
echo "results: $out" >&2
