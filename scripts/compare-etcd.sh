#!/usr/bin/env bash
# megastore and etcd side by side on this machine (issue 13, docs/performance.md): a
# `megastore dev` cluster (release build) and a 3-member etcd 3.4 cluster (Debian's
# etcd-server, installed if missing), both on loopback, run the same closed-loop
# workload — writes only, 256-byte values, 16, 32 and 64 clients — interleaved, ROUNDS
# times, SECONDS each. megastore writes one key in each of 1,000 groups; etcd puts
# 10,000 keys. Each run's JSON line (OUT) carries the servers' CPU seconds next to the
# client's; after each pair, a line with the megastore/etcd ratios.
#
# With RTT (ms) > 0, both run as across a wide-area network of that round trip between
# every pair of sites: megastore with [[wan]] links between its four sites, etcd with its
# peer links through scripts/wan-delay-proxy.py (RTT/2 each way; each member is a site,
# and the clients' connections to their members are local, as megastore's to their
# sites' replicas).
#
# With CONNECTIONS > 0, the clients of each system share that many connections (client
# i uses connection i mod CONNECTIONS), as an application's request handlers share one
# client: megastore then batches what its clients send each replica and coordinator
# (docs/architecture.md, "Call queues"); etcd's client multiplexes one HTTP/2 connection.
# With 0 (the default), every client has its own.
#
# Last, both systems' watch delivery: WATCHES changes (env, default 200) written one
# at a time and watched; the task board (BOARD tasks, default 1000, 16 workers, the
# same board code on both); and leases (LEASES, default 1000, each kept alive once).
# TOPOLOGY=three runs megastore without its read-only replica: two full replicas and a
# witness, etcd's replication factor (scripts/dev-cluster.sh).
#
# With WARMUP=S, each system is first written for S seconds (64 clients) and every run
# then writes those same groups (keys) instead of fresh ones: the runs measure a
# cluster in its steady state, its groups' logs truncated and their history collected
# (megastore's rate falls for its first two minutes of writes; docs/performance.md,
# "Five minutes of writes"). Without it, each run writes groups of its own, fresh.
#   [WATCHES=N] [BOARD=N] [LEASES=N] [TOPOLOGY=three] [WARMUP=S] scripts/compare-etcd.sh [OUT] [ROUNDS] [SECONDS] [RTT] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/megastore-vs-etcd.jsonl}
rounds=${2:-3}
seconds=${3:-20}
rtt=${4:-0}
connections=${5:-0}
warmup=${WARMUP:-0}
shared=()
if [ "$connections" != 0 ]; then shared=(--connections "$connections"); fi

if ! command -v etcd >/dev/null; then
    echo "==> installing etcd-server" >&2
    sudo_cmd=()
    if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
fi
source scripts/dev-cluster.sh
: > "$out"

# Three etcd members on loopback, in a fresh directory.
# Over a WAN, each member is reached by its peers through the delay proxy (ports
# 23810-2), and advertises that address.
ETCD_DIR=$(mktemp -d)
etcd_pids=()
proxy_pid=""
peer_port_base=23800
if [ "$rtt" != 0 ]; then
    peer_port_base=23810
    maps=()
    for i in 0 1 2; do maps+=(--map "127.0.0.1:$((23810 + i))=127.0.0.1:$((23800 + i))"); done
    python3 scripts/wan-delay-proxy.py --delay-ms "$(python3 -c "print($rtt / 2)")" "${maps[@]}" \
        --max-secs $((rounds * 6 * (seconds + 60) + 600)) > "$ETCD_DIR/proxy.log" 2>&1 &
    proxy_pid=$!
