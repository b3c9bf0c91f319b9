#!/usr/bin/python3
"""pipeline.py - pipelined training (a `repeat` block whose stacked params
shard the layer dim over a mesh axis Z, docs/pipeline.md) against NumPy.

1. A residual GELU-MLP stack (4 layers) in f64, trained 3 steps with SGD
   (momentum, weight decay) and with AdamW, compiled with
   `--microbatches=M --schedule=gpipe|1f1b|zb-h1|zb-h2`.  NumPy runs the same steps on
   the *whole* batch (no microbatches): accumulating the microbatches'
   gradients must give the plain full-batch step.  The loss of every step
   (`--metrics`, full precision) and every param after step 3 must agree to
   1e-9 relative.  Meshes: Z=2 x X=2 with TP over X inside each stage
   (F_X), Z=4 (one axis, one layer per stage), and Z=2 x X=2 with the
   batch on X (DP inside each stage); M in {1, 2, 4, 8} (zb-h2: 4 and 8,
   where its longer warm-up differs from ZB-H1's).  zb-h1 and zb-h2
   (the backward split into a dL/dx loop and a dL/dW loop, run as items B
   and W) must also give 1f1b's losses and params with the same optimizer
   to 1e-12 relative: the same ops on the same values, in another order.
   `--schedule=zero-bubble` (Z=2 x X=2, TP, AdamW, M = 4) gives zb-h2's
   losses and params bitwise on the default profile's HBM, and zb-h1's
   on a copy of it whose HBM lies between the two schedules' stage
   memory.
2. A small LLaMA-style decoder (examples/llama2_13b_train.ein with its
   stacked params' layer dim on Z and its heads and MLP on Y, mesh Z=2,
   Y=2, small dims by -D): embedding lookup on the first stage, RMSNorm,
   causal attention with rotary embeddings, SwiGLU, final norm, LM head and
   softmax cross-entropy on the last, under `--check` against the
   unsharded, unpipelined reference built into the executable, with the
   tolerance of the example's `# check-run:` line; gpipe, 1f1b and
   zb-h1, M = 2 and 4, and zb-h2, M = 4, on threads.
3. Pipelined inference: examples/llama2_13b.ein's forward with its layers
   on Z (mesh Z=2, Y=2), M = 1, 2, 4, its logits under `--check`.
4. A program with no param before the block (the backward's gradient has
   no reader on the first stage, which the others still send it), under
   `--check`, with 1f1b and zb-h1; and a forward whose output is
   the block's carried value itself (the last hidden state: an output the
   first stage still sends on), under `--check`, also gathered over the
   axis that splits the batch in the input (each microbatch's rows placed
   per device block).
5. The split backward in `--print-after=pipeline` for zb-h1 and
   zb-h2: two reverse loops over L, the first computing no weight gradient
   and the second every one (dWin, dWout stacked per layer), the values
   crossing from the first to the second stacked per layer, the
   embedding's weight gradient dWf after the second (in the W item), and W items
   in the schedule table, whose first stage runs Z = 2 forwards and waits
   a slot for B0 (zb-h2: 2Z - 1 = 3 forwards, no wait); gpipe keeps one
   backward loop.
6. The stacked params' gradient collectives once per step
   (passes/pipeline_grad.c): the MLP with the batch on X and larger dims
   (B = 512, D = E = 32, F = 64, where the planner reduces each layer's
   weight gradient over X inside the backward loop), its stacked params
   replicated over X (DP: AllReduce) or split over X (FSDP, Win[L_Z, D_X,
   F]: ReduceScatter), trained 3 steps under gpipe, 1f1b, zb-h1,
   zb-h2 and interleaved (v = 2) with M = 4 (1f1b also M = 1 and 8),
   equals NumPy's whole-batch
   steps to 1e-9 relative; `--dump-ir` has no collective of dWin or dWout
   inside a backward loop and one AllReduce (DP) or ReduceScatter (FSDP)
   of each stacked gradient after the loops; `--profile` counts that
   collective once per step on each stage, as the update's ops, where
   the layer's weight-gradient einsum is counted |L| M times per step.
   With bf16 params (DP, 1f1b, M = 8) the collective is deferred too (the
   accumulator keeps the gradient's dtype, as the reduced gradients'
   did) and the run equals NumPy's f64 steps to 2e-2 relative (bf16's
   rounding; measured 6.4e-3, the same as with the collective per
   microbatch).  FSDP with `--grad-sync=microbatch` (1f1b and
   zb-h1, M = 4) keeps one ReduceScatter of each stacked gradient
   inside the backward loop, its reason saying so, none after, equals
   NumPy to 1e-9, and `--profile` counts it as often as the layer's
   einsum.  With --mpi, DP and FSDP under 1f1b (M = 4), FSDP per
   microbatch too, also on 4 MPI ranks.
7. `--stats`: with M = 8, 1f1b holds at most Z microbatches' activations
   on stage 0 where gpipe holds all 8, so the peak bytes of device 0 (the
   first stage) must be lower under 1f1b; and zb-h2 holds up to 2Z - 1
   where zb-h1 holds Z, so device 0's peak must be higher under
   zb-h2.

With --mpi, five of the MLP's configurations (zb-h2 with M = 4 on Z = 4
among them) and two of the decoder's also run on 4 MPI ranks
(stage-to-stage transfers as MPI messages); --mpi-only runs only those.
`--quick` (the sanitizer build) runs the MLP's schedules for three (mesh,
M) pairs and two of the decoder's configurations on threads.  The last line is `N passed, N failed`; exit 1 on any
failure.

Usage: pipeline.py --einc PATH --example llama2_13b_train.ein [--quick]
                   [--mpi [--mpi-only] --mpirun PATH]
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
from e2e_common import Tally, mpi_launch, run_merged  # noqa: E402
from train import dgelu, gelu  # noqa: E402  (einc's tanh GELU and its derivative)

MLP = """\
mesh {MESH}
dim B = 16, E = 8, D = 8, F = 16, L = 4
input In[{IN}] : f64
input Tgt[{IN}] : f64
param Win[L_Z, D, F{FX}] : f64
param Wout[L_Z, F{FX}, D] : f64
param Wf[D, E] : f64
H[B, E] = In[B, D] * Wf[D, E]
repeat L {{
  T[B, F] = H[B, D] * Win[D, F]
  A[B, F] = gelu(T[B, F])
  H[B, D] = H[B, D] + A[B, F] * Wout[F, D] * 0.5
}}
Er[B, D] = H[B, D] - Tgt[B, D]
Lo[] = mean(Er[B, D] * Er[B, D])
loss Lo
optimize Win, Wout, Wf with {OPT}
"""
# name: (mesh line, In's and Tgt's sharding, F's axis in the stacked params)
MESHES = {
    "Z=2 x X=2, TP on X": ("Z = 2, X = 2", "B, D", "_X"),
    "Z=4": ("Z = 4", "B, D", ""),
    "Z=2 x X=2, batch on X": ("Z = 2, X = 2", "B_X, D", ""),
}
NDEV = 4  # every mesh above
OPTIMIZERS = {
    "sgd": "sgd(lr=0.05, momentum=0.9, weight_decay=0.01)",
    "adamw": "adamw(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1)",
}
STEPS = 3
B, D, F, L = 16, 8, 16, 4


def mlp_loss_grads(w, x, tgt):
    """Loss and gradients of the MLP stack on the whole batch, in NumPy:
    a plain loop over the layers and back (no microbatches)."""
    h = x @ w["Wf"]
    saved = []
    layers = len(w["Win"])  # L, or another stack's depth (pipeline_interleaved.py)
    for l in range(layers):
        t = h @ w["Win"][l]
        a = gelu(t)
        saved.append((h, t, a))
        h = h + 0.5 * (a @ w["Wout"][l])
    er = h - tgt
    loss = np.mean(er * er)
    dh = 2 * er / er.size
    g = {"Win": np.zeros_like(w["Win"]), "Wout": np.zeros_like(w["Wout"])}
    for l in reversed(range(layers)):
        hin, t, a = saved[l]
        g["Wout"][l] = 0.5 * a.T @ dh
        dt = 0.5 * (dh @ w["Wout"][l].T) * dgelu(t)
        g["Win"][l] = hin.T @ dt
        dh = dh + dt @ w["Win"][l].T
    g["Wf"] = x.T @ dh
    return loss, g


def mlp_reference(vals, opt):
    """The losses of steps 1..STEPS and the params after the last, with
    torch.optim.SGD's (momentum, coupled weight decay) and
    torch.optim.AdamW's (bias-corrected, decoupled weight decay) updates,
    the rules tests/e2e/train.py checks einc's optimizers against."""
    w = {n: vals[n].copy() for n in ("Win", "Wout", "Wf")}
    s1 = {n: np.zeros_like(v) for n, v in w.items()}
    s2 = {n: np.zeros_like(v) for n, v in w.items()}
    losses = []
    for t in range(1, STEPS + 1):
        loss, grads = mlp_loss_grads(w, vals["In"], vals["Tgt"])
        losses.append(loss)
        for n, g in grads.items():
            if opt == "sgd":
                s1[n] = 0.9 * s1[n] + g + 0.01 * w[n]
                w[n] = w[n] - 0.05 * s1[n]
            else:
                s1[n] = 0.8 * s1[n] + 0.2 * g
                s2[n] = 0.99 * s2[n] + 0.01 * g * g
                mhat, vhat = s1[n] / (1 - 0.8**t), s2[n] / (1 - 0.99**t)
                w[n] = w[n] * (1 - 0.01 * 0.1) - 0.01 * mhat / (np.sqrt(vhat) + 1e-6)
    return losses, w


