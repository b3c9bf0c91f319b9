#!/usr/bin/env python3
"""test_pipe_zb_auto.py - `--schedule=zero-bubble` resolved by memory
(passes/pipeline_choose.c, pass_pipeline_resolve_zb; docs/pipeline.md,
"zero-bubble: ZB-H2 when it fits, ZB-H1 when not").

On the residual MLP stack over Z = 2 stages (pp_uniform_mlp.ein) at
M = 8, where zb-h2 holds more microbatches than zb-h1 and so needs more
memory per stage:

  - with host's HBM (room for both) zero-bubble compiles zb-h2: the same
    table in --dump-ir, the same priced step and stage memory as
    --schedule=zb-h2, and --dump-ir, --dump-cost and the JSON say
    "schedule zero-bubble -> zb-h2 (fits: ...)";
  - with an HBM between zb-h1's and zb-h2's stage memory (a copy of
    hw/host.json) it compiles zb-h1, the same as --schedule=zb-h1, and
    says why ("-> zb-h1 (zb-h2 needs ...)"); with the HBM just above
    zb-h2's it is zb-h2 again;
  - without --microbatches, zero-bubble on host's HBM is zb-h2 at the M
    the choice takes, and the choice priced zb-h2 only (not the alias and
    both tables twice);
  - `einc analyze --stages=2 --schedule=zero-bubble` gives one row per M,
    zb-h2 under an HBM that holds it and zb-h1 at the M whose zb-h2 row
    would not fit, marked resolved_from in the JSON;
  - an unknown --schedule lists every name, the alias and zb-h1 among
    them.
"""
import json
import os
import sys
import tempfile

from einc_checks import Checks, run, with_hbm

check = Checks()


def ir(einc, prog, hw, *extra):
    """The --dump-ir=json of `prog` compiled with `extra`, or None."""
    rc, out, err = run(einc, prog, "--hw", hw, "--dump-ir=json", *extra)
    check(rc == 0, f"{os.path.basename(prog)} {' '.join(extra)} compiles ({err.strip()[:200]})")
    return json.loads(out) if rc == 0 else None


def table(einc, prog, hw, *extra):
    """The schedule table lines of --dump-ir's text, and the whole text."""
    rc, out, _ = run(einc, prog, "--hw", hw, "--dump-ir", *extra)
    return [ln for ln in out.splitlines() if ln.startswith("#   stage ")], out


def same_as(einc, prog, hw, concrete, m_flags):
    """zero-bubble compiled as `concrete`: schedule, step, memory, table."""
    alias = ir(einc, prog, hw, "--schedule=zero-bubble", *m_flags)
    want = ir(einc, prog, hw, f"--schedule={concrete}", *m_flags)
    if not alias or not want:
        return None
    a, w = alias["totals"]["pipeline"], want["totals"]["pipeline"]
    check(a["schedule"] == concrete and alias["pipeline"]["schedule"] == concrete,
          f"{os.path.basename(hw)} {' '.join(m_flags)}: zero-bubble compiles {concrete} ({a['schedule']})")
    check(a["step_time"] == w["step_time"] and a["stage_memory"] == w["stage_memory"] and
          a["microbatches"] == w["microbatches"],
          f"{os.path.basename(hw)} {' '.join(m_flags)}: zero-bubble's step and stage memory are {concrete}'s")
    ta, text = table(einc, prog, hw, "--schedule=zero-bubble", *m_flags)
    tw, _ = table(einc, prog, hw, f"--schedule={concrete}", *m_flags)
    check(ta and ta == tw, f"{os.path.basename(hw)} {' '.join(m_flags)}: --dump-ir's table is {concrete}'s")
    note = f"schedule zero-bubble -> {concrete} ("
    check(note in text and note in a.get("schedule_resolved", "") and
          note in alias["pipeline"].get("schedule_resolved", ""),
          f"{os.path.basename(hw)}: --dump-ir and the JSON say '{note}...'")
    rc, cost, _ = run(einc, prog, "--hw", hw, "--dump-cost", "--schedule=zero-bubble", *m_flags)
    check(rc == 0 and note in cost and f"schedule {concrete}: step" in cost,
          f"{os.path.basename(hw)}: --dump-cost says '{note}...' and prices {concrete}")
    check("schedule_resolved" not in want["pipeline"], f"--schedule={concrete} has no resolution note")
    return a


