#!/usr/bin/env python3
"""Seed 000, question 3 (3): LLaMA-2 13B, 3M tokens a step, on a 16x16x16
TPU v5p slice (4096 chips), with FSDP x TP.

The seed ("How to Scale Your Model", part 5, the answer to question 3):
pure FSDP is communication-bound at 3M tokens on 4096 chips (it needs
850 x 4096 = 3.48M), mixed FSDP+TP is not (235 tokens per chip suffice),
its FSDP share is X_opt = sqrt(B M_X N / (F M_Y)) = sqrt(3e6 x 2 x 4096 /
13824) = 1333, "about 1024-way FSDP and 4-way TP", and the step at 40% MFU
is 6 x 3e6 x 13e9 / (4096 x 4.6e14 x 0.4) = 300 ms.

`einc plan --chips 4096` on the program with no sharding
(autoshard/llama2_13b_train_q3.ein) prices 244 candidates, each estimated
without the ILP and the best 19 compiled in full: 1.5 to 3 minutes of
CPU, up to 9 on a loaded machine (docs/propagation.md, "Seed 000's
question 3").  It chooses the seed's family, FSDP+TP
on 16x32x8 (512 x 8), over a PP+DP row 0.3% faster by the cost model,
less than that row's bubble's margin (driver/plan_choose.c).  With
--plan (Release builds: 110 s of CPU, AMD EPYC Zen 3) this test runs
it and checks the family, the chip count and that the seed's split is
within 1% of the chosen step.  It also prices the plan's FSDP+TP
candidate as forced alternatives (autoshard/
llama2_13b_train_q3_fsdp_tp.ein: FSDP over X x Y, TP over Z), at TP = 4
and 8 on 4096 chips (FSDP over 1024 and 512), each one compile
(`--dump-ir=json`, the cost pass's totals).  These are the only splits
of 4096 chips into powers of two that shard every param both ways:
D = 5120 = 2^10 x 5 splits over at most 1024 chips and the heads N = 40
over at most 8 (the plan's rows on other meshes leave a dim whole or
shard another, and are not the seed's FSDP x TP).  Checked:
  - the split whose FSDP share is within a factor of 2 of X_opt (mesh
    granularity: the shares are powers of two), derived here from the
    file's dims (B tokens = B x T, F) and the chip count, with M_X = 2
    (FSDP over two axes) and M_Y = 1 (1365 here: 1024 x 4, not 512 x 8),
    is the fastest or within 2% of it: with collective matmul (tpu-v5p's
    profile) TP's activation collectives hide under their matmuls, so
    the two splits' steps differ by about 1%, a tie at the model's
    resolution, where the seed's sum of FSDP and TP traffic separates them;
  - the step, read as the seed reads it: einc's MFU is its own roofline's
    (model FLOPs at the peak over the step; seed 003), not the seed's
    assumed 40%, so the step at 40% MFU is compared through the FLOPs,
    step x MFU / 0.4 (einc's FLOPs at 40%), against the seed's
    6 x tokens x params / (N C 0.4) with this file's tokens (3,145,728)
    and params (counted from its dims): within 10% (attention, which the
    seed leaves out, adds about 1%); and einc's own step is below the
    seed's at 40% MFU (einc's MFU >= 40%) and fits the HBM.
Before that, a candidate that writes the storage of an earlier one is
priced by its figures, not compiled again (driver/plan_same.c): on
--mlp (regimes/mlp_seed000.ein) with D = 24 and F = 40 (the model dim,
which FSDP shards) on 16 chips, FSDP on a mesh whose chips do not divide
40 stores everything as DP does, and FSDP+TP as DP+TP when its data axes
do not; exactly those rows say `the storage of DP` (DP+TP) in the text
table and carry that row's figures in the JSON.
--quick (the sanitizers): the seed's split alone, the step checks.
Exits 1 on the first failure.
"""
import argparse
import json
import math
import re
import subprocess
import sys

