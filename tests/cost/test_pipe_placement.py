#!/usr/bin/env python3
"""test_pipe_placement.py - the pipelined step is priced where the run
function runs each op (passes/costmodel/pipe_work.c against
codegen/pipeline_plan.c; docs/pipeline.md "The cost of a compiled
pipelined program").  On hw/host.json, from --dump-ir=json's ops and
totals.pipeline, to 1e-9 relative:

  a. tests/cost/pipeline/pp_uniform_mlp.ein (Z = 2 stages, DP over X = 2):
     each layer's AllReduce over X of its weight gradients is moved out of
     the backward loop (passes/pipeline_grad.c): the loop stacks the
     unreduced gradient, and one AllReduce per stacked param runs after
     the loops on the stage's stack, once per step on the sum over the
     microbatches.  So no collective is left in the backward loops, a
     stage's backward per microbatch is k = 4 layers of every op in them
     (1f1b, and both loops with zero-bubble's split), and the sync is the
     update, the loss's sum over Z and those two AllReduces once each; the
     price once counted them in every microbatch's backward (right while
     they ran there), which would now fail both sums.
  b. tests/cost/pipeline/pp_embed_mlp.ein: the embedding's gradient (first
     stage, 1 MiB), the head's (last, 256 KiB) and the loss (last, a
     scalar) are summed on one stage only and AllReduced over Z after the
     schedule: stage_sum_time is three AllReduces of those bytes, priced
     as the program's own AllReduces over X (also 2 devices) of the same
     bytes (from the same program with L = 2, whose stage stacks one
     layer: its deferred AllReduce of dWin is 1 MiB), and the sync is that
     plus every update op (each stage runs them) and the deferred
     AllReduces of the stacked gradients.  The price once left them out.
  c. pp_embed_mlp.ein with zero-bubble and zb-h2: the embedding's and the
     head's weight gradients run in B m (the dL/dW loop item runs only
     the loop and what follows it), so the extras' W part is exactly the
     ops outside the loops from the dL/dW loop on (its LoopBegin and
     LoopEnd and the loss's reduction; not the deferred gradient
     collectives, once per step in the sync), and their B part holds dEmb and
     dWh; the price once put those in W m.
  d. pp_embed_mlp.ein: the AllGather over X of the input gradient that
     dEmb reads, and the head's AllReduce over X before the backward loop,
     run per microbatch in B m, in the extras; no collective but the
     deferred ones runs once per step.  With Emb sharded over X (FSDP,
     written here), the AllToAll that brings dEmb to Emb's layout is the
     update's, once per step in the sync, and the AllToAll of dH that
     dEmb reads is in B m.
  e. pp_uniform_mlp.ein with FSDP over X (Win[L_Z, D_X, F], B = 2048,
     where the planner reduce-scatters each layer's weight gradient): one
     ReduceScatter per stacked gradient after the loops, whose time is
     totals.pipeline.grad_once_time and in the sync; their unreduced sums
     (the stage's full gradients, 8 MiB, against 4 MiB reduced) add
     grad_once_bytes = the operands' bytes less the results' to the
     fullest stage's memory, which is 4 MiB below the DP program's at the
     same B (8 MiB of params and reduced gradients fewer, 4 MiB of
     unreduced sums more; without them it would be 8 MiB below).
"""
import json
import os
import sys
import tempfile

from einc_checks import Checks, run

check = Checks()
COLLECTIVES = {"AllGather", "AllReduce", "ReduceScatter", "AllToAll"}


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def compile_json(einc, prog, hw, *flags):
    rc, out, err = run(einc, prog, "--hw", hw, "--dump-ir=json", *flags)
    check(rc == 0, f"{os.path.basename(prog)} {' '.join(flags)}: compiles ({err.strip()[:200]})")
    return json.loads(out) if rc == 0 else None


def t(op):
    return op.get("cost", {}).get("time", 0.0)


def loops(ops):
    """(begin, end) op indices of the loops, in program order."""
    return [(o["index"], o["end"]) for o in ops if o["op"] == "LoopBegin"]


def inside(ops, lp):
    return [o for o in ops if lp[0] < o["index"] < lp[1]]


def deferred(ops):
    """The gradient collectives moved after the loops: a reduction of a
    stack of unreduced partial sums over the layers."""
    return [o for o in ops if o["op"] in ("AllReduce", "ReduceScatter") and "{U" in o["operands"][0]["type"]
            and o["operands"][0]["type"].split("[", 1)[1].startswith("L_Z")]


