#!/usr/bin/env python3
"""Seed 004 section 5.2, Table 2: the autotuner's dataflows against "the
default dataflow (B-stn)" on 256 TPU v4 chips, as einc prices them.

usage: test_meshslice_table2.py EINC REPO_ROOT

The seed compares the FC layers' training FLOP utilization "with and
without MeshSlice's dataflow optimization" (Table 2's caption) and reports
the optimized dataflows 21.2% (GPT-3) and 5.1% (Megatron-NLG) faster than
the default B-stn, the gain larger for the model with less compute.  The
reading einc adopts (docs/meshslice.md, "Seed 004's evaluation,
reproduced", row 3): stage 1 of the autotuner (3.2.1) replaced by B-stn
for every layer, stage 2 (mesh shape and K, 3.2.2) still run for it.  For
both models, at the weak-scaling batch of 5.1 (chips / 2 sequences of 2048),
`einc autotune --fit seed004 --train` must

1. keep the largest matrix stationary (3.2.1): C-stn for QKV, the
   attention output and FFN up, A-stn for FFN down, on a 32x8 mesh;
2. with `--dataflow rs`, keep the weight (or its gradient) stationary in
   all three training GEMMs of every layer, Table 1's B-stn row: forward
   B-stn, backward data A-stn with the weight as A, backward weight C-stn
   with the weight's gradient as C;
3. give the goldens below for the adopted reading (the seed's figures are
   missed; the note in docs/meshslice.md says why);
4. price B-stn on the heuristic's own mesh slower than on the mesh stage 2
   picks for it: the adopted reading is B-stn's most favourable mesh;
5. rank the models as the seed does (the larger gain for GPT-3);
6. for GPT-3, keep B-stn's utilization within 3 points for 32 to 256
   sequences (weight-stationary training moves only activations, so its
   communication per FLOP does not depend on the batch) and the heuristic
   more than 100% faster at each: no batch reaches the seed's figure.
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from einc_checks import Checks, run  # noqa: E402

# model file, seed's gain (%), einc's golden (%) for the adopted reading
MODELS = [("bench/meshslice/gpt3_fc.ein", 21.2, 295.71),
          ("bench/meshslice/megatron_fc.ein", 5.1, 169.50)]
HEURISTIC = {"Qkv": "os", "Proj": "os", "Up": "os", "Down": "ls"}


def autotune(einc, ein, *extra, batch=128):
    """The JSON report of `einc autotune` on 256 chips (None if it failed)."""
    rc, out, err = run(einc, "autotune", "--hw", "tpu-v4", "--fit", "seed004", "--train", "--chips", "256",
                       "-D", "B=%d" % batch, *extra, ein, "--json")
    return json.loads(out)["best"] if rc == 0 else None


def weight_stationary(layers):
    """Names of the layers whose three training GEMMs do not all keep the
    weight (K x N in the forward GEMM) or its gradient stationary."""
    fwd = {l["name"]: l for l in layers if "." not in l["name"]}
    bad = []
    for name, f in fwd.items():
        bd = next(l for l in layers if l["name"] == name + ".bwd_data")
        bw = next(l for l in layers if l["name"] == name + ".bwd_weight")
        ok = (f["dataflow"] == "rs" and bd["dataflow"] == "ls" and (bd["m"], bd["k"]) == (f["k"], f["n"])
              and bw["dataflow"] == "os" and (bw["m"], bw["n"]) == (f["k"], f["n"]))
        if not ok:
            bad.append(name)
    return bad


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__.splitlines()[2])
    einc, root = argv[1], argv[2]
    check = Checks()
    gains = []
    for rel, seed_gain, golden in MODELS:
        ein = os.path.join(root, rel)
        name = os.path.basename(rel)
        best = autotune(einc, ein, "--compare")
        rs = autotune(einc, ein, "--dataflow", "rs")
        check(best is not None and rs is not None, "%s: einc autotune runs with and without --dataflow rs" % name)
        if best is None or rs is None:
            continue
        fwd = {l["name"]: l["dataflow"] for l in best["layers"] if "." not in l["name"]}
        check(fwd == HEURISTIC and (best["rows"], best["cols"]) == (32, 8),
              "%s: the heuristic keeps the largest matrix stationary, %s on %dx%d"
              % (name, fwd, best["rows"], best["cols"]))
        bad = weight_stationary(rs["layers"])
        check(not bad, "%s: --dataflow rs keeps the weight stationary in all three GEMMs (not in %s)" % (name, bad))
        gain = 100 * (rs["time"] / best["time"] - 1)
        gains.append(gain)
        check(abs(gain - golden) <= 0.05,
              "%s: heuristic %.1f%% faster than B-stn on its own best %dx%d mesh (golden %.2f%%; seed 004 "
              "Table 2: %.1f%%)" % (name, gain, rs["rows"], rs["cols"], golden, seed_gain))
        same = autotune(einc, ein, "--dataflow", "rs", "--mesh", "%dx%d" % (best["rows"], best["cols"]))
        check(same is not None and same["time"] > rs["time"],
              "%s: B-stn on the heuristic's mesh is slower than on its own best mesh (%s s against %.4g s)"
              % (name, "%.4g" % same["time"] if same else "failed", rs["time"]))
    if len(gains) == 2:
        check(gains[0] > gains[1], "the gain is larger for GPT-3 (%.1f%%) than for Megatron-NLG (%.1f%%), "
              "as seed 004 5.2 says" % (gains[0], gains[1]))
    gpt3 = os.path.join(root, MODELS[0][0])
    utils = []
    for batch in (32, 64, 128, 256):
        rs = autotune(einc, gpt3, "--dataflow", "rs", batch=batch)
        best = autotune(einc, gpt3, batch=batch)
        if rs is None or best is None:
            check(False, "gpt3_fc.ein: einc autotune runs at B = %d" % batch)
            continue
        utils.append(rs["utilization"])
        check(rs["time"] / best["time"] > 2.0,
              "gpt3_fc.ein, B = %d: the heuristic is %.1f%% faster than B-stn"
              % (batch, 100 * (rs["time"] / best["time"] - 1)))
    if len(utils) == 4:
        check(max(utils) - min(utils) < 0.03,
              "gpt3_fc.ein: B-stn's utilization spans %.1f%% to %.1f%% for 32 to 256 sequences"
              % (100 * min(utils), 100 * max(utils)))
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
