#!/usr/bin/python3
"""pipeline_interleaved.py - the interleaved pipeline schedule
(`--schedule=interleaved --chunks=v`, docs/pipeline.md "Interleaved: v
chunks per stage") against NumPy, 1f1b and the unpipelined program.

With v chunks per stage, layer l of L belongs to model chunk l / (L/(Z v)),
which runs on stage (chunk mod Z): the stacked params' layer dim is dealt
block-cyclically to the stages, and an activation goes round the stages v
times (the last stage hands chunk c's output to stage 0's chunk c+1).

1. The residual GELU-MLP stack of pipeline.py in f64, trained 3 steps
   (SGD with momentum and weight decay, or AdamW) with v = 2: on Z=2 x X=2
   with TP over X (L = 4: one layer per chunk, and L = 8), on Z=4 (L = 8)
   and on Z=2 x X=2 with the batch on X (L = 8), M = Z and 2 Z.  NumPy runs
   the same steps on the whole batch: every step's loss and every param
   after step 3 must agree to 1e-9 relative (the params are read from .npy
   files, dealt block-cyclically, and written back in global order, so a
   layer on the wrong stage or written back to the wrong place fails), and
   1f1b compiled from the same source must give the same losses and params
   to 1e-12 relative.  Also v = 4 on Z=2 (L = 8, two layers per chunk).
2. A params checkpoint (`--save`) written by an interleaved run, loaded by
   the same program unpipelined (the layer dim not sharded) through
   `--params`: its first step's loss must be NumPy's loss at NumPy's params
   after the 3 steps (1e-9), so the block-cyclic layout came back in global
   layer order.
3. Pipelined inference with interleaving: a forward whose output is the
   block's carried value, M = 2 and 4, and examples/llama2_13b.ein's logits
   (layers on Z), under `--check` against the unsharded reference.
4. `--dump-ir` shows the table with chunks (F0.0 ... B0.1) and the layer
   assignment; the schedule's items on every stage are every (microbatch,
   chunk) forward and backward once; without --microbatches the chosen M
   is a multiple of Z.  `--trace` names each item's chunk:
   every device runs F m.c and B m.c once, a microbatch's forwards in chunk
   order and its backwards in reverse, the last stage's B m.(v-1) after its
   F m.(v-1); `--profile` counts a run as
   2 M v items (3 runs of 3 steps) and the layer einsum |L| M times a step.

With --mpi, two configurations of 1. run on 4 MPI ranks (--mpi-only: only
those).  The last line is `N passed, N failed`; exit 1 on any failure.

Usage: pipeline_interleaved.py --einc PATH --example llama2_13b.ein
                               [--quick] [--mpi [--mpi-only] --mpirun PATH]
"""
import json
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import Tally, mpi_launch, run_merged  # noqa: E402
from pipeline import (CARRIED_OUT, MESHES, MLP, NDEV, OPTIMIZERS, STEPS, against_1f1b, against_numpy,  # noqa: E402
                      arguments,
                      checked, compile_prog, llama_source, mlp_loss_grads, mlp_reference, selected)

B, D, F = 16, 8, 16


def mlp_source(mesh, layers, opt, pipelined=True):
    """pipeline.py's MLP with `layers` layers on `mesh`; unpipelined: the
    stacked params' layer dim not sharded."""
    mesh_line, ins, fx = MESHES[mesh]
    src = MLP.format(MESH=mesh_line, IN=ins, FX=fx, OPT=OPTIMIZERS[opt]).replace("L = 4", "L = %d" % layers)
    return src if pipelined else src.replace("[L_Z, ", "[L, ")


def inputs(work, layers):
    """The MLP's inputs and params for `layers` layers, saved as .npy."""
    rng = np.random.default_rng(250 + layers)
    vals = {"In": rng.standard_normal((B, D)), "Tgt": rng.standard_normal((B, D)),
            "Win": rng.standard_normal((layers, D, F)) / np.sqrt(D),
            "Wout": rng.standard_normal((layers, F, D)) / np.sqrt(F),
            "Wf": rng.standard_normal((D, D)) / np.sqrt(D)}
    for k, v in vals.items():
        np.save(os.path.join(work, "%s_%d.npy" % (k, layers)), v)
    return vals


