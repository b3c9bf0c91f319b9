#!/usr/bin/env python3
"""The ILP's second solve keeps no plan the cost pass rates slower, past the
resharding search's budget.

budget/decode_2dws_direct.ein (a 2-layer LLaMA-2 13B decode step, GQA, on
2x2x2 v5e in seed 002's 2D weight-stationary layout) has values whose
resharding searches run over PASS_RESHARD_EDGE_BUDGET, so the planner
prices them by the direct route (docs/propagation.md, "Planner time").
That route AllReduced and sliced partial sums the search ReduceScatters,
so the ILP with collective matmul's credits and the planner's step replay
saw no ReduceScatter for the Q matmul to hide and adopted a plan gathering
Xn into it, which the cost pass rates slower; and the replay priced the
Logits output's reshard twice when argmax needs the same one.  For each
vocabulary size (32000, whose LM head is large enough for the second
mispricing to matter, and 4096) this compiles
the program with --ilp-overlap=on and off and checks, by the cost pass's
step (`totals.step_time`): the direct route was taken (the warning), and
the plan with the second solve is not slower than the serial one.  Before
the fix: 662.8 against 654.8 us (V = 32000) and 589.8 against 582.7 us
(V = 4096).  Prints `N passed, N failed`; exits 1 on a failure.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "budget", "decode_2dws_direct.ein")


def step(einc, *flags):
    """(cost pass step seconds, stderr) of the program compiled with flags."""
    r = subprocess.run([einc, PROGRAM, "--hw", "tpu-v5e", "--dump-ir=json", "--debug-pass", *flags],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"einc {' '.join(flags)} failed:\n{r.stderr}")
    return json.loads(r.stdout)["totals"]["step_time"], r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    einc = ap.parse_args().einc
    results = []
    for v in (32000, 4096):
        on, log = step(einc, "-D", f"V={v}", "--ilp-overlap=on")
        off, _ = step(einc, "-D", f"V={v}", "--ilp-overlap=off")
        results += [("came from a direct route" in log, f"V={v}: some reshards priced by the direct route"),
                    ("ILP with collective matmul" in log, f"V={v}: the second solve ran"),
                    (on <= off * (1 + 1e-9), f"V={v}: step {on * 1e6:.1f} us with the second solve, "
                                             f"{off * 1e6:.1f} us without")]
    for ok, what in results:
        print(("ok   " if ok else "FAIL ") + what)
    fails = sum(not ok for ok, _ in results)
    print(f"{len(results) - fails} passed, {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
