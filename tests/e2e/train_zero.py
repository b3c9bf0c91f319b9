#!/usr/bin/python3
"""train_zero.py - ZeRO-sharded optimizer state (`zero=2`, docs/language.md,
"Sharding" under "Training") trains exactly as the replicated state does.

Program: a two-matmul MLP, data parallel (the batch over X, the weights
replicated), trained with AdamW (f32; and bf16 weights with master=f32)
and SGD with momentum.  For each, on X = 2 and X = 4 threads:
  - the step's IR shards the state over X and has the planner
    reduce-scatter every weight gradient and all-gather every weight
    (no AllReduce of a weight gradient; with master=f32 and SGD the
    planner may reduce or gather the f32 value the weight is made from);
  - `--dump-cost`'s per-device optimizer state is 1/X of zero=0's;
  - 6 steps from the same inputs and params give the same params and
    state (from --save, the state saved whole) as zero=0, within 1e-6
    relative (f32: the sums run in another order), and equal to a NumPy
    run of the same steps within 1e-4;
  - --check on 3 steps passes (the single-device reference);
  - a checkpoint saved under zero=2 resumes under zero=0 to the same
    params as an uninterrupted zero=2 run.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: train_zero.py --einc PATH
"""
import argparse
import os
import re
import sys
import tempfile

import numpy as np

from e2e_common import rel_err
from train_master import Tester as MasterTester, run

PROGRAM = """\
mesh X = {X}
dim B = 512, D = 64, F = 128
input Xin[B_X, D] : f32
input T[B_X, D] : f32
param W1[D, F] : {DT}
param W2[F, D] : {DT}
H[B, F] = Xin[B, D] * {C}W1[D, F]{E}
A[B, F] = tanh(H[B, F])
Y[B, D] = A[B, F] * {C}W2[F, D]{E}
Loss[] = mean((Y[B, D] - T[B, D]) * (Y[B, D] - T[B, D]))
loss Loss
optimize W1, W2 with {OPT}
"""

CASES = {
    "adamw": ("f32", "adamw(lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.1{Z})", ("W1.m", "W1.v", "W2.m", "W2.v")),
    "sgd": ("f32", "sgd(lr=0.05, momentum=0.9{Z})", ("W1.mom", "W2.mom")),
    "master": ("bf16", "adamw(lr=0.01, master=f32{Z})", ("W1.m", "W1.v", "W1.master", "W2.master")),
}


def program(case, x, zero):
    dt, opt, _ = CASES[case]
    cast = dt != "f32"
    return PROGRAM.format(X=x, DT=dt, C="f32(" if cast else "", E=")" if cast else "",
                          OPT=opt.format(Z=", zero=2" if zero else ""))


def numpy_adamw(x, t, w1, w2, steps, lr=0.01, b1=0.9, b2=0.99, wd=0.1, eps=1e-8):
    """The f32 AdamW steps of the program, in float64 (the test's reference)."""
    w = [w1.astype(np.float64), w2.astype(np.float64)]
    m = [np.zeros_like(v) for v in w]
    v = [np.zeros_like(u) for u in w]
    for s in range(1, steps + 1):
        h = x @ w[0]
        a = np.tanh(h)
        y = a @ w[1]
        dy = 2 * (y - t) / y.size
        g2 = a.T @ dy
        g1 = x.T @ ((dy @ w[1].T) * (1 - a * a))
        for i, g in enumerate((g1, g2)):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mh, vh = m[i] / (1 - b1 ** s), v[i] / (1 - b2 ** s)
            w[i] = w[i] - lr * wd * w[i] - lr * mh / (np.sqrt(vh) + eps)
    return w


class Tester(MasterTester):
    """train_master.py's checks and build; train() saves every tensor."""

    def train(self, exe, vals, steps, ck, *extra):
        p = run([exe] + self.inputs(vals, list(vals)) + ["--steps", str(steps), "--save", ck] + list(extra))
        if p.returncode:
            self.check(False, "run %s" % exe, p.stderr.strip()[-2000:])
            return None
        return {f[:-4]: np.load(os.path.join(ck, f)) for f in os.listdir(ck) if f.endswith(".npy")}


def state_bytes(einc, ein):
    out = run([einc, ein, "--dump-cost"]).stdout
    m = re.search(r"optimizer state \(moments\) (\d+) bytes", out)
    return int(m.group(1)) if m else None


