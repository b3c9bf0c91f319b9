#!/usr/bin/env bash
# Runs every test of einc: installs missing packages, builds with warnings as
# errors and runs the CTest suite and a 10^6-statement compile, then the
# suite again with AddressSanitizer and
# UndefinedBehaviorSanitizer, then runs each of the five libFuzzer harnesses
# for 20 s (tests/fuzz/run.sh, docs/reliability.md; the whole stays under
# 45 minutes on 2 cores).  Build trees: build/,
# build-asan/ and build-libfuzzer/.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
# `--hw host` prefers a calibration cached for this machine under
# $XDG_CACHE_HOME/einc (docs/cost-model.md); the tests expect the committed
# hw/host.json, so they run with an empty cache of their own.
XDG_CACHE_HOME=$(mktemp -d)
export XDG_CACHE_HOME
trap 'rm -rf "$XDG_CACHE_HOME"' EXIT
cmake -S . -B build -DEINC_WERROR=ON -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
# A chain of 10^6 statements compiles at -O3 within its budget and runs
# (docs/reliability.md, "No deep recursion on user input"); minutes, so
# outside CTest.
/usr/bin/python3 tests/fuzz/long_chain.py --einc build/einc --statements 1000000
cmake -S . -B build-asan -DEINC_WERROR=ON -DEINC_SANITIZE=ON
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure -j"$jobs"
tests/fuzz/run.sh 20
