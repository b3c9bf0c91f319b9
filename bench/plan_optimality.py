#!/usr/bin/env python3
"""Benchmark 11: the planner against an exhaustive search, with a results file.

Runs BUILD/tests/propagate/plan_optimality (bench/plan_optimality.c, built
by `cmake --build BUILD --target plan_optimality`; CTest runs it too), prints
its output unchanged, and reads its summary line, "within 5%: N (P%, target
>= 95%); worst Rx (target <= 1.5x)", into --json FILE: the share of the
200 random programs whose plan is within 5% of the exhaustive optimum, and
the worst planner / optimum ratio.  The plans are scored by the tpu-v5p
cost model, so the figures do not depend on the machine that runs it.

    python3 bench/plan_optimality.py --build BUILD [--json FILE]
"""
import re
import subprocess
import sys
from pathlib import Path

import benchlib as bl


def main():
    p = bl.parser(__doc__)
    a = p.parse_args()
    exe = Path(a.build) / "tests" / "propagate" / "plan_optimality"
    if not exe.exists():
        raise bl.BenchError(f"{exe} not found: cmake --build {a.build} --target plan_optimality")
    # Exit 1 is a MISS, still a result to record; 2 is a failure to plan.
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=3600)
    sys.stdout.write(r.stdout)
    if r.returncode not in (0, 1):
        raise bl.BenchError(f"{exe} exited {r.returncode}:\n{r.stderr[-2000:]}")
    out = r.stdout
    m = re.search(r"within 5%: \d+ \(([0-9.]+)%, target >= ([0-9.]+)%\); "
                  r"worst ([0-9.]+)x \(target <= ([0-9.]+)x\)", out)
    if not m:
        raise bl.BenchError("no 'within 5%: ...; worst ...' summary in the output of " + str(exe))
    share, share_target, worst, worst_target = map(float, m.groups())
    res = bl.Results("plan_optimality", "The planner against an exhaustive search")
    res.add("programs whose plan is within 5% of the exhaustive optimum", share, "%",
            f">= {share_target:g}%", None, "ok" if share >= share_target else "MISS")
    res.add("worst plan / optimum", worst, "x", f"<= {worst_target:g}x", None,
            "ok" if worst <= worst_target else "MISS")
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
