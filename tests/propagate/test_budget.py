#!/usr/bin/env python3
"""test_budget.py - the planner's time is bounded (passes/reshard.h,
PASS_RESHARD_EDGE_BUDGET; docs/propagation.md, "Planner time").

A rank-8 program on a 4-axis mesh (budget/rank8_4axes.ein), whose
resharding searches ran for over ten minutes without a budget, compiles
(CTest's timeout guards it), says in a warning that some routes came from
the direct route, and runs on 16 threads equal to its unsharded reference.
The examples, whose searches stay far inside the budget, get no such
warning.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

failures = 0


def check(cond, msg):
    global failures
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    a = ap.parse_args()
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "budget", "rank8_4axes.ein")
    with tempfile.TemporaryDirectory(prefix="einc-budget-") as work:
        exe = os.path.join(work, "rank8")
        p = subprocess.run([a.einc, src, "-o", exe], capture_output=True, text=True, timeout=600)
        check(p.returncode == 0, "rank 8 on 4 axes compiles (%s)" % p.stderr.strip()[-300:])
        check("came from a direct route" in p.stderr and "Planner time" in p.stderr,
              "and the warning says the plan used the direct route")
        if p.returncode == 0:
            r = subprocess.run([exe, "--random-inputs", "1", "--check"], capture_output=True, text=True,
                               timeout=600)
            check(r.returncode == 0 and "check Out" in r.stdout,
                  "runs on 16 threads equal to the reference: %s" % (r.stdout + r.stderr).strip()[-200:])
    for f in ("llama2_13b_train.ein", "fortunes_transformer.ein", "llama2_13b_decode.ein"):
        p = subprocess.run([a.einc, "--hw", "tpu-v5p", "--passes=optimize,autodiff,propagate", os.path.join(a.examples, f)],
                           capture_output=True, text=True, timeout=600)
        check(p.returncode == 0 and "direct route" not in p.stderr, "%s: every route searched" % f)


if __name__ == "__main__":
    main()
    print("FAILED" if failures else "all passed")
    sys.exit(1 if failures else 0)
