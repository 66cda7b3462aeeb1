#!/usr/bin/env bash
# The etcd side of scripts/many-groups.sh (issue 20, docs/performance.md): a 3-member
# etcd 3.4 cluster (Debian's etcd-server, installed if missing) on loopback. Prints each
# member's RSS before and after putting N keys of 100 bytes (128 puts per transaction
# through the JSON gateway, 4 at a time), then SIGKILLs member e1, starts it again, and
# times its first linearizable read.
#   scripts/etcd-many-keys.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
if ! command -v etcd >/dev/null; then
    echo "==> installing etcd-server" >&2
    sudo_cmd=()
    if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
fi
dir=$(mktemp -d)
pids=()
cluster=""
for i in 0 1 2; do cluster+="${cluster:+,}e$i=http://127.0.0.1:$((23800 + i))"; done
member() { # i: starts member i (a new one, or again over its directory)
    local state=new
    if [ -d "$dir/e$1" ]; then state=existing; fi
    etcd --name "e$1" --data-dir "$dir/e$1" \
        --listen-client-urls "http://127.0.0.1:$((23790 + $1))" \
        --advertise-client-urls "http://127.0.0.1:$((23790 + $1))" \
        --listen-peer-urls "http://127.0.0.1:$((23800 + $1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((23800 + $1))" \
        --initial-cluster "$cluster" --initial-cluster-state "$state" \
        --initial-cluster-token megastore-many-keys >> "$dir/e$1.log" 2>&1 &
    pids[$1]=$!
}
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
for i in 0 1 2; do member "$i"; done

# A linearizable read of one key at member i, retried until it answers: the seconds
# since START it took.
first_read() { # i start
    python3 - "$((23790 + $1))" "$2" <<'PY'
import base64, json, sys, time, urllib.request
port, start = sys.argv[1], float(sys.argv[2])
body = json.dumps({"key": base64.b64encode(b"fill0-000001").decode()}).encode()
while True:
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v3/kv/range", data=body)
        answer = json.loads(urllib.request.urlopen(request, timeout=2).read())
        print(f"{time.time() - start:.2f} {answer.get('count', '0')}")
        break
    except Exception:
        if time.time() - start > 300:
            sys.exit("no read within 300 s")
        time.sleep(0.05)
PY
}
rss() {
    local cells=()
    for i in 0 1 2; do cells+=("e$i $(( $(awk '/VmRSS/ {print $2}' "/proc/${pids[$i]}/status") / 1024 ))"); done
    local IFS=,
    echo "etcd rss MB ($1): ${cells[*]}"
}
for i in 0 1 2; do first_read "$i" "$(date +%s.%N)" > /dev/null; done
rss "started"
echo "==> putting $n keys" >&2
python3 - "$n" <<'PY'
import base64, json, sys, threading, urllib.request
n = int(sys.argv[1])
value = base64.b64encode(b"v" * 100).decode()
batches = [range(s, min(s + 128, n)) for s in range(0, n, 128)]
def put(worker):
    port = 23790 + worker % 3
    for b in batches[worker::4]:
        ops = [{"request_put": {"key": base64.b64encode(f"fill0-{k:06}".encode()).decode(), "value": value}} for k in b]
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v3/kv/txn", data=json.dumps({"success": ops}).encode())
        urllib.request.urlopen(request, timeout=30).read()
threads = [threading.Thread(target=put, args=(w,)) for w in range(4)]
for t in threads: t.start()
for t in threads: t.join()
PY
rss "after $n keys"
du -sh "$dir" | sed 's/^/data on disk: /'
kill -9 "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
start=$(date +%s.%N)
member 1
read -r seconds count < <(first_read 1 "$start")
echo "restart member e1: first linearizable read after ${seconds} s (count $count)"
sleep 2
rss "e1 restarted, 2 s later"
