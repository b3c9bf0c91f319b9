#!/usr/bin/env python3
"""test_analyze_pipe.py - `einc analyze --stages=Z`: the program's repeat
block pipelined over Z stages, priced per schedule and microbatch count
(driver/analyze_pipe.c, docs/pipeline.md).

On seed 000's DP stack of layers (tests/cost/pipeline/dp_layers_v5p.ein):
  - accounting: with one microbatch every schedule runs the stages one
    after the other, so the pipeline plus the update is the program's
    compute and communication (the plan row) plus the 2 (Z - 1)
    stage-to-stage transfers and the loss's AllReduce over the stages,
    but for DP's per-layer AllReduces of the stacked weight gradients,
    which the pipeline pass moves out of the backward loop to run once
    per step, each stage its own layers' (passes/pipeline_grad.c): out
    of the sequence, in the sync at 1/Z of their sum, for every M;
  - the schedules' memory: GPipe holds M microbatches, 1F1B and
    zero-bubble at most Z, and 1F1B's stage needs less memory than GPipe's
    once M > Z;
  - the bubble: GPipe's and 1F1B's follow (Z - 1) / (M + Z - 1) within the
    first and last stages' extra work, zero-bubble's is below 1F1B's at
    M = 2 Z, interleaved's below 1F1B's at the same M;
  - pipelining on Z times the chips beats the unpipelined step;
  - --chunks=v prices interleaved with v chunks per stage;
  - bad use is a clear error.
"""
import json
import os
import sys

from einc_checks import Checks, run

check = Checks()


