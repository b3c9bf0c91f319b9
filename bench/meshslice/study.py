#!/usr/bin/env python3
"""The MeshSlice paper's study (seed 004, section 5) redone with einc's model.

Runs `einc autotune --train` (forward, backward-data and backward-weight
GEMMs of every layer) on the FC layers of GPT-3 175B and Megatron-NLG 530B
(gpt3_fc.ein, megatron_fc.ein beside this script) for weak scaling from 16 to
256 TPU v4 chips (batch = chips / 2, sequence 2048) and prints Markdown tables:
FLOP utilization per algorithm (Fig. 9), the whole block with the non-GEMM
layers (`--non-gemm`, the paper's end-to-end figures), MeshSlice's speedups at 256 chips
beside the paper's figures and what each algorithm exposes, the autotuner's mesh shape
and K per layer, the dataflow heuristic against one dataflow for every layer on three
meshes (Table 2's readings; the default B-stn on its own best mesh is the adopted one), utilization
by mesh shape (Fig. 13), by K on a 32 x 8 mesh (Fig. 14) and on the 4 x 4 mesh
of Table 3 (the authors' real-TPU configuration), and last the paper's figures beside einc's with the difference in
percentage points.  docs/meshslice.md holds the output and the discussion.

    bench/meshslice/study.py --einc build/einc

By default the model uses the figures the paper's authors fitted on TPU v4
(`einc autotune --fit seed004`: their Autotuner.py, github.com/hwnam831/meshslice);
`--fit profile` uses the hardware profile's
figures and einc's assumed launch cost instead.

Every number comes from the autotuner's --json report; this script only
arranges them.  Exit status 1 if a run fails.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Table 3's configuration (tests/cost/seed_numbers.py's table3() runs the same).
TABLE3 = ["--chips", "16", "-D", "B=16", "--mesh", "4x4", "--slices", "8"]
MODELS = [("GPT-3 175B", "gpt3_fc.ein"), ("Megatron-NLG 530B", "megatron_fc.ein")]
CHIPS = [16, 32, 64, 128, 256]
ALGOS = ["cannon", "summa", "collective", "wang", "meshslice"]
ALGO_NAMES = {"cannon": "Cannon", "summa": "SUMMA", "collective": "Collective",
              "wang": "Wang", "meshslice": "MeshSlice"}
# What seed 004 reports (section 5), keyed by model.
PAPER = {
    "GPT-3 175B": {"over_wang": 13.8, "end_to_end": 12.0, "drop_16_256": 16.8,
                   "dataflow_gain": 21.2, "overlap_4x4_over_collective": 38.6,
                   "no_overlap_4x4_slower": 4.5, "slicing_4x4": 1.3},
    "Megatron-NLG 530B": {"over_wang": 26.0, "end_to_end": 23.4, "drop_16_256": 5.8,
                          "dataflow_gain": 5.1, "overlap_4x4_over_collective": 32.8,
                          "no_overlap_4x4_slower": 4.5, "slicing_4x4": 1.3},
}


def run(cmd, args, check=True):
    """Runs the autotuner with `args` and returns its JSON report (None if it
    refused the configuration and check is False)."""
    p = subprocess.run(cmd + args + ["--json"], capture_output=True, text=True)
    if p.returncode != 0:
        if check:
            sys.exit("study: %s failed:\n%s" % (" ".join(cmd + args), p.stderr))
        return None
    return json.loads(p.stdout)


def pct(x):
    return "%.1f%%" % (100 * x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--einc", required=True, help="einc executable (runs `einc autotune`)")
    ap.add_argument("--hw", default="tpu-v4")
    ap.add_argument("--fit", default="seed004", choices=["seed004", "profile"],
                    help="communication and GEMM-rate figures (einc autotune --fit)")
    ap.add_argument("--raw", help="also write every JSON report to this file")
    a = ap.parse_args()
    cmd = [a.einc, "autotune"]
    cmd += ["--hw", a.hw, "--fit", a.fit, "--train"]
    summary = []  # (model, figure, what, paper, einc) for the closing table
    no_overlap = []  # Table 3 without overlap, per model (the seed's one figure covers both)
    slicing = []  # Table 3: the slicing copies over Collective's time, per model (one seed figure)
    raw = {}
    out = []
    w = out.append

    for model, ein in MODELS:
        path = os.path.join(HERE, ein)
        reports = {}
        for n in CHIPS:
            reports[n] = run(cmd, ["--chips", str(n), "-D", "B=%d" % (n // 2), "--compare", "--non-gemm", path])
        raw[model] = {"weak_scaling": reports}
        w("### %s, weak scaling (batch = chips / 2, sequence 2048)\n" % model)
        w("FLOP utilization of the FC layers, each algorithm on its own best mesh shape "
          "(Fig. 9):\n")
        w("| chips | " + " | ".join(ALGO_NAMES[x] for x in ALGOS) + " |")
        w("|---|" + "---|" * len(ALGOS))
        for n in CHIPS:
            cells = []
            for x in ALGOS:
                t = reports[n]["algorithms"][x]
                cells.append("%s (%dx%d)" % (pct(t["utilization"]), t["rows"], t["cols"])
                             if t["found"] else "n/a")
            w("| %d | %s |" % (n, " | ".join(cells)))
        w("")
        r256 = reports[256]["algorithms"]
        ms = r256["meshslice"]["time"]
        drop = 1 - reports[256]["algorithms"]["meshslice"]["utilization"] / \
            reports[16]["algorithms"]["meshslice"]["utilization"]
        p = PAPER[model]
        w("| at 256 chips | einc model | paper (seed 004) |")
        w("|---|---|---|")
        w("| MeshSlice speedup over Wang | %.1f%% | %.1f%% (FC layers; %.1f%% end to end) |"
          % (100 * (r256["wang"]["time"] / ms - 1), p["over_wang"], p["end_to_end"]))
        w("| MeshSlice speedup over Collective | %.1f%% | not reported for this setup |"
          % (100 * (r256["collective"]["time"] / ms - 1)))
        w("| MeshSlice utilization drop, 16 -> 256 chips | %.1f%% | %.1f%% |"
          % (100 * drop, p["drop_16_256"]))
        w("")
        summary.append((model, "Fig. 9", "MeshSlice over Wang, 256 chips", p["over_wang"],
                        100 * (r256["wang"]["time"] / ms - 1)))
        # What each algorithm exposes beyond the GEMMs (MeshSlice's partial
        # GEMMs on its 32x8-class best mesh), and what the paper's two
        # figures imply for Wang if its MeshSlice had einc's 16-chip
        # utilization: U256 = (1 - drop) U16, Wang = U256 / (1 + over Wang).
        comp = sum(l["t_compute"] for l in reports[256]["best"]["layers"])
        peak_eff = reports[256]["params"]["gemm_eff"]
        u256 = (1 - p["drop_16_256"] / 100) * reports[16]["algorithms"]["meshslice"]["utilization"]
        w("Exposed time at 256 chips beyond the GEMMs (%.2f ms): Collective %.1f%%, Wang %.1f%%, MeshSlice %.1f%% "
          "of it; the paper's drop and gain with einc's 16-chip MeshSlice imply MeshSlice %s and Wang %s at 256 "
          "chips, exposing about %.1f%% and %.1f%%.\n"
          % (1e3 * comp, 100 * (r256["collective"]["time"] / comp - 1), 100 * (r256["wang"]["time"] / comp - 1),
             100 * (ms / comp - 1), pct(u256), pct(u256 / (1 + p["over_wang"] / 100)),
             100 * (peak_eff / u256 - 1), 100 * (peak_eff * (1 + p["over_wang"] / 100) / u256 - 1)))
        # Fig. 9 and Table 3 are the FC layers only; the end-to-end gain
        # adds the block's other layers (--non-gemm), the same time for
        # every algorithm.
        blk = lambda n, x: reports[n]["algorithms"][x]
        e2e = 100 * (blk(256, "wang")["block_time"] / blk(256, "meshslice")["block_time"] - 1)
        summary.append((model, "5.1 text", "end to end (FC + non-GEMM layers): MeshSlice over Wang, 256 chips",
                        p["end_to_end"], e2e))
        w("The whole block (FC GEMMs plus the non-GEMM layers, `--non-gemm`: attention products, softmax, "
          "LayerNorm, GeLU, residual adds, %.2f ms per device at 256 chips for every algorithm), utilization "
          "with each algorithm on its FC layers' best mesh:\n" % (1e3 * reports[256]["non_gemm"]["time"]))
        w("| chips | non-GEMM (ms) | " + " | ".join(ALGO_NAMES[x] for x in ALGOS) + " | MeshSlice over Wang |")
        w("|---|---|" + "---|" * len(ALGOS) + "---|")
        for n in CHIPS:
            cells = [pct(blk(n, x)["block_utilization"]) if blk(n, x)["found"] else "n/a" for x in ALGOS]
            w("| %d | %.2f | %s | %.1f%% |" % (n, 1e3 * reports[n]["non_gemm"]["time"], " | ".join(cells),
                                            100 * (blk(n, "wang")["block_time"] / blk(n, "meshslice")["block_time"] - 1)))
        w("")
        w("End to end at 256 chips: MeshSlice %.1f%% faster than Wang (paper %.1f%%; FC layers alone %.1f%%, "
          "paper %.1f%%); MeshSlice's whole-block utilization drops %.1f%% from 16 to 256 chips.\n"
          % (e2e, p["end_to_end"], 100 * (r256["wang"]["time"] / ms - 1), p["over_wang"],
             100 * (1 - blk(256, "meshslice")["block_utilization"] / blk(16, "meshslice")["block_utilization"])))
        summary.append((model, "Fig. 9", "MeshSlice utilization drop 16 -> 256 chips",
                        p["drop_16_256"], 100 * drop))
        w("Autotuner's choice for MeshSlice (mesh rows x cols; forward dataflow and K per "
          "layer, the backward GEMMs follow Table 1):\n")
        fwd = [l for l in reports[16]["best"]["layers"] if "." not in l["name"]]
        w("| chips | mesh | " + " | ".join(l["name"] for l in fwd) + " | one K for all | utilization |")
        w("|---|---|" + "---|" * len(fwd) + "---|---|")
        for n in CHIPS:
            b = reports[n]["best"]
            cells = ["%s K=%d" % (l["dataflow"].upper(), l["slices"]) for l in b["layers"]
                     if "." not in l["name"]]
            ck = reports[n].get("common_k", {}).get("k", 0)
            w("| %d | %dx%d | %s | %s | %s |" % (n, b["rows"], b["cols"], " | ".join(cells),
                                               ck or "-", pct(b["utilization"])))
        w("")

        # Table 2 (seed 004 5.2): the heuristic's dataflows against "the
        # default dataflow (B-stn)" for every FC layer.  The adopted reading
        # re-runs the autotuner's stage 2 (mesh and K, 3.2.2) for the
        # default; the other rows are the readings docs/meshslice.md lists
        # (row 3): another mesh, another single dataflow, and the gain read
        # as time saved or as utilization points instead of a speedup.
        best = reports[256]["best"]
        hm = "%dx%d" % (best["rows"], best["cols"])
        tm = "%dx%d" % (best["cols"], best["rows"])
        w("Dataflow optimization at 256 chips (Table 2): the heuristic's dataflows %s on %s, %s; every layer "
          "given one dataflow instead (the speedup is the heuristic's; paper: %.1f%% over the default B-stn):\n"
          % ("/".join(l["dataflow"].upper() for l in best["layers"] if "." not in l["name"]), hm,
             pct(best["utilization"]), p["dataflow_gain"]))
        w("| every layer | mesh | utilization | heuristic's speedup | time saved | utilization points |")
        w("|---|---|---|---|---|---|")
        names = {"rs": "B-stn (RS)", "os": "C-stn (OS)", "ls": "A-stn (LS)"}
        for df in ["rs", "os", "ls"]:
            for mesh, what in [(None, "its own best"), (hm, "the heuristic's"), (tm, "transposed")]:
                r = run(cmd, ["--chips", "256", "-D", "B=128", "--dataflow", df] +
                        (["--mesh", mesh] if mesh else []) + [path], check=False)
                if r is None or not r["best"]["found"]:
                    w("| %s | %s | n/a | | | |" % (names[df], what))
                    continue
                d = r["best"]
                raw[model]["dataflow_%s_%s" % (df, mesh or "own")] = r
                if df == "rs" and mesh is None:
                    summary.append((model, "Table 2", "dataflow optimization over B-stn",
                                    p["dataflow_gain"], 100 * (d["time"] / best["time"] - 1)))
                w("| %s | %s %dx%d | %s | %.1f%% | %.1f%% | %.1f |"
                  % (names[df], what, d["rows"], d["cols"], pct(d["utilization"]),
                     100 * (d["time"] / best["time"] - 1), 100 * (1 - best["time"] / d["time"]),
                     100 * (best["utilization"] - d["utilization"])))
        w("")

        # Fig. 13: utilization by mesh shape at 256 chips.
        w("MeshSlice utilization by mesh shape at 256 chips (Fig. 13): " + ", ".join(
            "%dx%d %s" % (m["rows"], m["cols"], pct(m["utilization"]) if m["found"] else "n/a")
            for m in reports[256]["meshes"]) + ".\n")

        # Fig. 14: utilization by K on 32 x 8 (one K for every layer).
        ks = []
        for k in [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96]:
            r = run(cmd, ["--chips", "256", "-D", "B=128", "--mesh", "32x8", "--slices", str(k),
                          path], check=False)
            if r:
                ks.append((k, r["best"]["utilization"]))
        raw[model]["k_sweep_32x8"] = ks
        w("MeshSlice utilization by K on 32x8, one K for every layer (Fig. 14): "
          + ", ".join("K=%d %s" % (k, pct(u)) for k, u in ks) + ".\n")

        # Table 3: the paper's authors' real 4 x 4 TPU v4 runs (runexp.sh runs
        # BenchTransformer.py with its defaults: batch = chips = 16, K = 8 for
        # every FC layer).  TPU v4 cannot overlap AG/RdS with computation
        # (seed 004 5.3), so Collective is measured without overlap and
        # MeshSlice in series; MeshSlice-Overlap is the same K with overlap.
        r16 = run(cmd, TABLE3 + ["--compare", "--non-gemm", path])
        raw[model]["table3"] = r16
        al = r16["algorithms"]
        ms, coll = al["meshslice"], al["collective"]
        serial_util = coll["time"] / ms["time_no_overlap"] * coll["utilization"]
        summary.append((model, "Table 3", "4x4 MeshSlice-Overlap over Collective",
                        p["overlap_4x4_over_collective"], 100 * (coll["time"] / ms["time"] - 1)))
        no_overlap.append(100 * (ms["time_no_overlap"] / coll["time"] - 1))
        # "the slicing itself only 1.3%" is part of the "about 4.5%" slower than
        # Collective (5.3): the same denominator, Collective's time.
        slicing.append(100 * ms["time_slicing"] / coll["time"])
        w("On a 4x4 mesh (Table 3: batch = chips = 16, K = 8 for every layer, as the authors' real-TPU "
          "runs): Collective %s, Wang %s, MeshSlice %s in series (%.1f%% slower than Collective; paper: "
          "about %.1f%% for both models, 1.3%% of it the slicing copies; einc's copies, read and written once in "
          "HBM: %.2f%% of Collective's time), "
          "MeshSlice-Overlap %s (%.1f%% faster than Collective; paper %.1f%%).\n"
          % (pct(coll["utilization"]), pct(al["wang"]["utilization"]), pct(serial_util),
             no_overlap[-1], p["no_overlap_4x4_slower"], slicing[-1], pct(ms["utilization"]),
             100 * (coll["time"] / ms["time"] - 1), p["overlap_4x4_over_collective"]))
        auto = run(cmd, ["--chips", "16", "-D", "B=8", "--mesh", "4x4", "--compare", path])["algorithms"]
        xla = run(cmd, ["--chips", "16", "-D", "B=16", "--mesh", "4x4", "--slices", "8", "--compare",
                        "--collective-overlap", path])["algorithms"]
        w("Other readings of Table 3, for comparison: the weak-scaling batch (8) with the autotuner's K "
          "per layer gives MeshSlice-Overlap %.1f%% faster and in series %.1f%% slower; Collective "
          "hiding one AllGather behind its GEMM (--collective-overlap, the authors' CostModel.py "
          "GSPMD_*, which seed 004 5.3 rules out on TPU v4) %.1f%% and %.1f%%.\n"
          % (100 * (auto["collective"]["time"] / auto["meshslice"]["time"] - 1),
             100 * (auto["meshslice"]["time_no_overlap"] / auto["collective"]["time"] - 1),
             100 * (xla["collective"]["time"] / xla["meshslice"]["time"] - 1),
             100 * (xla["meshslice"]["time_no_overlap"] / xla["collective"]["time"] - 1)))
        w("The same 4x4 rows with the block's non-GEMM layers added (%.2f ms per device; Table 3 itself is "
          "the FC layers): MeshSlice-Overlap %.1f%% faster than Collective; in series %.1f%% slower.\n"
          % (1e3 * r16["non_gemm"]["time"],
             100 * (coll["block_time"] / ms["block_time"] - 1),
             100 * (ms["block_time_no_overlap"] / coll["block_time"] - 1)))

        # How the comparison with Wang depends on the assumed launch cost.
        cells = []
        for tl in ["0", "1e-6", "5e-6", "2e-5", "1e-4"]:
            r = run(cmd, ["--chips", "256", "-D", "B=128", "--compare", "--t-launch", tl, path])
            al = r["algorithms"]
            cells.append("T_launch %s s: MeshSlice %s, Wang %s (+%.1f%%)"
                         % (tl, pct(al["meshslice"]["utilization"]), pct(al["wang"]["utilization"]),
                            100 * (al["wang"]["time"] / al["meshslice"]["time"] - 1)))
        w("Sensitivity to T_launch at 256 chips: " + "; ".join(cells) + ".\n")

        # The synchronization latency per ring step sets how fast MeshSlice
        # loses efficiency with the mesh (seed 004 Eq. 5: P - 1 of them per
        # partial collective); the seed gives no fitted value.
        cells = []
        for ls in ["1e-6", "2e-6", "5e-6", "1e-5"]:
            lo = run(cmd, ["--chips", "16", "-D", "B=8", "--compare", "--l-sync", ls, path])
            hi = run(cmd, ["--chips", "256", "-D", "B=128", "--compare", "--l-sync", ls, path])
            al = hi["algorithms"]
            cells.append("L_sync %s s: drop 16 -> 256 %.1f%%, over Wang %.1f%%"
                         % (ls, 100 * (1 - al["meshslice"]["utilization"]
                                       / lo["algorithms"]["meshslice"]["utilization"]),
                            100 * (al["wang"]["time"] / al["meshslice"]["time"] - 1)))
        w("Sensitivity to L_sync (paper: drop %.1f%%, over Wang %.1f%%): %s.\n"
          % (p["drop_16_256"], p["over_wang"], "; ".join(cells)))

    summary.append(("both (mean)", "Table 3", "4x4 without overlap: MeshSlice slower than Collective",
                    PAPER[MODELS[0][0]]["no_overlap_4x4_slower"], sum(no_overlap) / len(no_overlap)))
    summary.append(("both (mean)", "Table 3", "4x4: the slicing copies themselves, share of Collective's time",
                    PAPER[MODELS[0][0]]["slicing_4x4"], sum(slicing) / len(slicing)))
    w("### Seed 004's figures beside einc's\n")
    w("| model | figure | number | paper | einc | difference (points) | within 5 points |")
    w("|---|---|---|---|---|---|---|")
    for model, fig, what, paper, ours in summary:
        w("| %s | %s | %s | %.1f%% | %.1f%% | %+.1f | %s |"
          % (model, fig, what, paper, ours, ours - paper, "yes" if abs(ours - paper) <= 5 else "no"))
    w("")
    params = raw[MODELS[0][0]]["weak_scaling"][16]["params"]
    w("Model parameters (%s): %s" % (a.hw, ", ".join(("%s = %g" if isinstance(v, (int, float)) and not isinstance(v, bool) else "%s = %s")
                  % (k, v) for k, v in params.items())))
    print("\n".join(out))
    if a.raw:
        with open(a.raw, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
