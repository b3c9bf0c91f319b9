#!/usr/bin/python3
"""train_nonfinite.py - skip_nonfinite=true skips a step whose gradients hold NaN or Inf.

train.py's FFW block trains 7 steps on --data of 3 batches of 8 rows; the
second batch holds a NaN in In (or an Inf in Tgt), so steps 2 and 5 have
non-finite gradients.  With skip_nonfinite=true those steps must change
nothing (params, moments, step count), which NumPy reproduces
(train_schedule.py's reference), under no sharding and FSDP (sharded
gradients: their squared norms are all-reduced); the executable must
warn about each on stderr, mark it `"skipped": true` in --metrics and
count 2 in its summary.  Without skip_nonfinite the same data must poison
the params with NaN, so the test's data does exercise the skip.

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: train_nonfinite.py --einc PATH
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from train_schedule import ADAMW, SGD, build, reference, rel_err  # noqa: E402

STEPS = 7
SKIPPED = [2, 5]  # the steps that read batch 1
CASES = [
    ("adamw(lr=0.02, beta1=0.9, beta2=0.99, weight_decay=0.1, warmup_steps=2, "
     "skip_nonfinite=true)", dict(ADAMW, warmup=2, skip=True)),
    ("sgd(lr=0.05, momentum=0.9, weight_decay=0.01, clip_norm=0.1, skip_nonfinite=true)",
     dict(SGD, clip=0.1, skip=True)),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    a = ap.parse_args()
    np.seterr(all="ignore")  # NumPy's reference meets the NaN and Inf on purpose
    passed = failed = 0
    rng = np.random.default_rng(11)
    params = {"Win": 0.5 * rng.standard_normal((4, 8)), "Wout": 0.5 * rng.standard_normal((8, 4))}
    clean = {"In": rng.standard_normal((24, 4)), "Tgt": rng.standard_normal((24, 4))}
    poisoned = {}
    for name, row, col, value in (("NaN in In", 9, 2, np.nan), ("Inf in Tgt", 12, 1, np.inf)):
        d = {k: v.copy() for k, v in clean.items()}
        d["In" if "In" in name else "Tgt"][row, col] = value
        poisoned[name] = d

    def fail(title, why):
        nonlocal failed
        print("FAIL %s: %s" % (title, why))
        failed += 1

    with tempfile.TemporaryDirectory(prefix="einc-nonfinite-") as work:
        def path(name):
            return os.path.join(work, name + ".npy")
        for k, v in params.items():
            np.save(path(k), v)
        for spelling, c in CASES:
            for sname in ("replicated", "FSDP"):
                exe, err = build(a.einc, work, spelling, sname, "t")
                if err:
                    fail(spelling, err)
                    continue
                for dname, data in poisoned.items():
                    title = "%s %s, %s" % (spelling, sname, dname)
                    for k, v in data.items():
                        np.save(path("data_" + k), v)

                    def batch(step, data=data):
                        j = (step - 1) % 3
                        return data["In"][8 * j:8 * j + 8], data["Tgt"][8 * j:8 * j + 8]
                    want_l, want_w, _, skipped = reference(params, c, STEPS, batch)
                    if skipped != SKIPPED:
                        fail(title, "NumPy skips steps %s, not %s" % (skipped, SKIPPED))
                        continue
                    metrics = os.path.join(work, "m.jsonl")
                    run = [exe, "--steps", str(STEPS), "--metrics", metrics]
                    for k in ("In", "Tgt"):
                        run += ["--data", "%s=%s" % (k, path("data_" + k))]
                    for k in params:
                        run += ["--input", "%s=%s" % (k, path(k)),
                                "--output", "%s=%s" % (k, path("out_" + k))]
                    p = subprocess.run(run, capture_output=True, text=True, timeout=300)
                    if p.returncode != 0:
                        fail(title, "run: " + p.stderr.strip()[-2000:])
                        continue
                    problems = []
                    for n, want in want_w.items():
                        err = rel_err(np.load(path("out_" + n)), want)
                        if not err <= 1e-9:
                            problems.append("%s: relative error %.3g" % (n, err))
                    warned = [s for s in range(1, STEPS + 1)
                              if "warning: step %d: the gradients hold NaN or Inf" % s in p.stderr]
                    if warned != SKIPPED:
                        problems.append("warnings for steps %s: %s" % (warned, p.stderr[-500:]))
                    with open(metrics) as f:
                        marked = [m["step"] for m in map(json.loads, f) if m.get("skipped")]
                    if marked != SKIPPED:
                        problems.append("--metrics marks steps %s as skipped" % marked)
                    if "; 2 skipped (NaN or Inf gradients)" not in p.stdout:
                        problems.append("no count in the summary: " + p.stdout[-300:])
                    if problems:
                        fail(title, "; ".join(problems))
                    else:
                        print("ok   %s: steps %s skipped, params as NumPy" % (title, SKIPPED))
                        passed += 1
        # Without skip_nonfinite the poisoned batch reaches the params.
        exe, err = build(a.einc, work, CASES[0][0].replace(", skip_nonfinite=true", ""),
                         "replicated", "plain")
        for k, v in poisoned["NaN in In"].items():
            np.save(path("data_" + k), v)
        q = err or subprocess.run(
            [exe, "--steps", str(STEPS), "--data", "In=" + path("data_In"), "--data",
             "Tgt=" + path("data_Tgt"), "--input", "Win=" + path("Win"), "--input",
             "Wout=" + path("Wout"), "--output", "Win=" + path("out_Win")],
            capture_output=True, text=True, timeout=300).returncode
        if q or not np.isnan(np.load(path("out_Win"))).any():
            fail("without skip_nonfinite", "the NaN batch did not reach Win (exit %s)" % q)
        else:
            print("ok   without skip_nonfinite: the NaN batch reaches Win")
            passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