def main():
    einc, src = sys.argv[1], sys.argv[2]
    prog = os.path.join(src, "tests", "cost", "pipeline", "dp_layers_v5p.ein")
    z = 4
    rc, out, err = run(einc, "analyze", "--json", "--hw", "tpu-v5p", f"--stages={z}", prog)
    check(rc == 0, f"analyze --stages={z} runs ({err.strip()[:200]})")
    if rc != 0:
        return
    j = json.loads(out)
    pipe = j["pipeline"]
    plan = next(s for s in j["strategies"] if s["family"] == "plan")
    rows = {(r["schedule"], r["microbatches"]): r for r in pipe["schedules"]}
    check(pipe["stages"] == z and pipe["layers"] == 8, "4 stages of 2 layers")
    ms = sorted({m for (_, m) in rows})
    check(ms == [1, 2, 4, 8, 16, 32, 64], f"every M that divides the batch into X shards, up to 64: {ms}")

    # Accounting at M = 1: the stages run one after the other, so the
    # pipeline is every forward and backward op once plus 2 (Z - 1)
    # transfers; then the loss, which only the last stage computes, is
    # AllReduced over the stages, and each stage updates its quarter of the
    # layers (every param is stacked).  DP's AllReduce of each layer's
    # weight gradients is moved out of the backward loop by the pipeline
    # pass and runs once per step on the stage's stack, the stages side by
    # side: grad_sync is 1/Z of the layers' AllReduces, which are all of
    # the plan's communication but the loss's, so the sequence loses Z of
    # it and the sync adds one.  Zero-bubble overlaps a stage's W with the
    # B of the stage before it.
    hop = pipe["transfer_time"]
    upd, sync, zsum = pipe["update_time"], pipe["grad_sync_time"], pipe["stage_sum_time"]
    comm = sum(plan["comm_time"].values())
    check(0.99 * comm / z < sync < comm / z,
          f"DP: a stage's AllReduces of its stacked gradients run once per step, {sync:.6g} s, 1/Z of the "
          f"plan's communication but the loss's ({comm / z:.6g} s with it)")
    check(0 < zsum < 1e-3 * comm, f"the loss's AllReduce over the stages is priced ({zsum:.3g} s)")
    serial = (plan["compute_time"] - upd) + (comm - z * sync) + 2 * (z - 1) * hop + upd / z + zsum + sync
    check(rows[("zb-h1", 1)]["step_time"] < serial, "zero-bubble M=1: W overlaps the next B")
    for s in ("gpipe", "1f1b"):
        r = rows[(s, 1)]
        check(abs(r["step_time"] - serial) <= 1e-6 * serial,
              f"{s} M=1: step {r['step_time']:.6g} s = the plan's work in sequence but the gradients' "
              f"AllReduces + 2(Z-1) transfers + the loss's AllReduce over Z + a stage's share of the "
              f"gradients' AllReduces and of the update {serial:.6g} s")
    for (s, m), r in sorted(rows.items()):
        if s == "gpipe":
            check(r["held_microbatches"] == m, f"gpipe M={m} holds {r['held_microbatches']} = M microbatches")
        elif s in ("1f1b", "zb-h1"):
            check(r["held_microbatches"] == min(m, z),
                  f"{s} M={m} holds {r['held_microbatches']} = min(M, Z) microbatches")
        if s in ("gpipe", "1f1b") and m >= 4:
            f = (z - 1) / (m + z - 1)
            check(abs(r["bubble_formula"] - f) < 1e-12 and abs(r["bubble"] - f) < 0.05,
                  f"{s} M={m}: bubble {r['bubble']:.3f} near (Z-1)/(M+Z-1) = {f:.3f}")
    for m in (16, 32, 64):
        check(rows[("1f1b", m)]["memory"] < rows[("gpipe", m)]["memory"],
              f"M={m}: a 1F1B stage needs less memory than a GPipe one")
    zb, ob = rows[("zb-h1", 2 * z)], rows[("1f1b", 2 * z)]
    check(zb["bubble"] <= 0.5 * ob["bubble"],
          f"M=2Z: zero-bubble's bubble {zb['bubble']:.3f} <= half of 1F1B's {ob['bubble']:.3f}")
    check(zb["pipeline_time"] < ob["pipeline_time"], "M=2Z: zero-bubble's pipeline is shorter than 1F1B's")
    for m in (4, 8, 16):
        check(rows[("interleaved", m)]["bubble"] < rows[("1f1b", m)]["bubble"],
              f"M={m}: interleaved's bubble below 1F1B's")
    best = min(pipe["schedules"], key=lambda r: r["step_time"])
    check(best["schedule"] == pipe["fastest"] and best["microbatches"] == pipe["fastest_microbatches"],
          f"the fastest is {pipe['fastest']} with M={pipe['fastest_microbatches']}")
    check(best["step_time"] < pipe["unpipelined_step_time"] / 2,
          f"on 4x the chips the pipelined step {best['step_time']:.4g} s beats half the unpipelined "
          f"{pipe['unpipelined_step_time']:.4g} s")

    rc, dcn, _ = run(einc, "analyze", "--json", "--hw", "tpu-v5p", f"--stages={z}", "--stage-link=dcn",
                     "--microbatches=8", "--schedule=1f1b", prog)
    d = json.loads(dcn)["pipeline"] if rc == 0 else None
    check(d is not None and len(d["schedules"]) == 1 and d["transfer_time"] > hop,
          "--stage-link=dcn: one row, slower transfers than ICI")

    rc, text, _ = run(einc, "analyze", "--hw", "tpu-v5p", f"--stages={z}", "--microbatches=8",
                      "--schedule=1f1b", prog)
    lines = text.splitlines()
    chart = [l for l in lines if l.lstrip().startswith("stage")]
    check(rc == 0 and "fastest: 1f1b with 8 microbatches" in text and len(chart) >= z,
          "the text report ends with the schedule's stage x time-slot chart")

    # --chunks=v: interleaved priced with v chunks per stage (Z = 2: 4 layers a stage).
    rc, out4, err = run(einc, "analyze", "--json", "--hw", "tpu-v5p", "--stages=2", "--chunks=4",
                        "--schedule=interleaved", prog)
    rows4 = json.loads(out4)["pipeline"]["schedules"] if rc == 0 else []
    check(rows4 and all(abs(r["bubble_formula"] - 1 / (4 * r["microbatches"] + 1)) < 1e-12 for r in rows4),
          f"--chunks=4: interleaved's closed form (Z-1)/(4M+Z-1) on every row ({err.strip()[:120]})")

    bad = [
        (["--stages=4", "--chunks=4", "--schedule=interleaved"], "multiple of 4 layers per stage"),
        (["--stages=4", "--chunks=2", "--schedule=1f1b"], "--chunks prices the interleaved schedule"),
        (["--chunks=2"], "need --stages"),
        (["--stages=3"], "do not split into 3 stages"),
        (["--stages=4", "--microbatches=3"], "do not divide batch"),
        (["--microbatches=2"], "need --stages"),
        (["--stages=4", "--schedule=pipedream"], "--schedule wants"),
        (["--stages=1"], "--stages"),
    ]
    for args, want in bad:
        rc, _, err = run(einc, "analyze", "--hw", "tpu-v5p", *args, prog)
        check(rc != 0 and want in err, f"{' '.join(args)}: error mentions '{want}' ({err.strip()[:120]})")
    fwd = os.path.join(src, "examples", "llama2_ffw.ein")
    rc, _, err = run(einc, "analyze", "--hw", "tpu-v5p", "--stages=2", fwd)
    check(rc != 0 and "error" in err, f"a program without a repeat block or training step: {err.strip()[:120]}")
    rc, _, err = run(einc, "--hw", "tpu-v5p", "--stages=2", prog)
    check(rc != 0 and "einc analyze" in err, "--stages outside analyze is refused")


if __name__ == "__main__":
    main()
    sys.exit(check.exit_status())
