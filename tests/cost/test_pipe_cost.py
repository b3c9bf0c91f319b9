#!/usr/bin/env python3
"""test_pipe_cost.py - the cost pass's step of a compiled pipelined program
(passes/cost_pipe.c, docs/pipeline.md "The cost of a compiled pipelined
program"), read from `--dump-ir=json` totals.pipeline.

On a residual MLP stack pipelined over Z = 2 stages of 4 layers whose
stages do the same work (tests/cost/pipeline/pp_uniform_mlp.ein), for
gpipe and 1f1b and M = 1, 2, 4, 8:
  - accounting at M = 1: the stages run one after the other, so the
    pipeline is Z stage-times, the first and last stages' extras and
    2 (Z - 1) hops, exactly;
  - the bubble is (Z - 1) / (M + Z - 1) within 1% (the stages are uniform
    within 1%, checked first), and the pipeline lies between the uniform
    closed form (M + Z - 1)(F + B) and that plus every extra and hop;
  - the per-microbatch work shrinks as 1/M (the module is one microbatch)
    and the step decreases with M up to 4 (the DP AllReduces inside the
    backward loop run per microbatch);
  - GPipe holds M microbatches, 1F1B min(Z, M), and 1F1B's fullest stage
    needs less memory than GPipe's when M > Z; at M <= Z they agree;
  - the hop is one ICI link's (latency + bytes / one-way bandwidth), or
    the chip's DCN share when the pipeline axis is `over dcn` (TPU v5p),
    and on the calibrated host profile the measured 2-device AllGather of
    the block (its per-call wake-up, bandwidth and copy),
    and so is the cost of each of the two CollectivePermutes at the stage
    boundary (the activation forward, its gradient back), the same number
    as the schedule's hop;
  - an unpipelined program has no totals.pipeline, and --dump-cost prints
    the pipeline section.
Zero-bubble at M = 4, 8 prices the module whose backward loop the pipeline
pass split into dL/dx and dL/dW loops (passes/pipeline_split.c): the same
stage forward as 1f1b's, a stage backward (B + W) no shorter and at most
15% longer (the per-layer stacks that carry values from B to W, and
their slices), the same sync and update, at most Z microbatches held, no
closed form for its bubble (bubble_formula -1, "no closed form" in
--dump-cost) and a simulated bubble below 1f1b's, at M = 2Z at most half;
zb-h2 (ZB-H2) at M = 4, 8 the same stage times, at least as many held (at
most 2Z - 1), at least zero-bubble's memory and a bubble no larger.
Without flags the choice is the fastest of every (schedule, v, M) forced,
zb-h2 among them; under a small HBM the fastest that fits; and a pair
given by both flags over the HBM is compiled with a warning naming the
nearest pair that fits.
The same stack as a forward (pp_uniform_mlp_forward.ein, inference) is
priced by its M forwards: at M = 1, 2, 4, 8 the pipeline is one hop plus
the slower stage's M forwards and the other's one, exactly, the bubble (Z - 1) / (M + Z - 1) within 1%, no backward, sync or
update; the default M is Z.
"""
import json
import os
import sys
import tempfile

from einc_checks import Checks, run

check = Checks()
Z = 2


def pipe_ir(einc, prog, hw, *extra):
    """The --dump-ir=json of `prog` compiled with `extra`, or None."""
    rc, out, err = run(einc, prog, "--hw", hw, "--dump-ir=json", *extra)
    check(rc == 0, f"{os.path.basename(prog)} {' '.join(extra)} compiles ({err.strip()[:200]})")
    return json.loads(out) if rc == 0 else None


def pipe_totals(einc, prog, hw, *extra):
    """totals.pipeline of `prog` compiled with `extra`, or None."""
    ir = pipe_ir(einc, prog, hw, *extra)
    return ir["totals"].get("pipeline") if ir else None


