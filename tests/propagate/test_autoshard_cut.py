#!/usr/bin/env python3
"""`einc plan --plan-search=cut` against `--plan-search=all` (driver/plan_cut.c).

The cut estimates every candidate with a compile without the whole-program
ILP (--ilp=off), then compiles in full, in the order of the estimates, the
rows whose estimate is within 10% of the best full step that fits; the
rest keep the estimate's figures, say so, and are never chosen.  On the
given programs (seed 000's MLP regime program and 8 chips of tpu-v5p by
default) this checks, with the full enumeration as the reference:
  - both choose the same row (family and mesh) with the same figures;
  - every row the cut compiled in full has the full enumeration's figures;
  - the cut left some row at its estimate (the test can fail), each such
    row says why in the JSON ("estimated", "skipped") and the text table,
    its estimate is above the chosen step + 10%, and its full step (from
    the full enumeration) is not below the chosen one: nothing the cut
    dropped would have won;
  - the default (--plan-search=auto) on this small table compiles every
    row in full: the same JSON as --plan-search=all;
  - --plan-search=fast is refused.
--quick (the sanitizers): the first two checks and the cut rows' JSON only.
Exits 1 on the first failure.
"""
import argparse
import json
import subprocess
import sys

FIGURES = ("step_time", "mfu", "memory_per_device", "fits", "comm_time", "exposed_comm_time", "remat", "zero")


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def plan(cmd, mode, json_out=True):
    full = cmd + (["--plan-search=" + mode] if mode else []) + (["--json"] if json_out else [])
    r = subprocess.run(full, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "%s: %s" % (" ".join(full), r.stderr[-2000:]))
    return json.loads(r.stdout) if json_out else r.stdout


def mesh_key(c):
    return (c["storage"], ",".join("%s=%d" % kv for kv in c["mesh"].items()))


def run_case(einc, ein, chips, hw, defines, quick):
    cmd = [einc, "plan", ein, "--chips", str(chips), "--hw", hw] + sum((["-D", d] for d in defines), [])
    full, cut = plan(cmd, "all"), plan(cmd, "cut")
    what = "%s on %d chips of %s" % (ein, chips, hw)
    check(not cut["chosen"].get("estimated"), what + ": the chosen row was not compiled in full")
    check(mesh_key(cut["chosen"]) == mesh_key(full["chosen"]),
          "%s: cut chose %s, the full enumeration %s" % (what, mesh_key(cut["chosen"]), mesh_key(full["chosen"])))
    for k in FIGURES:
        check(cut["chosen"][k] == full["chosen"][k], "%s: chosen %s %s against %s" % (what, k, cut["chosen"][k],
                                                                                 full["chosen"][k]))
    rows = {mesh_key(c): c for c in full["candidates"]}
    check(len(rows) == len(cut["candidates"]), what + ": the two tables have different rows")
    best = cut["chosen"]["step_time"]
    skipped = 0
    for c in cut["candidates"]:
        f = rows[mesh_key(c)]
        if c.get("estimated"):
            skipped += 1
            check("not compiled in full: estimated" in c.get("skipped", ""), "%s: %s says why" % (what, c))
            check(c["estimate"] > best * 1.1, "%s: %s cut with an estimate within 10%% of %g" % (what, c, best))
            check(f["step_time"] >= best, "%s: the cut dropped %s, whose full step %g beats the chosen %g" %
                  (what, mesh_key(c), f["step_time"], best))
        else:
            for k in FIGURES:
                check(c[k] == f[k], "%s: %s compiled in full has %s %s, the full enumeration %s" %
                      (what, mesh_key(c), k, c[k], f[k]))
    check(skipped > 0, what + ": the cut compiled every row in full")
    print("%s: %d of %d rows cut, the same choice (%s, %.4g ms)" % (what, skipped, len(rows),
                                                                 "/".join(mesh_key(cut["chosen"])), best * 1e3))
    if quick:
        return cmd
    text = plan(cmd, "cut", json_out=False)
    check("estimated with --ilp=off" in text and text.count("not compiled in full: estimated") >= skipped,
          what + ": the text table does not say which rows were cut:\n" + text)
    auto = plan(cmd, None)
    check(auto == full, what + ": --plan-search=auto on a small table differs from all")
    return cmd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--chips", type=int, default=8)
    ap.add_argument("--hw", default="tpu-v5p")
    ap.add_argument("-D", action="append", default=[])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("ein")
    a = ap.parse_args()
    cmd = run_case(a.einc, a.ein, a.chips, a.hw, a.D, a.quick)
    r = subprocess.run(cmd + ["--plan-search=fast"], capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "--plan-search" in r.stderr, "--plan-search=fast: %d %s" % (r.returncode, r.stderr))
    print("ok")


if __name__ == "__main__":
    main()
