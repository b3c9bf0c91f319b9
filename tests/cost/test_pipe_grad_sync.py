#!/usr/bin/env python3
"""test_pipe_grad_sync.py - where a pipelined training step reduces its
stacked FSDP gradients: once per step on their unreduced sums (less
collective time, the stage's full gradient held) or per microbatch inside
the backward loop (passes/pipeline_grad.c, passes/pipeline_choose.c;
docs/pipeline.md "Gradient collectives once per step").

On tests/cost/pipeline/pp_fsdp_mlp.ein (Z = 2, FSDP over X = 2), 1f1b at
M = 4 on the host profile:
  - `--grad-sync=step` and `--grad-sync=microbatch` price both variants:
    deferred, the stage holds more (grad_once_bytes > 0, the full gradient
    of its layers: |X| - 1 blocks more) and the step is shorter; per
    microbatch grad_once_bytes is 0, both gradients are named in
    pipeline.grad_per_microbatch and --dump-ir keeps each ReduceScatter in
    the backward loop, its reason saying so;
  - with the profile's HBM between the two peaks (a quarter of the
    deferred sums' bytes below the deferred peak), the default (auto) falls
    back: the given pair compiles with a stage that fits, fewer than all
    gradients per microbatch (greedy: one makes room), --dump-cost and
    --dump-ir say which, while `--grad-sync=step` forced there exceeds
    the HBM (a warning, compiled as asked, that says the default's
    fallback fits);
  - with the schedule and M left to the choice, the pair chosen fits, and
    if it keeps gradients per microbatch, the same pair with every one
    deferred does not fit;
  - with the HBM above the deferred peak nothing falls back;
  - a DP program (pp_uniform_mlp.ein: AllReduce, whose deferral adds no
    bytes) never falls back, whatever the HBM;
  - `--grad-sync=sometimes` is refused with a message;
  - under --grad-sync=microbatch every gradient of a block of 65 is named,
    and --dump-cost quotes whole names, however long.
"""
import json
import os
import re
import sys
import tempfile

from einc_checks import Checks, run, with_hbm

check = Checks()
PAIR = ["--microbatches=4", "--schedule=1f1b"]


def compiled(einc, prog, hw, *extra):
    """(--dump-ir=json, stderr) of `prog` on profile `hw`, or (None, stderr)."""
    rc, out, err = run(einc, prog, "--hw", hw, "--dump-ir=json", *extra)
    check(rc == 0, f"{os.path.basename(prog)} {' '.join(extra)} compiles ({err.strip()[-200:]})")
    return (json.loads(out) if rc == 0 else None), err


def memory(ir):
    return ir["totals"]["pipeline"]["stage_memory"]


def kept(ir):
    return ir["pipeline"]["grad_per_microbatch"]


def rs_inside(einc, prog, hw, *extra, names=("dWin", "dWout")):
    """The stacked gradients among `names` whose ReduceScatter --dump-ir
    shows inside a loop with the reason "reduced per microbatch", and those
    after the loops."""
    rc, out, err = run(einc, prog, "--hw", hw, "--dump-ir", *extra)
    inside, after, loop = [], [], False
    for line in out.splitlines():
        rhs = line.split("=", 1)[1].strip() if "=" in line else ""
        loop = True if rhs.startswith("LoopBegin(") else False if rhs.startswith("LoopEnd(") else loop
        name = line.strip().split("[", 1)[0].split(".")[0]
        if name in names and rhs.startswith("ReduceScatter_"):
            if loop and "reduced per microbatch, inside the backward loop" in line:
                inside.append(name)
            elif not loop:
                after.append(name)
    return sorted(inside), sorted(after)