def check_permutes(ir, want, what):
    """The module's stage boundaries are two CollectivePermutes along Z, the
    activation forward (+1, pairs 0->1) and its gradient back (-1, 1->0),
    each priced at `want` seconds (seed 001's one hop), which is also the
    schedule's hop (totals.pipeline.hop_time): one source."""
    perms = [op for op in ir["ops"] if op["op"] == "CollectivePermute"]
    got = [(op["axes"], op["delta"], op["pairs"], op["operands"][0]["tensor"]) for op in perms]
    check(got == [(["Z"], 1, [[0, 1]], "H"), (["Z"], -1, [[1, 0]], "dH")],
          f"{what}: a CollectivePermute_Z(+1) of H after the forward loop and (-1) of dH after the backward loop: {got}")
    for op in perms:
        t = op["cost"]["time"]
        check(close(t, want, 1e-9), f"{what}: CollectivePermute_Z({op['delta']:+d}) costs {t:.6g} s = one hop {want:.6g} s")
        check(t == ir["totals"]["pipeline"]["hop_time"], f"{what}: the permute's time is the schedule's hop")


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


ORDER = ("1f1b", "gpipe", "zb-h1", "zb-h2", "interleaved")


def key_of(ir):
    """(schedule, v, M) of a compiled pipelined program."""
    p = ir["pipeline"]
    return (p["schedule"], p["chunks"] if p["schedule"] == "interleaved" else 1, p["microbatches"])


def forced_steps(einc, prog, hw, *extra):
    """{(schedule, v, M): (step, stage memory)} of `prog` compiled with each
    forced: gpipe, 1f1b, zero-bubble and zb-h2 at M = 1 .. 64, interleaved with
    v = 2, 4 at every M that is a multiple of Z."""
    out = {}
    for s in ORDER:
        for v in ((2, 4) if s == "interleaved" else (1,)):
            for m in (1, 2, 4, 8, 16, 32, 64):
                if s == "interleaved" and m % Z:
                    continue
                chunks = [f"--chunks={v}"] if s == "interleaved" else []
                p = pipe_totals(einc, prog, hw, f"--microbatches={m}", f"--schedule={s}", *chunks, *extra)
                if p:
                    out[(s, v, m)] = (p["step_time"], p["stage_memory"])
    return out


