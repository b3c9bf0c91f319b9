#!/usr/bin/env python3
"""End-to-end tests of `einc autotune` (driver/autotune.c).

Usage: test_autotune_cli.py EINC TEST_DIR

Writes small .ein models, runs the autotuner and checks its report against
an independent Python computation of the same quantities: which einsums are
2D GEMMs and their M, N, K; the dataflow heuristic; blocked-slicing validity
of the chosen K; the best mesh being the fastest listed; the Collective time
from Eq. 5 and the padded GEMM time; FLOP utilization.  Also checks that bad
input gives a clear error and the documented exit status.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

EXE = [sys.argv[1], "autotune"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args, src=None, name="model.ein"):
    """Runs the autotuner; `src` is written to a temp .ein passed last."""
    with tempfile.TemporaryDirectory() as d:
        if src is not None:
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(src)
            args = args + [path]
        p = subprocess.run(EXE + args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(b), 1e-30)


MODEL = """\
mesh X = 2, Y = 2
dim B = 4, S = 512, D = 1024, F = 4096, H = 8, E = 128
input In[B, S_X, D_Y] : bf16
param W1[D_X, F_Y] : bf16
param W2[F_X, D_Y] : bf16
input Q[B, S, H, E] : bf16
input K[B, S, H, E] : bf16
Hid[B, S, F] = In[B, S, D] * W1[D, F]
Out[B, S, D] = Hid[B, S, F] * W2[F, D]
Sc[B, H, S] = Q[B, S, H, E] * K[B, S, H, E]
output Out[B, S, D]
output Sc[B, H, S]
"""
TOKENS, D, F = 4 * 512, 1024, 4096


def pad(x, t):
    return -(-x // t) * t


def gemm_time(p, m, n, k, accumulate=False):
    """A partial GEMM on the chip's roofline: padded FLOPs at gemm_eff of
    peak against its bf16 bytes (A, B, C; C twice when accumulated) over HBM."""
    compute = 2.0 * pad(m, 128) * pad(n, 128) * pad(k, 128) / (p["peak_flops"] * p["gemm_eff"])
    memory = 2.0 * (m * k + k * n + m * n * (2 if accumulate else 1)) / p["hbm_bw"]
    return 1e-6 + max(compute, memory)


def coll_time(p, ring, shard):
    """Eq. 5 of seed 004; TPU v4 axes wrap when their size is a multiple of 4."""
    if ring <= 1:
        return 0.0
    bw = p["bw_ring"] if ring % 4 == 0 else p["bw_line"]
    return p["t_launch"] + (ring - 1) * (p["l_sync"] + shard / bw)


def heuristic(m, n, k):
    a, b, c = m * k, k * n, m * n
    if c >= a and c >= b:
        return "os"
    return "ls" if a >= b else "rs"


def sliced_dim(df, m, n, k):
    return {"os": k, "ls": n, "rs": m}[df]


def test_report_consistency():
    rc, out, err = run(["--chips", "16", "--json"], MODEL)
    check(rc == 0, "json run succeeds (%d: %s)" % (rc, err))
    if rc:
        return
    r = json.loads(out)
    p = r["params"]
    layers = r["best"]["layers"]
    # The two FC einsums are 2D GEMMs; the batched score einsum is not.
    check([l["name"] for l in layers] == ["Hid", "Out"], "GEMMs found: %s" % [l["name"] for l in layers])
    want = {"Hid": (TOKENS, F, D), "Out": (TOKENS, D, F)}
    for l in layers:
        check((l["m"], l["n"], l["k"]) == want[l["name"]], "M, N, K of %s" % l["name"])
        check(l["dataflow"] == heuristic(l["m"], l["n"], l["k"]), "dataflow of %s" % l["name"])
        rows, cols, k = r["best"]["rows"], r["best"]["cols"], l["slices"]
        d = sliced_dim(l["dataflow"], l["m"], l["n"], l["k"])
        check(k == 1 or ((d // rows) % (k * p["block"]) == 0 and (d // cols) % (k * p["block"]) == 0),
              "K=%d of %s splits %d into blocks on %dx%d" % (k, l["name"], d, rows, cols))
    # The best mesh is the fastest of those listed, and its time is the sum.
    found = [m for m in r["meshes"] if m["found"]]
    check(len(r["meshes"]) == 5, "all factor pairs of 16 listed")
    check(min(m["time"] for m in found) == r["best"]["time"], "best mesh is the fastest")
    check(close(sum(l["time"] for l in layers), r["best"]["time"]), "total is the layers' sum")
    flops = sum(2.0 * l["m"] * l["n"] * l["k"] for l in layers)
    check(close(r["best"]["utilization"], flops / (r["best"]["time"] * 16 * p["peak_flops"])),
          "utilization = FLOPs / (time * chips * peak)")
    check(r["command"].startswith("einc -D X=%d -D Y=%d " % (r["best"]["rows"], r["best"]["cols"])),
          "command sets the mesh: %s" % r["command"])
    check("--meshslice=" in r["command"], "command sets --meshslice")


def test_collective_formula():
    # One GEMM, Collective on a fixed 4x4 mesh: recompute Eq. 5 + GEMM here.
    src = MODEL.replace("Out[B, S, D] = Hid[B, S, F] * W2[F, D]\n", "").replace("output Out[B, S, D]\n", "")
    rc, out, err = run(["--chips", "16", "--mesh", "4x4", "--algorithm", "collective", "--json"], src)
    check(rc == 0, "collective run (%s)" % err)
    if rc:
        return
    r = json.loads(out)
    p = r["params"]
    l = r["best"]["layers"][0]
    m, n, k = l["m"], l["n"], l["k"]
    check(l["dataflow"] == "os", "Hid keeps C stationary")
    # C-stn: AllGather A (m x k) along rows and B (k x n) along columns at once.
    shard_a, shard_b = 2.0 * m * k / 16, 2.0 * k * n / 16
    want = max(coll_time(p, 4, shard_a), coll_time(p, 4, shard_b)) + gemm_time(p, m // 4, n // 4, k)
    check(close(l["time"], want), "Collective time %g == %g" % (l["time"], want))
    # MeshSlice with a fixed K: the three-stage pipeline recomputed.
    rc, out, err = run(["--chips", "16", "--mesh", "4x4", "--slices", "4", "--json"], src)
    check(rc == 0, "meshslice K=4 run (%s)" % err)
    if rc:
        return
    l = json.loads(out)["best"]["layers"][0]
    # Each iteration first copies its sub-shards of A and B out of the local
    # shards (seed 004 3.1.2), read and written once at the HBM bandwidth.
    copies = 2.0 * (shard_a + shard_b) / 4 / p["hbm_bw"]
    ag = max(coll_time(p, 4, shard_a / 4), coll_time(p, 4, shard_b / 4)) + copies
    g = gemm_time(p, m // 4, n // 4, k // 4, accumulate=True)
    want = ag + g + 3 * max(ag, g)
    check(l["slices"] == 4 and close(l["time"], want), "MeshSlice K=4 time %g == %g" % (l["time"], want))
    # The same K without overlap (seed 004 Table 3): four gathers and four
    # partial GEMMs one after another, never faster than the pipeline.
    want_serial = 4 * (ag + g)
    check(close(l["time_no_overlap"], want_serial),
          "MeshSlice K=4 without overlap %g == %g" % (l["time_no_overlap"], want_serial))
    rc, out, err = run(["--chips", "16", "--mesh", "4x4", "--slices", "4", "--no-overlap", "--json"], src)
    check(rc == 0, "--no-overlap run (%s)" % err)
    if rc:
        return
    r = json.loads(out)
    l = r["best"]["layers"][0]
    check(r["params"]["no_overlap"] is True and close(l["time"], want_serial),
          "--no-overlap prices the serial loop: %g == %g" % (l["time"], want_serial))


def test_training():
    # --train: forward, backward data A' = C' B^T and backward weight
    # B' = A^T C' per layer, with the dataflows of docs/meshslice.md.
    rc, out, err = run(["--chips", "16", "--train", "--json"], MODEL)
    check(rc == 0, "--train run (%s)" % err)
    if rc:
        return
    layers = json.loads(out)["best"]["layers"]
    got = [(l["name"], l["m"], l["n"], l["k"], l["dataflow"]) for l in layers]
    want = []
    for name, (m, n, k) in [("Hid", (TOKENS, F, D)), ("Out", (TOKENS, D, F))]:
        df = heuristic(m, n, k)
        bwd = {"os": [((m, k, n), "ls"), ((k, n, m), "rs")],
               "ls": [((m, k, n), "os"), ((n, k, m), "rs")],
               "rs": [((k, m, n), "ls"), ((k, n, m), "os")]}[df]
        want.append((name, m, n, k, df))
        for suffix, (shape, d) in zip([".bwd_data", ".bwd_weight"], bwd):
            want.append((name + suffix,) + shape + (d,))
    check(got == want, "training GEMMs %s == %s" % (got, want))


def test_fit_and_shared_k():
    # --fit seed004: the authors' fitted TPU v4 figures (docs/meshslice.md,
    # "Fitted figures"); --train gives a layer's three GEMMs one K.
    rc, out, err = run(["--chips", "16", "--hw", "tpu-v4", "--fit", "seed004", "--train", "--json"], MODEL)
    check(rc == 0, "--fit seed004 run (%s)" % err)
    if rc:
        return
    r = json.loads(out)
    par = r["params"]
    check(par["fit"] == "seed004", "params.fit is seed004")
    for key, want in [("t_launch", 13e-6), ("l_sync", 5e-6), ("bw_ring", 79.751e9), ("bw_line", 79.751e9),
                      ("t_launch_rds", 26e-6), ("bw_ring_rds", 63.167e9), ("t_launch_sr", 13e-6),
                      ("l_sync_sr", 5e-5), ("bw_link", 35.224e9), ("bw_sr", 2 * 35.224e9),
                      ("t_gemm_launch", 0.0)]:
        check(close(par[key], want), "fitted %s %g == %g" % (key, par[key], want))
    check(close(par["gemm_eff"] * par["peak_flops"], 242.0 * 1024 ** 4), "fitted GEMM rate")
    ks = {}
    for l in r["best"]["layers"]:
        ks.setdefault(l["name"].split(".")[0], set()).add(l["slices"])
    check(len(ks) == 2 and all(len(v) == 1 for v in ks.values()),
          "one K per layer for its three training GEMMs: %s" % ks)
    # --collective-overlap hides one AllGather of Collective behind its GEMM;
    # without overlap it is the plain Collective.
    base = ["--chips", "4", "--mesh", "2x2", "--compare", "--json"]
    rc1, out1, err1 = run(base, MODEL)
    rc2, out2, err2 = run(base + ["--collective-overlap"], MODEL)
    check(rc1 == 0 and rc2 == 0, "--collective-overlap runs (%s %s)" % (err1, err2))
    if rc1 == 0 and rc2 == 0:
        plain = json.loads(out1)["algorithms"]["collective"]
        hidden = json.loads(out2)["algorithms"]["collective"]
        check(json.loads(out2)["params"]["collective_overlap"] is True, "params.collective_overlap")
        check(hidden["time"] < plain["time"], "Collective with overlap %g < %g" % (hidden["time"], plain["time"]))
        check(close(hidden["time_no_overlap"], plain["time"]),
              "Collective without overlap unchanged: %g == %g" % (hidden["time_no_overlap"], plain["time"]))


def test_text_report():
    rc, out, err = run(["--chips", "4", "--compare"], MODEL)
    check(rc == 0, "text run (%s)" % err)
    check("best mesh" in out and "\nrun: einc -D X=" in out, "text report has the best mesh and command")
    for name in ["Cannon", "SUMMA", "Collective", "Wang", "MeshSlice"]:
        check(name in out, "--compare lists %s" % name)
    check("'Sc' has a batch dim" in err, "skipped einsum is explained: %s" % err)


def test_command_not_compiling_is_noted():
    # In's B = 4 over X does not split over X = 8, though M = B*S does.
    src = MODEL.replace("In[B, S_X, D_Y]", "In[B_X, S, D_Y]")
    rc, out, err = run(["--chips", "8", "--mesh", "8x1", "--json"], src)
    check(rc == 0, "run with a mesh the file's shardings do not fit (%s)" % err)
    if rc == 0:
        check(json.loads(out)["command_compiles"] is False, "command_compiles is false")
        check("do not fit" in err, "note explains the rejected command: %s" % err)


def test_non_gemm():
    """--non-gemm: the block's other layers by hand from MODEL's dims (B S H E
    D F), the same time added to every algorithm, and a model without them."""
    rc, out, err = run(["--chips", "4", "--train", "--compare", "--non-gemm", "--json"], MODEL)
    check(rc == 0, "--non-gemm runs: %s" % err[:200])
    if rc != 0:
        return
    j = json.loads(out)
    p = j["params"]
    eb, rate, hbm, n = 2.0, p["peak_flops"] * p["gemm_eff"], p["hbm_bw"], 4.0
    b, sq, h, e = 4, 512, 8, 128
    tok = b * sq / n
    qkv, sc, model, ffn = tok * h * e, tok * sq * h, tok * D, tok * F
    prod_flops = 3 * 2 * sc * e  # forward and two backward products
    want = {"attention scores (Q K^T)": (prod_flops, 3 * (2 * qkv + sc) * eb),
            "attention context (P V)": (prod_flops, 3 * (sc + 2 * qkv) * eb),
            "softmax": (0, 5 * sc * eb), "LayerNorm x2": (0, 2 * 5 * model * eb),
            "GeLU": (0, 5 * ffn * eb), "residual add x2": (0, 2 * 2 * 3 * model * eb)}
    ng = j["non_gemm"]
    got = {l["name"]: l for l in ng["layers"]}
    check(set(got) == set(want), "non-GEMM layers: %s" % sorted(got))
    total = 0
    for name, (fl, by) in want.items():
        l = got.get(name, {})
        t = max(fl / rate, by / hbm)
        total += t
        check(close(l.get("flops", -1), fl) and close(l.get("bytes", -1), by) and close(l.get("time", -1), t),
              "%s: flops %s bytes %s time %s, by hand %g %g %g" % (name, l.get("flops"), l.get("bytes"),
                                                                  l.get("time"), fl, by, t))
    check(close(ng["time"], total) and close(ng["flops"], 2 * prod_flops), "non-GEMM sums")
    for key, a in j["algorithms"].items():
        if not a["found"]:
            continue
        fl = a["utilization"] * a["time"] * n * p["peak_flops"] + ng["flops"] * n
        check(close(a["block_time"], a["time"] + total) and
              close(a["block_time_no_overlap"], a["time_no_overlap"] + total) and
              close(a["block_utilization"], fl / (a["block_time"] * n * p["peak_flops"])),
              "%s: block time = GEMMs + non-GEMM layers, utilization over both" % key)
    rc, out, _ = run(["--chips", "4", "--train", "--compare", "--json"], MODEL)
    j0 = json.loads(out) if rc == 0 else {}
    check("non_gemm" not in j0 and all("block_time" not in a for a in j0.get("algorithms", {}).values()),
          "without --non-gemm the report is the FC layers only")
    check(j0.get("algorithms", {}).get("meshslice", {}).get("time") == j["algorithms"]["meshslice"]["time"],
          "--non-gemm does not change the GEMMs' tuning")
    rc, out, err = run(["--chips", "4", "--non-gemm"], MODEL.replace("H = 8, E = 128", "N = 8, E = 128")
                       .replace("H, E]", "N, E]").replace("B, H, S]", "B, N, S]"))
    check(rc == 1 and "has no H" in err, "--non-gemm without a dim H: exit 1 and the name (%d, %s)" % (rc, err.strip()))
    rc, out, _ = run(["--chips", "4", "--train", "--non-gemm"], MODEL)
    check(rc == 0 and "non-GEMM layers of the block" in out and "whole block on the best mesh" in out,
          "the text report has the non-GEMM section")


def test_pod_8960():
    """8960 chips (a TPU v5p pod, seed 000): beyond an executable's 4096
    devices the search still runs, and the printed command prices the plan
    (--dump-cost) and compiles; with -o einc refuses that mesh."""
    src = ("mesh X = 2, Y = 2\ndim B = 70, S = 2048, D = 71680, F = 286720, H = 560, E = 128\n"
           "input In[B, S, D] : bf16\nparam W1[D, F] : bf16\nparam W2[F, D] : bf16\n"
           "Hid[B, S, F] = In[B, S, D] * W1[D, F]\nOut[B, S, D] = Hid[B, S, F] * W2[F, D]\noutput Out[B, S, D]\n")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "pod.ein")
        with open(path, "w") as f:
            f.write(src)
        p = subprocess.run(EXE + ["--hw", "tpu-v4", "--fit", "seed004", "--train", "--chips", "8960", "--compare",
                                  "--non-gemm", "--json", path], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, "autotune --chips 8960 runs: %s" % p.stderr[:300])
        if p.returncode != 0:
            return
        j = json.loads(p.stdout)
        b = j["best"]
        check(b["found"] and b["rows"] * b["cols"] == 8960 and all(
            a["rows"] * a["cols"] == 8960 for a in j["algorithms"].values() if a["found"]),
            "8960 chips: every algorithm's mesh has 8960 chips (%sx%s)" % (b.get("rows"), b.get("cols")))
        check(j["command"].endswith("--dump-cost " + path) and j["command_compiles"] and not p.stderr,
              "the command prices the plan and compiles: %s (%s)" % (j["command"], p.stderr[:200]))
        args = j["command"].split()[1:]
        q = subprocess.run([sys.argv[1]] + args, capture_output=True, text=True, timeout=120)
        check(q.returncode == 0 and "8960 devices" in q.stdout, "the printed command runs: %s" % q.stderr[:300])
        args.remove("--dump-cost")
        q = subprocess.run([sys.argv[1]] + args[:-1] + ["-o", os.path.join(d, "exe"), path], capture_output=True,
                           text=True, timeout=120)
        check(q.returncode == 1 and "executable runs at most 4096" in q.stderr and not
              os.path.exists(os.path.join(d, "exe")), "with -o: refused (%d, %s)" % (q.returncode, q.stderr[:300]))


def test_errors():
    cases = [
        (["--json"], MODEL, 2, "--chips N is required"),
        (["--chips", "0"], MODEL, 2, "--chips wants"),
        (["--chips", "4", "--mesh", "3x3"], MODEL, 2, "is not 4 chips"),
        (["--chips", "4", "--algorithm", "fft"], MODEL, 2, "unknown algorithm"),
        (["--chips", "4", "--dataflow", "xs"], MODEL, 2, "unknown dataflow"),
        (["--chips", "4", "--gemm-eff", "1.5"], MODEL, 2, "--gemm-eff"),
        (["--chips", "4", "--fit", "tpu"], MODEL, 2, "--fit wants 'seed004' or 'profile'"),
        (["--chips", "4", "--slices", "3", "--algorithm", "wang"], MODEL, 2, "meshslice only"),
        (["--chips", "4", "--hw", "no-such-chip"], MODEL, 1, "no-such-chip"),
        (["--chips", "4"], "mesh X = 4\ndim M = 64, K = 32, N = 16\ninput A[M_X, K] : f32\n"
         "param W[K, N] : f32\nC[M, N] = A[M, K] * W[K, N]\noutput C[M, N]\n", 1, "2D mesh"),
        (["--chips", "4"], "mesh X = 2, Y = 2\ndim A = 4\ninput I[A] : f32\noutput I[A]\n", 1, "no 2D GEMM"),
        (["--chips", "4"], MODEL.replace("Hid[B, S, F] =", "Hid[B, S, F] = ="), 1, "error"),
        (["--chips", "7"], MODEL, 1, "no mesh shape"),
        (["--chips", "16", "--slices", "5"], MODEL, 1, "no mesh shape"),
    ]
    for args, src, want_rc, want_msg in cases:
        rc, out, err = run(args, src)
        check(rc == want_rc, "%s: exit %d, want %d (%s)" % (args, rc, want_rc, err.strip()[:200]))
        check(want_msg in err, "%s: message '%s' in: %s" % (args, want_msg, err.strip()[:200]))
    rc, out, err = run(["--chips", "4", "/nonexistent/model.ein"])
    check(rc == 1 and "cannot open" in err, "missing file: %d %s" % (rc, err))
    rc, out, err = run(["--help"])
    check(rc == 0 and "usage: einc autotune" in out, "--help")


for t in [test_report_consistency, test_collective_formula, test_training, test_fit_and_shared_k, test_text_report,
          test_command_not_compiling_is_noted, test_non_gemm, test_pod_8960,
          test_errors]:
    t()
print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
