#!/usr/bin/python3
"""update_rounding.py - an AdamW update that rounds to nothing in the param's dtype is warned about once.

AdamW's first update is lr * G/|G| = +-lr per element (eps aside); for an
element w with 1 < |w| < 2 in bf16 (spacing 2^-7) an update below 2^-8
rounds back to w.  So einc must warn exactly once, naming the param, for a
bf16 param with adamw(lr=0.001) (below 2^-8 = 0.0039), and not at all for
an f32 param with the same lr or a bf16 param with lr=0.01.  The warning
is checked against behaviour: one step of the warned program leaves W
(every element 1.5, exact in bf16) bit for bit unchanged, and one step of
the lr=0.01 program changes every element by about lr (NumPy's closed
form: the update rounded to bf16's nearest).

SGD's update lr * g depends on the gradient, so it is judged by the run:
the executable compares a bf16 param before and after the first step at
the peak lr and warns once when most of its elements did not move.  Here
g is about 1.7 everywhere, so sgd(lr=0.001) moves each 1.5 by 0.0017,
below half of bf16's spacing 2^-7 there: one run-time warning, at step 1,
or at step 3 with warmup_steps=2 (steps 1 and 2 have lr 0 and lr/2 and
warn nothing); sgd(lr=0.01) moves every element and master=f32 keeps the
update in an f32 copy: neither warns.

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: update_rounding.py --einc PATH
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

PROGRAM = """\
mesh X = 2
dim B = 4, D = 4, E = 4
input In[B_X, D] : {DT}
param W[D, E] : {DT}
Out[B, E] = In[B, D] * W[D, E]
L[] = mean(Out[B, E] * Out[B, E])
loss L
optimize W with adamw(lr={LR}, weight_decay=0)
"""
WARNING = "rounds to nothing"
SGD_PROGRAM = PROGRAM.replace("adamw(lr={LR}, weight_decay=0)", "sgd(lr={LR}{MORE})")


def bf16_round(x):
    """Round-to-nearest-even of f32 values to bf16, returned as f32."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    a = ap.parse_args()
    passed = failed = 0

    def check(ok, title, why=""):
        nonlocal passed, failed
        print("%s %s%s" % ("ok" if ok else "FAIL", title, "" if ok else ": " + why))
        passed += ok
        failed += not ok

    with tempfile.TemporaryDirectory(prefix="einc-rounding-") as work:
        x = np.linspace(0.5, 1.0, 16, dtype=np.float32).reshape(4, 4)
        w = np.full((4, 4), 1.5, np.float32)
        np.save(os.path.join(work, "In.npy"), bf16_round(x))
        np.save(os.path.join(work, "W.npy"), w)
        for dt, lr, want in (("bf16", "0.001", 1), ("f32", "0.001", 0), ("bf16", "0.01", 0)):
            title = "%s param, adamw(lr=%s)" % (dt, lr)
            name = "%s_%s" % (dt, lr.replace(".", "_"))
            src, exe = os.path.join(work, name + ".ein"), os.path.join(work, name)
            with open(src, "w") as f:
                f.write(PROGRAM.format(DT=dt, LR=lr))
            p = subprocess.run([a.einc, src, "-o", exe], capture_output=True, text=True)
            if p.returncode:
                check(False, title, "einc failed: " + p.stderr[-2000:])
                continue
            n = p.stderr.count(WARNING)
            check(n == want and (not want or "'W'" in p.stderr), title + ": %d warning(s)" % want,
                  "got %d:\n%s" % (n, p.stderr))
            if dt != "bf16":
                continue
            out = os.path.join(work, name + "_W.npy")
            r = subprocess.run([exe, "--input", "In=" + os.path.join(work, "In.npy"),
                                "--input", "W=" + os.path.join(work, "W.npy"),
                                "--output", "W=" + out], capture_output=True, text=True,
                               timeout=300)
            if r.returncode:
                check(False, title + ": one step", r.stderr[-2000:])
                continue
            got = np.load(out)
            if want:
                check(np.array_equal(got, w), title + ": one step leaves W unchanged",
                      "W changed by up to %g" % float(np.max(np.abs(got - w))))
            else:
                # The gradient of mean(Out^2) is positive here (In, W > 0): W - lr.
                expect = bf16_round(w - np.float32(lr))
                check(np.array_equal(got, expect), title + ": one step moves W by lr",
                      "got %s, want %s" % (got.ravel()[:4], expect.ravel()[:4]))
        # SGD: warned by the run, once, at the first step at the peak lr.
        for lr, more, steps, want in (("0.001", "", 2, "step 1 "), ("0.001", ", warmup_steps=2", 4,
                                                                    "step 3 "),
                                      ("0.01", "", 2, None), ("0.001", ", master=f32", 2, None)):
            title = "bf16 param, sgd(lr=%s%s), %d steps" % (lr, more, steps)
            name = "sgd_%d_%s" % (steps, (lr + more).replace(".", "_").replace(", ", "_")
                                  .replace("=", "_"))
            src, exe = os.path.join(work, name + ".ein"), os.path.join(work, name)
            with open(src, "w") as f:
                f.write(SGD_PROGRAM.format(DT="bf16", LR=lr, MORE=more))
            p = subprocess.run([a.einc, src, "-o", exe], capture_output=True, text=True)
            if p.returncode or WARNING in p.stderr:
                check(False, title, "einc failed or warned at compile time: " + p.stderr[-2000:])
                continue
            r = subprocess.run([exe, "--input", "In=" + os.path.join(work, "In.npy"),
                                "--input", "W=" + os.path.join(work, "W.npy"),
                                "--steps", str(steps)], capture_output=True, text=True, timeout=300)
            n = r.stderr.count(WARNING)
            ok = r.returncode == 0 and n == (1 if want else 0)
            if want:
                ok = ok and ("warning: " + want) in r.stderr and "'W'" in r.stderr \
                    and "16 of 16 elements" in r.stderr
            check(ok, title + ": %s" % ("one warning at " + want.strip() if want else "no warning"),
                  "exit %d, %d warning(s):\n%s" % (r.returncode, n, r.stderr[-2000:]))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
