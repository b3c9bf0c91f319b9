#!/usr/bin/python3
"""train_schedule.py - learning-rate schedules and gradient clipping against NumPy.

The program is train.py's FFW block (einsum, gelu, einsum, mean squared
error) in f64, unsharded, FSDP and FSDP+TP on a 2x2 mesh (under FSDP every
gradient is sharded, so the global norm needs the sum of the devices'
partial sums).  Each optimizer line below trains 20 steps; NumPy runs the
same steps with an independent implementation of the schedule (optax's
warmup_cosine_decay_schedule with init 0; linear warmup to a constant) and
of torch.nn.utils.clip_grad_norm_ (the gradients of both params scaled by
min(1, C / (||g||_2 + 1e-6))), and the loss of step 20 and the params after
it must agree to 1e-9 relative.

A clip threshold that binds must change the result: the test also checks
that the reference without clipping differs from the clipped one by far
more than the tolerance, and that the clip bound at some step.

Checkpoints: 8 steps saved and resumed to step 20 must give the
uninterrupted run's params (the schedule's position is the saved step
count); a program whose lr or clip_norm differs must be refused by
--resume with a message naming that hyperparameter, and accepted with a
warning under --resume-mismatch=ok.

The last line is `N passed, N failed`; exit 1 on any failure.

With --mpi the clipping cases also run under FSDP+TP on 4 MPI ranks.

Usage: train_schedule.py --einc PATH [--mpi --mpirun PATH]
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402
from train import FFW, dgelu, gelu  # noqa: E402  train.py's program and NumPy forward pass

SHARDINGS = {
    "replicated": {"IN": "B, D", "WIN": "D, F", "WOUT": "F, D"},
    "FSDP": {"IN": "B_XY, D", "WIN": "D_XY, F", "WOUT": "F, D_XY"},
    "FSDP+TP": {"IN": "B_X, D", "WIN": "D_X, F_Y", "WOUT": "F_Y, D_X"},
}
STEPS = 20
ADAMW = dict(opt="adamw", lr=0.02, b1=0.9, b2=0.99, eps=1e-8, wd=0.1)
SGD = dict(opt="sgd", lr=0.05, mom=0.9, wd=0.01)
# (spelling, reference settings); clip=None: no clipping.
CASES = [
    ("adamw(lr=0.02, beta1=0.9, beta2=0.99, weight_decay=0.1, warmup_steps=5, decay=cosine, "
     "decay_steps=15, min_lr=0.002)", dict(ADAMW, warmup=5, cosine=True, n=15, min_lr=0.002)),
    ("adamw(lr=0.02, beta1=0.9, beta2=0.99, weight_decay=0.1, warmup_steps=5, decay=cosine, "
     "decay_steps=15, min_lr=0.002, clip_norm=0.05)",
     dict(ADAMW, warmup=5, cosine=True, n=15, min_lr=0.002, clip=0.05)),
    ("sgd(lr=0.05, momentum=0.9, weight_decay=0.01, warmup_steps=4, clip_norm=0.1)",
     dict(SGD, warmup=4, clip=0.1)),
    ("sgd(lr=0.05, momentum=0.9, decay=cosine, decay_steps=12)",
     dict(SGD, wd=0.0, cosine=True, n=12)),
]
def lr_at(s, c):
    """The lr of the update after `s` earlier ones (optax's count)."""
    warm = min(1.0, s / c["warmup"]) if c.get("warmup") else 1.0
    peak = c["lr"]
    if not c.get("cosine"):
        return warm * peak
    w, n, floor = c.get("warmup", 0), c["n"], c.get("min_lr", 0.0)
    p = min(1.0, max(0.0, (s - w) / (n - w)))
    return warm * (floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def reference(vals, c, steps, batch=None):
    """Loss of the last step, the params after it, whether the clip bound,
    and the steps skipped.  Step s (1-based) trains on batch(s), an (In,
    Tgt) pair, by default vals'.  With c["skip"] a step whose gradients
    hold NaN or Inf changes nothing, not even the step count t that bias
    correction and the schedule read (optax's apply_if_finite)."""
    w = {"Win": vals["Win"].copy(), "Wout": vals["Wout"].copy()}
    state = {n: [np.zeros_like(w[n]), np.zeros_like(w[n])] for n in w}
    loss, bound, skipped, t = None, False, [], 0
    for step in range(1, steps + 1):
        x, tgt = batch(step) if batch else (vals["In"], vals["Tgt"])
        tmp = x @ w["Win"]
        act = gelu(tmp)
        out = act @ w["Wout"]
        loss = np.mean((out - tgt) ** 2)
        d_out = 2 * (out - tgt) / out.size
        grads = {"Wout": act.T @ d_out, "Win": x.T @ ((d_out @ w["Wout"].T) * dgelu(tmp))}
        norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))
        if c.get("skip") and not math.isfinite(norm):
            skipped.append(step)
            continue
        t += 1
        if c.get("clip"):
            f = min(1.0, c["clip"] / (norm + 1e-6))
            bound |= f < 1
            grads = {n: g * f for n, g in grads.items()}
        lr = lr_at(t - 1, c)
        for n in w:
            g, p = grads[n], w[n]
            if c["opt"] == "sgd":
                g = g + c["wd"] * p
                mom = state[n][0]
                mom[:] = c["mom"] * mom + g
                w[n] = p - lr * mom
            else:
                m, v = state[n]
                m[:] = c["b1"] * m + (1 - c["b1"]) * g
                v[:] = c["b2"] * v + (1 - c["b2"]) * g * g
                mhat, vhat = m / (1 - c["b1"]**t), v / (1 - c["b2"]**t)
                w[n] = p - lr * c["wd"] * p - lr * mhat / (np.sqrt(vhat) + c["eps"])
    return loss, w, bound, skipped


