#!/usr/bin/env python3
"""Pipeline parallelism as a candidate of auto-sharding (issue 25, item 3).

On tests/propagate/autoshard/mlp_layers_pp.ein (8 MLP layers in a
`repeat`, no mesh, no sharding), `einc plan --chips 4 --json`:
  - prices the layers pipelined over the first axis for every stage count
    that divides both the chips and the layers (PP on X=4; PP+DP, PP+FSDP,
    PP+TP on X=2, Y=2), each row carrying its stages, microbatches and
    schedule;
  - a PP row's schedule is the fastest of the pipeline pass's own
    choice (any of the four), 1f1b and zero-bubble, and its
    step and microbatches equal those of the same plan written by hand
    (the forced alternative) with that schedule, for PP on X=4 and PP+DP
    on X=2, Y=2;
  - under a small HBM, `tests/propagate/autoshard/adamw_zero.ein`'s DP
    rows fit only by sharding AdamW's state (--zero=2), and carry it, with
    the memory of the forced DP program under --zero=2; --zero=0 given
    keeps them from fitting;
  - with the HBM of a copy of `host` set just below the least memory of
    the unpipelined rows, only pipelined rows fit without
    recomputation (--remat=none); left free, the search also fits the
    others by remat, and the chosen row is the fastest that fits, a
    pipelined one, faster than the rematerialised ones by more than its
    bubble's margin (PLAN_PIPE_MARGIN); `einc --chips 4 -o` compiles it into an
    executable that runs pipelined and passes --check against the
    single-device reference.
Exits 1 on the first failure.
"""
import argparse
import json
import os
import re
import sys
import tempfile

from test_autoshard import check, expected_choice, judged, run


def plan(einc, ein, hw):
    r = run([einc, "plan", ein, "--chips", "4", "--hw", hw, "--json"])
    check(r.returncode == 0, f"plan --hw {hw}: {r.stderr}")
    return json.loads(r.stdout)


def forced_step(einc, src, mesh, shard, hw, work, schedule):
    """The pipeline step (seconds), microbatches and schedule of src
    compiled with `mesh` declared and the declarations rewritten by
    `shard` (the totals of --dump-ir=json), with --schedule=`schedule`, or
    the pipeline pass's own choice when it is None."""
    text = "mesh " + mesh + "\n" + src
    for old, new in shard:
        check(old in text, f"{old!r} not in the program")
        text = text.replace(old, new)
    path = os.path.join(work, "forced.ein")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    r = run([einc, path, "--hw", hw, "--dump-ir=json"] + (["--schedule=" + schedule] if schedule else []))
    check(r.returncode == 0, f"forced {mesh}: {r.stderr}")
    p = json.loads(r.stdout)["totals"].get("pipeline")
    check(p, f"forced {mesh}: not pipelined")
    return p["step_time"], p["microbatches"], p["schedule"]