def train(a, work, rt, src_text, flags, layers, extra=()):
    """Compiles and trains; (problem or None, losses, params)."""
    src = os.path.join(work, "mlp_il.ein")
    with open(src, "w") as f:
        f.write(src_text)
    exe = os.path.join(work, "mlp_il_" + rt)
    rc, out = compile_prog(a, src, exe, flags, rt)
    if rc != 0:
        return "einc: " + out, None, None
    metrics = os.path.join(work, "metrics_il.jsonl")
    run = (mpi_launch(a.mpirun, NDEV) if rt == "mpi" else []) + [
        exe, "--steps", str(STEPS), "--log-every", "1", "--metrics", metrics] + list(extra)
    for k in ("In", "Tgt", "Win", "Wout", "Wf"):
        run += ["--input", "%s=%s" % (k, os.path.join(work, "%s_%d.npy" % (k, layers)))]
    for n in ("Win", "Wout", "Wf"):
        run += ["--output", "%s=%s" % (n, os.path.join(work, "out_il_" + n + ".npy"))]
    rc, out = run_merged(run)
    if rc != 0:
        return "run: " + out[-3000:], None, None
    with open(metrics) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    return None, losses, {n: np.load(os.path.join(work, "out_il_" + n + ".npy")) for n in ("Win", "Wout", "Wf")}


def configs(quick):
    """(mesh, L, v, M, optimizer) of the MLP runs."""
    out = [("Z=2 x X=2, TP on X", 4, 2, 2, "sgd"), ("Z=2 x X=2, TP on X", 4, 2, 4, "adamw"),
           ("Z=2 x X=2, TP on X", 8, 2, 2, "adamw"), ("Z=2 x X=2, TP on X", 8, 2, 4, "sgd"),
           ("Z=4", 8, 2, 4, "sgd"), ("Z=4", 8, 2, 8, "adamw"),
           ("Z=2 x X=2, batch on X", 8, 2, 4, "adamw"), ("Z=2 x X=2, TP on X", 8, 4, 4, "sgd")]
    return [out[1], out[4]] if quick else out


def run_mlp(a, work, tally):
    refs = {}
    mpi = [("Z=2 x X=2, TP on X", 8, 2, 4, "sgd"), ("Z=4", 8, 2, 4, "sgd")]
    for rt, (mesh, layers, v, m, opt) in selected(a, configs(a.quick), mpi):
        if (layers, opt) not in refs:
            refs[(layers, opt)] = mlp_reference(inputs(work, layers), opt)
        title = "mlp %s, L=%d, %s, interleaved v=%d, M=%d (%s)" % (mesh, layers, opt, v, m, rt)
        src = mlp_source(mesh, layers, opt)
        bad, losses, params = train(a, work, rt, src, ["--microbatches=%d" % m, "--schedule=interleaved",
                                                       "--chunks=%d" % v], layers)
        if bad:
            tally.result(False, title, bad)
            continue
        problems = against_numpy(refs[(layers, opt)], losses, params)
        bad, ref_losses, ref_params = train(a, work, rt, src, ["--microbatches=%d" % m, "--schedule=1f1b"],
                                            layers)
        problems += ["1f1b " + bad] if bad else against_1f1b((ref_losses, ref_params), losses, params)
        want = refs[(layers, opt)][0]
        tally.result(not problems, "%s: loss %.6f -> %.6f as NumPy and as 1f1b" % (title, want[0], want[-1]),
                     "\n".join(problems))


