#!/usr/bin/env bash
# Installs the Debian 12 packages einc builds and tests with, if any is missing.
# Needs root (or sudo) only when something has to be installed.
set -euo pipefail
# libzstd-dev: linking LLVM's static libraries (cmake/llvm_link.cmake) needs
# libzstd.so, which llvm-19-dev does not pull in.
# clang and libclang-rt-14-dev (libFuzzer, ASan, UBSan) build tests/fuzz/;
# python3-sklearn has the digits data of examples/digits/, python3-matplotlib
# plots its loss curves, fortunes has the text of examples/fortunes/.
# libglpk-dev and coinor-libclp-dev: the planner's whole-program ILP
# (passes/propagate_ilp.c; CLP solves its relaxations, propagate_ilp_clp.c).
# libmicrohttpd-dev: the HTTP server of an executable's --serve (runtime/server.c).
# libdnnl-dev (oneDNN): bf16 x bf16 GEMMs (runtime/gemm_bf16_dnnl.c opens it at
# run time; optional: without it they widen to f32 for cblas_sgemm).
pkgs=(build-essential cmake pkg-config llvm-19-dev libzstd-dev flex bison libcunit1-dev
      libopenblas-dev libopenmpi-dev openmpi-bin python3-numpy libcjson-dev
      clang libclang-rt-14-dev python3-sklearn python3-matplotlib
      fortunes libglpk-dev coinor-libclp-dev libmicrohttpd-dev libdnnl-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
