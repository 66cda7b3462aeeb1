# Sourced by the cluster benchmarks: a `megastore dev` cluster (release build) in a fresh
# directory, with extra config lines (e.g. [[wan]] links), started and stopped.
#   start_dev "$extra_config_lines"   # sets DEV_DIR and DEV_PID; waits until it serves
#   stop_dev                          # SIGINT, wait, remove the directory (also on exit)
# MEGASTORE_BIN names another binary to run instead (an A/B against an older build).
# TOPOLOGY=three runs the default topology without its read-only replica (full replicas
# at A and B, the witness at C): etcd's replication factor, for side-by-side runs.
target=${CARGO_TARGET_DIR:-target}
if [ -n "${MEGASTORE_BIN:-}" ]; then
    megastore=$MEGASTORE_BIN
else
    cargo build --release --locked -p megastore-cli
    megastore="$target/release/megastore"
fi

start_dev() {
    DEV_DIR=$(mktemp -d)
    case "${TOPOLOGY:-four}" in
        four) cp crates/config/cluster.example.toml "$DEV_DIR/cluster.toml" ;;
        three) python3 - crates/config/cluster.example.toml > "$DEV_DIR/cluster.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
# Drop the read-only replica's table and its site.
text = re.sub(r'\[\[replicas\]\]\nname = "d"\n(?:[^\[\n][^\n]*\n|\n)*', "", text)
print(text.replace('sites = ["A", "B", "C", "D"]', 'sites = ["A", "B", "C"]'), end="")
PY
            ;;
        *) echo "TOPOLOGY must be four or three, not ${TOPOLOGY}" >&2; return 1 ;;
    esac
    printf '%b' "$1" >> "$DEV_DIR/cluster.toml"
    "$megastore" dev --no-demo --data-dir "$DEV_DIR" > "$DEV_DIR/dev.log" 2>&1 &
    DEV_PID=$!
    until grep -q "runs until Ctrl-C" "$DEV_DIR/dev.log"; do
        if ! kill -0 "$DEV_PID" 2>/dev/null; then
            cat "$DEV_DIR/dev.log" >&2
            DEV_PID=""
            return 1
        fi
        sleep 0.2
    done
}

stop_dev() {
    kill -INT "$DEV_PID"; wait "$DEV_PID" || true
    DEV_PID=""
    rm -rf "$DEV_DIR"
}

# A benchmark interrupted (or timed out) still stops its cluster: a leftover one holds
# the ports the next would listen on.
trap 'if [ -n "${DEV_PID:-}" ]; then stop_dev; fi' EXIT
trap 'exit 143' INT TERM

# [[wan]] links of RTT ms (default 80) between every pair of the topology's sites (four,
# or three with TOPOLOGY=three).
wan_links() {
    local rtt=${1:-80} wan="" pair pairs=("A B" "A C" "A D" "B C" "B D" "C D")
    if [ "${TOPOLOGY:-four}" = three ]; then pairs=("A B" "A C" "B C"); fi
    for pair in "${pairs[@]}"; do
        set -- $pair
        wan+="\n[[wan]]\nbetween = [\"$1\", \"$2\"]\nrtt_ms = $rtt\n"
    done
    printf '%s' "$wan"
}