def run_checkpoint(a, work, tally):
    """An interleaved run's --save, read by the unpipelined program."""
    mesh, layers, opt = "Z=2 x X=2, TP on X", 8, "sgd"
    vals = inputs(work, layers)
    _, want_w = mlp_reference(vals, opt)
    want_loss = mlp_loss_grads(want_w, vals["In"], vals["Tgt"])[0]
    ckpt = os.path.join(work, "ckpt_il")
    title = "checkpoint of an interleaved run (Z=2, v=2, L=8) read unpipelined"
    bad, _, _ = train(a, work, "threads", mlp_source(mesh, layers, opt),
                      ["--microbatches=4", "--schedule=interleaved"], layers, ["--save", ckpt])
    if bad:
        tally.result(False, title, bad)
        return
    src = os.path.join(work, "mlp_flat.ein")
    with open(src, "w") as f:
        f.write(mlp_source(mesh, layers, opt, pipelined=False))
    exe = os.path.join(work, "mlp_flat")
    rc, out = compile_prog(a, src, exe, [])
    if rc != 0:
        tally.result(False, title + ": einc", out)
        return
    metrics = os.path.join(work, "metrics_flat.jsonl")
    run = [exe, "--steps", "1", "--log-every", "1", "--metrics", metrics, "--params", ckpt]
    for k in ("In", "Tgt"):
        run += ["--input", "%s=%s" % (k, os.path.join(work, "%s_%d.npy" % (k, layers)))]
    rc, out = run_merged(run)
    if rc != 0:
        tally.result(False, title + ": run", out[-3000:])
        return
    with open(metrics) as f:
        got = [json.loads(line)["loss"] for line in f if line.strip()][0]
    tally.result(abs(got - want_loss) <= 1e-9 * abs(want_loss),
                 "%s: loss %.9f, NumPy's at its params after %d steps %.9f" % (title, got, STEPS, want_loss))


def run_forward(a, work, tally):
    src = os.path.join(work, "carried_out_il.ein")
    with open(src, "w") as f:
        f.write(CARRIED_OUT)
    for rt, m in selected(a, [2, 4], [2]):
        checked(a, tally, "interleaved forward whose output is the carried value, M=%d (%s)" % (m, rt), src,
                os.path.join(work, "carried_il_" + rt), ["--microbatches=%d" % m, "--schedule=interleaved"],
                rt, [], r"check H: max_rel_err=\S+")
    if a.mpi_only:
        return
    # The inference example with its layers on Z, 4 layers (Z v blocks).
    src, dims, check_run = llama_source(a, work, a.example)
    dims = ["L=4" if d == "L=2" else d for d in dims]
    checked(a, tally, "interleaved llama forward, M=2 (threads)", src, os.path.join(work, "llama_il"),
            dims + ["--microbatches=2", "--schedule=interleaved"], "threads", check_run,
            r"check Logits: max_rel_err=\S+")


def run_table(a, work, tally):
    """--dump-ir's table: on each stage every F m.c and B m.c once."""
    src = os.path.join(work, "table_il.ein")
    with open(src, "w") as f:
        f.write(mlp_source("Z=4", 8, "sgd"))
    rc, out = run_merged([a.einc, src, "--dump-ir", "--microbatches=4", "--schedule=interleaved"])
    rows = re.findall(r"#\s+stage (\d) \|(.*)", out)
    want = sorted("%s%d.%d" % (k, m, c) for k in "FB" for m in range(4) for c in range(2))
    problems = [] if rc == 0 else [out[-2000:]]
    if len(rows) != 4:
        problems.append("%d stage rows in --dump-ir, not 4" % len(rows))
    for z, row in rows:
        got = sorted(c for c in row.split() if c != ".")
        if got != want:
            problems.append("stage %s: items %s" % (z, " ".join(got)))
    if "2 chunks of 1 layers each" not in out:
        problems.append("no layer assignment line ('4 stages of 2 chunks of 1 layers each')")
    tally.result(not problems, "--dump-ir: the interleaved table has every F m.c and B m.c once per stage",
                 "\n".join(problems))
    # Without --microbatches the cost model picks M among the multiples of Z.
    rc, out = run_merged([a.einc, src, "--dump-ir", "--schedule=interleaved"])
    m = re.search(r"split into (\d+) microbatch", out)
    tally.result(rc == 0 and m is not None and int(m.group(1)) % 4 == 0,
                 "interleaved without --microbatches: M = %s, a multiple of Z = 4" % (m.group(1) if m else "?"),
                 out[-2000:])


