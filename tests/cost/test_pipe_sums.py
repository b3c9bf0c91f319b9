#!/usr/bin/env python3
"""test_pipe_sums.py - a pipelined step prices the sums of its non-stacked
gradients over the microbatches (passes/costmodel/pipe_work.c, summed_bytes;
docs/pipeline.md "The Z = 2, M = 8 miss").

tests/cost/pipeline/pp_embed_mlp.ein has an embedding Emb[V, D] before its
repeat block (first stage) and a head Wh[D, E] after it (last stage), both
f32 and whole on each device.  The run function adds each microbatch's
gradient of them into its sum right after the op that computes it
(codegen/pipeline.c, accumulate): in B m, or in W m with zero-bubble, whose
split backward runs both weight gradients in W (pipe_work_split_w), an
elementwise add in place, 2 reads and 1 write of the gradient's bytes at
the profile's hbm_bandwidth.  For gpipe, 1f1b and zero-bubble at M = 1 and
4 on hw/host.json, the first stage's extra per microbatch
(totals.pipeline.first_stage_extra) is its costed ops (those outside the
loops before the forward loop and from the backward loop's end, less the
hop; every collective there runs per microbatch)
plus 3 x 1 MiB / hbm_bandwidth, and the last stage's (the ops from the
forward loop's end to the backward loop's begin, and the loss's
reduction; with zero-bubble dWh after the dL/dW loop too, its AllReduce
over X then once per step) plus 3 x 256 KiB / hbm_bandwidth, each to
1e-9 relative;
without the term both miss by that much (226 us and 57 us here).  At
M = 1 the simulated pipeline is Z (F + B) plus both extras and two hops,
so the items the schedule simulates hold the sums too.
"""
import json
import os
import sys
import tempfile

from einc_checks import Checks, run

check = Checks()
EMB_BYTES = 1024 * 256 * 4  # Emb[V, D] f32, whole on each device
WH_BYTES = 256 * 256 * 4    # Wh[D, E]


def stage_ops(ops):
    """Seconds of the costed ops only the first and only the last stage run
    per microbatch, outside the loops: the forward's before the forward
    loop (with its LoopBegin) and the backward's from the backward loop's
    LoopEnd on (first); the forward's from the forward loop's LoopEnd on
    and the backward's before the backward loop ends (last); the
    collectives too (the AllGather of dH the embedding's gradient reads,
    the head's AllReduce over X before the backward loop and the loss's
    run per microbatch, tests/cost/test_pipe_placement.py), but for
    zero-bubble's AllReduce of the head gradient dWh, moved after the
    dL/dW loop with dWh (the last stage's), which then runs once per step
    as a linear collective after the backward loop that only the update
    reads, and for the
    stacked gradients' AllReduces that the pipeline pass moved after the
    loops (on stacks of partial sums over the layers, once per step on
    every stage, in the sync); the stage-to-stage hops never."""
    first = last = 0.0
    depth = 0
    loops = 0  # LoopEnds seen: 0 before the forward's, 1 between the loops, 2 after
    for op in ops:
        kind, t = op["op"], op.get("cost", {}).get("time", 0.0)
        if kind == "LoopEnd":
            depth -= 1
            loops += 1
        inside = depth > 0
        if kind == "LoopBegin":
            depth += 1
        operand = op["operands"][0]["type"] if op.get("operands") else ""
        deferred = kind == "AllReduce" and "{U" in operand and "[L_Z," in operand
        head = op.get("result", {}).get("tensor", "").startswith("dWh")
        once = head and kind == "AllReduce" and loops >= 2
        if inside or op["phase"] == "update" or kind == "CollectivePermute" or deferred or once:
            continue
        if (op["phase"] == "forward" and loops == 0) or (op["phase"] == "backward" and loops >= 2 and not head):
            first += t
        else:
            last += t
    return first, last


def main():
    einc, src = sys.argv[1], sys.argv[2]
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()
    hw = os.path.join(src, "hw", "host.json")
    bw = json.load(open(hw))["hbm_bandwidth"]
    prog = os.path.join(src, "tests", "cost", "pipeline", "pp_embed_mlp.ein")
    want_first, want_last = 3 * EMB_BYTES / bw, 3 * WH_BYTES / bw
    for sched in ("gpipe", "1f1b", "zb-h1"):
        for m in (1, 4):
            if sched == "zb-h1" and m < 2:
                continue
            rc, out, err = run(einc, prog, "--hw", hw, "--dump-ir=json", f"--schedule={sched}",
                               f"--microbatches={m}")
            what = f"{sched} M = {m}"
            check(rc == 0, f"{what}: compiles ({err.strip()[:200]})")
            if rc != 0:
                continue
            ir = json.loads(out)
            p = ir["totals"]["pipeline"]
            first, last = stage_ops(ir["ops"])
            got_first, got_last = p["first_stage_extra"] - first, p["last_stage_extra"] - last
            check(abs(got_first - want_first) <= 1e-9 * p["first_stage_extra"],
                  f"{what}: first stage extra {p['first_stage_extra'] * 1e6:.3f} us = its ops "
                  f"{first * 1e6:.3f} us + dEmb's sum {got_first * 1e6:.3f} us (3 x 1 MiB / hbm_bw "
                  f"= {want_first * 1e6:.3f} us)")
            check(abs(got_last - want_last) <= 1e-9 * p["last_stage_extra"],
                  f"{what}: last stage extra {p['last_stage_extra'] * 1e6:.3f} us = its ops "
                  f"{last * 1e6:.3f} us + dWh's sum {got_last * 1e6:.3f} us (3 x 256 KiB / hbm_bw "
                  f"= {want_last * 1e6:.3f} us)")
            if m == 1:  # the stages run one after the other: the sums are in the simulated items
                seq = 2 * (p["stage_forward_time"] + p["stage_backward_time"]) + p["first_stage_extra"] + \
                    p["last_stage_extra"] + 2 * p["hop_time"]
                check(abs(p["pipeline_time"] - seq) <= 1e-9 * seq,
                      f"{what}: pipeline {p['pipeline_time'] * 1e6:.3f} us = Z (F + B) + both extras + "
                      f"2 hops {seq * 1e6:.3f} us")
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