def check_a(einc, src, hw):
    prog = os.path.join(src, "tests", "cost", "pipeline", "pp_uniform_mlp.ein")
    k = 4  # 8 layers over 2 stages
    for sched in ("1f1b", "zero-bubble"):
        ir = compile_json(einc, prog, hw, f"--schedule={sched}", "--microbatches=4")
        if not ir:
            continue
        ops, p = ir["ops"], ir["totals"]["pipeline"]
        lps = loops(ops)
        back = [o for lp in lps[1:] for o in inside(ops, lp)]  # the backward loop, and zero-bubble's dL/dW one
        inner = [o["op"] for o in back if o["op"] in COLLECTIVES]
        check(not inner, f"a {sched}: no collective left in the backward loops ({inner})")
        once = deferred(ops)
        names = sorted(o["result"]["tensor"] for o in once)
        check(names == ["dWin", "dWout"] and all(o["index"] > lps[-1][1] and o["op"] == "AllReduce" for o in once),
              f"a {sched}: one AllReduce over X of each stacked gradient after the loops ({names})")
        want = k * sum(t(o) for o in back)
        check(close(p["stage_backward_time"], want),
              f"a {sched}: stage backward {p['stage_backward_time'] * 1e6:.3f} us = k x the backward loops' "
              f"ops {want * 1e6:.3f} us, no AllReduce in it")
        upd = sum(t(o) for o in ops if o["phase"] == "update")
        ar = sum(t(o) for o in once)
        want = p.get("stage_sum_time", 0.0) + upd + ar
        check(close(p["sync_time"], want),
              f"a {sched}: sync {p['sync_time'] * 1e6:.3f} us = the loss's sum over Z + the update + the two "
              f"AllReduces once per step {want * 1e6:.3f} us (per microbatch would add "
              f"{3 * ar * 1e6:.3f} us to the step)")


def check_bcd(einc, src, hw):
    prog = os.path.join(src, "tests", "cost", "pipeline", "pp_embed_mlp.ein")
    for sched in ("1f1b", "zero-bubble", "zb-h2"):
        ir = compile_json(einc, prog, hw, f"--schedule={sched}", "--microbatches=4")
        if not ir:
            continue
        ops, p = ir["ops"], ir["totals"]["pipeline"]

        def find(kind, tensor):
            return next((o for o in ops if o["op"] == kind and o["result"]["tensor"] == tensor
                         and o["phase"] == "backward"), {"op": "?"})
        # b: the AllReduces over Z, priced as the module's AllReduces over X
        # of the same bytes (with L = 2, a stage's stack of dWin is 1 MiB).
        one = compile_json(einc, prog, hw, f"--schedule={sched}", "--microbatches=4", "-D", "L=2")
        ar = {o["operands"][0]["bytes_per_device"]: t(o) for o in ops + (one["ops"] if one else [])
              if o["op"] == "AllReduce"}
        once = sum(t(o) for o in deferred(ops))
        want = sum(ar.get(b, float("nan")) for b in (1 << 20, 1 << 18, 4))
        check(close(p.get("stage_sum_time", 0.0), want),
              f"b {sched}: the sums AllReduced over Z (dEmb 1 MiB, dWh 256 KiB, the loss) "
              f"{p.get('stage_sum_time', 0.0) * 1e6:.3f} us = three AllReduces of those bytes {want * 1e6:.3f} us")
        upd = sum(t(o) for o in ops if o["phase"] == "update")
        check(once > 0 and close(p["sync_time"], want + upd + once),
              f"b, d {sched}: sync {p['sync_time'] * 1e6:.3f} us = the AllReduces over Z + the update + the "
              f"deferred gradient AllReduces {(want + upd + once) * 1e6:.3f} us: no other collective runs once per step")
        # d: the per-microbatch collectives outside the loops are in the extras.
        gather, head = find("AllGather", "dH"), find("AllReduce", "dWh")
        check(gather["op"] == "AllGather" and head["op"] == "AllReduce",
              f"d {sched}: dH's AllGather and dWh's AllReduce found")
        b_first = p["first_stage_extra"] - p.get("first_stage_extra_forward", 0) - p.get("first_stage_extra_w", 0)
        b_last = p["last_stage_extra"] - p.get("last_stage_extra_forward", 0) - p.get("last_stage_extra_w", 0)
        demb, dwh = find("Einsum", "dEmb"), find("Einsum", "dWh")
        check(b_first >= t(gather) + t(demb),
              f"c, d {sched}: the first stage's B extra {b_first * 1e6:.3f} us holds dH's AllGather "
              f"{t(gather) * 1e6:.3f} us and dEmb {t(demb) * 1e6:.3f} us")
        check(b_last >= t(head) + t(dwh),
              f"c, d {sched}: the last stage's B extra {b_last * 1e6:.3f} us holds dWh {t(dwh) * 1e6:.3f} us "
              f"and its AllReduce {t(head) * 1e6:.3f} us")
        if sched == "1f1b":
            continue
        # c: the W part is the ops outside the loops from the dL/dW loop's LoopBegin on.
        wb = loops(ops)[2][0]
        in_loop = {o["index"] for lp in loops(ops) for o in inside(ops, lp)}
        moved = {o["index"] for o in deferred(ops)}
        want_w = sum(t(o) for o in ops if o["index"] >= wb and o["index"] not in in_loop and o["phase"] != "update"
                     and o["index"] not in moved)
        got_w = p.get("first_stage_extra_w", -1) + p.get("last_stage_extra_w", -1)
        check(close(got_w, want_w),
              f"c {sched}: the extras' W part {got_w * 1e6:.6f} us = the ops after the dL/dW loop begins "
              f"{want_w * 1e6:.6f} us (dEmb {t(demb) * 1e6:.1f} us and dWh {t(dwh) * 1e6:.1f} us run in B)")

    # d, FSDP: the AllToAll that lays dEmb out as Emb only the update
    # reads (the update's op, once per step, on the sum); the AllToAll of
    # dH that dEmb reads runs per microbatch in B m.
    fsdp = os.path.join(tempfile.mkdtemp(), "pp_embed_fsdp.ein")
    with open(prog) as f, open(fsdp, "w") as g:
        g.write(f.read().replace("param Emb[V, D]", "param Emb[V_X, D]"))
    ir = compile_json(einc, fsdp, hw, "--schedule=1f1b", "--microbatches=4")
    if ir:
        ops, p = ir["ops"], ir["totals"]["pipeline"]
        be = loops(ops)[1][1]
        after = [o for o in ops if o["index"] > be and o["op"] in COLLECTIVES]
        once = [o for o in after if o["result"]["tensor"] == "dEmb"]
        per_mb = [o for o in after if o["result"]["tensor"] == "dH"]
        check(len(once) == 1 and len(per_mb) == 1,
              f"d FSDP: after the backward loop, one collective of dH and one of dEmb ({len(per_mb)}, {len(once)})")
        upd = sum(t(o) for o in ops if o["phase"] == "update")
        want = p.get("stage_sum_time", 0.0) + upd + sum(t(o) for o in deferred(ops))
        check(close(p["sync_time"], want) and all(o["phase"] == "update" for o in once),
              f"d FSDP: sync {p['sync_time'] * 1e6:.3f} us = the AllReduces over Z + the update + the deferred "
              f"gradient AllReduces, dEmb's "
              f"{once[0]['op'] if once else '?'} in it, {want * 1e6:.3f} us")
        b_first = p["first_stage_extra"] - p.get("first_stage_extra_forward", 0)
        check(per_mb and b_first >= t(per_mb[0]),
              f"d FSDP: the first stage's B extra {b_first * 1e6:.3f} us holds dH's "
              f"{per_mb[0]['op'] if per_mb else '?'} {t(per_mb[0]) * 1e6 if per_mb else 0:.3f} us")