def check_memory(einc, prog, src, forced):
    """The choice drops the (schedule, M) pairs whose fullest stage exceeds
    the profile's HBM: on host.json with hbm_bytes just below the fastest
    pair's peak, the choice is the fastest forced pair that fits, a note
    names the one dropped and --dump-cost says how many did not fit; below
    every pair's peak, the smallest peak, with a warning naming the change
    that would make room (--remat=layer when the params, gradients and
    state fit; more stages when they alone do not).  A pair given by both
    --schedule and --microbatches is compiled as asked: over the HBM with
    a warning naming its peak, the HBM and a pair that fits (1f1b at the
    same M, or more microbatches), and --dump-cost says "given" with
    "above" or "within".  With one flag given and nothing fitting, the
    warning names the nearest pair that fits (1f1b for a given schedule,
    more microbatches for a given M)."""
    host = json.load(open(os.path.join(src, "hw", "host.json")))
    fastest = min(forced, key=lambda k: forced[k][0])
    smallest = min(forced, key=lambda k: (forced[k][1], ORDER.index(k[0]), k[1], k[2]))
    # A stage's params and gradients: 4 layers of Win and Wout, f32.
    fixed = 2 * 2 * 4 * 256 * 1024 * 4
    with tempfile.TemporaryDirectory() as d:
        def compile_with(hbm, *extra):
            host["hbm_bytes"] = hbm
            path = os.path.join(d, f"small_{int(hbm)}.json")
            with open(path, "w") as f:
                json.dump(host, f)
            return run(einc, prog, "--hw", path, *extra)

        hbm = 0.97 * forced[fastest][1]
        fits = {k: t for k, (t, mem) in forced.items() if mem <= hbm}
        want = min(fits, key=lambda k: (fits[k], ORDER.index(k[0]), k[1], k[2]))
        check(fastest not in fits and len(fits) < len(forced),
              f"HBM {hbm:.0f} B: the fastest {fastest} ({forced[fastest][1]:.0f} B) does not fit")
        rc, out, err = compile_with(hbm, "--dump-ir=json")
        got = key_of(json.loads(out)) if rc == 0 else None
        check(got == want, f"HBM {hbm:.0f} B: the choice {got} is the fastest of the {len(fits)} forced pairs "
              f"that fit ({want}, {forced[want][1]:.0f} B)")
        check("note: pipeline:" in err and "would be fastest" in err and "above" in err,
              f"HBM {hbm:.0f} B: a note names the fastest pair dropped ({err.strip()[-300:]})")
        rc, out, err = compile_with(hbm, "--dump-cost")
        check(rc == 0 and f"{len(forced) - len(fits)} do not" in out,
              f"HBM {hbm:.0f} B: --dump-cost says {len(forced) - len(fits)} pairs do not fit")

        low = forced[smallest][1]
        check(fixed < low, f"the stage's params and gradients {fixed} B are below every peak ({low:.0f} B)")
        for hbm, advice in ((0.5 * (fixed + low), "--remat=layer"), (0.5 * fixed, "more stages")):
            rc, out, err = compile_with(hbm, "--dump-ir=json")
            got = key_of(json.loads(out)) if rc == 0 else None
            check(got == smallest, f"HBM {hbm:.0f} B: nothing fits, the smallest peak is compiled ({got}, "
                  f"want {smallest})")
            check("warning: no pipeline schedule fits" in err and advice in err,
                  f"HBM {hbm:.0f} B: a warning names the change ({advice}): {err.strip()[-300:]}")

        # Forced pairs: gpipe at M = 8 over the HBM where 1f1b at M = 8
        # fits; 1f1b at M = 2 over it where 1f1b at some larger M fits.
        gp, ob = forced[("gpipe", 1, 8)][1], forced[("1f1b", 1, 8)][1]
        hbm = 0.5 * (gp + ob)
        check(ob < hbm < gp, f"gpipe M=8 ({gp:.0f} B) holds more than 1f1b M=8 ({ob:.0f} B)")
        gib = 1024.0 ** 3
        for flags, peak, advice in ((("--schedule=gpipe", "--microbatches=8"), gp, "--schedule=1f1b at the same M fits"),
                                    (("--schedule=1f1b", "--microbatches=2"), forced[("1f1b", 1, 2)][1],
                                     "--microbatches=")):
            rc, out, err = compile_with(hbm, "--dump-ir=json", *flags)
            got = key_of(json.loads(out)) if rc == 0 else None
            want = (flags[0].split("=")[1], 1, int(flags[1].split("=")[1]))
            check(got == want, f"HBM {hbm:.0f} B, {' '.join(flags)}: compiled as asked ({got})")
            warn = [ln for ln in err.splitlines() if "warning: pipeline: the given" in ln]
            check(len(warn) == 1 and f"needs {peak / gib:.4g} GiB" in warn[0] and f"{hbm / gib:.4g} GiB" in warn[0]
                  and advice in warn[0] and "error" not in err,
                  f"HBM {hbm:.0f} B, {' '.join(flags)}: a warning names the peak {peak / gib:.4g} GiB, the HBM and "
                  f"'{advice}': {warn}")
            rc, out, err = compile_with(hbm, "--dump-cost", *flags)
            check(rc == 0 and "schedule and M given: " in out and "above" in out,
                  f"HBM {hbm:.0f} B, {' '.join(flags)}: --dump-cost says the given pair is above the HBM")
        # One flag given, nothing fitting: the choice's warning names the
        # nearest pair that fits, priced: 1f1b at its fastest fitting M for
        # --schedule=gpipe, and 1f1b at the first of 4, 8, ... microbatches
        # that fits for --microbatches=2.
        ob_fit = {m: forced[("1f1b", 1, m)] for m in (1, 2, 4, 8, 16, 32, 64) if forced[("1f1b", 1, m)][1] <= hbm}
        fastest_ob = min(ob_fit, key=lambda m: (ob_fit[m][0], m))
        more = min(m for m in ob_fit if m > 2)
        for flags, advice in ((("--schedule=gpipe",), f"--schedule=1f1b fits, fastest with --microbatches={fastest_ob} "),
                              (("--microbatches=2",), f"--microbatches={more} with --schedule=1f1b fits")):
            rc, out, err = compile_with(hbm, "--dump-cost", *flags)
            warn = [ln for ln in err.splitlines() if "warning: no pipeline schedule fits" in ln]
            check(rc == 0 and len(warn) == 1 and advice in warn[0],
                  f"HBM {hbm:.0f} B, {flags[0]} alone: nothing fits, the warning names '{advice}': {warn}")
        # Within the HBM: no warning; --dump-cost says so.
        rc, out, err = compile_with(hbm, "--dump-cost", "--schedule=1f1b", "--microbatches=8")
        check(rc == 0 and "the given" not in err and "schedule and M given: 1f1b, M = 8" in out and "within" in out,
              f"HBM {hbm:.0f} B: 1f1b M=8 fits, no warning, --dump-cost says within")


