# Sourced by .ci/run and .ci/demo: installs what a fresh Debian 12 machine lacks and
# sets up the build environment. Safe to run again: it only installs what is missing.

export CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0 DEBIAN_FRONTEND=noninteractive

# libclang-dev: bindgen (librocksdb-sys) needs it.
# librocksdb-dev: RocksDB 7.8.3, linked instead of compiling RocksDB from source
#                 (see docs/building.md; .cargo/config.toml points the build at it).
# protobuf-compiler: protoc, which crates/rpc's build script runs on proto/.
packages=(libclang-dev librocksdb-dev protobuf-compiler)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "==> installing ${missing[*]}"
    sudo_cmd=()
    if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
