#!/usr/bin/env python3
"""test_pipe_head_once.py - the gradients outside the repeat block whose
collective a pipelined step runs once per step, and the choice and
`einc analyze --stages` pricing the step as it is compiled
(passes/costmodel/pipe_work.c mark_once, pipe_price.c stage_memory,
passes/pipeline_choose.c, driver/analyze_pipe.c; docs/pipeline.md
"Gradient collectives once per step").

On tests/cost/pipeline/pp_fsdp_head.ein (Z = 2, the head's weight
Wh[D_X, E] split over X = 2), on the host profile:
  - zero-bubble runs the head gradient's ReduceScatter once per step on
    its unreduced sum, so the last stage holds the full D x E gradient:
    grad_once_last_bytes is one block more (D E 4 / 2 B) and 1f1b, which
    runs it per microbatch, has none; with the HBM set half a block below
    zero-bubble's stage peak, the given zero-bubble pair is over it (a
    warning), 1f1b's is not;
  - the choice of M for zero-bubble, priced on the module not split yet,
    predicts the compiled (split) module's step ("its step priced at"
    against totals.pipeline.step_time) within a quarter of one head
    ReduceScatter: priced per microbatch, as before, it was M - 1 of them
    over;
  - `einc analyze --stages=2` on one stage of pp_fsdp_mlp.ein
    (fsdp_mlp_stage.ein) with the HBM below its deferred peak reports
    the FSDP gradient the compiler keeps per microbatch there, and the
    same stage memory as the compiled pp_fsdp_mlp.ein, and their whole
    names when they are the longest the language takes.
"""
import json
import os
import re
import sys
import tempfile

from einc_checks import Checks, run, with_hbm

check = Checks()


def ir(einc, prog, hw, *extra):
    """(--dump-ir=json, stderr), or (None, stderr)."""
    rc, out, err = run(einc, prog, "--hw", hw, "--dump-ir=json", *extra)
    check(rc == 0, f"{os.path.basename(prog)} {' '.join(extra)} compiles ({err.strip()[-200:]})")
    return (json.loads(out) if rc == 0 else None), err


def head_rs_time(j):
    """Seconds of the head gradient's ReduceScatter (dWh), as costed."""
    for op in j["ops"]:
        if op["op"].startswith("ReduceScatter") and op["result"]["tensor"] == "dWh":
            return op["cost"]["time"]
    return None


