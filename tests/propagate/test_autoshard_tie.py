#!/usr/bin/env python3
"""The tie rule between pipelined and unpipelined candidates (issue 24).

`einc plan` chooses a pipelined row over the best unpipelined row that
fits only when it is faster even with its bubble PLAN_PIPE_MARGIN (5
points of the makespan, the bubble's measured uncertainty; driver/plan.h)
larger: its "judged_step" (driver/plan_choose.c).  On
tests/propagate/autoshard/mlp_layers_pp.ein (8 MLP layers, trained) on 4
chips:
  - `hw/host.json`: PP on X=4 is the fastest row that fits, faster than
    every unpipelined row, but by less than its margin (its judged step
    is above the best unpipelined step), so the best unpipelined row is
    chosen; the table's "chosen:" line and JSON "why" say so, and `einc
    FILE --chips 4` compiles that unpipelined plan;
  - `hw/tpu-v5e.json`: a pipelined row wins by more than its margin and is
    chosen, and `--chips 4` compiles it pipelined.
Both cases first check that they test the rule: the pipelined row is the
fastest that fits (the choice without the margin), and its judged step is
on the stated side of the unpipelined step.  Every judged step is checked
against its figures (step + makespan x m / (1 - bubble - m)).  With
--quick (the sanitizer build) the compiles of the chosen plans and the
text tables are skipped.  Exits 1 on the first failure.
"""
import argparse
import json
import os
import re
import sys

from test_autoshard import PIPE_MARGIN, check, expected_choice, judged, run


def mesh_str(c):
    return ",".join(f"{k}={v}" for k, v in c["mesh"].items())


def case(einc, ein, hw, pipelined, quick):
    """Plans ein on 4 chips of profile file hw; the chosen row must be
    pipelined or not as `pipelined` says, by the margin."""
    name = os.path.basename(hw)
    r = run([einc, "plan", ein, "--chips", "4", "--hw", hw, "--json"])
    check(r.returncode == 0, f"{name}: plan: {r.stderr}")
    d = json.loads(r.stdout)
    cands = [c for c in d["candidates"] if "step_time" in c and not c.get("estimated")]
    for c in cands:
        p = c.get("pipeline")
        if p:
            want = c["step_time"] + p["makespan"] * PIPE_MARGIN / (1 - p["bubble"] - PIPE_MARGIN)
            check(0 < p["makespan"] <= c["step_time"] and abs(p["judged_step"] - want) <= 1e-9 * want,
                  f"{name}: {c['family']} {c['mesh']}: judged step {p['judged_step']}, want {want} from {p}")
    fit = [c for c in cands if c["fits"]]
    fastest = min(fit, key=lambda c: c["step_time"])
    unp = [c for c in fit if "pipeline" not in c]
    u = min(unp, key=lambda c: c["step_time"])
    # The case tests the rule: the fastest row is pipelined, beating every
    # unpipelined one, and its margin decides.
    check("pipeline" in fastest and fastest["step_time"] < u["step_time"] * (1 - 1e-3),
          f"{name}: the fastest row {fastest['family']} {fastest['mesh']} is not pipelined and faster than "
          f"{u['family']} {u['mesh']}: the case no longer tests the margin")
    ch = d["chosen"]
    want, lost = expected_choice(d)
    check(ch == want, f"{name}: chose {ch['family']} {ch['mesh']}, the rule {want['family']} {want['mesh']}")
    why = d.get("why", "")
    if pipelined:
        check("pipeline" in ch and judged(ch) < u["step_time"] and lost is None,
              f"{name}: chosen {ch['family']} {ch['mesh']} is not a pipelined row beyond its margin "
              f"(judged {judged(ch)} against {u['step_time']})")
        check("beats the best unpipelined plan" in why and "PLAN_PIPE_MARGIN" in why, f"{name}: why: {why}")
    else:
        check(judged(fastest) >= u["step_time"], f"{name}: {fastest['family']} wins by more than its margin")
        check("pipeline" not in ch and ch["step_time"] <= u["step_time"] * (1 + 1e-3) and lost == fastest,
              f"{name}: chosen {ch['family']} {ch['mesh']}, want the best unpipelined row {u['family']} {u['mesh']}")
        check(why.startswith("the fastest unpipelined plan that fits") and "PLAN_PIPE_MARGIN" in why
              and f"{fastest['family']} on {mesh_str(fastest)}" in why, f"{name}: why: {why}")
    print(f"ok: {name}: fastest {fastest['family']} {mesh_str(fastest)} {fastest['step_time'] * 1e3:.4g} ms "
          f"(judged {judged(fastest) * 1e3:.4g} ms), best unpipelined {u['family']} {mesh_str(u)} "
          f"{u['step_time'] * 1e3:.4g} ms: chose {ch['family']} {mesh_str(ch)}")
    if quick:
        return
    t = run([einc, "plan", ein, "--chips", "4", "--hw", hw])
    star = [line.split() for line in t.stdout.splitlines() if line.startswith("*")]
    check(len(star) == 1 and star[0][1:3] == [ch["family"], mesh_str(ch)], f"{name}: the text table marks {star}")
    line = [x for x in t.stdout.splitlines() if x.startswith("chosen: ")]
    check(line and why.split("; ")[-1] in line[0], f"{name}: the chosen line does not say why:\n{line}")
    # `--chips 4` compiles what plan chose: pipelined or not.
    ir = run([einc, ein, "--chips", "4", "--hw", hw, "--dump-ir"])
    check(ir.returncode == 0, f"{name}: --chips 4 --dump-ir: {ir.stderr}")
    piped = re.search(r"^# pipeline over X: (\d+) stages", ir.stdout, re.M)
    check(bool(piped) == pipelined and (not piped or int(piped.group(1)) == ch["pipeline"]["stages"]),
          f"{name}: the compiled plan is {'not ' if not piped else ''}pipelined, the chosen row "
          f"{ch['family']} {ch['mesh']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--hw-dir", required=True)
    ap.add_argument("--quick", action="store_true", help="the plans' JSON only (the sanitizer build)")
    ap.add_argument("ein")
    a = ap.parse_args()
    ein = os.path.abspath(a.ein)
    case(a.einc, ein, os.path.join(a.hw_dir, "host.json"), False, a.quick)
    case(a.einc, ein, os.path.join(a.hw_dir, "tpu-v5e.json"), True, a.quick)
    print("2 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