def compile_prog(a, src, exe, flags, runtime="threads"):
    """einc's exit code and output for `src` compiled to `exe`."""
    return run_merged([a.einc, src, "-o", exe, "--runtime=" + runtime] + flags)


def mlp_configs(quick):
    """(mesh, optimizer, schedule, M) to run: every M and schedule for every
    mesh, the optimizers alternating so each mesh and schedule sees both;
    --quick a handful."""
    out = []
    for mesh in MESHES:
        for sched in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
            for i, m in enumerate((1, 2, 4, 8)):
                # zb-h1 and zb-h2 with 1f1b's optimizer, to compare
                opt = ("sgd", "adamw")[(i + (sched != "gpipe")) % 2]
                if sched != "zb-h2" or m >= 4:
                    out.append((mesh, opt, sched, m))
    if quick:
        out = [c for c in out if (c[0], c[3]) in (("Z=2 x X=2, TP on X", 4), ("Z=4", 2),
                                                   ("Z=2 x X=2, batch on X", 8))]
    return out


def selected(a, threads, mpi):
    """The (runtime, configuration) pairs to run: `threads` unless
    --mpi-only, and `mpi` with --mpi."""
    return ([("threads", c) for c in threads] if not a.mpi_only else []) + \
        ([("mpi", c) for c in mpi] if a.mpi else [])


