#!/usr/bin/env bash
# quickstart.sh - from a fresh checkout to a sharded LLaMA-2 13B FFW layer running.
#
# 1. installs any missing Debian package (scripts/deps.sh; needs root or sudo
#    only when something is missing),
# 2. configures and builds einc into build/ (Release),
# 3. compiles examples/llama2_ffw.ein (D=5120, F=13824, FSDP+TP on a 2x2
#    mesh) into build/llama2_ffw, printing the collectives einc chose,
# 4. runs it on the threads runtime (one thread per device) on random
#    inputs, three times, and checks it against the unsharded reference:
#    the `check Out: max_rel_err=...` line is that check.
set -euo pipefail
cd "$(dirname "$0")"

scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"

echo
echo "== einc examples/llama2_ffw.ein --dump-ir"
build/einc examples/llama2_ffw.ein --dump-ir
build/einc examples/llama2_ffw.ein -o build/llama2_ffw

echo
echo "== build/llama2_ffw --random-inputs 1 --check --repeat 3"
build/llama2_ffw --random-inputs 1 --check --repeat 3