def trace_problems(path, Z, v, M, devs_per_stage):
    """What is wrong with an interleaved run's --trace: every device's
    items must be F m.c and B m.c once each for every microbatch m and
    chunk c; on a device a microbatch's forwards run in chunk order and its
    backwards in reverse chunk order, each chunk's backward after its
    forward, and on the last stage B m.(v-1) (the last model chunk) starts
    after F m.(v-1) ends.  (Only spans of one device are compared: each
    device's trace clock starts at its own first run.)"""
    events = json.load(open(path))["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "pipeline" and e["name"] != "recv wait"]
    problems = []
    want = sorted("%s%d.%d" % (k, m, c) for k in "FB" for m in range(M) for c in range(v))
    for d in range(Z * devs_per_stage):
        items = sorted((e for e in spans if e["tid"] == d), key=lambda e: e["ts"])
        names = [e["name"] for e in items]
        if sorted(names) != want:
            problems.append("device %d: items %s" % (d, " ".join(names)))
            continue
        pos = {n: i for i, n in enumerate(names)}
        at = {e["name"]: e for e in items}
        for m in range(M):
            order = ["F%d.%d" % (m, c) for c in range(v)] + ["B%d.%d" % (m, c) for c in reversed(range(v))]
            if [pos[n] for n in order] != sorted(pos[n] for n in order):
                problems.append("device %d runs microbatch %d's items out of order: %s" % (d, m, " ".join(names)))
            f, b = at["F%d.%d" % (m, v - 1)], at["B%d.%d" % (m, v - 1)]
            if d // devs_per_stage == Z - 1 and b["ts"] < f["ts"] + f["dur"] - 1e-3:
                problems.append("device %d (last stage): B%d.%d starts before F%d.%d ends" % (d, m, v - 1, m, v - 1))
    return problems


def run_trace(a, work, tally):
    """--trace names each item's chunk and its order follows the ring;
    --profile counts 2 M v items a run."""
    src = os.path.join(work, "trace_il.ein")
    with open(src, "w") as f:
        f.write(mlp_source("Z=2 x X=2, TP on X", 8, "sgd"))
    exe = os.path.join(work, "trace_il")
    rc, out = compile_prog(a, src, exe, ["--microbatches=4", "--schedule=interleaved"])
    if rc != 0:
        tally.result(False, "interleaved --trace: einc", out)
        return
    tr = exe + ".json"
    rc, out = run_merged([exe, "--random-inputs", "1", "--trace", tr])
    problems = [out[-2000:]] if rc != 0 else trace_problems(tr, 2, 2, 4, 2)
    tally.result(not problems, "interleaved --trace (Z=2 x X=2, v=2, M=4): every F m.c and B m.c once per "
                 "device, in chunk order per microbatch", "\n".join(problems))
    rc, out = run_merged([exe, "--random-inputs", "1", "--profile", "--steps", "3"])
    line = re.search(r"^pipeline: 2 stages, 4 microbatches, interleaved: measured bubble ([0-9.]+)% "
                     r"\(median over 3 runs\), predicted ([0-9.]+)%"
                     r"(?:; \d+ devices on \d+ CPUs: core-idle bubble [0-9.]+%)?$", out, re.M)
    row = re.search(r"^\s+\d+\s+(\d+)\s+\S+\s+\S+\s+\S+\s+T = Einsum", out, re.M)
    calls = int(row.group(1)) if row else -1
    tally.result(rc == 0 and line is not None and calls == 8 * 4 * 3,
                 "interleaved --profile: 3 runs of 2 M v items, %s; the layer einsum called |L| M steps = 96 "
                 "times (got %d)" % (line.group(0) if line else "no pipeline line", calls), out[-3000:])


def main():
    a = arguments(__doc__)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-interleaved-") as work:
        run_mlp(a, work, tally)
        run_forward(a, work, tally)
        if not a.mpi_only:
            run_checkpoint(a, work, tally)
            run_table(a, work, tally)
            run_trace(a, work, tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