def rel(a, b):
    return rel_err(np.asarray(a, np.float64), np.asarray(b, np.float64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    vals = {"Xin": rng.standard_normal((512, 64)).astype(np.float32),
            "T": rng.standard_normal((512, 64)).astype(np.float32),
            "W1": (0.1 * rng.standard_normal((64, 128))).astype(np.float32),
            "W2": (0.1 * rng.standard_normal((128, 64))).astype(np.float32)}
    with tempfile.TemporaryDirectory() as work:
        t = Tester(args.einc, work)
        for case in CASES:
            states = CASES[case][2]
            for x in (2, 4):
                name = "%s_x%d" % (case, x)
                exe0 = t.build(name + "_z0", program(case, x, False))
                exe2 = t.build(name + "_z2", program(case, x, True))
                ein0, ein2 = exe0 + ".ein" if exe0 else None, exe2 + ".ein" if exe2 else None
                if not exe0 or not exe2:
                    continue
                ir = run([args.einc, ein2, "--dump-ir"]).stdout
                sharded = all(re.search(r"^state %s\[[^\]]*_X" % re.escape(s), ir, re.M) for s in states)
                rs = all(re.search(r"= ReduceScatter_X d%s[\.\d]*\[" % w, ir, re.M) for w in ("W1", "W2"))
                # The new weight, or (SGD) the new momentum it is made
                # from: the same bytes, as the planner prices them.
                ag = all(re.search(r"= AllGather_X %s(\.mom)?[\.\d]*\[" % w, ir, re.M) for w in ("W1", "W2"))
                ar = re.search(r"= AllReduce_X dW", ir, re.M)
                # The master case reduces the f32 gradient of the cast
                # weights as the planner prices best; the f32 ones must
                # reduce-scatter.
                exact = case != "master"
                t.check(sharded and ag and (not exact or (rs and not ar)), "%s: state over X, %sweights "
                        "all-gathered" % (name, "gradients reduce-scattered, " if exact else ""), ir[:1500])
                b0, b2 = state_bytes(args.einc, ein0), state_bytes(args.einc, ein2)
                # opt.step (4 bytes) stays whole.
                t.check(b0 and b2 and (b2 - 4) * x == b0 - 4 or (case == "sgd" and b2 * x == b0),
                        "%s: state per device %s bytes, 1/%d of %s" % (name, b2, x, b0))
                v = dict(vals)
                if case == "master":
                    v["W1"], v["W2"] = (vals["W1"].astype(np.float32), vals["W2"].astype(np.float32))
                r0 = t.train(exe0, v, 6, os.path.join(work, name + "_ck0"))
                r2 = t.train(exe2, v, 6, os.path.join(work, name + "_ck2"))
                if r0 is None or r2 is None:
                    continue
                keys = sorted(set(r0) & set(r2) - {"opt.step"})
                worst = max(rel(r2[k], r0[k]) for k in keys)
                t.check(set(r0) == set(r2) and worst <= 1e-6, "%s: 6 steps equal zero=0's (%s, worst %.2g)"
                        % (name, ", ".join(keys), worst))
                if case == "adamw":
                    w = numpy_adamw(vals["Xin"], vals["T"], vals["W1"], vals["W2"], 6)
                    e = max(rel(r2["W1"], w[0]), rel(r2["W2"], w[1]))
                    t.check(e <= 1e-4, "%s: NumPy's params within %.2g" % (name, e))
                p = run([exe2, "--random-inputs", "1", "--steps", "3", "--check"])
                t.check(p.returncode == 0, "%s: --check" % name, (p.stdout + p.stderr)[-800:])
        # A zero=2 checkpoint resumes under zero=0 (the state is saved whole).
        exe0 = t.build("resume_z0", program("adamw", 2, False))
        exe2 = t.build("resume_z2", program("adamw", 2, True))
        if exe0 and exe2:
            whole = t.train(exe2, vals, 6, os.path.join(work, "ck_whole"))
            t.train(exe2, vals, 3, os.path.join(work, "ck_half"))
            p = run([exe0, "--input", "Xin=%s" % os.path.join(work, "in_Xin.npy"), "--input",
                     "T=%s" % os.path.join(work, "in_T.npy"), "--steps", "6", "--resume",
                     os.path.join(work, "ck_half"), "--save", os.path.join(work, "ck_resumed")])
            ok = p.returncode == 0
            if ok:
                got = np.load(os.path.join(work, "ck_resumed", "W1.npy"))
                ok = rel(got, whole["W1"]) <= 1e-6
            t.check(ok, "a zero=2 checkpoint resumes under zero=0", (p.stderr or "")[-800:])
        print("%d passed, %d failed" % (t.passed, t.failed))
        return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
