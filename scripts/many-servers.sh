#!/usr/bin/env bash
# Issue 17's cluster of many servers, measured (docs/scaling.md): the default topology
# with replicas a (site A) and b (site B) on three servers each (`[[servers]]` a2, a3,
# b2, b3, each with its coordinator), release build, `megastore cluster up`. Fills
# GROUPS groups (`bench --fill`), splits them into six ranges, and then:
#   1. a closed-loop workload (`bench`, CLIENTS clients at A and B, half writes, half
#      current reads, SECONDS) while every range sits on the first servers;
#   2. `range rebalance --by groups`, each line stamped with the wall clock, with
#      lockd's Raft log index before and after it and over as long a quiet spell;
#   3. the same workload with the ranges spread over three servers per site.
# Every process's RSS is taken after the fill, after the rebalance and at the end. One
# JSON line goes to OUT; then a table of every line in OUT (the rows of
# docs/performance.md, "Three servers per site").
#   scripts/many-servers.sh [OUT] [GROUPS] [SECONDS] [CLIENTS]
# MEGASTORE_BIN=path runs that binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/megastore-many-servers.jsonl}
groups=${2:-10000}
seconds=${3:-20}
clients=${4:-16}

# The release build (or MEGASTORE_BIN); its `megastore dev` is not used.
source scripts/dev-cluster.sh

dir=$(mktemp -d)
config="$dir/cluster.toml"
trap '"$megastore" cluster down --config "$config" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
trap 'exit 143' INT TERM
cp crates/config/cluster.example.toml "$config"
port=7120
for server in a2:11:a a3:21:a b2:12:b b3:22:b; do
    IFS=: read -r name id replica <<< "$server"
    cat >> "$config" <<TOML

[[servers]]
name = "$name"
id = $id
replica = "$replica"
address = "127.0.0.1:$port"
coordinator_address = "127.0.0.1:$((port + 100))"
data_dir = "data/$name"
TOML
    port=$((port + 1))
done
"$megastore" cluster up --config "$config" > "$dir/up.log" 2>&1 || { cat "$dir/up.log" >&2; exit 1; }

rss() { # every process's RSS in MB, as a JSON object
    python3 - "$config.pids" <<'PY'
import json, sys
rss = {}
for p in json.load(open(sys.argv[1])):
    try:
        status = open(f"/proc/{p['pid']}/status").read()
        kb = int(next(l for l in status.splitlines() if l.startswith("VmRSS")).split()[1])
        rss[p["name"]] = round(kb / 1024, 1)
    except (OSError, StopIteration):
        rss[p["name"]] = None
print(json.dumps(rss))
PY
}
raft_index() { # the lockd leader's last Raft log index (the highest any node reports)
    local best=0
    for port in 7601 7602 7603; do
        local index
        index=$(curl -s "http://127.0.0.1:$port/metrics" \
            | awk '/^megastore_lockd_last_log_index /{print $2}')
        if [ -n "$index" ] && [ "${index%.*}" -gt "$best" ]; then best=${index%.*}; fi
    done
    echo "$best"
}
workload() { # label
    echo "==> workload: $1" >&2
    "$megastore" bench --config "$config" --groups "$groups" --reads 0.5 --clients "$clients" \
        --site A --site B --duration "$seconds" --warmup 2 --group-prefix many \
        2> "$dir/bench-$1.err" | tail -1
}

echo "==> filling $groups groups" >&2
fill_started=$(date +%s%3N)
"$megastore" bench --config "$config" --fill "$groups" --clients 64 --group-prefix many \
    > "$dir/fill.out" 2> "$dir/fill.err" || { cat "$dir/fill.err" >&2; exit 1; }
fill_ms=$(( $(date +%s%3N) - fill_started ))
for sixth in 1 2 3 4 5; do
    "$megastore" range split --config "$config" \
        --at-group "$(printf 'many-%06d' $((groups * sixth / 6)))" > /dev/null
done
rss_filled=$(rss)
before=$(workload one-server-per-site)

echo "==> rebalancing" >&2
quiet_from=$(raft_index)
quiet_started=$(date +%s%3N)
sleep 10
quiet_to=$(raft_index)
quiet_ms=$(( $(date +%s%3N) - quiet_started ))
raft_from=$(raft_index)
"$megastore" range rebalance --by groups --config "$config" 2>&1 \
    | while IFS= read -r line; do printf '%s %s\n' "$(date +%s%3N)" "$line"; done \
    > "$dir/rebalance.log"
