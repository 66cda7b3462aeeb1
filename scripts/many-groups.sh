#!/usr/bin/env bash
# Memory per group and restart time with many entity groups (issue 20,
# docs/performance.md): the default topology as separate processes (`megastore cluster
# up`, release build) on loopback, every replica with `cache_groups = CACHE`. Fills
# groups in steps (`megastore bench --fill`, CLIENTS at a time) and prints each
# process's RSS after each, then reads random groups for READ_SECONDS, then SIGKILLs
# each full replica in turn, starts it again, and times its first current read through
# its own public API (scripts/first-current-read.py).
#   [CLIENTS=64] [READ_SECONDS=30] scripts/many-groups.sh [CACHE] [STEP...]
# e.g. `scripts/many-groups.sh 10000 100000 900000`: 100,000 groups, then 1,000,000.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${1:-10000}
shift || true
steps=("${@:-100000}")
clients=${CLIENTS:-64}
read_seconds=${READ_SECONDS:-30}
target=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -p megastore-cli
megastore="$target/release/megastore"
python=${MEGASTORE_PYTHON:-$HOME/.cache/megastore/venv/bin/python}
dir=$(mktemp -d)
config="$dir/cluster.toml"
sed "s|^data_dir = \"data/\([a-d]\)\"\$|&\ncache_groups = $cache|" \
    crates/config/cluster.example.toml > "$config"
trap '"$megastore" cluster down --config "$config" >/dev/null 2>&1 || true; if [ -z "${KEEP:-}" ]; then rm -rf "$dir"; else echo "kept $dir" >&2; fi' EXIT
"$megastore" cluster up --config "$config" >&2

rss() { # label: one line per process, RSS in MB
    python3 - "$config.pids" "$1" <<'PY'
import json, sys
started = json.load(open(sys.argv[1]))
cells = []
for p in started:
    try:
        status = open(f"/proc/{p['pid']}/status").read()
        kb = int(next(l for l in status.splitlines() if l.startswith("VmRSS")).split()[1])
        cells.append(f"{p['name']} {kb / 1024:.0f}")
    except (OSError, StopIteration):
        cells.append(f"{p['name']} -")
print(f"rss MB ({sys.argv[2]}): " + ", ".join(cells))
PY
}

rss "started"
total=0
for i in "${!steps[@]}"; do
    step=${steps[$i]}
    total=$((total + step))
    echo "==> filling $step groups (fill$i-…), $clients at a time" >&2
    "$megastore" bench --config "$config" --fill "$step" --clients "$clients" \
        --group-prefix "fill$i" 2>/dev/null | tail -1
    rss "after $total groups"
done
echo "==> current reads of random groups of the first step for ${read_seconds} s" >&2
"$megastore" bench --config "$config" --groups "${steps[0]}" --group-prefix fill0 --reads 1 \
    --clients 16 --duration "$read_seconds" 2>/dev/null | tail -1
rss "after the reads"
du -sh "$dir/data" | sed 's/^/data on disk: /'

# Each replica, killed and started again: its first current read through its own API.
for replica in a b; do
    pid=$(python3 -c "import json,sys; print(next(p['pid'] for p in json.load(open(sys.argv[1])) if p['name']=='replica-$replica'))" "$config.pids")
    address=$(python3 -c "
import sys, tomllib
c = tomllib.load(open(sys.argv[1], 'rb'))
print(next(r['address'] for r in c['replicas'] if r['name'] == '$replica'))" "$config")
    kill -9 "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    start=$(date +%s.%N)
    "$megastore" replica --config "$config" --id "$replica" >> "$dir/logs/replica-$replica.restarted.log" 2>&1 &
    new=$!
    read -r seconds path rows local < <("$python" scripts/first-current-read.py . "$address" fill0-000001 "$start" 30)
    echo "restart replica $replica: first current read after ${seconds} s ($path, $rows row); first local (vouched) read after ${local} s"
    sleep 2
    echo "rss MB (replica $replica restarted, 2 s later): $(( $(awk '/VmRSS/ {print $2}' /proc/$new/status) / 1024 ))"
    # The restarted process is this script's child: stop it with the rest.
    kill "$new"; wait "$new" 2>/dev/null || true
    "$megastore" replica --config "$config" --id "$replica" >> "$dir/logs/replica-$replica.restarted.log" 2>&1 &
    python3 - "$config.pids" "replica-$replica" $! <<'PY'
import json, sys
path, name, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
started = json.load(open(path))
for p in started:
    if p["name"] == name:
        p["pid"] = pid
json.dump(started, open(path, "w"))
PY
done
