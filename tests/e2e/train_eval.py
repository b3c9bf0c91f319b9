#!/usr/bin/python3
"""train_eval.py - held-out evaluation during training (--eval-data,
--eval-every) and --check's tolerance on training runs.

A small MLP classifier (DP on X, Megatron on Y, AdamW) on synthetic data:
1. --eval-every 3 over 6 steps on threads: eval_loss in the step lines and
   in the --metrics lines of steps 3 and 6 only; step 6's against NumPy's
   forward pass over the whole batches of the held-out rows (27 rows: 3
   batches of 8, 3 rows dropped) with the params the run saved; step 3's
   against the same with the params of a 3-step run without evaluation.
2. The run with evaluation saves exactly (bit for bit) the params, AdamW
   moments and step count of the same run without it, and the same losses.
3. The same on 4 MPI ranks (with --mpi).
4. Bad uses exit 1 with a clear message: --eval-every without --eval-data,
   --eval-every 0 or not a number, held-out rows of the wrong shape, fewer
   held-out rows than one batch, an input of --data without held-out rows,
   --eval-data naming a param, --metrics onto a held-out file.
5. --check on 10 AdamW steps passes at the default tolerance, 1e-4 x 10
   for f32, and fails when a pass plugin (wrong_grad_pass.c)
   negates a gradient in the sharded program only.

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: train_eval.py --einc PATH --plugin WRONG_GRAD.so [--mpi --mpirun PATH]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, mpi_launch  # noqa: E402

PROGRAM = """\
mesh X = 2, Y = 2
dim B = 8, P = 16, H = 32, C = 4
input Img[B_X, P] : f32
input Lab[B_X, C] : f32
param W1[P, H_Y] : f32
param B1[H_Y] : f32
param W2[H_Y, C] : f32
param B2[C] : f32
Pre[B, H] = Img[B, P] * W1[P, H] + B1[H]
Hid[B, H] = relu(Pre[B, H])
Z[B, C] = Hid[B, H] * W2[H, C] + B2[C]
M[B] = max(Z[B, C])
Lse[B] = log(sum(exp(Z[B, C] - M[B]))) + M[B]
L[] = mean(Lse[B] - sum(Lab[B, C] * Z[B, C], C))
loss L
optimize W1, B1, W2, B2 with adamw(lr=0.01, weight_decay=0.0001)
"""
BATCH = 8
PARAMS = ["W1", "B1", "W2", "B2"]
SAVED = PARAMS + [n + s for n in PARAMS for s in (".m", ".v")] + ["opt.step"]


def forward_loss(p, x, y):
    """The program's loss on one batch, in float64."""
    hid = np.maximum(x @ p["W1"] + p["B1"], 0)
    z = hid @ p["W2"] + p["B2"]
    mx = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - mx).sum(axis=1)) + mx[:, 0]
    return np.mean(lse - (y * z).sum(axis=1))