def main():
    einc, src = sys.argv[1], sys.argv[2]
    prog = os.path.join(src, "tests", "cost", "pipeline", "pp_fsdp_mlp.ein")
    step, _ = compiled(einc, prog, "host", *PAIR, "--grad-sync=step")
    mb, _ = compiled(einc, prog, "host", *PAIR, "--grad-sync=microbatch")
    if not step or not mb:
        return check.exit_status()
    ps, pm = step["totals"]["pipeline"], mb["totals"]["pipeline"]
    # A stage's 2 layers of dWin and dWout, 32 x 64 f64: deferred it holds
    # them whole, |X| - 1 = 1 block more than its reduced 1/2.
    extra = 2 * 2 * 32 * 64 * 8 / 2
    check(ps["grad_once_bytes"] == extra and pm["grad_once_bytes"] == 0,
          f"deferred, the unreduced sums add {ps['grad_once_bytes']:.0f} B (want {extra:.0f}); per microbatch "
          f"{pm['grad_once_bytes']:.0f} B")
    check(abs(memory(step) - memory(mb) - extra) <= 1e-9 * memory(step),
          f"the stage peaks differ by those bytes: {memory(step):.0f} B deferred, {memory(mb):.0f} B per microbatch")
    check(ps["step_time"] < pm["step_time"],
          f"deferred the step is shorter: {ps['step_time'] * 1e6:.1f} us against {pm['step_time'] * 1e6:.1f} us")
    check(step["pipeline"]["grad_sync"] == "step" and kept(step) == [] and
          mb["pipeline"]["grad_sync"] == "microbatch" and sorted(kept(mb)) == ["dWin", "dWout"],
          f"pipeline.grad_per_microbatch: {kept(step)} deferred, {kept(mb)} per microbatch")
    check(rs_inside(einc, prog, "host", *PAIR, "--grad-sync=microbatch") == (["dWin", "dWout"], []) and
          rs_inside(einc, prog, "host", *PAIR, "--grad-sync=step") == ([], ["dWin", "dWout"]),
          "--dump-ir: the ReduceScatters inside the backward loop per microbatch, after the loops deferred")

    with tempfile.TemporaryDirectory() as d:
        hbm = memory(step) - 0.25 * extra  # one gradient's fallback (extra / 2) makes room
        small = with_hbm(src, d, hbm)
        auto, err = compiled(einc, prog, small, *PAIR)
        forced, ferr = compiled(einc, prog, small, *PAIR, "--grad-sync=step")
        if auto and forced:
            check(memory(forced) > hbm and "above" in ferr and kept(forced) == [] and
                  "without --grad-sync=step, 1 FSDP gradient reduced per microbatch fits" in ferr,
                  f"HBM {hbm:.0f} B, --grad-sync=step: {memory(forced):.0f} B, above it, with a warning naming "
                  "the default's fallback")
            check(memory(auto) <= hbm and 1 <= len(kept(auto)) < 2,
                  f"HBM {hbm:.0f} B, auto: {memory(auto):.0f} B fits, {kept(auto)} per microbatch (greedy: one)")
            check(auto["totals"]["pipeline"]["step_time"] < pm["step_time"] and "warning" not in err,
                  "auto: its step lies below every gradient per microbatch's, no warning")
            inside, after = rs_inside(einc, prog, small, *PAIR)
            check(inside == kept(auto) and sorted(inside + after) == ["dWin", "dWout"],
                  f"--dump-ir: {inside} inside the backward loop, {after} after the loops")
            rc, out, err = run(einc, prog, "--hw", small, "--dump-cost", *PAIR)
            check(rc == 0 and "stacked gradients reduced per microbatch, inside the backward loop (their unreduced "
                  f"sums would not fit the HBM): {kept(auto)[0]}" in out and "so 1 of them reduced per microbatch" in out,
                  "--dump-cost names the gradient kept per microbatch and why")
        chosen, err = compiled(einc, prog, small)
        if chosen:
            pair = [f"--microbatches={chosen['pipeline']['microbatches']}",
                    f"--schedule={chosen['pipeline']['schedule']}"]
            if chosen["pipeline"]["schedule"] == "interleaved":
                pair.append(f"--chunks={chosen['pipeline']['chunks']}")
            check(memory(chosen) <= hbm and kept(chosen),
                  f"HBM {hbm:.0f} B, chosen {' '.join(pair)}: {memory(chosen):.0f} B fits, {kept(chosen)} per microbatch")
            again, _ = compiled(einc, prog, small, *pair, "--grad-sync=step")
            if again:
                check(memory(again) > hbm, f"the chosen pair with every gradient deferred: {memory(again):.0f} B, "
                      "over the HBM")
        roomy, _ = compiled(einc, prog, with_hbm(src, d, 1.01 * memory(step)), *PAIR)
        if roomy:
            check(kept(roomy) == [] and memory(roomy) == memory(step),
                  "HBM above the deferred peak: every gradient once per step")
        dp = os.path.join(src, "tests", "cost", "pipeline", "pp_uniform_mlp.ein")
        tiny, _ = compiled(einc, dp, with_hbm(src, d, 1e5), *PAIR)
        if tiny:
            check(kept(tiny) == [], "DP (AllReduce, no bytes added): never kept per microbatch, even over the HBM")
    rc, out, err = run(einc, prog, "--hw", "host", *PAIR, "--grad-sync=sometimes")
    check(rc != 0 and "--grad-sync wants auto, step or microbatch, not 'sometimes'" in err,
          f"a bad --grad-sync is refused: {err.strip()[:200]}")
    many_grads(einc)
    long_names(einc, src)
    return check.exit_status()