def main():
    einc, src = sys.argv[1], sys.argv[2]
    prog = os.path.join(src, "tests", "cost", "pipeline", "pp_uniform_mlp.ein")
    m8 = ["--microbatches=8"]
    h1 = ir(einc, prog, "host", "--schedule=zb-h1", *m8)
    h2 = ir(einc, prog, "host", "--schedule=zb-h2", *m8)
    if not h1 or not h2:
        return check.exit_status()
    mem1, mem2 = h1["totals"]["pipeline"]["stage_memory"], h2["totals"]["pipeline"]["stage_memory"]
    check(mem1 < mem2, f"M = 8: zb-h1's stage ({mem1:.0f} B) needs less than zb-h2's ({mem2:.0f} B)")
    a = same_as(einc, prog, "host", "zb-h2", m8)
    if a:
        check("fits: " in a["schedule_resolved"], f"host: the note says zb-h2 fits ({a['schedule_resolved']})")
    with tempfile.TemporaryDirectory() as d:
        between = with_hbm(src, d, (mem1 + mem2) / 2)
        a = same_as(einc, prog, between, "zb-h1", m8)
        if a:
            check("zb-h2 needs" in a["schedule_resolved"],
                  f"HBM between: the note says what zb-h2 needs ({a['schedule_resolved']})")
        same_as(einc, prog, with_hbm(src, d, mem2 + 1024), "zb-h2", m8)

        # The default M: zb-h2 at the M the choice takes among zb-h2's.
        a = same_as(einc, prog, "host", "zb-h2", [])
        if a:
            check(f"at M = {a['microbatches']})" in a["schedule_resolved"],
                  f"no --microbatches: the note quotes the chosen M ({a['schedule_resolved']})")
        rc, cost, _ = run(einc, prog, "--hw", "host", "--dump-cost")
        check(rc == 0 and "schedule zero-bubble ->" not in cost,
              "no --schedule: no resolution note (the choice enumerates zb-h1 and zb-h2 themselves)")

        # einc analyze --stages: per M, zb-h2 when it fits, else zb-h1.
        dp = os.path.join(src, "tests", "cost", "pipeline", "dp_layers_v5p.ein")
        rc, out, err = run(einc, "analyze", "--json", "--hw", "tpu-v5p", "--stages=2", dp)
        rows = {}
        if rc == 0:
            rows = {(r["schedule"], r["microbatches"]): r for r in json.loads(out)["pipeline"]["schedules"]}
        check(("zb-h1", 8) in rows and ("zb-h2", 8) in rows, f"analyze lists zb-h1 and zb-h2 rows ({err[:200]})")
        if ("zb-h1", 8) in rows and ("zb-h2", 8) in rows:
            r1, r2 = rows[("zb-h1", 8)]["memory"], rows[("zb-h2", 8)]["memory"]
            v5p = json.load(open(os.path.join(src, "hw", "tpu-v5p.json")))
            v5p["hbm_bytes"] = (r1 + r2) / 2
            small = os.path.join(d, "v5p_small.json")
            with open(small, "w") as f:
                json.dump(v5p, f)
            rc, out, err = run(einc, "analyze", "--json", "--hw", small, "--stages=2", "--schedule=zero-bubble", dp)
            got = json.loads(out)["pipeline"]["schedules"] if rc == 0 else []
            by_m = {r["microbatches"]: r for r in got}
            check(r1 < r2 and 8 in by_m and by_m[8]["schedule"] == "zb-h1" and
                  by_m[8].get("resolved_from") == "zero-bubble" and by_m[8]["zb_h2_memory"] == r2,
                  f"analyze --schedule=zero-bubble, HBM between at M = 8: zb-h1 ({by_m.get(8)}, {err[:200]})")
            fits = [r for r in got if r["zb_h2_memory"] <= v5p["hbm_bytes"]]
            check(len(got) == len(by_m) and all(r["schedule"] == "zb-h2" for r in fits) and fits,
                  "analyze --schedule=zero-bubble: one row per M, zb-h2 wherever it fits")
            rc, text, _ = run(einc, "analyze", "--hw", small, "--stages=2", "--schedule=zero-bubble", dp)
            check(rc == 0 and "schedule zero-bubble at M = 8 -> zb-h1 (zb-h2 needs" in text,
                  "analyze's text says how zero-bubble resolved at each M")

    rc, _, err = run(einc, prog, "--schedule=zb")
    check(rc != 0 and "gpipe, 1f1b, interleaved, zero-bubble, zb-h1 or zb-h2, not 'zb'" in err,
          f"an unknown --schedule lists every name ({err.strip()[:200]})")
    rc, _, err = run(einc, "analyze", "--stages=2", "--schedule=zb", prog)
    check(rc != 0 and "zero-bubble, zb-h1 or zb-h2" in err, "and einc analyze's too")
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
