#!/usr/bin/python3
"""train.py - training steps (`loss`, `optimize ... with sgd/adamw`) against NumPy.

The program is seed 000's FFW block (einsum, gelu, einsum) with a mean
squared error, in f64, under no sharding, DP, FSDP, TP and FSDP+TP on a
2x2 mesh.  Each call of the executable's run is one training step, and
`--steps N` trains N of them on the same batch; `--output` writes the loss
of step N and the params and optimizer state after it.  NumPy runs the
same steps with torch.optim.SGD's and torch.optim.AdamW's update rules
(SGD: momentum and weight decay; AdamW: bias-corrected moments and
decoupled weight decay), and both must agree to 1e-9 relative.

Optimizer state (`Win.m`, `Win.v`, `opt.step`, `Win.mom`) starts at zero
in the runtime; for SGD the test also gives it as zero .npy files by name,
which must change nothing.  FSDP also runs compiled for a profile with 256 bytes
of memory per device, where the regather pass gathers Wout again before
the backward pass instead of keeping the forward's copy.

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: train.py --einc PATH [--mpi --mpirun PATH]
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

FFW = """\
mesh X = 2, Y = 2
dim B = 8, D = 4, F = 8
input In[{IN}] : f64
input Tgt[{IN}] : f64
param Win[{WIN}] : f64
param Wout[{WOUT}] : f64
Tmp[B, F] = In[B, D] * Win[D, F]
Act[B, F] = gelu(Tmp[B, F])
Out[B, D] = Act[B, F] * Wout[F, D]
L[] = mean((Out[B, D] - Tgt[B, D]) * (Out[B, D] - Tgt[B, D]))
loss L
optimize Win, Wout with {OPT}
"""
# Compiled with TINY_HBM as --hw: nothing fits, so weights are gathered again.
REGATHER = "FSDP, gathered again"
SHARDINGS = {
    "replicated": {"IN": "B, D", "WIN": "D, F", "WOUT": "F, D"},
    "DP": {"IN": "B_XY, D", "WIN": "D, F", "WOUT": "F, D"},
    "FSDP": {"IN": "B_XY, D", "WIN": "D_XY, F", "WOUT": "F, D_XY"},
    REGATHER: {"IN": "B_XY, D", "WIN": "D_XY, F", "WOUT": "F, D_XY"},
    "TP": {"IN": "B, D", "WIN": "D, F_XY", "WOUT": "F_XY, D"},
    "FSDP+TP": {"IN": "B_X, D", "WIN": "D_X, F_Y", "WOUT": "F_Y, D_X"},
}
OPTIMIZERS = {
    "sgd": ("sgd(lr=0.05, momentum=0.9, weight_decay=0.01)", ["mom"]),
    "adamw": ("adamw(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1)", ["m", "v"]),
}
STEPS = 4
K = np.sqrt(2 / np.pi)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(K * (x + 0.044715 * x**3)))


def dgelu(x):
    t = np.tanh(K * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K * (1 + 3 * 0.044715 * x * x)


def reference(vals, opt, steps):
    """Losses of steps 1..steps and the params after each step, in NumPy."""
    w = {"Win": vals["Win"].copy(), "Wout": vals["Wout"].copy()}
    state = {n: [np.zeros_like(w[n]), np.zeros_like(w[n])] for n in w}
    losses, history = [], [dict((n, v.copy()) for n, v in w.items())]
    moments = []
    for t in range(1, steps + 1):
        x, tgt = vals["In"], vals["Tgt"]
        tmp = x @ w["Win"]
        act = gelu(tmp)
        out = act @ w["Wout"]
        losses.append(np.mean((out - tgt) ** 2))
        d_out = 2 * (out - tgt) / out.size
        grads = {"Wout": act.T @ d_out, "Win": x.T @ ((d_out @ w["Wout"].T) * dgelu(tmp))}
        for n in w:
            g, p = grads[n], w[n]
            if opt == "sgd":
                g = g + 0.01 * p
                mom = state[n][0]
                mom[:] = 0.9 * mom + g
                w[n] = p - 0.05 * mom
            else:
                m, v = state[n]
                m[:] = 0.8 * m + 0.2 * g
                v[:] = 0.99 * v + 0.01 * g * g
                mhat, vhat = m / (1 - 0.8**t), v / (1 - 0.99**t)
                w[n] = p - 0.01 * 0.1 * p - 0.01 * mhat / (np.sqrt(vhat) + 1e-6)
        history.append(dict((n, v.copy()) for n, v in w.items()))
        moments.append({n: [s.copy() for s in state[n]] for n in w})
    return losses, history, moments


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    passed = failed = 0
    rng = np.random.default_rng(5)
    vals = {"In": rng.standard_normal((8, 4)), "Tgt": rng.standard_normal((8, 4)),
            "Win": 0.5 * rng.standard_normal((4, 8)), "Wout": 0.5 * rng.standard_normal((8, 4))}
    with tempfile.TemporaryDirectory(prefix="einc-train-") as work:
        def path(name):
            return os.path.join(work, name + ".npy")
        tiny = os.path.join(work, "tiny.json")
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hw",
                               "tpu-v5e.json")) as f:
            prof = json.load(f)
        prof["name"], prof["hbm_bytes"] = "tiny", 256.0
        with open(tiny, "w") as f:
            json.dump(prof, f)
        for k, v in vals.items():
            np.save(path(k), v)
        for opt, (spelling, suffixes) in OPTIMIZERS.items():
            losses, history, moments = reference(vals, opt, STEPS)
            zeros = {"%s.%s" % (w, s): np.zeros_like(vals[w]) for w in ("Win", "Wout")
                     for s in suffixes} if opt == "sgd" else {}
            for k, v in zeros.items():
                np.save(path(k), v)
            for sname, subs in SHARDINGS.items():
                for rt in ["threads"] + (["mpi"] if a.mpi and sname == "FSDP+TP" else []):
                    title = "%s %s (%s)" % (opt, sname, rt)
                    ein = os.path.join(work, "train.ein")
                    with open(ein, "w") as f:
                        f.write(FFW.format(OPT=spelling, **subs))
                    exe = os.path.join(work, "train_" + rt)
                    hw = ["--hw", tiny] if sname == REGATHER else []
                    p = subprocess.run([a.einc, ein, "-o", exe, "--runtime=" + rt] + hw,
                                       capture_output=True, text=True)
                    if p.returncode != 0:
                        print("FAIL %s: einc: %s" % (title, p.stderr.strip()[-2000:]))
                        failed += 1
                        continue
                    if hw:
                        ir = subprocess.run([a.einc, ein, "--dump-ir"] + hw, capture_output=True,
                                            text=True).stdout
                        if "gathered again" not in ir:
                            print("FAIL %s: no weight is gathered again:\n%s" % (title, ir))
                            failed += 1
                            continue
                    run = (mpi_launch(a.mpirun, 4) if rt == "mpi" else []) + [exe]
                    for k in list(vals) + list(zeros):
                        run += ["--input", "%s=%s" % (k, path(k))]
                    first = "Win." + suffixes[0]
                    for o in ("L", "Win", "Wout", first):
                        run += ["--output", "%s=%s" % (o, path("out_" + o))]
                    problems = []
                    for steps in (1, STEPS):
                        p = subprocess.run(run + ["--steps", str(steps)], capture_output=True,
                                           text=True, timeout=300)
                        if p.returncode != 0:
                            problems.append("run: " + p.stderr.strip()[-2000:])
                            break
                        got_l = float(np.load(path("out_L")))
                        want_l = losses[steps - 1]
                        if not abs(got_l - want_l) <= 1e-9 * abs(want_l):
                            problems.append("step %d: L = %.15g, NumPy %.15g" % (steps, got_l, want_l))
                        wants = dict(history[steps])
                        wants[first] = moments[steps - 1]["Win"][0]
                        for w, want in wants.items():
                            got = np.load(path("out_" + w))
                            err = np.max(np.abs(got - want)) / np.max(np.abs(want))
                            if got.shape != want.shape or not err <= 1e-9:
                                problems.append("%s after %d steps: relative error %.3g" %
                                                (w, steps, err))
                    if problems:
                        print("FAIL %s: %s" % (title, "; ".join(problems)))
                        failed += 1
                    else:
                        print("ok   %s: %d steps, loss %.6f -> %.6f as NumPy" %
                              (title, STEPS, losses[0], losses[-1]))
                        passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