CHIPS = 4096
SEED_MFU = 0.4


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def price(einc, ein, tp):
    """The cost pass's totals and the dims for FSDP over 4096 / tp chips
    (X = 16, Y = 256 / tp) and TP over Z = tp."""
    cmd = [einc, ein, "--hw", "tpu-v5p", "--dump-ir=json", "-D", "X=16", "-D", "Y=%d" % (CHIPS // 16 // tp),
           "-D", "Z=%d" % tp]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    check(r.returncode == 0, "%s: %s" % (" ".join(cmd), r.stderr[-2000:]))
    d = json.loads(r.stdout)
    return d["totals"], {x["name"]: x["size"] for x in d["dims"]}


def check_same_storage(einc, mlp):
    """The rows that take an earlier row's figures (see the docstring)."""
    cmd = [einc, "plan", mlp, "--chips", "16", "--hw", "tpu-v5p", "-D", "D=24", "-D", "F=40", "-D", "B=4096"]
    r = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "%s: %s" % (" ".join(cmd), r.stderr[-2000:]))
    cands = json.loads(r.stdout)["candidates"]
    t = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check(t.returncode == 0, "%s: %s" % (" ".join(cmd), t.stderr[-2000:]))
    flagged = set()
    for line in t.stdout.splitlines():
        m = re.match(r"^[ *] (\S+)\s+(\S+)\s.*, the storage of (\S+)$", line)
        if m:
            flagged.add((m.group(1), m.group(2), m.group(3)))
    key = {}
    for c in cands:
        key[(c["family"], ",".join("%s=%d" % kv for kv in c["mesh"].items()))] = c
    want = set()
    for (fam, mesh), c in key.items():
        sizes = list(c["mesh"].values())
        data = math.prod(sizes) if fam == "FSDP" else math.prod(sizes[:-1])
        if fam in ("FSDP", "FSDP+TP") and 40 % data != 0:
            want.add((fam, mesh, "DP" if fam == "FSDP" else "DP+TP"))
    check(want and flagged == want, "rows with an earlier row's storage: %s, expected %s" % (sorted(flagged),
                                                                                        sorted(want)))
    for fam, mesh, other in flagged:
        a, b = key[(fam, mesh)], key[(other, mesh)]
        check(all(a[k] == b[k] for k in ("step_time", "mfu", "memory_per_device", "comm_time")),
              "%s on %s does not carry %s's figures" % (fam, mesh, other))
    print("%d rows took an earlier row's figures: %s" % (len(flagged), sorted(flagged)))


