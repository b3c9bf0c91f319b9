#!/usr/bin/env python3
"""Seed 004 section 5.3, Table 3: 2D GEMMs on a real 4x4 TPU v4, as einc prices them.

usage: test_meshslice_table3.py EINC REPO_ROOT

Table 3 is one experiment: Collective, Wang and MeshSlice on the FC layers
of GPT-3 and Megatron-NLG on a real 4x4 TPU v4, which cannot overlap
AG/RdS with computation (seed 004 5.3), and MeshSlice-Overlap, the same
runs estimated with overlap.  The seed reports MeshSlice without overlap
about 4.5% slower than Collective, and MeshSlice-Overlap 38.6% (GPT-3) and
32.8% (Megatron-NLG) faster.  It states neither the batch nor K; the
paper's authors' real-TPU script (runexp.sh) runs BenchTransformer.py with
its defaults, batch = chips = 16 and K = 8 for every FC layer.  For both
models `einc autotune --fit seed004 --train` in that configuration must

1. be the configuration tests/cost/seed_numbers.py and
   bench/meshslice/study.py run for Table 3 (one list of arguments);
2. keep the 4x4 mesh and K = 8 for all twelve training GEMMs;
3. price Collective without overlap (its time equals its time in series);
4. order the three as the seed does: MeshSlice-Overlap < Collective <
   MeshSlice in series;
5. give the goldens below, the no-overlap row within 5 points of the
   seed's 4.5% (the overlap rows: docs/meshslice.md, "Seed 004's
   evaluation, reproduced", row 4);
6. price the slicing copies, recomputed here from the layers' shapes,
   within 5 points of the seed's "slicing itself 1.3%" of MeshSlice's
   time in series, and MeshSlice in series slower than Collective by more
   than the copies (its K launches and synchronizations come on top);
   the JSON's time_slicing (cost_ms_slice_copy_time, the helper the cost
   pass shares) equals that recomputation, and Collective's is 0.
"""
import importlib.util
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from einc_checks import Checks, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# model file, seed's MeshSlice-Overlap gain (%), einc's golden (%), einc's serial slowdown golden (%)
MODELS = [("bench/meshslice/gpt3_fc.ein", 38.6, 43.69, 5.20),
          ("bench/meshslice/megatron_fc.ein", 32.8, 37.63, 2.79)]
SEED_NO_OVERLAP = 4.5
SEED_SLICING = 1.3  # "the slicing itself only 1.3%" (seed 004 5.3)


def copy_seconds(layer, chips, hbm_bw, elem_bytes=2.0):
    """The slicing copies of one training GEMM over all its K iterations:
    each moving matrix's local shard read and written once (seed 004
    3.1.2; C-stn moves A and B, A-stn B and C, B-stn A and C)."""
    m, n, k = layer["m"], layer["n"], layer["k"]
    size = {"a": m * k, "b": k * n, "c": m * n}
    moving = {"os": "ab", "ls": "bc", "rs": "ac"}[layer["dataflow"]]
    return sum(2.0 * elem_bytes * size[x] / chips / hbm_bw for x in moving)


def load(name, path):
    """The module at `path` (a script of this repository), imported by path."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__.splitlines()[2])
    einc, root = argv[1], argv[2]
    check = Checks()
    numbers = load("seed_numbers", os.path.join(HERE, "seed_numbers.py"))
    study = load("study", os.path.join(root, "bench", "meshslice", "study.py"))
    slower = []
    for ein, seed_gain, golden_gain, golden_slower in MODELS:
        args = numbers.table3(ein)
        name = os.path.basename(ein)
        check(args[args.index("--chips"):args.index("--compare")] == study.TABLE3,
              "%s: seed_numbers.py and study.py run the same Table 3 configuration" % name)
        rc, out, err = run(einc, *[os.path.join(root, x) if x == ein else x for x in args])
        check(rc == 0, "%s: einc %s exits 0 (%s)" % (name, " ".join(args), err.strip()[-200:]))
        if rc != 0:
            continue
        j = json.loads(out)
        best, al = j["best"], j["algorithms"]
        check((best["rows"], best["cols"]) == (4, 4), "%s: the 4x4 mesh" % name)
        ks = [l["slices"] for l in best["layers"]]
        check(len(ks) == 12 and set(ks) == {8}, "%s: K = 8 for the 12 training GEMMs (%s)" % (name, ks))
        ms, coll = al["meshslice"], al["collective"]
        check(abs(coll["time"] - coll["time_no_overlap"]) <= 1e-12 * coll["time"],
              "%s: Collective has nothing to overlap (%.6g s, in series %.6g s)"
              % (name, coll["time"], coll["time_no_overlap"]))
        check(ms["time"] < coll["time"] < ms["time_no_overlap"],
              "%s: MeshSlice-Overlap %.4g s < Collective %.4g s < MeshSlice in series %.4g s"
              % (name, ms["time"], coll["time"], ms["time_no_overlap"]))
        gain = 100 * (coll["time"] / ms["time"] - 1)
        check(abs(gain - golden_gain) <= 0.1,
              "%s: MeshSlice-Overlap %.2f%% faster than Collective (golden %.2f%%; seed 004 Table 3: %.1f%%)"
              % (name, gain, golden_gain, seed_gain))
        slower.append(100 * (ms["time_no_overlap"] / coll["time"] - 1))
        copies = sum(copy_seconds(l, 16, j["params"]["hbm_bw"]) for l in best["layers"])
        share = 100 * copies / ms["time_no_overlap"]
        check(abs(ms["time_slicing"] - copies) <= 1e-9 * copies,
              "%s: the JSON's time_slicing %.6g s is the copies recomputed from the shapes, %.6g s"
              % (name, ms["time_slicing"], copies))
        check(coll["time_slicing"] == 0, "%s: Collective (K = 1) slices nothing" % name)
        check(0 < share and abs(share - SEED_SLICING) <= 5 and ms["time_no_overlap"] - coll["time"] > copies,
              "%s: the slicing copies are %.2f%% of MeshSlice in series (seed 004: the slicing itself %.1f%%)"
              % (name, share, SEED_SLICING))
        check(abs(slower[-1] - golden_slower) <= 0.05,
              "%s: MeshSlice in series %.2f%% slower than Collective (golden %.2f%%)"
              % (name, slower[-1], golden_slower))
    if len(slower) == 2:
        mean = sum(slower) / 2
        check(abs(mean - SEED_NO_OVERLAP) <= 5,
              "without overlap, the mean of both models %.2f%% is within 5 points of seed 004's %.1f%%"
              % (mean, SEED_NO_OVERLAP))
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
