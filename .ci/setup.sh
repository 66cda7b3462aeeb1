# Sourced by .ci/run and .ci/demo: installs what a fresh Debian 12 machine lacks and
# sets up the build environment. Safe to run again: it only installs what is missing.

export CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0 DEBIAN_FRONTEND=noninteractive

# libclang-dev: bindgen (librocksdb-sys) needs it.
# librocksdb-dev: RocksDB 7.8.3, linked instead of compiling RocksDB from source
#                 (see docs/building.md; .cargo/config.toml points the build at it).
# protobuf-compiler: protoc, which crates/rpc's build script runs on proto/.
# docker-compose: `docker-compose config` validates docker-compose.yml (no engine needed;
#                 tests/it/compose.rs reads its output with the python3-yaml it brings).
# etcd-server: the peer `megastore bench --etcd` and scripts/compare-etcd.sh measure
#              side by side (tests/it/compare_etcd.rs runs one member).
packages=(libclang-dev librocksdb-dev protobuf-compiler docker-compose etcd-server)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3 with venv: the end-to-end test that drives the public API from Python.
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then missing+=(python3 python3-venv); fi
if ((${#missing[@]})); then
    echo "==> installing ${missing[*]}"
    sudo_cmd=()
    if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# grpcio for that test, in a virtualenv of our own (pinned; PyPI wheels, about 10 s).
export MEGASTORE_PYTHON="${MEGASTORE_PYTHON:-$HOME/.cache/megastore/venv/bin/python}"
if ! "$MEGASTORE_PYTHON" -c 'import grpc, grpc_tools' 2>/dev/null; then
    venv="$HOME/.cache/megastore/venv"
    echo "==> installing grpcio and grpcio-tools into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "grpcio==1.85.3" "grpcio-tools==1.85.1"
    MEGASTORE_PYTHON="$venv/bin/python"
fi

# A target directory outside the clone: fresh clones on the same machine reuse the
# compiled dependencies. Capped so it cannot fill the disk.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/megastore/target}"
if [ -d "$CARGO_TARGET_DIR" ] && [ "$(du -sm "$CARGO_TARGET_DIR" | cut -f1)" -gt 20000 ]; then
    echo "==> $CARGO_TARGET_DIR is over 20 GB; starting it afresh"
    rm -rf "$CARGO_TARGET_DIR"
fi

# Runs one named step, timing it.
step() {
    local name=$1
    shift
    local start=$SECONDS
    echo "==> $name: $*"
    "$@"
    echo "==> $name: ok ($((SECONDS - start)) s)"
}