def check_plan(einc, ein, x_opt, steps):
    """`einc plan ein --chips 4096 --hw tpu-v5p --json` (the program with no
    sharding): the chosen family is the seed's FSDP+TP, its mesh holds 4096
    chips, and the seed's split (the FSDP share within a factor 2 of X_opt;
    `steps`: the forced alternatives' steps by TP) is within 1% of the
    chosen step, the model's resolution between the two splits (the
    docstring).  Several minutes of CPU: Release only (--plan)."""
    cmd = [einc, "plan", ein, "--chips", str(CHIPS), "--hw", "tpu-v5p", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3000)
    check(r.returncode == 0, "%s: %s" % (" ".join(cmd), r.stderr[-2000:]))
    d = json.loads(r.stdout)
    ch = d["chosen"]
    sizes = list(ch["mesh"].values())
    print("einc plan --chips %d: %s on %s, %.1f ms; %s" % (CHIPS, ch["family"], "x".join(map(str, sizes)),
                                                       ch["step_time"] * 1e3, d.get("why", "")))
    check(ch["family"] == "FSDP+TP", "the chosen family is %s, not the seed's FSDP+TP" % ch["family"])
    check(math.prod(sizes) == CHIPS, "the chosen mesh %s does not hold %d chips" % (sizes, CHIPS))
    check(ch in d["candidates"], "the chosen row is not one of the candidates")
    seed = [tp for tp in steps if x_opt / 2 <= CHIPS // tp <= x_opt * 2]
    check(len(seed) == 1 and steps[seed[0]] <= 1.01 * ch["step_time"],
          "the seed's split takes %s s, over 1%% above the chosen %.4g s"
          % ([steps[tp] for tp in seed], ch["step_time"]))


def params_of(dm):
    """LLaMA-2's parameter count from the program's dims: the embedding and
    the LM head (2 V D), per layer the four attention projections (4 D N P G),
    the three MLP matrices (3 D F) and two norms (2 D), and the final norm."""
    D = dm["D"]
    return 2 * dm["V"] * D + dm["L"] * (4 * D * dm["N"] * dm["P"] * dm["G"] + 3 * D * dm["F"] + 2 * D) + D


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--hw-dir", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mlp", required=True)
    ap.add_argument("--plan", help="the program with no sharding: also run `einc plan --chips 4096` on it")
    ap.add_argument("ein")
    a = ap.parse_args()
    check_same_storage(a.einc, a.mlp)
    with open(a.hw_dir + "/tpu-v5p.json") as f:
        C = json.load(f)["peak_flops"]["bf16"]
    splits = [4] if a.quick else [4, 8]
    rows = {}
    for tp in splits:
        tot, dm = price(a.einc, a.ein, tp)
        rows[tp] = tot
        print("FSDP %4d x TP %2d: step %.1f ms, MFU %.1f%%, %.3g GiB per device"
              % (CHIPS // tp, tp, tot["step_time"] * 1e3, tot["mfu"] * 100, tot["peak_memory"] / 2 ** 30))
    tokens = dm["B"] * dm["T"]
    params = params_of(dm)
    seed_step = 6 * tokens * params / (CHIPS * C * SEED_MFU)
    x_opt = math.sqrt(tokens * 2 * CHIPS / (dm["F"] * 1))
    print("tokens %d, params %.4g; seed: X_opt %.0f, step at 40%% MFU %.1f ms" % (tokens, params, x_opt,
                                                                                 seed_step * 1e3))
    seed = [tp for tp in splits if x_opt / 2 <= CHIPS // tp <= x_opt * 2]
    check(len(seed) == 1, "no single split has its FSDP share within a factor 2 of X_opt %.0f" % x_opt)
    best = seed[0]
    fastest = min(rows[tp]["step_time"] for tp in rows)
    check(rows[best]["step_time"] <= 1.02 * fastest,
          "the seed's split FSDP %d x TP %d takes %.4g s, over 2%% above the fastest split's %.4g s"
          % (CHIPS // best, best, rows[best]["step_time"], fastest))
    tot = rows[best]
    at40 = tot["step_time"] * tot["mfu"] / SEED_MFU
    print("FSDP %d x TP %d: einc's step %.1f ms at its MFU %.1f%%; at 40%% MFU %.1f ms (seed %.1f ms, %+.1f%%)"
          % (CHIPS // best, best, tot["step_time"] * 1e3, tot["mfu"] * 100, at40 * 1e3, seed_step * 1e3,
             100 * (at40 / seed_step - 1)))
    check(abs(at40 / seed_step - 1) <= 0.10, "the step at 40%% MFU, %.4g s, is not within 10%% of the seed's %.4g s"
          % (at40, seed_step))
    check(tot["mfu"] >= SEED_MFU and tot["step_time"] <= seed_step,
          "einc's step %.4g s at MFU %.3f is not below the seed's at 40%%" % (tot["step_time"], tot["mfu"]))
    check(tot["peak_memory"] > 0 and tot["peak_memory"] <= 96e9, "the plan does not fit a v5p's HBM")
    if a.plan:
        check_plan(a.einc, a.plan, x_opt, {tp: rows[tp]["step_time"] for tp in rows})
    print("ok")


if __name__ == "__main__":
    main()
