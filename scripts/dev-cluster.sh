# Sourced by the cluster benchmarks: a `megastore dev` cluster (release build) in a fresh
# directory, with extra config lines (e.g. [[wan]] links), started and stopped.
#   start_dev "$extra_config_lines"   # sets DEV_DIR and DEV_PID; waits until it serves
#   stop_dev                          # SIGINT, wait, remove the directory (also on exit)
# MEGASTORE_BIN names another binary to run instead (an A/B against an older build).
target=${CARGO_TARGET_DIR:-target}
if [ -n "${MEGASTORE_BIN:-}" ]; then
    megastore=$MEGASTORE_BIN
else
    cargo build --release --locked -p megastore-cli
    megastore="$target/release/megastore"
fi

start_dev() {
    DEV_DIR=$(mktemp -d)
    cp crates/config/cluster.example.toml "$DEV_DIR/cluster.toml"
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

# [[wan]] links of RTT ms (default 80) between every pair of the default topology's four
# sites.
wan_links() {
    local rtt=${1:-80} wan="" pair
    for pair in "A B" "A C" "A D" "B C" "B D" "C D"; do
        set -- $pair
        wan+="\n[[wan]]\nbetween = [\"$1\", \"$2\"]\nrtt_ms = $rtt\n"
    done
    printf '%s' "$wan"
}