def main():
    einc, src = sys.argv[1], sys.argv[2]
    pdir = os.path.join(src, "tests", "cost", "pipeline")
    prog = os.path.join(pdir, "pp_fsdp_head.ein")
    block = 256 * 256 * 4 / 2
    zb, _ = ir(einc, prog, "host", "--schedule=zb-h1", "--microbatches=2")
    fb, _ = ir(einc, prog, "host", "--schedule=1f1b", "--microbatches=2")
    if not zb or not fb:
        return check.exit_status()
    tz, tf = zb["totals"]["pipeline"], fb["totals"]["pipeline"]
    check(tz["grad_once_last_bytes"] == block and tz["grad_once_first_bytes"] == 0 and
          tf["grad_once_last_bytes"] == 0,
          f"zero-bubble: the head's unreduced sum adds {tz['grad_once_last_bytes']:.0f} B to the last stage "
          f"(want {block:.0f}); 1f1b {tf['grad_once_last_bytes']:.0f} B")
    with tempfile.TemporaryDirectory() as d:
        small = with_hbm(src, d, tz["stage_memory"] - block / 2)
        rc, _, err = run(einc, prog, "--hw", small, "--schedule=zb-h1", "--microbatches=2")
        rc1, _, err1 = run(einc, prog, "--hw", small, "--schedule=1f1b", "--microbatches=2")
        check(rc == 0 and "above" in err and rc1 == 0 and "above" not in err1,
              "HBM half a block below zero-bubble's peak: zero-bubble over it (the head's sum counted), 1f1b within")

    rc, out, _ = run(einc, prog, "--hw", "host", "--dump-cost", "--schedule=zb-h1")
    m = re.search(r"its step priced at ([0-9.]+) us", out)
    pipe = re.search(r"^pipeline: .* (\d+) microbatches", out, re.M)
    check(rc == 0 and m and pipe, "--dump-cost says the chosen pair's priced step")
    if m and pipe:
        mb = pipe.group(1)
        chosen, _ = ir(einc, prog, "host", "--schedule=zb-h1", f"--microbatches={mb}")
        rs = head_rs_time(chosen) if chosen else None
        check(rs is not None and rs > 0, f"the head's ReduceScatter is costed ({rs})")
        if chosen and rs:
            got, want = float(m.group(1)) * 1e-6, chosen["totals"]["pipeline"]["step_time"]
            check(abs(got - want) <= 0.25 * rs,
                  f"zero-bubble, M = {mb}: the choice priced {got * 1e6:.1f} us, the compiled step is "
                  f"{want * 1e6:.1f} us (within a quarter of the head's ReduceScatter, {rs * 1e6:.1f} us)")

    # analyze against the compiler, with the HBM below the deferred peak.
    stage = os.path.join(pdir, "fsdp_mlp_stage.ein")
    piped = os.path.join(pdir, "pp_fsdp_mlp.ein")
    pair = ["--microbatches=4", "--schedule=1f1b"]
    deferred, _ = ir(einc, piped, "host", *pair, "--grad-sync=step")
    if not deferred:
        return check.exit_status()
    extra = deferred["totals"]["pipeline"]["grad_once_bytes"]
    with tempfile.TemporaryDirectory() as d:
        for hbm in (deferred["totals"]["pipeline"]["stage_memory"] - 0.25 * extra,
                    1.01 * deferred["totals"]["pipeline"]["stage_memory"]):
            hw = with_hbm(src, d, hbm)
            comp, _ = ir(einc, piped, hw, *pair)
            rc, out, err = run(einc, "analyze", "--hw", hw, "--stages=2", *pair, "--json", stage)
            check(rc == 0, f"einc analyze --stages=2 {' '.join(pair)} runs ({err.strip()[-200:]})")
            if rc != 0 or not comp:
                continue
            row = json.loads(out)["pipeline"]["schedules"][0]
            want = comp["pipeline"]["grad_per_microbatch"]
            check(row["grad_per_microbatch"] == want and row["memory"] == comp["totals"]["pipeline"]["stage_memory"],
                  f"HBM {hbm:.0f} B: analyze keeps {row['grad_per_microbatch']} per microbatch, {row['memory']:.0f} B; "
                  f"the compiler {want}, {comp['totals']['pipeline']['stage_memory']:.0f} B")
    long_names(einc, src, stage, piped, pair)
    return check.exit_status()


def long_names(einc, src, stage, piped, pair):
    """Params of the longest names the language takes (128 bytes), the HBM
    below every pair's peak: analyze names both gradients kept per
    microbatch in full, as the compiler does (its row's names were cut
    at 255 bytes in all, the second gradient's name lost its tail)."""
    pad = "x" * 124
    with tempfile.TemporaryDirectory() as d:
        progs = []
        for path in (stage, piped):
            text = open(path, encoding="utf-8").read()
            text = re.sub(r"\bWout\b", "Wout" + pad, re.sub(r"\bWin\b", "Win" + pad + "y", text))
            progs.append(os.path.join(d, os.path.basename(path)))
            with open(progs[-1], "w", encoding="utf-8") as f:
                f.write(text)
        hw = with_hbm(src, d, 1024)
        comp, _ = ir(einc, progs[1], hw, *pair)
        rc, out, err = run(einc, "analyze", "--hw", hw, "--stages=2", *pair, "--json", progs[0])
        check(rc == 0, f"einc analyze --stages=2 on 128-byte names runs ({err.strip()[-200:]})")
        if rc != 0 or not comp:
            return
        got = json.loads(out)["pipeline"]["schedules"][0]["grad_per_microbatch"]
        want = comp["pipeline"]["grad_per_microbatch"]
        check(len(want) == 2 and sorted(got) == sorted(want),
              f"128-byte names: analyze keeps {[len(g) for g in got]}-byte names per microbatch, "
              f"the compiler {[len(g) for g in want]}")
        rc, out, _ = run(einc, "analyze", "--hw", hw, "--stages=2", *pair, progs[0])
        row = [line for line in out.splitlines() if "; per microbatch: " in line]
        check(rc == 0 and len(row) == 1 and row[0].split("; per microbatch: ")[1].split(",") == got,
              "the table's row names the same gradients as the JSON")


if __name__ == "__main__":
    sys.exit(main())
