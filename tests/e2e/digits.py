#!/usr/bin/python3
"""digits.py - examples/digits_mlp.ein trains on scikit-learn's digits.

1. One training step from given params on the first batch, against a NumPy
   implementation of the same step (the MLP, the log-sum-exp cross-entropy,
   its gradients and torch.optim.AdamW's update): the loss and every param
   and AdamW moment after the step, to 1e-5 relative (f32).
2. 500 steps from --random-inputs 1 on shuffled batches under FSDP+TP on
   2x2 (threads, and 4 MPI ranks with --mpi), DP on 4 devices and one
   device: each reaches >= 95% accuracy on the 357 held-out images
   (examples/digits/accuracy.py), and the sharded loss curves (--metrics)
   agree with the unsharded one to 1e-3 relative at every step.
3. examples/digits/plot.py draws the three curves into a PNG.

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: digits.py --einc PATH --examples DIR [--mpi --mpirun PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402

STRATEGIES = [("FSDP+TP", []), ("DP", ["-D", "Z=4", "-D", "X=1", "-D", "Y=1"]),
              ("unsharded", ["-D", "X=1", "-D", "Y=1"])]
STEPS = 500
LR, B1, B2, EPS, WD = 0.01, 0.9, 0.999, 1e-8, 1e-4  # the file's adamw(...)


def numpy_step(p, x, y):
    """Loss and params, m, v after one AdamW step (t = 1) from p."""
    pre = x @ p["W1"] + p["B1"]
    hid = np.maximum(pre, 0)
    z = hid @ p["W2"] + p["B2"]
    mx = z.max(axis=1, keepdims=True)
    e = np.exp(z - mx)
    loss = np.mean(np.log(e.sum(axis=1)) + mx[:, 0] - (y * z).sum(axis=1))
    dz = (e / e.sum(axis=1, keepdims=True) - y) / len(x)
    dhid = (dz @ p["W2"].T) * (pre > 0)
    g = {"W2": hid.T @ dz, "B2": dz.sum(0), "W1": x.T @ dhid, "B1": dhid.sum(0)}
    out = {}
    for n, w in p.items():
        m = (1 - B1) * g[n]
        v = (1 - B2) * g[n] ** 2
        out[n] = w - LR * WD * w - LR * (m / (1 - B1)) / (np.sqrt(v / (1 - B2)) + EPS)
        out[n + ".m"], out[n + ".v"] = m, v
    return loss, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    ein = os.path.join(a.examples, "digits_mlp.ein")
    scripts = os.path.join(a.examples, "digits")
    results = []

    def check(ok, what):
        results.append(ok)
        print("%s %s" % ("ok  " if ok else "FAIL", what))

    def run(cmd, **kw):
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)

    with tempfile.TemporaryDirectory(prefix="einc-digits-") as work:
        p = run(["/usr/bin/python3", os.path.join(scripts, "prepare.py"), work])
        check(p.returncode == 0, "prepare.py: %s" % (p.stdout + p.stderr).strip())
        data = ["--data", "Img=%s/train_x.npy" % work, "--data", "Lab=%s/train_y.npy" % work]
        exes = {}
        for name, defines in STRATEGIES:
            for rt in ["threads"] + (["mpi"] if a.mpi and name == "FSDP+TP" else []):
                exe = os.path.join(work, "digits_%s_%s" % (name.replace("+", ""), rt))
                p = run([a.einc, ein, "-o", exe, "--runtime=" + rt, *defines])
                check(p.returncode == 0, "compile %s (%s) %s" % (name, rt, p.stderr.strip()[-500:]))
                exes[(name, rt)] = exe

        # 1. one step against NumPy
        rng = np.random.default_rng(2)
        init = {"W1": rng.standard_normal((64, 128)) * 0.2, "B1": rng.standard_normal(128) * 0.1,
                "W2": rng.standard_normal((128, 10)) * 0.2, "B2": rng.standard_normal(10) * 0.1}
        args = []
        for n, v in init.items():
            np.save(os.path.join(work, "init_%s.npy" % n), v.astype(np.float32))
            args += ["--input", "%s=%s/init_%s.npy" % (n, work, n)]
        x = np.load(os.path.join(work, "train_x.npy"))[:64].astype(np.float64)
        y = np.load(os.path.join(work, "train_y.npy"))[:64].astype(np.float64)
        f32 = {n: v.astype(np.float32).astype(np.float64) for n, v in init.items()}
        want_loss, want = numpy_step(f32, x, y)
        for (name, rt), exe in exes.items():
            ck = os.path.join(work, "step1_%s_%s" % (name.replace("+", ""), rt))
            cmd = (mpi_launch(a.mpirun, 4) if rt == "mpi" else []) + [exe, *args, *data,
                                                                        "--steps", "1", "--save", ck]
            p = run(cmd)
            if p.returncode != 0:
                check(False, "one step, %s (%s): %s" % (name, rt, p.stderr.strip()[-500:]))
                continue
            got_loss = float(p.stdout.split("loss", 1)[1].split()[0]) if "loss" in p.stdout else None
            errs = [abs(got_loss - want_loss) / abs(want_loss) if got_loss is not None else 1.0]
            for n, w in want.items():
                g = np.load(os.path.join(ck, n + ".npy"))
                errs.append(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30))
            check(max(errs) <= 1e-5, "one AdamW step, %s (%s): loss %.6g (NumPy %.6g), largest "
                  "relative error %.2g over the loss, params and moments"
                  % (name, rt, got_loss or 0, want_loss, max(errs)))

        # 2. 500 shuffled steps: accuracy and the same curve
        curves = {}
        for (name, rt), exe in exes.items():
            tag = "%s_%s" % (name.replace("+", ""), rt)
            metrics, ck = os.path.join(work, tag + ".jsonl"), os.path.join(work, "ck_" + tag)
            cmd = (mpi_launch(a.mpirun, 4) if rt == "mpi" else []) + [
                exe, "--random-inputs", "1", *data, "--seed", "1", "--steps", str(STEPS),
                "--log-every", str(STEPS), "--metrics", metrics, "--save", ck]
            p = run(cmd)
            if p.returncode != 0:
                check(False, "train %s (%s): %s" % (name, rt, p.stderr.strip()[-500:]))
                continue
            with open(metrics) as f:
                curves[(name, rt)] = np.array([json.loads(line)["loss"] for line in f])
            p = run(["/usr/bin/python3", os.path.join(scripts, "accuracy.py"), ck, work, "--min", "0.95"])
            check(p.returncode == 0, "%s (%s), %d steps: %s" % (name, rt, STEPS, p.stdout.strip()))
        ref = curves.get(("unsharded", "threads"))
        for key, c in curves.items():
            if key == ("unsharded", "threads") or ref is None:
                continue
            err = np.max(np.abs(c - ref) / np.abs(ref)) if len(c) == len(ref) else np.inf
            check(err <= 1e-3, "%s (%s): loss curve within %.2g of the unsharded one (%d steps, "
                  "%.3f -> %.4f)" % (key[0], key[1], err, len(c), c[0], c[-1]))

        # 3. the plot
        png = os.path.join(work, "curves.png")
        p = run(["/usr/bin/python3", os.path.join(scripts, "plot.py"), png] +
                ["%s=%s/%s_threads.jsonl" % (n, work, n.replace("+", "")) for n, _ in STRATEGIES])
        check(p.returncode == 0 and os.path.getsize(png) > 1000 if os.path.exists(png) else False,
              "plot.py wrote the three curves: %s" % (p.stdout + p.stderr).strip()[-300:])
    failed = results.count(False)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