def eval_loss(ckpt, x, y):
    """Mean loss over the whole batches of (x, y) with the params in ckpt."""
    p = {n: np.load(os.path.join(ckpt, n + ".npy")).astype(np.float64) for n in PARAMS}
    nb = len(x) // BATCH
    return np.mean([forward_loss(p, x[j * BATCH:(j + 1) * BATCH], y[j * BATCH:(j + 1) * BATCH])
                    for j in range(nb)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    t = Tally()

    def run(cmd):
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    with tempfile.TemporaryDirectory(prefix="einc-train-eval-") as work:
        def path(name):
            return os.path.join(work, name)

        rng = np.random.default_rng(5)
        teacher = rng.standard_normal((16, 4))

        def rows(n):
            x = rng.standard_normal((n, 16)).astype(np.float32)
            y = np.eye(4, dtype=np.float32)[np.argmax(x @ teacher + rng.standard_normal((n, 4)), 1)]
            return x, y
        tx, ty = rows(64)
        ex, ey = rows(27)
        for name, v in [("tx", tx), ("ty", ty), ("ex", ex), ("ey", ey), ("ex_bad", ex[:, :15]),
                        ("ex_few", ex[:5]), ("ey_few", ey[:5])]:
            np.save(path(name + ".npy"), v)
        init = {"W1": rng.standard_normal((16, 32)) * 0.3, "B1": rng.standard_normal(32) * 0.1,
                "W2": rng.standard_normal((32, 4)) * 0.3, "B2": rng.standard_normal(4) * 0.1}
        inputs = []
        for n, v in init.items():
            np.save(path("init_%s.npy" % n), v.astype(np.float32))
            inputs += ["--input", "%s=%s" % (n, path("init_%s.npy" % n))]
        data = ["--data", "Img=" + path("tx.npy"), "--data", "Lab=" + path("ty.npy")]
        evald = ["--eval-data", "Img=%s,Lab=%s" % (path("ex.npy"), path("ey.npy"))]
        ex64, ey64 = ex.astype(np.float64), ey.astype(np.float64)

        with open(path("mlp.ein"), "w") as f:
            f.write(PROGRAM)
        exes = {}
        for rt in ["threads"] + (["mpi"] if a.mpi else []):
            exes[rt] = path("mlp_" + rt)
            p = run([a.einc, path("mlp.ein"), "-o", exes[rt], "--runtime=" + rt])
            t.result(p.returncode == 0, "compile (%s)" % rt, p.stderr[-800:])
        wrong = path("mlp_wrong")
        p = run([a.einc, path("mlp.ein"), "-o", wrong, "--load-pass=" + a.plugin,
                 "--passes=optimize,autodiff,propagate,regather,meshslice,negate-grad,cost"])
        t.result(p.returncode == 0, "compile with the negate-grad plugin", p.stderr[-800:])

        def launch(rt):
            return (mpi_launch(a.mpirun, 4) if rt == "mpi" else []) + [exes[rt]]

        # 1-3. evaluation on threads (and MPI): values, and training unchanged
        plain = path("ck_plain")
        p = run(launch("threads") + inputs + data + ["--steps", "6", "--save", plain,
                                                      "--metrics", path("plain.jsonl")])
        t.result(p.returncode == 0 and "eval_loss" not in p.stdout,
                 "6 steps without --eval-data: no eval_loss", p.stdout + p.stderr)
        third = path("ck_3")
        p = run(launch("threads") + inputs + data + ["--steps", "3", "--save", third])
        t.result(p.returncode == 0, "3 steps without --eval-data", p.stderr)
        for rt in exes:
            ck, met = path("ck_eval_" + rt), path("eval_%s.jsonl" % rt)
            p = run(launch(rt) + inputs + data + evald + ["--eval-every", "3", "--steps", "6",
                                                          "--save", ck, "--metrics", met])
            if p.returncode != 0:
                t.result(False, "6 steps with --eval-every 3 (%s)" % rt, p.stderr)
                continue
            shown = {int(m.group(1)): float(m.group(2)) for m in
                     re.finditer(r"^step (\d+)/6 .*eval_loss=(\S+)$", p.stdout, re.M)}
            with open(met) as f:
                lines = [json.loads(ln) for ln in f]
            logged = {ln["step"]: ln["eval_loss"] for ln in lines if "eval_loss" in ln}
            t.result(sorted(shown) == [3, 6] and sorted(logged) == [3, 6] and len(lines) == 6,
                     "%s: eval_loss in the step lines and metrics of steps 3 and 6 only" % rt,
                     p.stdout)
            if sorted(logged) != [3, 6]:
                continue
            for step, ckpt in [(6, ck), (3, third)]:
                want = eval_loss(ckpt, ex64, ey64)
                err = abs(logged[step] - want) / abs(want)
                t.result(err <= 1e-5 and abs(shown[step] - want) <= 1e-5 * abs(want),
                         "%s: step %d eval_loss %.7g, NumPy's forward pass on 3 held-out "
                         "batches %.7g (rel err %.2g)" % (rt, step, logged[step], want, err))
            if rt != "threads":
                continue
            files = sorted(os.listdir(plain))
            same = sorted(os.listdir(ck)) == files and set(SAVED) <= {f[:-4] for f in files}
            for name in files if same else []:
                with open(os.path.join(ck, name), "rb") as f1, \
                        open(os.path.join(plain, name), "rb") as f2:
                    same = same and f1.read() == f2.read()
            with open(path("plain.jsonl")) as f:
                plain_losses = [json.loads(ln)["loss"] for ln in f]
            t.result(same and plain_losses == [ln["loss"] for ln in lines],
                     "threads: every checkpoint file (params, AdamW moments, opt.step, steps.txt) "
                     "and the losses equal (bit for bit) to the run without evaluation",
                     " ".join(files))

        # 4. bad uses
        bad = [
            (["--eval-every", "2"], "--eval-every needs --eval-data"),
            (evald + ["--eval-every", "0"], "--eval-every expects a count from 1"),
            (evald + ["--eval-every", "x3"], "--eval-every expects a count from 1"),
            (["--eval-data", "Img=%s,Lab=%s" % (path("ex_bad.npy"), path("ey.npy"))],
             "--eval-data Img: %s has shape (27, 15), expected (N, 16)" % path("ex_bad.npy")),
            (["--eval-data", "Img=%s,Lab=%s" % (path("ex_few.npy"), path("ey_few.npy"))],
             "has 5 rows, fewer than the batch of 8"),
            (["--eval-data", "Img=" + path("ex.npy")],
             "--eval-data gives no file for input 'Lab', which --data feeds"),
            (evald + ["--eval-data", "W1=" + path("ex.npy")],
             "--eval-data W1: that input is not fed by --data"),
            (["--eval-data", "Img"], "--eval-data expects NAME=file.npy"),
            (evald + ["--metrics", path("ey.npy")], "--eval-data Lab=" + path("ey.npy")),
        ]
        for flags, msg in bad:
            p = run(launch("threads") + inputs + data + ["--steps", "2"] + flags)
            t.result(p.returncode == 1 and msg in p.stderr and "Sanitizer" not in p.stderr,
                     "refused: %s" % " ".join(flags).replace(work + "/", ""),
                     "exit %d: %s" % (p.returncode, p.stderr))

        # 5. --check's tolerance follows the steps; a wrong gradient fails
        p = run(launch("threads") + inputs + data + evald + ["--steps", "10", "--check"])
        tols = set(re.findall(r"^check \S+: max_rel_err=\S+ over 10 steps \(tol (\S+)\)|"
                              r"^check W1: max_rel_err=\S+ \(tol (\S+)\)", p.stdout, re.M))
        tol_ok = all(abs(float(x or y) - 1e-3) < 1e-12 for x, y in tols) and tols
        t.result(p.returncode == 0 and tol_ok,
                 "--check over 10 AdamW steps passes at 1e-4 x 10",
                 p.stdout + p.stderr)
        p = run([wrong] + inputs + data + ["--steps", "10", "--check"])
        t.result(p.returncode == 1 and "differs from the reference" in p.stderr,
                 "--check fails on a negated gradient in the sharded program",
                 p.stdout + p.stderr)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