def run_mlp(a, work, tally):
    rng = np.random.default_rng(25)
    vals = {"In": rng.standard_normal((B, D)), "Tgt": rng.standard_normal((B, D)),
            "Win": rng.standard_normal((L, D, F)) / np.sqrt(D),
            "Wout": rng.standard_normal((L, F, D)) / np.sqrt(F),
            "Wf": rng.standard_normal((D, D)) / np.sqrt(D)}
    for k, v in vals.items():
        np.save(os.path.join(work, k + ".npy"), v)
    refs = {opt: mlp_reference(vals, opt) for opt in OPTIMIZERS}
    mpi = [("Z=2 x X=2, TP on X", "adamw", "1f1b", 4), ("Z=4", "sgd", "gpipe", 2),
           ("Z=2 x X=2, TP on X", "adamw", "zb-h1", 4), ("Z=4", "adamw", "zb-h1", 8),
           ("Z=4", "sgd", "zb-h2", 4)]
    one_f_one_b = {}  # (runtime, mesh, optimizer, M): 1f1b's losses and params
    split = {}  # (runtime, mesh, optimizer, M, schedule): zb-h1's and zb-h2's
    for rt, (mesh, opt, sched, m) in selected(a, mlp_configs(a.quick), mpi):
        title = "mlp %s, %s, %s, M=%d (%s)" % (mesh, opt, sched, m, rt)
        mesh_line, ins, fx = MESHES[mesh]
        src = os.path.join(work, "mlp.ein")
        with open(src, "w") as f:
            f.write(MLP.format(MESH=mesh_line, IN=ins, FX=fx, OPT=OPTIMIZERS[opt]))
        failed, out, got_losses, got_w = train(a, rt, src, ["--microbatches=%d" % m, "--schedule=" + sched],
                                               work, vals, "")
        if failed:
            tally.result(False, title + ": " + failed, out)
            continue
        want_losses, want_w = refs[opt]
        problems = against_numpy(refs[opt], got_losses, got_w)
        key, also = (rt, mesh, opt, m), ""
        if sched == "1f1b":
            one_f_one_b[key] = (got_losses, got_w)
        elif sched in ("zb-h1", "zb-h2") and key in one_f_one_b:
            problems += against_1f1b(one_f_one_b[key], got_losses, got_w)
            also = " and as 1f1b"
        if sched in ("zb-h1", "zb-h2"):
            split[key + (sched,)] = (got_losses, got_w)
        tally.result(not problems, "%s: %d steps, loss %.6f -> %.6f as NumPy%s" %
                     (title, STEPS, want_losses[0], want_losses[-1], also), "\n".join(problems))
    if not a.mpi_only:
        run_alias(a, work, tally, vals, split)