def build(einc, work, opt, sharding, name, runtime="threads"):
    """Compiles the FFW program with optimizer `opt` under SHARDINGS[sharding]
    for `runtime` into work/name; returns (executable, einc's error or None)."""
    ein = os.path.join(work, name + ".ein")
    with open(ein, "w") as f:
        f.write(FFW.format(OPT=opt, **SHARDINGS[sharding]))
    exe = os.path.join(work, name)
    p = subprocess.run([einc, ein, "-o", exe, "--runtime=" + runtime], capture_output=True,
                       text=True)
    return exe, ("einc: " + p.stderr.strip()[-2000:] if p.returncode else None)


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def check_resume(einc, work, data, params, want_w):
    """The checkpoint tests on CASES[1] (unsharded), given the --input flags
    of the data and of the params; returns a list of problems."""
    problems = []
    spelling = CASES[1][0]

    def build_one(text, name):
        exe, err = build(einc, work, text, "replicated", name)
        if err:
            problems.append("%s: %s" % (name, err))
        return exe

    def run(exe, *args):
        # A resumed run takes the params from the checkpoint, only the data from files.
        ins = data if "--resume" in args else data + params
        return subprocess.run([exe] + ins + list(args), capture_output=True, text=True,
                              timeout=300)

    same = build_one(spelling, "same")
    ck = os.path.join(work, "ck")
    p = run(same, "--steps", "8", "--save", ck)
    q = run(same, "--steps", str(STEPS), "--resume", ck, "--output",
            "Win=" + os.path.join(work, "res_Win.npy"))
    if p.returncode or q.returncode:
        return problems + ["save and resume: " + (p.stderr + q.stderr).strip()[-2000:]]
    err = rel_err(np.load(os.path.join(work, "res_Win.npy")), want_w["Win"])
    if not err <= 1e-9:
        problems.append("8 steps saved, resumed to %d: Win relative error %.3g" % (STEPS, err))
    for name, changed in (("lr", spelling.replace("lr=0.02", "lr=0.03")),
                          ("clip_norm", spelling.replace("clip_norm=0.05", "clip_norm=0.5"))):
        other = build_one(changed, "other_" + name)
        p = run(other, "--steps", str(STEPS), "--resume", ck)
        if p.returncode == 0 or "hyperparameter %s of 'Win'" % name not in p.stderr or \
                "--resume-mismatch=ok" not in p.stderr:
            problems.append("other %s: --resume not refused as it should be (exit %d): %s" %
                            (name, p.returncode, p.stderr.strip()[-500:]))
        p = run(other, "--steps", str(STEPS), "--resume", ck, "--resume-mismatch=ok")
        if p.returncode != 0 or "warning:" not in p.stderr or name not in p.stderr:
            problems.append("other %s with --resume-mismatch=ok: exit %d: %s" %
                            (name, p.returncode, p.stderr.strip()[-500:]))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    passed = failed = 0
    rng = np.random.default_rng(7)
    vals = {"In": rng.standard_normal((8, 4)), "Tgt": rng.standard_normal((8, 4)),
            "Win": 0.5 * rng.standard_normal((4, 8)), "Wout": 0.5 * rng.standard_normal((8, 4))}

    def fail(title, why):
        nonlocal failed
        print("FAIL %s: %s" % (title, why))
        failed += 1

    with tempfile.TemporaryDirectory(prefix="einc-sched-") as work:
        def path(name):
            return os.path.join(work, name + ".npy")
        for k, v in vals.items():
            np.save(path(k), v)
        for spelling, c in CASES:
            want_l, want_w, bound, _ = reference(vals, c, STEPS)
            if c.get("clip"):
                # The test can only fail on clipping if the clip changes the result.
                free_l, free_w, _, _ = reference(vals, dict(c, clip=None), STEPS)
                diff = max(rel_err(free_w[n], want_w[n]) for n in want_w)
                if not bound or diff < 1e-4:
                    fail(spelling, "clip_norm does not bind (bound %s, change %.3g)" %
                         (bound, diff))
                    continue
            # Under MPI the clipping cases' sum of squares crosses ranks.
            runs = [(s, "threads") for s in SHARDINGS] + \
                [("FSDP+TP", "mpi")] * bool(a.mpi and c.get("clip"))
            for sname, rt in runs:
                title = "%s %s (%s)" % (spelling, sname, rt)
                exe, err = build(a.einc, work, spelling, sname, "train_" + rt, rt)
                if err:
                    fail(title, err)
                    continue
                data, params = ([x for k in names for x in ("--input", "%s=%s" % (k, path(k)))]
                                for names in (("In", "Tgt"), ("Win", "Wout")))
                run = (mpi_launch(a.mpirun, 4) if rt == "mpi" else []) + \
                    [exe, "--steps", str(STEPS)] + data + params
                for o in ("L", "Win", "Wout"):
                    run += ["--output", "%s=%s" % (o, path("out_" + o))]
                p = subprocess.run(run, capture_output=True, text=True, timeout=300)
                if p.returncode != 0:
                    fail(title, "run: " + p.stderr.strip()[-2000:])
                    continue
                problems = []
                got_l = float(np.load(path("out_L")))
                if not abs(got_l - want_l) <= 1e-9 * abs(want_l):
                    problems.append("L = %.15g, NumPy %.15g" % (got_l, want_l))
                for n, want in want_w.items():
                    err = rel_err(np.load(path("out_" + n)), want)
                    if not err <= 1e-9:
                        problems.append("%s: relative error %.3g" % (n, err))
                if spelling == CASES[1][0] and sname == "replicated" and rt == "threads":
                    problems += check_resume(a.einc, work, data, params, want_w)
                if problems:
                    fail(title, "; ".join(problems))
                else:
                    print("ok   %s: loss %.6f after %d steps as NumPy" % (title, want_l, STEPS))
                    passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
