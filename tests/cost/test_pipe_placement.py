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
  c. pp_embed_mlp.ein with zero-bubble and zb-h2: the split backward
     runs every weight gradient in W m (Qi et al.'s split;
     passes/pipeline_split.c moves the embedding's and the head's after
     the dL/dW loop, pipe_work_split_w), so the extras' W part is exactly
     the ops outside the loops from the dL/dW loop on (its LoopBegin and
     LoopEnd, dWh, the AllGather of dH and dEmb; not the deferred gradient
     collectives nor dWh's AllReduce, once per step in the sync) plus the
     adds of dEmb and dWh into their sums (3 x bytes / hbm_bw), and their B
     part holds neither dEmb nor dWh.  1f1b runs them in B m.
  d. pp_embed_mlp.ein: the AllGather over X of the input gradient that
     dEmb reads runs per microbatch, in the extras; so does the head's
     AllReduce over X with 1f1b, before the backward loop; with the split
     schedules it follows dWh after the backward loop and, linear and
     read by the update only, runs once per step in the sync.  No other
     collective but the deferred ones runs once per step.  With Emb sharded over X (FSDP,
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
  f. pp_embed_mlp.ein with zero-bubble on Z = 2 and 4 stages, M = 2Z: the
     predicted bubble is its own table replayed with the costed items
     (check_f), and with dEmb and dWh back in B the same table replays to
     a bubble no smaller (8.41% against 8.29% at Z = 2, 14.64% against
     14.14% at Z = 4, the price before the split moved them).
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
    for sched in ("1f1b", "zb-h1"):
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
    bw = json.load(open(hw))["hbm_bandwidth"]
    sum_emb, sum_wh = 3 * (1 << 20) / bw, 3 * (1 << 18) / bw  # dEmb's and dWh's adds into their sums
    b_1f1b = None
    for sched in ("1f1b", "zb-h1", "zb-h2"):
        split = sched != "1f1b"
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
        # d: the per-microbatch collectives outside the loops are in the extras.
        gather, head = find("AllGather", "dH"), find("AllReduce", "dWh")
        check(gather["op"] == "AllGather" and head["op"] == "AllReduce",
              f"d {sched}: dH's AllGather and dWh's AllReduce found")
        head_once = t(head) if split else 0.0
        check(once > 0 and close(p["sync_time"], want + upd + once + head_once),
              f"b, d {sched}: sync {p['sync_time'] * 1e6:.3f} us = the AllReduces over Z + the update + the "
              f"deferred gradient AllReduces{' + dWh' + chr(39) + 's AllReduce' if split else ''} "
              f"{(want + upd + once + head_once) * 1e6:.3f} us: no other collective runs once per step")
        b_first = p["first_stage_extra"] - p.get("first_stage_extra_forward", 0) - p.get("first_stage_extra_w", 0)
        b_last = p["last_stage_extra"] - p.get("last_stage_extra_forward", 0) - p.get("last_stage_extra_w", 0)
        demb = next((o for o in ops if o["result"]["tensor"] == "dEmb" and o["phase"] == "backward"), {"op": "?"})
        dwh = find("Einsum", "dWh")
        check(demb["op"] != "?" and dwh["op"] == "Einsum", f"c {sched}: dEmb and dWh found")
        if not split:
            b_1f1b = (b_first, b_last)
            check(b_first >= t(gather) + t(demb),
                  f"c, d {sched}: the first stage's B extra {b_first * 1e6:.3f} us holds dH's AllGather "
                  f"{t(gather) * 1e6:.3f} us and dEmb {t(demb) * 1e6:.3f} us")
            check(b_last >= t(head) + t(dwh),
                  f"c, d {sched}: the last stage's B extra {b_last * 1e6:.3f} us holds dWh {t(dwh) * 1e6:.3f} us "
                  f"and its AllReduce {t(head) * 1e6:.3f} us")
            continue
        # c: the W part is the ops outside the loops from the scalar the
        # dL/dW loop carries on (but the collectives once per step) and the
        # sums' adds.
        wb = next((o["index"] for o in ops if o["result"]["tensor"] == "dW_loop"), loops(ops)[2][0])
        check(min(demb.get("index", -1), dwh.get("index", -1), gather.get("index", -1)) > loops(ops)[2][1],
              f"c {sched}: dWh, dH's AllGather and dEmb follow the dL/dW loop (the W item)")
        in_loop = {o["index"] for lp in loops(ops) for o in inside(ops, lp)}
        moved = {o["index"] for o in deferred(ops)} | {head.get("index")}
        want_w = sum(t(o) for o in ops if o["index"] >= wb and o["index"] not in in_loop and o["phase"] != "update"
                     and o["index"] not in moved) + sum_emb + sum_wh
        got_w = p.get("first_stage_extra_w", -1) + p.get("last_stage_extra_w", -1)
        check(close(got_w, want_w),
              f"c {sched}: the extras' W part {got_w * 1e6:.6f} us = the ops after the dL/dW loop begins and "
              f"the sums' adds {want_w * 1e6:.6f} us (dEmb {t(demb) * 1e6:.1f} us and dWh {t(dwh) * 1e6:.1f} us "
              f"among them)")
        if b_1f1b:
            # the loss's reduction after the backward loop runs in B m with 1f1b and
            # after the dL/dW loop, in W m, with a split backward
            red = sum(t(o) for o in ops if o["op"] == "AllReduce" and o["phase"] == "forward")
            want_b = (b_1f1b[0] - t(gather) - t(demb) - sum_emb, b_1f1b[1] - t(dwh) - t(head) - sum_wh - red)
            check(abs(b_first - want_b[0]) < 1e-12 and abs(b_last - want_b[1]) < 1e-12,
                  f"c {sched}: the B extras, first {b_first * 1e6:.3f} us and last {b_last * 1e6:.3f} us, are "
                  f"1f1b's less dH's AllGather, dEmb and its sum ({want_b[0] * 1e6:.3f} us) and less dWh, its "
                  f"AllReduce and its sum and the loss's reduction ({want_b[1] * 1e6:.3f} us)")

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


def replay(rows, times, hop):
    """The bubble of the schedule table `rows` (--dump-ir=json's
    pipeline.table) with per-stage item times {(stage, "F"|"B"|"W"): s}:
    each stage runs its row in order, an item starting when its stage is
    free and its input is ready (F m after F m on the stage before plus a
    hop, B m after F m and B m on the stage after plus a hop, W m after
    B m), as pp_build simulates a table (passes/costmodel/pipeline_sim.c)."""
    order = {int(r.split("|")[0].split()[1]): [x for x in r.split("|")[1].split() if x != "."] for r in rows}
    Z, done, free, pos = len(order), {}, [0.0] * len(order), [0] * len(order)
    total = sum(len(v) for v in order.values())
    while len(done) < total:
        moved = False
        for s in range(Z):
            if pos[s] == len(order[s]):
                continue
            item = order[s][pos[s]]
            kind, mb = item[0], int(item[1:])
            deps = {"F": [((s - 1, "F", mb), hop)] if s > 0 else [],
                    "B": [((s, "F", mb), 0.0)] + ([((s + 1, "B", mb), hop)] if s < Z - 1 else []),
                    "W": [((s, "B", mb), 0.0)]}[kind]
            if any(d not in done for d, _ in deps):
                continue
            start = max([free[s]] + [done[d] + h for d, h in deps])
            free[s] = done[(s, kind, mb)] = start + times[(s, kind)]
            pos[s] += 1
            moved = True
        if not moved:
            raise RuntimeError("the table deadlocks")
    span = max(free)
    work = sum(times[(s, x[0])] for s in range(Z) for x in order[s])
    return 1 - work / (Z * span)


def check_f(einc, src, hw):
    """f. The price of zero-bubble's weight gradients outside the block in
    W: pp_embed_mlp.ein on Z = 2 and 4 stages (M = 2Z), its predicted
    bubble is the replay of its own table with each stage's F, B and W
    from its costed ops (the dL/dW loop and the dL/dx loop's LayerStacks k
    times, and first_stage_extra_w / last_stage_extra_w, W; the rest of
    the backward, B), and with the head's weight gradient dWh, its
    AllReduce over X (per microbatch there) and the adds of dEmb and dWh
    into their sums back in B (their place before the split moved them,
    the loss's reduction staying in W) the same order replays to a bubble
    no smaller, and larger at Z = 4, where the stages between wait for the
    last stage's B."""
    prog = os.path.join(src, "tests", "cost", "pipeline", "pp_embed_mlp.ein")
    with open(prog) as f:
        text = f.read()
    for Z in (2, 4):
        path = os.path.join(tempfile.mkdtemp(), f"pp_embed_z{Z}.ein")
        with open(path, "w") as g:
            g.write(text.replace("mesh Z = 2, X = 2", f"mesh Z = {Z}, X = 2"))
        ir = compile_json(einc, path, hw, "--schedule=zb-h1", f"--microbatches={2 * Z}")
        if not ir:
            continue
        ops, p = ir["ops"], ir["totals"]["pipeline"]
        k = 8 // Z
        lps = loops(ops)
        w_layer = sum(t(o) for o in inside(ops, lps[2])) + \
            sum(t(o) for o in inside(ops, lps[1]) if o["op"] == "LayerStack")
        new = {}
        for s in range(Z):
            f = p["stage_forward_time"] + (p["first_stage_extra_forward"] if s == 0 else 0) + \
                (p["last_stage_extra_forward"] if s == Z - 1 else 0)
            bw = p["stage_backward_time"] + \
                (p["first_stage_extra"] - p["first_stage_extra_forward"] if s == 0 else 0) + \
                (p["last_stage_extra"] - p["last_stage_extra_forward"] if s == Z - 1 else 0)
            w = k * w_layer + (p["first_stage_extra_w"] if s == 0 else 0) + \
                (p["last_stage_extra_w"] if s == Z - 1 else 0)
            new.update({(s, "F"): f, (s, "B"): bw - w, (s, "W"): w})
        got = replay(ir["pipeline"]["table"], new, p["hop_time"])
        check(close(got, p["bubble"], 1e-6),
              f"f Z = {Z}: zero-bubble's predicted bubble {100 * p['bubble']:.3f}% = its table replayed with the "
              f"costed items, the weight gradients outside the block in W, {100 * got:.3f}%")
        bw_ = json.load(open(hw))["hbm_bandwidth"]
        head = next(o for o in ops if o["op"] == "AllReduce" and o["result"]["tensor"] == "dWh")
        dwh = next(o for o in ops if o["op"] == "Einsum" and o["result"]["tensor"] == "dWh")
        demb = next(o for o in ops if o["result"]["tensor"] == "dEmb" and o["phase"] == "backward")
        gather = next(o for o in ops if o["op"] == "AllGather" and o["result"]["tensor"] == "dH")
        first_w = t(gather) + t(demb) + 3 * (1 << 20) / bw_
        last_w = t(dwh) + 3 * (1 << 18) / bw_
        old = dict(new)
        old[(0, "B")] += first_w
        old[(0, "W")] -= first_w
        old[(Z - 1, "B")] += last_w + t(head)
        old[(Z - 1, "W")] -= last_w
        before = replay(ir["pipeline"]["table"], old, p["hop_time"])
        check(before >= got - 1e-12 and (Z == 2 or before > got + 1e-3),
              f"f Z = {Z}: with dEmb and dWh in B, as before the split moved them, the same table replays to "
              f"{100 * before:.3f}% (>= {100 * got:.3f}%{', by over 0.1 points' if Z > 2 else ''})")


def main():
    einc, src = sys.argv[1], sys.argv[2]
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()
    hw = os.path.join(src, "hw", "host.json")
    check_a(einc, src, hw)
    check_bcd(einc, src, hw)
    check_e(einc, src, hw)
    check_f(einc, src, hw)
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
