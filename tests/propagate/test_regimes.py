#!/usr/bin/env python3
"""Seed 000's regimes as `einc plan` sees them (issue 24, item 4).

On tests/propagate/regimes/mlp_seed000.ein (a trained MLP block at the
seed's D = 8192, F = 32768, no mesh, no sharding), `einc plan --chips 64
--hw tpu-v5p --json -D B=...` at a batch per chip well above and well
below seed 000's thresholds, each derived here from the profile:

  alpha = C / W_ici (peak bf16 FLOP/s over the bidirectional ICI bytes/s;
          2550 on v5p, seed 000 "Data Parallelism");
  pure DP and FSDP are compute-bound when B/N > alpha / M, M the mesh axes
          they span (seed 000, "FSDP": "bandwidth-bound below 2550 / M_X";
          850 tokens per chip on a 3D mesh);
  FSDP+TP is compute-bound down to B/N > alpha^2 / (M_X M_Y F), M_X M_Y = 2
          on a 3D mesh (seed 000, "Combining FSDP and TP"; about 100).

Checked:
  - above alpha / 3 by at least 3x: the chosen family is DP or FSDP, on a
    3-axis mesh, compute-bound; every DP and FSDP row on a 3-axis mesh,
    and DP on the one axis of 64 (above alpha), is compute-bound; every
    row labelled FSDP gathers its weights (FSDP's signature; a plan of
    FSDP's storage that gathers none is labelled TP-D);
  - in the FSDP+TP window, below alpha / 3 by at least 3x and above the
    FSDP+TP threshold by at least 2x: every DP and FSDP row on a 3-axis
    mesh, and DP on one axis, is communication-bound; the chosen family
    is the seed's, FSDP+TP, with FSDP over the mesh's first two axes
    within a factor 2 of X_opt = sqrt(B N M_X / (F M_Y)) chips (seed 000,
    "Combining FSDP and TP"), it gathers its weights, and it is
    compute-bound exactly when the seed's ratio
    T_math / T_comms = sqrt(B F M_X M_Y / (alpha^2 N)) is above 1.
"bound" is the seed's test: the collectives' seconds against the matmuls'
(T_comms > T_math; these matmuls are compute-bound, so FLOPs at the peak),
T_comms the busiest mesh axis's (JSON "comm_axis_time"; collectives over
other axes run at once, the seed's max(T_FSDP, T_TP)) and T_math JSON
"math_time".  The window needs the tensor-parallel activation
collectives overlapped with their matmuls (collective matmul, the
profile's "collective_matmul"; docs/cost-model.md), as the seed assumes.
--quick (the sanitizers) runs the first batch only.
Exits 1 on the first failure.
"""
import argparse
import json
import math
import os
import subprocess
import sys

CHIPS = 64


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def plan(einc, ein, batch):
    cmd = [einc, "plan", ein, "--chips", str(CHIPS), "--hw", "tpu-v5p", "--json", "-D", "B=%d" % batch]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "%s: %s" % (" ".join(cmd), r.stderr))
    return json.loads(r.stdout)


def label(c):
    return "%s on %s" % (c["family"], "x".join(str(v) for v in c["mesh"].values()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--hw-dir", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("ein")
    a = ap.parse_args()
    with open(os.path.join(a.hw_dir, "tpu-v5p.json")) as f:
        hw = json.load(f)
    alpha = hw["peak_flops"]["bf16"] / hw["ici_bidi_bandwidth"]
    F = 32768  # the .ein's hidden dim
    t_dp3 = alpha / 3
    t_mix = alpha ** 2 / (2 * F)
    print("alpha %.0f; DP/FSDP on 3 axes compute-bound above %.0f tokens per chip; FSDP+TP above %.0f"
          % (alpha, t_dp3, t_mix))
    hi, lo = 4096, 256
    check(hi >= 3 * t_dp3 and hi > alpha and lo * 3 <= t_dp3 and lo >= 2 * t_mix and hw.get("collective_matmul"),
          "batches per chip %d and %d are not well apart from the thresholds, or the profile has no "
          "collective matmul" % (hi, lo))

    d = plan(a.einc, a.ein, hi * CHIPS)
    ch = d["chosen"]
    print("%d tokens per chip: chosen %s, %s-bound" % (hi, label(ch), ch["bound"]))
    check(ch["family"] in ("DP", "FSDP") and len(ch["mesh"]) == 3 and ch["bound"] == "compute",
          "above %.0f tokens per chip the seed's choice is DP or FSDP on 3 axes, compute-bound: %s" % (t_dp3, ch))
    for c in d["candidates"]:
        if c["family"] in ("DP", "FSDP") and (len(c["mesh"]) == 3 or c["family"] == "DP" and len(c["mesh"]) == 1):
            check(c["bound"] == "compute", "%d tokens per chip: %s is %s-bound (comm %.3g s, math %.3g s)"
                  % (hi, label(c), c["bound"], c["comm_time"], c["math_time"]))
        if c["family"] == "FSDP":
            check(c["gathers_params"], "%s gathers no weight" % label(c))
        check(c["family"] not in ("TP-D", "2D-WS") or not c["gathers_params"],
              "%s is labelled weight-stationary but gathers weights" % label(c))
    if a.quick:
        print("ok (quick)")
        return

    B = lo * CHIPS
    d = plan(a.einc, a.ein, B)
    ch = d["chosen"]
    for c in d["candidates"]:
        if c["family"] in ("DP", "FSDP") and (len(c["mesh"]) == 3 or c["family"] == "DP" and len(c["mesh"]) == 1):
            check(c["bound"] == "communication", "%d tokens per chip: %s is %s-bound (comm %.3g s, math %.3g s)"
                  % (lo, label(c), c["bound"], c["comm_time"], c["math_time"]))
    # The seed's pick in the FSDP+TP window: FSDP over two axes (M_X = 2),
    # TP over one (M_Y = 1), X_opt chips of FSDP, and its ratio of the
    # matmuls' time to the busier axis's collectives.
    x_opt = math.sqrt(B * CHIPS * 2 / (F * 1))
    ratio = math.sqrt(B * F * 2 / (alpha ** 2 * CHIPS))
    print("%d tokens per chip: chosen %s, %s-bound, %.3g ms (comm %.3g ms on the busiest axis, math %.3g ms); "
          "the seed's pick FSDP+TP with X_opt %.1f, T_math/T_comms %.2f"
          % (lo, label(ch), ch["bound"], ch["step_time"] * 1e3, ch["comm_axis_time"] * 1e3,
             ch["math_time"] * 1e3, x_opt, ratio))
    check(ch["family"] == "FSDP+TP" and len(ch["mesh"]) == 3 and ch["gathers_params"],
          "at %d tokens per chip the seed's choice is FSDP+TP on 3 axes, gathering weights: %s" % (lo, ch))
    sizes = list(ch["mesh"].values())
    fsdp = sizes[0] * sizes[1]
    check(x_opt / 2 <= fsdp <= x_opt * 2, "FSDP over %d chips, the seed's X_opt is %.1f" % (fsdp, x_opt))
    check(ch["bound"] == ("compute" if ratio > 1 else "communication"),
          "the seed's ratio is %.2f, %s is %s-bound" % (ratio, label(ch), ch["bound"]))
    print("ok")


if __name__ == "__main__":
    main()
