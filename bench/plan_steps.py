#!/usr/bin/env python3
"""The planner's plans before and after, estimated and measured (docs/performance.md, section 12).

For each program the planner has to get right (issue 10: DP + TP on a Z x Y
mesh, the FSDP backward pass written by hand, the 2x2 FSDP + TP FFW block at
B = 256), two einc builds plan it on the same `--hw` profile: BEFORE (an
earlier einc, e.g. built at the commit before the step-time objective) and
the einc of --build.  For each it prints the collectives inserted, the step
time `--dump-cost` estimates, and the median time per run measured with
`--profile --repeat R` on the threads runtime, the two builds' executables
run alternately, R runs each, `--rounds` times (the fastest round's median
kept, as calibration keeps its fastest round).  The ratio columns are
before / after: above 1 means the plan got faster.

usage: plan_steps.py --before BEFORE_EINC [--build BUILD] [--hw host] [--repeat 5] [--rounds 3]
       [--json FILE]
"""

import os
import re
import sys
import tempfile
from pathlib import Path

import benchlib

ROOT = benchlib.ROOT
CASES = (
    ("DP + TP, Z x Y", "tests/golden/plans/dp_tp_zy.ein", ["--meshslice=off"]),
    ("FSDP backward by hand", "tests/golden/plans/fsdp_backward.ein", ["--meshslice=off"]),
    ("2x2 FSDP + TP FFW, B = 256", "tests/golden/plans/ffw_2x2_meshslice_b256.ein", []),
)
RESHARDS = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Slice", "MeshSlice")


def plan(einc, path, flags, hw):
    """(collectives as 'Op_Axes:value' words, estimated step in us) of einc's plan."""
    ir = benchlib.run([einc, path, "--hw", hw, "--dump-ir", *flags])
    words = []
    for line in ir.splitlines():
        m = re.match(r"^\s*(\S+?)(?:\.\d+)?\[[^=]*= (\w+?)(_[A-Z]+)?[ (]", line)
        if m and m.group(2) in RESHARDS:
            op = m.group(2) + (m.group(3) or "")
            df = re.search(r"MeshSlice\((\w+)", line) if m.group(2) == "MeshSlice" else None
            words.append("MeshSlice(%s):%s" % (df.group(1), m.group(1)) if df else "%s:%s" % (op, m.group(1)))
    cost = benchlib.run([einc, path, "--hw", hw, "--dump-cost", *flags])
    m = re.search(r"^totals: step ([0-9.e+-]+) us", cost, re.M)
    if not m:
        raise benchlib.BenchError("no 'totals: step' line from %s --dump-cost %s" % (einc, path))
    return words, float(m.group(1))


def main():
    ap = benchlib.parser(__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the einc to compare with")
    ap.add_argument("--hw", default="host", help="profile both builds plan for (default host)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per measurement (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    a = ap.parse_args()
    builds = (("before", a.before), ("after", benchlib.einc(a.build)))
    print(benchlib.machine())
    print("# before: %s; after: %s; --hw %s; median of --repeat %d, best of %d alternating rounds"
          % (builds[0][1], builds[1][1], a.hw, a.repeat, a.rounds))
    rows = []
    res = benchlib.Results("plan_steps", "The planner's plans before and after the step-time search")
    with tempfile.TemporaryDirectory() as tmp:
        for name, rel, flags in CASES:
            path = str(ROOT / rel)
            got = {}
            for tag, einc in builds:
                words, est = plan(einc, path, flags, a.hw)
                exe = os.path.join(tmp, "%s_%s" % (Path(rel).stem, tag))
                benchlib.run([einc, path, "--hw", a.hw, *flags, "-o", exe])
                got[tag] = {"plan": " ".join(words) or "none", "est": est, "exe": exe, "ms": []}
            for _ in range(a.rounds):
                for tag, _ in builds:
                    out = benchlib.run([got[tag]["exe"], "--random-inputs", "1", "--profile",
                                        "--repeat", str(a.repeat)])
                    got[tag]["ms"].append(benchlib.median_ms(out))
            for tag, _ in builds:
                g = got[tag]
                rows.append([name, tag, g["plan"], g["est"] / 1e3, min(g["ms"])])
            b, f = got["before"], got["after"]
            rows.append([name, "before / after", "", b["est"] / f["est"], min(b["ms"]) / min(f["ms"])])
            res.add("%s, measured step after" % name, min(f["ms"]), "ms", "",
                    min(b["ms"]) / min(f["ms"]))
    benchlib.table(["program", "einc", "collectives", "estimated ms (ratio)", "measured ms (ratio)"], rows)
    res.write(a.json)


if __name__ == "__main__":
    benchlib.main_guard(main)