fi
cluster=""
for i in 0 1 2; do cluster+="${cluster:+,}e$i=http://127.0.0.1:$((peer_port_base + i))"; done
for i in 0 1 2; do
    etcd --name "e$i" --data-dir "$ETCD_DIR/e$i" \
        --listen-client-urls "http://127.0.0.1:$((23790 + i))" \
        --advertise-client-urls "http://127.0.0.1:$((23790 + i))" \
        --listen-peer-urls "http://127.0.0.1:$((23800 + i))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((peer_port_base + i))" \
        --initial-cluster "$cluster" --initial-cluster-state new \
        --initial-cluster-token megastore-compare > "$ETCD_DIR/e$i.log" 2>&1 &
    etcd_pids+=($!)
done
endpoints="127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792"
stop_all() {
    kill "${etcd_pids[@]}" $proxy_pid 2>/dev/null || true
    wait "${etcd_pids[@]}" $proxy_pid 2>/dev/null || true
    rm -rf "$ETCD_DIR"
    if [ -n "${DEV_PID:-}" ]; then stop_dev; fi
}
trap stop_all EXIT  # (replaces dev-cluster.sh's, and stops the cluster too)
# Every member serves its /health once the cluster has a leader (etcd-server ships no
# etcdctl). A cluster that does not come up says why.
healthy() {
    python3 -c 'import json, sys, urllib.request
try:
    body = urllib.request.urlopen(sys.argv[1], timeout=2).read()
    sys.exit(0 if json.loads(body).get("health") == "true" else 1)
except Exception:
    sys.exit(1)' "http://127.0.0.1:$1/health"
}
for i in 0 1 2; do
    waited=0
    until healthy $((23790 + i)); do
        if [ "$waited" -ge 300 ] || ! kill -0 "${etcd_pids[$i]}" 2>/dev/null; then
            echo "etcd member e$i did not become healthy; its log:" >&2
            tail -20 "$ETCD_DIR/e$i.log" >&2
            exit 1
        fi
        sleep 0.2
        waited=$((waited + 1))
    done
done
wan=""
if [ "$rtt" != 0 ]; then wan=$(wan_links "$rtt"); fi
start_dev "$wan"

# CPU seconds (user + system) the processes have spent so far.
cpu_of() {
    local ticks=0 pid
    for pid in "$@"; do
        ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$ticks"
}

# The closed-loop write workload on one system; its JSON line on stdout.
write_load() { # system, clients, seconds, group prefix
    local system=$1 clients=$2 duration=$3 prefix=$4
    if [ "$system" = etcd ]; then
        "$megastore" bench --etcd "$endpoints" --groups 10000 --reads 0 --value-size 256 \
            --clients "$clients" --duration "$duration" --group-prefix "$prefix" "${shared[@]}" \
            2>/dev/null | tail -1
    else
        "$megastore" bench --config "$DEV_DIR/cluster.toml" --groups 1000 --reads 0 \
            --value-size 256 --clients "$clients" --duration "$duration" \
            --group-prefix "$prefix" "${shared[@]}" 2>/dev/null | tail -1
    fi
}

# One run: prints its JSON line, with the round and the servers' CPU added.
run_one() { # system, clients, round
    local system=$1 clients=$2 round=$3 before after line prefix
    local pids=("$DEV_PID")
    if [ "$system" = etcd ]; then pids=("${etcd_pids[@]}"); fi
    prefix="r$round-c$clients"
    if [ "$system" = etcd ]; then prefix="r$round"; fi
    if [ "$warmup" != 0 ]; then prefix=steady; fi
    before=$(cpu_of "${pids[@]}")
    line=$(write_load "$system" "$clients" "$seconds" "$prefix")
    after=$(cpu_of "${pids[@]}")
    python3 - "$line" "$round" "$(( after - before ))" "$rtt" <<'PY'
import json, sys
report = json.loads(sys.argv[1])
report["round"] = int(sys.argv[2])
report["rtt_ms"] = int(sys.argv[4])
report["server_cpu_s"] = int(sys.argv[3]) / 100
print(json.dumps(report))
PY
}

if [ "$warmup" != 0 ]; then
    for system in megastore etcd; do
        echo "==> warm-up: $system, ${warmup} s" >&2
        write_load "$system" 64 "$warmup" steady > /dev/null
    done
