#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan+UBSan, coverage) in a build tree
# of their own and runs each for SECONDS on one core; exits 1 if any found a
# crash.  docs/reliability.md says what is fuzzed and what runs found.
#
#   tests/fuzz/run.sh SECONDS [HARNESS...]     (default: all five)
#
# Environment: EINC_FUZZ_BUILD, the build tree (default build-libfuzzer/ at
# the top of the source tree); EINC_FUZZ_WORK, where the growing corpora,
# logs and crash files go (default $EINC_FUZZ_BUILD/fuzz-work; kept between
# runs, so a later run starts from what earlier ones found).
#
# A crash leaves $EINC_FUZZ_WORK/crash-HARNESS-<sha1>; reproduce it with
#   $EINC_FUZZ_BUILD/tests/fuzz/HARNESS FILE
# and, once fixed, copy it to tests/fuzz/corpus/ein/ (or npy/, cli/, plan/) under a name
# that says what it was: CTest replays that folder in every build.
set -euo pipefail
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 SECONDS [fuzz_frontend|fuzz_compile|fuzz_npy|fuzz_cli|fuzz_plan ...]" >&2
  exit 2
fi
secs=$1
shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(fuzz_frontend fuzz_compile fuzz_npy fuzz_cli fuzz_plan)

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${EINC_FUZZ_BUILD:-$root/build-libfuzzer}
work=${EINC_FUZZ_WORK:-$build/fuzz-work}
jobs=$(nproc 2>/dev/null || echo 2)

mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DEINC_FUZZ=ON -DEINC_MPI=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/fuzz-cmake.log" 2>&1 ||
  { cat "$build/fuzz-cmake.log"; exit 1; }
cmake --build "$build" -j"$jobs" --target "${harnesses[@]}" >"$build/fuzz-build.log" 2>&1 ||
  { tail -n 60 "$build/fuzz-build.log"; exit 1; }

# Seeds: the hand-made and regression inputs, and every .ein file of the tree.
mkdir -p "$work"
rm -rf "$work/seeds-ein"
mkdir -p "$work/seeds-ein"
cp "$root"/tests/fuzz/corpus/ein/* "$work/seeds-ein/"
n=0
while IFS= read -r f; do
  n=$((n + 1))
  cp "$f" "$work/seeds-ein/tree-$n-$(basename "$f")"
done < <(cd "$root" && find examples tests bench -name '*.ein' -not -path 'tests/fuzz/*' | sort)

status=0
ok=0
summary=()
for h in "${harnesses[@]}"; do
  case $h in
    fuzz_npy) seeds=$root/tests/fuzz/corpus/npy; dict=() ;;
    fuzz_cli) seeds=$root/tests/fuzz/corpus/cli; dict=(-dict="$root/tests/fuzz/cli.dict") ;;
    fuzz_plan) seeds=$root/tests/fuzz/corpus/plan; dict=() ;;
    *) seeds=$work/seeds-ein; dict=(-dict="$root/tests/fuzz/ein.dict") ;;
  esac
  mkdir -p "$work/corpus-$h"
  log=$work/$h.log
  echo "== $h: ${secs} s (log: $log)"
  # -max_len: the largest example is under 3 KB; longer inputs only slow
  # each execution.  -timeout: an input taking 10 s is a hang, reported.
  if "$build/tests/fuzz/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -max_len=8192 -print_final_stats=1 -artifact_prefix="$work/crash-$h-" "${dict[@]}" \
       "$work/corpus-$h" "$seeds" >"$log" 2>&1; then
    result=ok
    ok=$((ok + 1))
  else
    result="CRASH (see $log; inputs: $work/crash-$h-*)"
    status=1
    tail -n 40 "$log"
  fi
  # (A run that crashed at once has no statistics: keep going.)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1) || true
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1) || true
  cov=$({ grep -o 'cov: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  ft=$({ grep -o 'ft: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  units=$(find "$work/corpus-$h" -type f | wc -l)
  summary+=("$(printf '%-14s %6s s  %10s execs  %7s exec/s  cov %6s  ft %6s  corpus %5s  %s' \
    "$h" "$secs" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$units" "$result")")
done
echo "== fuzzing summary"
printf '%s\n' "${summary[@]}"
echo "fuzz: $ok passed, $((${#harnesses[@]} - ok)) failed"
exit $status
