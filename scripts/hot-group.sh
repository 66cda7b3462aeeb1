#!/usr/bin/env bash
# One hot entity group (issue 13, docs/performance.md "One hot group"): a `megastore
# dev` cluster (release build) with [[wan]] links of RTT ms between its four sites, and
# 1, 4, 16 and 64 writers at site A all writing one group (blind writes of one 256-byte
# row, up to 8 attempts each), SECONDS per run — once with a client connection per
# writer, once with every writer sharing one connection (whose core combines their
# commits into shared log entries), and twice through the public gRPC API at site A's
# replica (a Begin, Write and Commit per write; then Begin blind, which takes the
# position of the replica's commit in flight). Each run first writes WARMUP seconds
# unmeasured (a fresh group's first writes find no position leader yet). Each run's
# JSON line goes to OUT, followed by a table of commits/s, latency percentiles and
# give-ups.
#   scripts/hot-group.sh [OUT] [RTT] [SECONDS] [WARMUP]
# MEGASTORE_BIN=path runs that binary instead of building one (an A/B of two builds).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/megastore-hot-group.jsonl}
rtt=${2:-80}
seconds=${3:-20}
warmup=${4:-3}

source scripts/dev-cluster.sh
: > "$out"
wan=""
if [ "$rtt" != 0 ]; then wan=$(wan_links "$rtt"); fi
start_dev "$wan"

for writers in 1 4 16 64; do
    for connections in per-writer shared grpc grpc-blind; do
        echo "==> $writers writer(s), connections: $connections" >&2
        shared=()
        case "$connections" in
            shared) shared=(--connections 1) ;;
            grpc) shared=(--grpc) ;;
            grpc-blind) shared=(--grpc --blind) ;;
        esac
        line=$("$megastore" bench --config "$DEV_DIR/cluster.toml" --groups 1 --reads 0 \
            --value-size 256 --clients "$writers" --site A --duration "$seconds" --warmup "$warmup" \
            --group-prefix "hot-$writers-$connections" "${shared[@]}" 2>/dev/null | tail -1)
        python3 - "$line" "$rtt" <<'PY' >> "$out"
import json, sys
report = json.loads(sys.argv[1])
report["rtt_ms"] = int(sys.argv[2])
print(json.dumps(report))
PY
    done
done

python3 - "$out" <<'PY'
import json, sys
print("| writers | connections | commits/s | p50 / p90 / p99 ms | give-ups |")
print("|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    w = next(k for k in r["kinds"] if k["kind"] == "write")
    shared = {"megastore-grpc": "gRPC, Begin", "megastore-grpc-blind": "gRPC, Begin blind"}.get(
        r.get("system"), "one, shared" if r.get("connections") else "one per writer")
    print(f"| {r['clients']} | {shared} | {w['per_second']:.1f} | "
          f"{w['p50_us'] / 1000:.0f} / {w['p90_us'] / 1000:.0f} / {w['p99_us'] / 1000:.0f} | "
          f"{r['conflicts']} |")
PY
echo "results: $out" >&2