def pipe_totals(a, src, flags):
    """totals.pipeline of `src` compiled with `flags`, or {}."""
    p = subprocess.run([a.einc, src, "--dump-ir=json"] + flags, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return json.loads(p.stdout)["totals"]["pipeline"] if p.returncode == 0 else {}


def run_alias(a, work, tally, vals, split):
    """--schedule=zero-bubble compiles zb-h2 where its stages fit the HBM
    (the default profile's, tpu-v5e) and zb-h1 under an HBM between the
    two (a copy of hw/tpu-v5e.json): its losses and params after STEPS
    steps are bitwise those of the schedule it resolved to (the choice
    itself: tests/cost/test_pipe_zb_auto.py)."""
    mesh, opt, m = "Z=2 x X=2, TP on X", "adamw", 4
    mesh_line, ins, fx = MESHES[mesh]
    src = os.path.join(work, "mlp.ein")
    with open(src, "w") as f:
        f.write(MLP.format(MESH=mesh_line, IN=ins, FX=fx, OPT=OPTIMIZERS[opt]))
    mflag = "--microbatches=%d" % m
    mem = {s: pipe_totals(a, src, [mflag, "--schedule=" + s]).get("stage_memory") for s in ("zb-h1", "zb-h2")}
    if mem["zb-h1"] is None or mem["zb-h2"] is None or not mem["zb-h1"] < mem["zb-h2"]:
        tally.result(False, "mlp %s, M=%d: zb-h1's stage needs less than zb-h2's: %s" % (mesh, m, mem), "")
        return
    hw = json.load(open(os.path.join(os.path.dirname(a.example), "..", "hw", "tpu-v5e.json")))
    hw["hbm_bytes"] = (mem["zb-h1"] + mem["zb-h2"]) / 2
    small = os.path.join(work, "v5e_between.json")
    with open(small, "w") as f:
        json.dump(hw, f)
    for want, hwflags in (("zb-h2", []), ("zb-h1", ["--hw", small])):
        title = "mlp %s, %s, zero-bubble, M=%d%s (threads)" % (mesh, opt, m,
                                                               " on an HBM between" if hwflags else "")
        ref = split.get(("threads", mesh, opt, m, want)) if not hwflags else None
        if ref is None:
            failed, out, *ref = train(a, "threads", src, [mflag, "--schedule=" + want] + hwflags, work, vals, "")
            if failed:
                tally.result(False, "%s: %s compiled as %s" % (title, want, failed), out)
                continue
        got = pipe_totals(a, src, [mflag, "--schedule=zero-bubble"] + hwflags).get("schedule")
        tally.result(got == want, "%s: compiles %s (%s)" % (title, want, got), "")
        failed, out, losses, w = train(a, "threads", src, [mflag, "--schedule=zero-bubble"] + hwflags, work,
                                       vals, "")
        if failed:
            tally.result(False, title + ": " + failed, out)
            continue
        same = losses == ref[0] and all(np.array_equal(w[n], ref[1][n]) for n in ref[1])
        tally.result(same, "%s: losses and params bitwise %s's" % (title, want),
                     "losses %s, %s %s" % (losses, want, ref[0]))


def train(a, rt, src, flags, work, vals, prefix):
    """Compiles the MLP `src` with `flags` for runtime `rt` into
    work/<prefix>mlp_<rt> and runs it STEPS steps (on 4 MPI ranks for mpi)
    from `vals`, saved as work/<prefix><name>.npy: what failed ("einc",
    "run" or None), the output, the losses (--metrics) and the params
    after the last step."""
    exe = os.path.join(work, prefix + "mlp_" + rt)
    rc, out = compile_prog(a, src, exe, flags, rt)
    if rc != 0:
        return "einc", out, None, None
    metrics = os.path.join(work, prefix + "metrics.jsonl")
    run = (mpi_launch(a.mpirun, NDEV) if rt == "mpi" else []) + [
        exe, "--steps", str(STEPS), "--log-every", "1", "--metrics", metrics]
    for k in vals:
        run += ["--input", "%s=%s" % (k, os.path.join(work, prefix + k + ".npy"))]
    names = ("Win", "Wout", "Wf")
    for n in names:
        run += ["--output", "%s=%s" % (n, os.path.join(work, prefix + "out_" + n + ".npy"))]
    rc, out = run_merged(run)
    if rc != 0:
        return "run", out, None, None
    with open(metrics) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    return None, out, losses, {n: np.load(os.path.join(work, prefix + "out_" + n + ".npy")) for n in names}


def against_numpy(ref, losses, params, tol=1e-9):
    """What differs beyond `tol` relative between a run's losses and params
    and NumPy's, `ref` (mlp_reference's)."""
    want_losses, want_w = ref
    problems = []
    if len(losses) != STEPS:
        problems.append("%d losses in --metrics, not %d" % (len(losses), STEPS))
    for i, (g, w) in enumerate(zip(losses, want_losses)):
        if g is None or not abs(g - w) <= tol * abs(w):
            problems.append("step %d: loss %r, NumPy %.17g" % (i + 1, g, w))
    for n, want in want_w.items():
        got = params[n]
        err = (np.max(np.abs(got - want)) / np.max(np.abs(want))
               if got.shape == want.shape else float("inf"))
        if not err <= tol:
            problems.append("%s after %d steps: relative error %.3g" % (n, STEPS, err))
    return problems


def against_1f1b(ref, got_losses, got_w):
    """What differs (beyond 1e-12 relative) between zb-h1's (or
    zb-h2's) losses and params and 1f1b's, `ref`."""
    problems = []
    for i, (g, w) in enumerate(zip(got_losses, ref[0])):
        if g is None or w is None or not abs(g - w) <= 1e-12 * abs(w):
            problems.append("step %d: loss %r, 1f1b %r" % (i + 1, g, w))
    for n, want in ref[1].items():
        got = got_w[n]
        err = (np.max(np.abs(got - want)) / np.max(np.abs(want))
               if got.shape == want.shape else float("inf"))
        if not err <= 1e-12:
            problems.append("%s: relative difference %.3g from 1f1b" % (n, err))
    return problems


def llama_source(a, work, example=None):
    """The training example (or `example`) with its layers pipelined over Z
    and its heads and MLP on Y, and the -D flags and run flags of its check
    lines."""
    with open(example or a.example) as f:
        text = f.read()
    dims = re.search(r"^# check-with:(.*)$", text, re.M).group(1).split()
    run = re.search(r"^# check-run:(.*)$", text, re.M)
    check_run = run.group(1).split() if run else []
    # The batch of 4 splits into 2 and 4 microbatches, and 2 layers over
    # the 2 stages.
    dims = [{"B=2": "B=4", "L=3": "L=2"}.get(d, d) for d in dims]
    text = text.replace("mesh X = 2, Y = 2", "mesh Z = 2, Y = 2").replace("B_X", "B")
    text = text.replace("[L, ", "[L_Z, ")
    src = os.path.join(work, os.path.basename(example or a.example))
    with open(src, "w") as f:
        f.write(text)
    return src, dims, check_run


def checked(a, tally, title, src, exe, flags, rt, check_run, pattern):
    """Compiles `src` with `flags` for runtime `rt`, runs it under --check
    (4 MPI ranks for mpi) and records whether it passed; `pattern` finds
    the check line the title quotes.  The run exits 1 on a mismatch."""
    rc, out = compile_prog(a, src, exe, flags, rt)
    if rc != 0:
        tally.result(False, title + ": einc", out)
        return
    launch = mpi_launch(a.mpirun, 4) if rt == "mpi" else []
    rc, out = run_merged(launch + [exe, "--random-inputs", "1", "--check"] + check_run)
    worst = re.search(pattern, out)
    tally.result(rc == 0 and worst is not None,
                 "%s: %s" % (title, worst.group(0) if worst else "no check line"), out[-3000:])


def run_llama(a, work, tally):
    src, dims, check_run = llama_source(a, work)
    threads = [("1f1b", 4), ("zb-h1", 2)] if a.quick else [
        (s, m) for s in ("gpipe", "1f1b", "zb-h1") for m in (2, 4)] + [("zb-h2", 4)]
    for rt, (sched, m) in selected(a, threads, [("1f1b", 2), ("zb-h1", 4)]):
        # The summary line names the worst output.
        checked(a, tally, "llama %s, M=%d (%s)" % (sched, m, rt), src, os.path.join(work, "llama_" + rt),
                dims + ["--microbatches=%d" % m, "--schedule=" + sched], rt, check_run,
                r"check: largest max_rel_err=.*")


def run_forward(a, work, tally):
    """Pipelined inference: examples/llama2_13b.ein's forward (the logits
    of every position) with its layers on Z, under --check: each stage
    runs F0 .. F(M-1), the last stage's logits land at their microbatch's
    rows and reach every stage."""
    src, dims, check_run = llama_source(a, work, os.path.join(os.path.dirname(a.example),
                                                              "llama2_13b.ein"))
    threads = [4] if a.quick else [1, 2, 4]
    for rt, m in selected(a, threads, [2]):
        checked(a, tally, "llama forward, M=%d (%s)" % (m, rt), src, os.path.join(work, "fwd_" + rt),
                dims + ["--microbatches=%d" % m], rt, check_run, r"check Logits: max_rel_err=\S+")


# No param before the block: the backward loop's gradient has no reader on
# the first stage, and the other stages still send it.
NO_PRE = MLP.format(MESH="Z = 2, X = 2", IN="B_X, D", FX="_X", OPT="sgd(lr=0.05)").replace(
    "param Wf[D, E] : f64\n", "").replace("H[B, E] = In[B, D] * Wf[D, E]", "H[B, D] = In[B, D] * 1").replace(
    "optimize Win, Wout, Wf", "optimize Win, Wout")


def run_no_pre(a, work, tally):
    src = os.path.join(work, "no_pre.ein")
    with open(src, "w") as f:
        f.write(NO_PRE)
    for rt, (sched, m) in selected(a, [("1f1b", 4), ("zb-h1", 4)], []):
        checked(a, tally, "no param before the block, %s, M=%d (%s)" % (sched, m, rt), src,
                os.path.join(work, "no_pre_" + rt), ["--microbatches=%d" % m, "--schedule=" + sched], rt,
                ["--steps", "2"], r"check: largest max_rel_err=.*")


# A forward whose output is the repeat block's carried value: every stage
# but the last sends it on, and the last stage's rows are the output.
CARRIED_OUT = """mesh Z = 2, X = 2
dim B = 32, D = 16, F = 32, L = 4
input In[B_X, D] : f64
param Win[L_Z, D, F] : f64
param Wout[L_Z, F, D] : f64
H[B, D] = In[B, D] * 1.0
repeat L {
  T[B, F] = H[B, D] * Win[D, F]
  H[B, D] = H[B, D] + gelu(T[B, F]) * Wout[F, D] * 0.25
}
output H
"""


def run_carried_out(a, work, tally):
    # Also gathered over X, which splits the batch in the input: a
    # microbatch's output is then one block of rows per device of X, each
    # going to its device's part of the whole batch.
    for name, text, ms in (("", CARRIED_OUT, [2, 4]),
                           (" gathered over the batch's axis", CARRIED_OUT.replace("output H\n", "output H[B, D]\n"),
                            [4])):
        src = os.path.join(work, "carried_out.ein")
        with open(src, "w") as f:
            f.write(text)
        for rt, m in selected(a, ms, [2] if not name else []):
            checked(a, tally, "forward whose output is the carried value%s, M=%d (%s)" % (name, m, rt), src,
                    os.path.join(work, "carried_out_" + rt), ["--microbatches=%d" % m], rt, [],
                    r"check H: max_rel_err=\S+")


def loop_bodies(ir):
    """The reverse loops over L in --print-after text: for each, its body's
    ops as (name defined, right-hand side) from each indented line."""
    loops, body = [], None
    for line in ir.splitlines():
        if re.search(r"= LoopBegin\(L = \d+, reverse\)", line):
            body = []
        elif body is not None and "= LoopEnd(L)" in line:
            loops.append(body)
            body = None
        elif body is not None and line.startswith("  "):
            lhs, _, rhs = line.partition(" = ")
            body.append((lhs.strip().split("[")[0], rhs))
    return loops


def run_split_ir(a, work, tally):
    src = os.path.join(work, "mlp_split.ein")
    with open(src, "w") as f:
        f.write(MLP.format(MESH="Z = 2, X = 2", IN="B, D", FX="_X", OPT=OPTIMIZERS["sgd"]))
    exe = os.path.join(work, "split")
    for sched in ("gpipe", "zb-h1", "zb-h2"):
        rc, out = compile_prog(a, src, exe, ["--microbatches=4", "--schedule=" + sched,
                                             "--print-after=pipeline"])
        loops = loop_bodies(out) if rc == 0 else []
        if sched == "gpipe":
            tally.result(rc == 0 and len(loops) == 1, "gpipe: one backward loop over the layers",
                         out[-3000:])
            continue
        grads = ("dWin", "dWout")
        problems = []
        if len(loops) != 2:
            problems.append("%d reverse loops over L, not 2" % len(loops))
        else:
            b, w = loops
            problems += ["%s is computed in the dL/dx loop" % g for g in grads if g in dict(b)]
            problems += ["%s is not computed in the dL/dW loop" % g for g in grads if g not in dict(w)]
            # stacked per layer in the dL/dx loop, sliced in the dL/dW loop
            stacked = [n for n, rhs in b if rhs.startswith("LayerStack(L)")]
            sliced = [n for n in stacked if any(rhs.startswith("LayerSlice(L) " + n + "[")
                                                for _, rhs in w)]
            if not sliced:
                problems.append("no value of the dL/dx loop reaches the dL/dW loop per layer")
        # Every weight gradient is W work (Qi et al.): the embedding's dWf,
        # outside the block, follows the dL/dW loop (the W item) rather than
        # the dL/dx loop (B, what stage 0's gradient path ends with).
        lines = out.splitlines()
        ends = [i for i, ln in enumerate(lines) if "= LoopEnd(L)" in ln and not ln.startswith("  ")]
        dwf = [i for i, ln in enumerate(lines) if ln.startswith("dWf[") or ln.startswith("dWf.")]
        if len(ends) != 3 or not dwf or min(dwf) < ends[2]:
            problems.append("dWf is not after the dL/dW loop (LoopEnds at lines %s, dWf at %s)" % (ends, dwf))
        rows = [r for r in out.splitlines() if re.match(r"#\s+stage \d \|", r)]
        if len(rows) != 2 or any(" W%d" % k not in r for r in rows for k in range(4)):
            problems.append("the table has not W0 .. W3 on each stage: %r" % rows)
        # zb-h2's first stage runs 2Z - 1 = 3 forwards before its first B,
        # where zb-h1's (ZB-H1) waits a slot after Z = 2.
        warm = "| F0 F1 F2 B0" if sched == "zb-h2" else "| F0 F1 .  B0"
        if len(rows) == 2 and warm not in rows[0]:
            problems.append("stage 0's row does not start %r: %r" % (warm, rows[0]))
        tally.result(rc == 0 and not problems, "%s: the backward split into a dL/dx loop and "
                     "a dL/dW loop (dWin, dWout), the embedding's dWf after it, W items in the table, stage 0 starting %s" % (sched, warm),
                     "\n".join(problems) + out[-3000:])


# The MLP of section 6: the batch on X, dims at which the planner reduces
# each layer's weight gradient over X inside the backward loop.
GRAD_DIMS = ["-D", "B=512", "-D", "D=32", "-D", "E=32", "-D", "F=64"]
# kind: (Win, Wout, the deferred collective, the dtype, the tolerance
# against NumPy's f64 steps: bf16's rounding of the params and gradients)
GRAD_PARAMS = {"DP": ("Win[L_Z, D, F]", "Wout[L_Z, F, D]", "AllReduce", "f64", 1e-9),
               "FSDP": ("Win[L_Z, D_X, F]", "Wout[L_Z, F_X, D]", "ReduceScatter", "f64", 1e-9),
               "DP bf16": ("Win[L_Z, D, F]", "Wout[L_Z, F, D]", "AllReduce", "bf16", 2e-2),
               "FSDP per microbatch": ("Win[L_Z, D_X, F]", "Wout[L_Z, F_X, D]", "ReduceScatter", "f64", 1e-9)}
# kind: the flags beyond the schedule's (the collective kept in the backward loop)
GRAD_FLAGS = {"FSDP per microbatch": ["--grad-sync=microbatch"]}


def grad_source(kind):
    win, wout, _, dtype, _ = GRAD_PARAMS[kind]
    text = MLP.format(MESH="Z = 2, X = 2", IN="B_X, D", FX="", OPT=OPTIMIZERS["sgd"])
    return text.replace("Win[L_Z, D, F]", win).replace("Wout[L_Z, F, D]", wout).replace(": f64", ": " + dtype)


def deferred_problems(ir, coll, per_microbatch=False):
    """What is wrong in `ir` (--dump-ir text) with the gradient collectives:
    one `coll` of each stacked gradient after the loops, none in them; or
    `per_microbatch`, one inside the backward loop, none after."""
    problems, inside = [], False
    after, within = {}, {}
    for line in ir.splitlines():
        rhs = line.split("=", 1)[1].strip() if "=" in line else ""
        if rhs.startswith("LoopBegin("):
            inside = True
        elif rhs.startswith("LoopEnd("):
            inside = False
        name = line.strip().split("[", 1)[0]
        if not any(rhs.startswith(c + "_") for c in ("AllReduce", "ReduceScatter", "AllGather", "AllToAll")):
            continue
        operand = rhs.split(" ", 1)[1] if " " in rhs else ""
        for g in ("dWin", "dWout"):
            if name.split(".")[0] == g and inside:
                within.setdefault(g, []).append((rhs.split("_")[0], "reduced per microbatch, inside" in line))
            if name.split(".")[0] == g and not inside:
                after.setdefault(g, []).append((rhs.split("_")[0], operand))
    if per_microbatch:
        for g in ("dWin", "dWout"):
            if within.get(g) != [(coll, True)] or g in after:
                problems.append("%s: inside the loop %r, after it %r; not one %s per microbatch, said so, inside" %
                                (g, within.get(g), after.get(g), coll))
        return problems
    for g, got in within.items():
        problems.append("%s's %r inside a loop" % (g, got))
    for g in ("dWin", "dWout"):
        got = after.get(g, [])
        if len(got) != 1 or got[0][0] != coll or "[L_Z," not in got[0][1] or "{U_X}" not in got[0][1]:
            problems.append("%s: after the loops %r, not one %s of its stack of partial sums" % (g, got, coll))
    return problems


def profile_calls(out, pattern):
    """The calls of the --profile rows whose name matches `pattern`."""
    return [int(m.group(1)) for m in re.finditer(r"^\s+\d+\s+(\d+)\s+\S+\s+\S+\s+\S+\s+" + pattern,
                                                 out, re.M)]


def run_grad_once(a, work, tally):
    rng = np.random.default_rng(26)
    b, d, f = 512, 32, 64
    vals = {"In": rng.standard_normal((b, d)), "Tgt": rng.standard_normal((b, d)),
            "Win": rng.standard_normal((L, d, f)) / np.sqrt(d),
            "Wout": rng.standard_normal((L, f, d)) / np.sqrt(f),
            "Wf": rng.standard_normal((d, d)) / np.sqrt(d)}
    for k, v in vals.items():
        np.save(os.path.join(work, "g" + k + ".npy"), v)
        np.save(os.path.join(work, "gb" + k + ".npy"), v.astype(np.float32))  # read into bf16
    ref = mlp_reference(vals, "sgd")
    threads = [(kind, sched, m) for kind in ("DP", "FSDP") for sched, m in
               (("gpipe", 4), ("1f1b", 1), ("1f1b", 4), ("1f1b", 8), ("zb-h1", 4), ("zb-h2", 4),
                                ("interleaved", 4))]
    if a.quick:
        threads = [c for c in threads if c[1] == "1f1b" and c[2] == 4]
    threads.append(("DP bf16", "1f1b", 8))
    threads += [("FSDP per microbatch", s, 4) for s in (("1f1b",) if a.quick else ("1f1b", "zb-h1"))]
    mpi = [("DP", "1f1b", 4), ("FSDP", "1f1b", 4), ("FSDP per microbatch", "1f1b", 4)]
    for rt, (kind, sched, m) in selected(a, threads, mpi):
        per_mb = kind in GRAD_FLAGS
        title = "gradients reduced %s, %s, %s, M=%d (%s)" % (
            "where " + " ".join(GRAD_FLAGS[kind]) + " says" if per_mb else "once per step", kind, sched, m, rt)
        coll, dtype, tol = GRAD_PARAMS[kind][2:]
        src = os.path.join(work, "grad_%s.ein" % kind.replace(" ", "_"))
        with open(src, "w") as fh:
            fh.write(grad_source(kind))
        flags = GRAD_DIMS + ["--microbatches=%d" % m, "--schedule=" + sched] + GRAD_FLAGS.get(kind, [])
        rc, ir = run_merged([a.einc, src, "--dump-ir"] + flags)
        problems = deferred_problems(ir, coll, per_mb) if rc == 0 else ["einc --dump-ir failed"]
        failed, out, got_losses, got_w = train(a, rt, src, flags, work, vals, "gb" if dtype == "bf16" else "g")
        if failed:
            tally.result(False, title + ": " + failed, out)
            continue
        exe = os.path.join(work, ("gb" if dtype == "bf16" else "g") + "mlp_" + rt)
        problems += against_numpy(ref, got_losses, got_w, tol)
        profiled = rt == "threads" and sched == "1f1b" and dtype == "f64"
        if profiled:
            # Once per step on each of the 2 stages, as the update's ops;
            # the layer's dWin einsum |L| M times per step.
            rc, out = run_merged([exe, "--random-inputs", "1", "--profile", "--steps", "2"])
            once = profile_calls(out, r"dWin\.\d+ = %s" % coll)
            upd = profile_calls(out, r"Win\.\d+ = Elementwise Win,")
            ein = profile_calls(out, r"dWin = Einsum")
            if per_mb and (rc != 0 or once != ein or upd != [4] or ein != [L * m * 2]):
                problems.append("--profile calls: %s of dWin %r, its einsum %r (want both [%d]), Win's update %r "
                                "(want [4])" % (coll, once, ein, L * m * 2, upd))
            elif not per_mb and (rc != 0 or once != [4] or upd != [4] or ein != [L * m * 2]):
                problems.append("--profile calls: %s of dWin %r, Win's update %r (want [4]), dWin's einsum %r "
                                "(want [%d])" % (coll, once, upd, ein, L * m * 2))
        where = "in the backward loop" if per_mb else "after the loops"
        how = ", per microbatch in --profile" if per_mb else ", once per step in --profile"
        tally.result(not problems, "%s: as NumPy (to %g), one %s per stacked gradient %s%s" %
                     (title, tol, coll, where, how if profiled else ""), "\n".join(problems))


def peak_bytes(out, dev):
    """Device `dev`'s peak bytes in `--stats` output, or None."""
    m = re.search(r"device %d: peak (\d+) bytes" % dev, out)
    return int(m.group(1)) if m else None


def run_stats(a, work, tally):
    src = os.path.join(work, "mlp_stats.ein")
    with open(src, "w") as f:
        f.write(MLP.format(MESH="Z = 2", IN="B, D", FX="", OPT=OPTIMIZERS["sgd"]))
    peaks = {}
    for sched in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
        exe = os.path.join(work, "stats_" + sched)
        rc, out = compile_prog(a, src, exe, ["--microbatches=8", "--schedule=" + sched])
        if rc == 0:
            rc, out = run_merged([exe, "--random-inputs", "1", "--stats"])
        peaks[sched] = peak_bytes(out, 0) if rc == 0 else None
        if peaks[sched] is None:
            tally.result(False, "--stats %s, M=8: no peak of device 0" % sched, out)
            return
    tally.result(peaks["1f1b"] < peaks["gpipe"],
                 "--stats M=8, stage 0's peak: 1f1b %d bytes < gpipe %d bytes" %
                 (peaks["1f1b"], peaks["gpipe"]))
    tally.result(peaks["zb-h1"] < peaks["zb-h2"],
                 "--stats M=8, stage 0's peak: zb-h1 %d bytes < zb-h2 %d bytes (Z against 2Z - 1 held)" %
                 (peaks["zb-h1"], peaks["zb-h2"]))


def arguments(doc):
    """The command line of this test and pipeline_interleaved.py."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--example", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--mpi-only", action="store_true",
                    help="with --mpi: only the MPI configurations")
    return ap.parse_args()


def main():
    a = arguments(__doc__)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-pipeline-") as work:
        run_mlp(a, work, tally)
        run_llama(a, work, tally)
        run_forward(a, work, tally)
        run_no_pre(a, work, tally)
        run_carried_out(a, work, tally)
        run_grad_once(a, work, tally)
        if not a.mpi_only:
            run_split_ir(a, work, tally)
            run_stats(a, work, tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