raft_to=$(raft_index)
rss_spread=$(rss)
"$megastore" range list --config "$config" > "$dir/ranges.txt"
"$megastore" range list -o json --config "$config" > "$dir/ranges.json"
after=$(workload three-servers-per-site)
rss_end=$(rss)

python3 - "$dir" "$groups" "$fill_ms" "$quiet_from" "$quiet_to" "$quiet_ms" "$raft_from" \
    "$raft_to" "$rss_filled" "$rss_spread" "$rss_end" "$before" "$after" >> "$out" <<'PY'
import json, sys
(d, groups, fill_ms, quiet_from, quiet_to, quiet_ms, raft_from, raft_to,
 rss_filled, rss_spread, rss_end, before, after) = sys.argv[1:]
steps = []
for line in open(f"{d}/rebalance.log"):
    at, _, text = line.rstrip("\n").partition(" ")
    steps.append((int(at), text))
if not steps:
    sys.exit("the rebalance printed nothing")
# Each move: from its "moving" line to its "moved" line.
moves, started = [], None
for at, text in steps:
    if text.startswith("moving"):
        started = (at, text)
    elif "moved: epoch" in text and started:
        moves.append({"move": started[1], "ms": at - started[0]})
        started = None
rebalance_ms = steps[-1][0] - steps[0][0]
quiet_rate = (int(quiet_to) - int(quiet_from)) / max(int(quiet_ms), 1)
raft_entries = int(raft_to) - int(raft_from)
background = quiet_rate * rebalance_ms
def summary(report):
    r = json.loads(report)
    kinds = {k["kind"]: k for k in r["kinds"]}
    return {
        "client_cpu_s": r["client_cpu_s"],
        **{f"{kind}_{m}": kinds[kind][m] for kind in ("write", "read") for m in
           ("per_second", "p50_us", "p99_us", "errors") if kind in kinds},
    }
print(json.dumps({
    "groups": int(groups),
    "fill_ms": int(fill_ms),
    "placement_bytes": len(open(f"{d}/ranges.json").read()),
    "ranges": open(f"{d}/ranges.txt").read().splitlines()[1],
    "rebalance_ms": rebalance_ms,
    "moves": moves,
    "lockd_entries_during_rebalance": raft_entries,
    "lockd_entries_per_move_net": None if not moves else
        round((raft_entries - background) / len(moves), 1),
    "lockd_entries_per_s_quiet": round(quiet_rate * 1000, 2),
    "rss_mb_filled": json.loads(rss_filled),
    "rss_mb_spread": json.loads(rss_spread),
    "rss_mb_end": json.loads(rss_end),
    "one_server_per_site": summary(before),
    "three_servers_per_site": summary(after),
}))
PY
python3 - "$out" <<'PY'
import json, sys
print("| fill, s | rebalance, s (each move, ms) | lockd Raft entries: per s idle / per move beyond that | writes/s, p50 / p99 ms: 1 server per site → 3 | reads/s, p99 ms: 1 → 3 | errors |")
print("|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    one, three = r["one_server_per_site"], r["three_servers_per_site"]
    moves = sorted(m["ms"] for m in r["moves"]) or [0]
    errors = sum(run.get(f"{kind}_errors", 0) for run in (one, three) for kind in ("write", "read"))
    def writes(w):
        return f"{w['write_per_second']:.0f}, {w['write_p50_us'] / 1000:.0f} / {w['write_p99_us'] / 1000:.0f}"
    print(f"| {r['fill_ms'] / 1000:.1f} | {r['rebalance_ms'] / 1000:.1f} ({moves[0]}–{moves[-1]}) | "
          f"{r['lockd_entries_per_s_quiet']} / {r['lockd_entries_per_move_net']} | "
          f"{writes(one)} → {writes(three)} | "
          f"{one['read_per_second']:.0f}, {one['read_p99_us'] / 1000:.0f} → "
          f"{three['read_per_second']:.0f}, {three['read_p99_us'] / 1000:.0f} | {errors} |")
PY
echo "results: $out" >&2