def main():
    einc, src = sys.argv[1], sys.argv[2]
    prog = os.path.join(src, "tests", "cost", "pipeline", "pp_uniform_mlp.ein")
    rows = {}
    for s in ("gpipe", "1f1b"):
        for m in (1, 2, 4, 8):
            p = pipe_totals(einc, prog, "host", f"--microbatches={m}", f"--schedule={s}")
            check(p is not None, f"{s} M={m}: totals.pipeline present")
            if p is None:
                return
            rows[(s, m)] = p
            check(p["stages"] == Z and p["microbatches"] == m and p["schedule"] == s,
                  f"{s} M={m}: stages, microbatches and schedule recorded")
            f, b = p["stage_forward_time"], p["stage_backward_time"]
            extra = p["first_stage_extra"] + p["last_stage_extra"]
            check(extra <= 0.01 * (f + b), f"{s} M={m}: stages uniform within 1% ({extra:.3g} s of {f + b:.3g} s)")
            check(abs(p["bubble_formula"] - (Z - 1) / (m + Z - 1)) < 1e-12, f"{s} M={m}: formula (Z-1)/(M+Z-1)")
            check(abs(p["bubble"] - p["bubble_formula"]) <= 0.01,
                  f"{s} M={m}: bubble {p['bubble']:.4f} simulated vs {p['bubble_formula']:.4f}")
            lo = (m + Z - 1) * (f + b)
            hi = lo + m * extra + 2 * m * Z * p["hop_time"]
            check(lo <= p["pipeline_time"] <= hi,
                  f"{s} M={m}: pipeline {p['pipeline_time']:.6g} s within [{lo:.6g}, {hi:.6g}]")
            check(close(p["step_time"], p["pipeline_time"] + p["sync_time"], 1e-12),
                  f"{s} M={m}: step = pipeline + sync and update")
            check(p["held_microbatches"] == (m if s == "gpipe" else min(Z, m)),
                  f"{s} M={m}: holds {p['held_microbatches']} microbatches")

    for s in ("gpipe", "1f1b"):
        p = rows[(s, 1)]
        serial = Z * (p["stage_forward_time"] + p["stage_backward_time"]) + p["first_stage_extra"] + \
            p["last_stage_extra"] + 2 * (Z - 1) * p["hop_time"]
        check(close(p["pipeline_time"], serial, 1e-9),
              f"{s} M=1: pipeline {p['pipeline_time']:.9g} s = the stages in turn {serial:.9g} s")
        # Up to M = 4; beyond it the per-layer AllReduces over X of the
        # weight gradients, run in every microbatch's backward and
        # latency-bound on host at a microbatch's size, outweigh the
        # bubble they shrink.
        steps = [rows[(s, m)]["step_time"] for m in (1, 2, 4)]
        check(all(a > b for a, b in zip(steps, steps[1:])), f"{s}: the step decreases with M up to 4: {steps}")
        for m in (2, 4, 8):
            r = rows[(s, m)]["stage_forward_time"] / rows[(s, 1)]["stage_forward_time"]
            check(0.8 / m <= r <= 1.25 / m, f"{s} M={m}: a microbatch's forward is about 1/M of the batch's ({r:.3f})")
        sync = {rows[(s, m)]["sync_time"] for m in (1, 2, 4, 8)}
        check(max(sync) - min(sync) <= 1e-9 * max(sync), f"{s}: gradient sync and update once per step, whatever M")
    for m in (1, 2, 4, 8):
        g, o = rows[("gpipe", m)]["stage_memory"], rows[("1f1b", m)]["stage_memory"]
        if m > Z:
            check(o < g, f"M={m} > Z: 1f1b's stage needs less memory ({o:.0f} B) than gpipe's ({g:.0f} B)")
        else:
            check(o == g, f"M={m} <= Z: 1f1b and gpipe hold the same ({o:.0f} B)")
        check(close(rows[("gpipe", m)]["pipeline_time"], rows[("1f1b", m)]["pipeline_time"], 0.01),
              f"M={m}: gpipe and 1f1b take the same time on uniform stages")

    for m in (4, 8):
        p, o = pipe_totals(einc, prog, "host", f"--microbatches={m}", "--schedule=zb-h1"), rows[("1f1b", m)]
        check(p is not None and p["schedule"] == "zb-h1", f"zero-bubble M={m}: priced")
        if not p:
            continue
        check(close(p["stage_forward_time"], o["stage_forward_time"], 1e-9),
              f"zero-bubble M={m}: the stage forward is 1f1b's")
        r = p["stage_backward_time"] / o["stage_backward_time"]
        check(1 - 1e-9 <= r <= 1.15, f"zero-bubble M={m}: stage backward B + W {r:.3f} of 1f1b's")
        check(close(p["sync_time"], o["sync_time"], 1e-9), f"zero-bubble M={m}: the same sync and update")
        check(p["held_microbatches"] <= Z, f"zero-bubble M={m}: holds {p['held_microbatches']} <= Z")
        check(p["bubble_formula"] < 0, f"zero-bubble M={m}: no closed form for the bubble")
        limit = 0.5 * o["bubble"] if m == 2 * Z else o["bubble"]
        check(p["bubble"] < limit, f"zero-bubble M={m}: bubble {p['bubble']:.4f} < {limit:.4f} (1f1b's "
              f"{o['bubble']:.4f}{', halved' if m == 2 * Z else ''})")
        # ZB-H2: twice the warm-up forwards (up to 2Z - 1 held), the same
        # split stage times, a bubble no larger (Z = 2 here).
        h = pipe_totals(einc, prog, "host", f"--microbatches={m}", "--schedule=zb-h2")
        check(h is not None and h["schedule"] == "zb-h2", f"zb-h2 M={m}: priced")
        if h:
            check(close(h["stage_forward_time"], p["stage_forward_time"], 1e-12) and
                  close(h["stage_backward_time"], p["stage_backward_time"], 1e-12),
                  f"zb-h2 M={m}: zero-bubble's stage forward and backward")
            check(p["held_microbatches"] <= h["held_microbatches"] <= 2 * Z - 1 and
                  h["stage_memory"] >= p["stage_memory"],
                  f"zb-h2 M={m}: holds {h['held_microbatches']} (zero-bubble {p['held_microbatches']}, <= 2Z-1), "
                  f"{h['stage_memory']:.0f} B >= {p['stage_memory']:.0f} B")
            check(h["bubble"] <= p["bubble"] + 1e-12 and h["bubble_formula"] < 0,
                  f"zb-h2 M={m}: bubble {h['bubble']:.4f} <= zero-bubble's {p['bubble']:.4f}")
    rc, out, err = run(einc, prog, "--hw", "host", "--dump-cost", "--microbatches=4", "--schedule=zb-h1")
    check(rc == 0 and "schedule zb-h1: step" in out and "no closed form" in out,
          "--dump-cost prints zero-bubble's section, with no closed form for its bubble")

    # The hop: one microbatch's carried activation, rows |B| / M / X of D f32.
    hw = json.load(open(os.path.join(src, "hw", "tpu-v5p.json")))
    m = 2
    carry = 512 // m // 2 * 256 * 4
    ici_ir = pipe_ir(einc, prog, "tpu-v5p", f"--microbatches={m}")
    with open(prog) as f:
        text = f.read()
    with tempfile.TemporaryDirectory() as d:
        dcn_prog = os.path.join(d, "pp_dcn.ein")
        with open(dcn_prog, "w") as f:
            f.write(text.replace("mesh Z = 2, X = 2", "mesh Z = 2 over dcn, X = 2"))
        dcn_ir = pipe_ir(einc, dcn_prog, "tpu-v5p", f"--microbatches={m}")
    if ici_ir and dcn_ir:
        ici, dcn = ici_ir["totals"]["pipeline"], dcn_ir["totals"]["pipeline"]
        want = hw["ici_latency"] + carry / hw["ici_oneway_bandwidth"]
        check(close(ici["hop_time"], want, 1e-9), f"ICI hop {ici['hop_time']:.6g} s = latency + bytes / link {want:.6g} s")
        check_permutes(ici_ir, want, "ICI")
        want = carry / hw["dcn_bandwidth"]
        check(close(dcn["hop_time"], want, 1e-9), f"DCN hop {dcn['hop_time']:.6g} s = bytes / W_dcn {want:.6g} s")
        check_permutes(dcn_ir, want, "DCN")
        check(dcn["pipeline_time"] > ici["pipeline_time"], "slower hops lengthen the pipeline")

    # On a calibrated host the hop is the measured 2-device AllGather of the
    # block (costmodel.h cost_hop_time): its per-call wake-up t_launch +
    # l_sync, then the block over its bandwidth and its local copy.
    host_json = os.path.join(src, "hw", "host.json")
    ag = json.load(open(host_json))["calibration"]["collectives"]["allgather"]
    for m in (2, 8):
        carry = 512 // m // 2 * 256 * 4
        fit = ag["small_messages"] if 2 * carry < ag["small_messages"]["below_bytes"] else ag
        want = fit["t_launch"] + fit["l_sync"] + carry / fit["bandwidth"] + carry / fit["local_bandwidth"]
        ir = pipe_ir(einc, prog, host_json, f"--microbatches={m}", "--schedule=1f1b")
        if ir:
            got = ir["totals"]["pipeline"]["hop_time"]
            check(close(got, want, 1e-9), f"host M={m}: hop {got:.6g} s = the 2-device AllGather fit of "
                  f"{carry} bytes {want:.6g} s")
            check(got >= fit["t_launch"], f"host M={m}: the hop pays the calibrated wake-up {fit['t_launch']:.3g} s")
            check_permutes(ir, want, f"host M={m}")

    # Not pipelined: no pipeline member.  --dump-cost prints the section.
    flat = os.path.join(src, "tests", "cost", "pipeline", "dp_layers_v5p.ein")
    rc, out, err = run(einc, flat, "--hw", "tpu-v5p", "--dump-ir=json")
    check(rc == 0 and "pipeline" not in json.loads(out)["totals"], "an unpipelined program has no totals.pipeline")
    rc, out, err = run(einc, prog, "--hw", "host", "--dump-cost", "--microbatches=4", "--schedule=gpipe")
    check(rc == 0 and "pipeline: 2 stages x 4 layers, 4 microbatches, schedule gpipe: step" in out and
          "by (Z-1)/(M+Z-1)" in out, "--dump-cost prints the pipeline section")

    # A pipelined forward: M forwards through the recurrence.
    fwd = os.path.join(src, "tests", "cost", "pipeline", "pp_uniform_mlp_forward.ein")
    for m in (1, 2, 4, 8):
        p = pipe_totals(einc, fwd, "host", f"--microbatches={m}")
        check(p is not None and p["forward"] and p["microbatches"] == m, f"forward M={m}: priced as a forward")
        if not p:
            continue
        f, extra = p["stage_forward_time"], p["first_stage_extra"] + p["last_stage_extra"]
        check(p["stage_backward_time"] == 0 and p["sync_time"] == 0, f"forward M={m}: no backward, sync or update")
        check(extra <= 0.01 * f, f"forward M={m}: stages uniform within 1% ({extra:.3g} s of {f:.3g} s)")
        # Two stages, t0 = F + the first's extra, t1 = F + the last's: the
        # slower one runs back to back, the other fills or drains once.
        t0, t1 = f + p["first_stage_extra"], f + p["last_stage_extra"]
        want = p["hop_time"] + max(t0 + m * t1, m * t0 + t1)
        check(close(p["pipeline_time"], want, 1e-9) and close(p["step_time"], want, 1e-9),
              f"forward M={m}: pipeline {p['pipeline_time']:.9g} s = hop + max(t0 + M t1, M t0 + t1) {want:.9g} s")
        check(abs(p["bubble"] - (Z - 1) / (m + Z - 1)) <= 0.01,
              f"forward M={m}: bubble {p['bubble']:.4f} vs (Z-1)/(M+Z-1) {(Z - 1) / (m + Z - 1):.4f}")
    p = pipe_totals(einc, fwd, "host")
    check(p is not None and p["microbatches"] == Z, f"forward: the default M is Z ({p and p['microbatches']})")
    rc, out, err = run(einc, fwd, "--hw", "host", "--dump-cost", "--microbatches=4")
    check(rc == 0 and "pipeline (forward): 2 stages x 4 layers, 4 microbatches: step" in out,
          "--dump-cost prints the forward pipeline section")

    # Without --microbatches the pipeline pass takes the M the cost model
    # rates fastest: the argmin of the steps priced with each M forced
    # (with --schedule=1f1b; without --schedule, each M forced with the
    # schedule it then chooses).
    for hwname in ("host", "tpu-v5p"):
        for sched in (["--schedule=1f1b"], []):
            steps = {}
            for m in (1, 2, 4, 8, 16, 32, 64):
                p = pipe_totals(einc, prog, hwname, f"--microbatches={m}", *sched)
                if p:
                    steps[m] = p["step_time"]
            chosen = pipe_totals(einc, prog, hwname, *sched)
            best = min(steps, key=lambda m: (steps[m], m))
            check(chosen is not None and chosen["microbatches"] == best,
                  f"{hwname} {' '.join(sched) or 'no --schedule'}: the default M is the fastest of the forced "
                  f"ones ({best}, step {steps[best]:.4g} s; chosen {chosen and chosen['microbatches']})")

    # Without --schedule and --microbatches a training step gets the
    # (schedule, M, v) the cost model rates fastest among gpipe, 1f1b,
    # zero-bubble and interleaved with v = 2 and 4 chunks (|L| / Z = 4):
    # the argmin of the steps compiled with all forced (1f1b, gpipe,
    # zero-bubble, interleaved, then fewer chunks, then fewer microbatches
    # on a tie).  Zero-bubble is priced before its split with the split's
    # stacks added, so its price is the split module's, exactly.
    for hwname in ("host", "tpu-v5p"):
        forced = forced_steps(einc, prog, hwname)
        chosen_ir = pipe_ir(einc, prog, hwname)
        best = min(forced, key=lambda k: (forced[k][0], ORDER.index(k[0]), k[1], k[2]))
        got = chosen_ir and key_of(chosen_ir)
        check(got == best and chosen_ir["totals"]["pipeline"]["step_time"] <= min(t for t, _ in forced.values()),
              f"{hwname}: the default schedule, v and M are the fastest of the {len(forced)} forced ones "
              f"({best}, step {forced[best][0]:.4g} s; next {sorted(t for t, _ in forced.values())[1]:.4g} s; "
              f"chosen {got})")
        check(any(k[0] == "interleaved" for k in forced) and any(k[0] == "zb-h1" for k in forced),
              f"{hwname}: interleaved and zero-bubble are among the forced ones")
        if got and got[0] in ("zb-h1", "zb-h2"):
            check(close(chosen_ir["totals"]["pipeline"]["stage_memory"], forced[got][1], 1e-12),
                  f"{hwname}: {got[0]}'s memory as chosen is the split module's")
        for s in ("zb-h1", "zb-h2"):
            zb = [k for k in forced if k[0] == s]
            check(len(zb) == 7, f"{hwname}: {s} forced at every M ({len(zb)})")
        if hwname == "host":
            check_memory(einc, prog, src, forced)
    no_dw = os.path.join(src, "tests", "golden", "cases", "error_pipeline_zero_bubble_no_dw.ein")
    p = pipe_totals(einc, no_dw, "host")
    check(p is not None and p["schedule"] in ("1f1b", "gpipe"),
          f"a backward with no weight gradient is not given zero-bubble ({p and p['schedule']})")


if __name__ == "__main__":
    main()
    sys.exit(check.exit_status())