def long_names(einc, src):
    """Four FSDP params of 128-byte names over a tiny HBM, every gradient
    kept per microbatch: --dump-cost's "given:" line quotes whole names
    and counts the ones it has no room for (it cut the fourth mid-name)."""
    params = [f"W{i}" + "x" * 126 for i in range(4)]
    with tempfile.TemporaryDirectory() as d:
        prog = os.path.join(d, "long_fsdp.ein")
        fsdp_block(prog, params)
        rc, out, err = run(einc, prog, "--hw", with_hbm(src, d, 1024), "--dump-cost", *PAIR)
        line = next((ln for ln in out.splitlines() if "so 4 of them reduced per microbatch:" in ln), "")
        clause = line.split("reduced per microbatch:", 1)[1].split("; its step", 1)[0] if line else ""
        quoted = re.findall(r"'([^']*)'", clause)
        more = re.search(r" and (\d+) more$", clause)
        check(rc == 0 and quoted and set(quoted) <= {"d" + w for w in params} and
              len(quoted) + (int(more.group(1)) if more else 0) == 4 and clause.count("'") == 2 * len(quoted),
              f"--dump-cost names {len(quoted)} whole gradients of 4{' and counts ' + more.group(1) if more else ''}: "
              f"...{clause[-80:]}")


def fsdp_block(path, params):
    """Writes to `path` a residual stack pipelined over Z = 2 whose block
    has one FSDP param (split over X = 2) of each name in `params`."""
    lines = ["mesh Z = 2, X = 2", "dim B = 512, C = 32, D = 32, L = 4",
             "input In[B_X, D] : f64", "input Tgt[B_X, D] : f64", "H[B, D] = In[B, D] * 1", "repeat L {"]
    lines[4:4] = [f"param {w}[L_Z, C_X, D] : f64" for w in params]
    prev = "H"
    for i, w in enumerate(params):
        lines += [f"  T{i}[B, D] = {prev}[B, C] * {w}[C, D]", f"  G{i}[B, D] = {prev}[B, D] + tanh(T{i}[B, D]) * 0.01"]
        prev = f"G{i}"
    lines += [f"  H[B, D] = {prev}[B, D]", "}", "Er[B, D] = H[B, D] - Tgt[B, D]", "Lo[] = mean(Er[B, D] * Er[B, D])",
              "loss Lo", "optimize " + ", ".join(params) + " with sgd(lr=0.05)"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def many_grads(einc):
    """A block of 65 FSDP params under --grad-sync=microbatch: every one
    named in pipeline.grad_per_microbatch, as --dump-ir keeps every
    ReduceScatter in the loop (the list stopped at 64 names)."""
    n = 65
    with tempfile.TemporaryDirectory() as d:
        prog = os.path.join(d, "many_fsdp.ein")
        fsdp_block(prog, [f"W{i}" for i in range(n)])
        mb, _ = compiled(einc, prog, "host", *PAIR, "--grad-sync=microbatch")
        if mb:
            want = sorted(f"dW{i}" for i in range(n))
            inside, _ = rs_inside(einc, prog, "host", *PAIR, "--grad-sync=microbatch", names=want)
            check(sorted(kept(mb)) == want and sorted(inside) == want,
                  f"{n} FSDP gradients per microbatch: {len(kept(mb))} named in grad_per_microbatch, "
                  f"{len(inside)} ReduceScatters inside the loop")


if __name__ == "__main__":
    sys.exit(main())
