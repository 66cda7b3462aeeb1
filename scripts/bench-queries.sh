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
    for r in $(seq "$repeats"); do
        echo "==> $name / queries (run $r)" >&2
        "$megastore" bench --config "$dir/cluster.toml" --queries --runs "$runs" --site A 2>/dev/null |
            tail -1 | sed "s/^{/{\"network\":\"$name\",\"run\":$r,/" >> "$out"
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