def check_e(einc, src, hw):
    prog = os.path.join(src, "tests", "cost", "pipeline", "pp_uniform_mlp.ein")
    work = tempfile.mkdtemp()
    with open(prog) as f:
        text = f.read().replace("B = 512", "B = 2048")
    mem = {}
    for kind, (win, wout) in (("DP", ("Win[L_Z, D, F]", "Wout[L_Z, F, D]")),
                              ("FSDP", ("Win[L_Z, D_X, F]", "Wout[L_Z, F_X, D]"))):
        path = os.path.join(work, kind + ".ein")
        with open(path, "w") as g:
            g.write(text.replace("Win[L_Z, D, F]", win).replace("Wout[L_Z, F, D]", wout))
        ir = compile_json(einc, path, hw, "--schedule=1f1b", "--microbatches=4")
        if not ir:
            return
        ops, p = ir["ops"], ir["totals"]["pipeline"]
        once = deferred(ops)
        want = "ReduceScatter" if kind == "FSDP" else "AllReduce"
        check(sorted(o["op"] for o in once) == [want, want],
              f"e {kind}: one {want} per stacked gradient after the loops ({[o['op'] for o in once]})")
        t_once = sum(t(o) for o in once)
        extra = sum(o["operands"][0]["bytes_per_device"] - o["result"]["bytes_per_device"] for o in once)
        check(close(p["grad_once_time"], t_once) and t_once > 0,
              f"e {kind}: grad_once_time {p['grad_once_time'] * 1e6:.3f} us = the deferred collectives "
              f"{t_once * 1e6:.3f} us")
        check(p["grad_once_bytes"] == extra and extra == (4 << 20 if kind == "FSDP" else 0),
              f"e {kind}: grad_once_bytes {p['grad_once_bytes']} = their operands' bytes less their results' "
              f"{extra} (FSDP: 8 MiB summed, 4 MiB reduced)")
        upd = sum(t(o) for o in ops if o["phase"] == "update")
        check(close(p["sync_time"], p.get("stage_sum_time", 0.0) + upd + t_once),
              f"e {kind}: sync {p['sync_time'] * 1e6:.3f} us holds them once")
        mem[kind] = p["stage_memory"]
    if len(mem) == 2:
        check(close(mem["DP"] - mem["FSDP"], 4 << 20),
              f"e: the FSDP stage holds its unreduced gradients: DP's memory less FSDP's "
              f"{(mem['DP'] - mem['FSDP']) / 2**20:.3f} MiB = 4 MiB (8 MiB without them)")


def main():
    einc, src = sys.argv[1], sys.argv[2]
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()
    hw = os.path.join(src, "hw", "host.json")
    check_a(einc, src, hw)
    check_bcd(einc, src, hw)
    check_e(einc, src, hw)
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