def zero_move(einc, ein, hw_dir):
    """ZeRO as a move: under a small HBM the DP rows fit only with
    --zero=2, which they then carry, and their memory is the forced DP
    program's under --zero=2; with --zero=0 given they do not fit."""
    with tempfile.TemporaryDirectory() as work:
        prof = json.load(open(os.path.join(hw_dir, "tpu-v5p.json"), encoding="utf-8"))
        prof.update(name="v5p-small", hbm_bytes=5.0e8)
        hw = os.path.join(work, "v5p-small.json")
        with open(hw, "w", encoding="utf-8") as f:
            json.dump(prof, f)
        d = plan(einc, ein, hw)
        dp = [c for c in d["candidates"] if c["family"] == "DP"]
        check(dp and all(c["fits"] and c["zero"] == 2 for c in dp), f"DP rows under 0.47 GiB: {dp}")
        ch = d["chosen"]
        check(ch == expected_choice(d)[0], "chosen is not the fastest that fits")
        r = run([einc, "plan", ein, "--chips", "4", "--hw", hw, "--zero=0", "--json"])
        check(r.returncode == 0, f"--zero=0: {r.stderr}")
        dp0 = [c for c in json.loads(r.stdout)["candidates"] if c["family"] == "DP"]
        check(dp0 and all(not c["fits"] and c["zero"] == 0 for c in dp0), f"DP rows with --zero=0: {dp0}")
        src = open(ein, encoding="utf-8").read()
        forced = os.path.join(work, "forced.ein")
        with open(forced, "w", encoding="utf-8") as f:
            f.write("mesh X = 4\n" + src.replace("input In[B, D]", "input In[B_X, D]")
                    .replace("input Tgt[B, D]", "input Tgt[B_X, D]"))
        r = run([einc, forced, "--hw", hw, "--zero=2", "--dump-ir=json"])
        check(r.returncode == 0, f"forced DP --zero=2: {r.stderr}")
        mem = json.loads(r.stdout)["totals"]["peak_memory"]
        row = [c for c in dp if c["mesh"] == {"X": 4}][0]
        check(mem == row["memory_per_device"], f"DP on X=4 with zero: plan {row['memory_per_device']}, forced {mem}")
    return 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--hw-dir", required=True)
    ap.add_argument("ein")
    args = ap.parse_args()
    einc, ein = args.einc, os.path.abspath(args.ein)
    src = open(ein, encoding="utf-8").read()
    n = 0
    d = plan(einc, ein, "host")
    cands = d["candidates"]
    check(all("step_time" in c for c in cands), "a candidate did not compile")
    pp = {(c["storage"], tuple(sorted(c["mesh"].items()))): c for c in cands if "pipeline" in c}
    want = {("PP", (("X", 4),)), ("PP+DP", (("X", 2), ("Y", 2))), ("PP+FSDP", (("X", 2), ("Y", 2))),
            ("PP+TP", (("X", 2), ("Y", 2)))}
    check(set(pp) == want, f"pipelined rows {sorted(pp)}, want {sorted(want)}")
    for c in pp.values():
        p = c["pipeline"]
        check(p["stages"] == c["mesh"]["X"] and p["microbatches"] >= 1 and 256 % p["microbatches"] == 0
              and p["schedule"] in ("1f1b", "zb-h1", "zb-h2", "interleaved", "gpipe") and 0 <= p["bubble"] < 1,
              f"pipeline fields {c}")
    n += 1
    with tempfile.TemporaryDirectory() as work:
        layers = [("param Win[L, D, F]", "param Win[L_X, D, F]"), ("param Wout[L, F, D]", "param Wout[L_X, F, D]")]
        for key, mesh, shard in ((("PP", (("X", 4),)), "X = 4", layers),
                                 (("PP+DP", (("X", 2), ("Y", 2))), "X = 2, Y = 2",
                                  layers + [("input In[B, D]", "input In[B_Y, D]")])):
            row = pp[key]
            # The microbatches the plan chose are the pass's choice on the
            # forced program too (the same module, the same cost model),
            # and the schedule is the fastest of the pass's own choice
            # (which may be interleaved), 1f1b and zero-bubble (all fit on
            # host).
            forced = {sc: forced_step(einc, src, mesh, shard, "host", work, sc)
                      for sc in (None, "1f1b", "zero-bubble")}
            best = min(forced, key=lambda sc: forced[sc][0])
            step, mb, name = forced[best]
            check(row["pipeline"]["schedule"] == name and abs(step - row["step_time"]) <= 1e-9 * step
                  and mb == row["pipeline"]["microbatches"],
                  f"{key}: plan's {row['pipeline']} at {row['step_time']} against the forced programs' {forced}")
            n += 1
        # Memory below the others' least: a pipelined row then takes the
        # fastest (schedule, M) whose stage fits, fewer microbatches in
        # flight (its rows above are the fastest pairs, which may hold more).
        least = min(c["memory_per_device"] for c in cands if "pipeline" not in c)
        prof = json.load(open(os.path.join(args.hw_dir, "host.json"), encoding="utf-8"))
        prof.update(name="host-small", hbm_bytes=float(int(0.97 * least)))
        hw = os.path.join(work, "host-small.json")
        with open(hw, "w", encoding="utf-8") as f:
            json.dump(prof, f)
        # Without recomputation only pipelined rows fit ...
        r = run([einc, "plan", ein, "--chips", "4", "--hw", hw, "--remat=none", "--json"])
        check(r.returncode == 0, f"plan --remat=none: {r.stderr}")
        fit = [c for c in json.loads(r.stdout)["candidates"] if c["fits"]]
        check(fit and all("pipeline" in c for c in fit), f"unpipelined rows fit: {[c['family'] for c in fit]}")
        # ... and with the search free to rematerialise the others, the
        # chosen row is the fastest that fits, a pipelined one.
        d = plan(einc, ein, hw)
        ch, cands = d["chosen"], d["candidates"]
        fit = [c for c in cands if c["fits"]]
        check(any("pipeline" not in c and c["remat"] == "layer" for c in fit), "no row fits by remat")
        unp = min(c["step_time"] for c in fit if "pipeline" not in c)
        check("pipeline" in ch and ch["fits"] and ch["step_time"] == min(c["step_time"] for c in fit)
              and ch == expected_choice(d)[0] and judged(ch) < unp,
              f"chosen {ch} is not the fastest row that fits, or not pipelined beyond its margin ({unp})")
        n += 1
        exe = os.path.join(work, "mlp")
        r = run([einc, ein, "--chips", "4", "--hw", hw, "-o", exe])
        check(r.returncode == 0, f"-o: {r.stderr}")
        ir = run([einc, ein, "--chips", "4", "--hw", hw, "--dump-ir"]).stdout
        check(re.search(r"^# pipeline over X: %d stages.*; schedule %s," % (ch["pipeline"]["stages"],
                                                                          ch["pipeline"]["schedule"]), ir, re.M),
              f"the compiled plan is not the chosen pipeline {ch['pipeline']}:\n{ir[:600]}")
        r = run([exe, "--random-inputs", "1", "--check"], cwd=work)
        check(r.returncode == 0, f"the pipelined executable fails --check:\n{r.stdout}{r.stderr}")
        n += 1
    n += zero_move(einc, os.path.join(os.path.dirname(ein), "adamw_zero.ein"), args.hw_dir)
    print(f"{n} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