fi
for round in $(seq "$rounds"); do
    for clients in 16 32 64; do
        # Interleaved, the order alternating by round.
        systems=(megastore etcd)
        if [ $((round % 2)) = 0 ]; then systems=(etcd megastore); fi
        declare -A lines=()
        for system in "${systems[@]}"; do
            echo "==> round $round, $clients clients: $system" >&2
            lines[$system]=$(run_one "$system" "$clients" "$round")
            echo "${lines[$system]}" >> "$out"
        done
        python3 - "${lines[megastore]}" "${lines[etcd]}" <<'PY' | tee -a "$out"
import json, sys
m, e = (json.loads(a) for a in sys.argv[1:3])
def writes(r):
    return next(k for k in r["kinds"] if k["kind"] == "write")
def per_1000(r):
    count = writes(r)["count"]
    return (r["server_cpu_s"] + r["client_cpu_s"]) * 1000 / count if count else None
mw, ew = writes(m), writes(e)
ratio = {
    "round": m["round"],
    "rtt_ms": m["rtt_ms"],
    "clients": m["clients"],
    "megastore_writes_per_s": round(mw["per_second"], 1),
    "etcd_writes_per_s": round(ew["per_second"], 1),
    "ratio_writes_per_s": round(mw["per_second"] / ew["per_second"], 3) if ew["per_second"] else None,
    "megastore_p50_ms": mw["p50_us"] / 1000,
    "etcd_p50_ms": ew["p50_us"] / 1000,
    "megastore_cpu_s_per_1000_writes": round(per_1000(m), 3),
    "etcd_cpu_s_per_1000_writes": round(per_1000(e), 3),
}
ratio["ratio_cpu_per_write"] = round(
    ratio["megastore_cpu_s_per_1000_writes"] / ratio["etcd_cpu_s_per_1000_writes"], 3)
print(json.dumps(ratio))
PY
    done
done
# Then a committed change's way to a watcher (`megastore bench --watches`): WATCHES keys
# (default 200; 0 skips this) written one at a time, 20 ms apart, and watched at another
# site; etcd: the same puts and a watch of their prefix. One JSON line each.
watches=${WATCHES:-200}
if [ "$watches" != 0 ]; then
    for system in megastore etcd; do
        echo "==> watch delivery, $watches changes: $system" >&2
        if [ "$system" = etcd ]; then
            target=(--etcd "$endpoints")
        else
            target=(--config "$DEV_DIR/cluster.toml")
        fi
        "$megastore" bench "${target[@]}" --watches --runs "$watches" 2>/dev/null | tail -1 \
            | tee -a "$out"
    done
fi
# The coordination recipes and leases (`--board`, `--leases`), 0 skips each.
for workload in board leases; do
    if [ "$workload" = board ]; then count=${BOARD:-1000}; else count=${LEASES:-1000}; fi
    [ "$count" = 0 ] && continue
    for system in megastore etcd; do
        echo "==> $workload, $count items: $system" >&2
        if [ "$system" = etcd ]; then
            target=(--etcd "$endpoints")
        else
            target=(--config "$DEV_DIR/cluster.toml")
        fi
        pids=("$DEV_PID")
        if [ "$system" = etcd ]; then pids=("${etcd_pids[@]}"); fi
        before=$(cpu_of "${pids[@]}")
        line=$("$megastore" bench "${target[@]}" "--$workload" --runs "$count" --clients 16 \
            2>/dev/null | tail -1)
        after=$(cpu_of "${pids[@]}")
        # The servers' CPU over the whole run (leases: grants, keep-alives and revokes).
        python3 -c 'import json, sys; r = json.loads(sys.argv[1]); r["server_cpu_s"] = int(sys.argv[2]) / 100; print(json.dumps(r))' \
            "$line" "$((after - before))" | tee -a "$out"
    done
done
echo "results: $out" >&2
