#!/usr/bin/python3
"""bf16_gemm.py - GEMMs of two bf16 operands on both of the runtime's routes
against NumPy.

A program of bf16 x bf16 contractions (plain, transposed operands, a
transposed result, batched; odd sizes: 17 rows per device on 4 devices)
is compiled for one device and for four ({X: 4}, the rows or the batch
sharded), and each executable run with EINC_BF16_GEMM=dnnl (oneDNN's
dnnl_gemm_bf16bf16f32, when the runtime was built with oneDNN) and
EINC_BF16_GEMM=sgemm (operands widened to f32, cblas_sgemm), with --check.
Both sum bf16 products in f32 and round the sum once to the bf16 result,
so each must be within one bf16 step (2^-7 relative) of NumPy's product
of the same bf16 values taken in f64, and the two routes within one step
of each other.  A bad EINC_BF16_GEMM value must end the run with a message
naming the variable.  The last line is `N passed, N failed`.

Usage: bf16_gemm.py --einc PATH [--mpi --mpirun PATH] [--no-dnnl]
  --no-dnnl   the runtime was built without oneDNN: only the sgemm route
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, mpi_launch  # noqa: E402

M, K, N, B = 68, 129, 37, 4
SOURCE = """mesh X = {x}
dim M = {M}, K = {K}, N = {N}, B = {B}
input A[M_X, K] : bf16
input AT[K, M_X] : bf16
input W[K, N] : bf16
input WT[N, K] : bf16
input Q[B_X, M, K] : bf16
input R[B_X, K, N] : bf16
C1[M_X, N] = A[M, K] * W[K, N]
C2[M_X, N] = AT[K, M] * WT[N, K]
C3[N, M_X] = 0.5 * A[M, K] * W[K, N]
C4[B_X, M, N] = Q[B, M, K] * R[B, K, N]
output C1[M, N]
output C2[M, N]
output C3[N, M]
output C4[B, M, N]
"""
STEP = 2.0 ** -7  # one bf16 step, relative (8 significant bits)


def to_bf16(x):
    """f32 values truncated to bf16 (exactly representable), still as f32."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return u.view(np.float32)


def close(got, want):
    """Max of |got - want| / (STEP |want| + 1e-4 max|want|): <= 1 passes."""
    scale = STEP * np.abs(want) + 1e-4 * np.max(np.abs(want))
    return float(np.max(np.abs(got.astype(np.float64) - want) / scale))


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--no-dnnl", action="store_true")
    a = ap.parse_args()
    routes = ["sgemm"] if a.no_dnnl else ["dnnl", "sgemm"]
    rng = np.random.default_rng(26)
    x = {n: to_bf16(rng.standard_normal(s)) for n, s in
         [("A", (M, K)), ("W", (K, N)), ("Q", (B, M, K)), ("R", (B, K, N))]}
    x["AT"] = np.ascontiguousarray(x["A"].T)
    x["WT"] = np.ascontiguousarray(x["W"].T)
    f = {n: v.astype(np.float64) for n, v in x.items()}
    want = {"C1": f["A"] @ f["W"], "C2": f["A"] @ f["W"], "C3": 0.5 * (f["A"] @ f["W"]).T,
            "C4": f["Q"] @ f["R"]}
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-bf16-gemm-") as work:
        ins = []
        for n, v in x.items():
            np.save(os.path.join(work, n + ".npy"), v)
            ins += ["--input", "%s=%s" % (n, os.path.join(work, n + ".npy"))]
        for xs in [1, 4]:
            src = os.path.join(work, "mm%d.ein" % xs)
            with open(src, "w") as fh:
                fh.write(SOURCE.format(x=xs, M=M, K=K, N=N, B=B))
            for rt, exe, launch in builds(a, src, os.path.join(work, "mm%d" % xs), xs, tally):
                got = {}
                for route in routes:
                    env = dict(os.environ, EINC_BF16_GEMM=route)
                    if rt == "mpi":  # mpirun passes -x variables to the ranks
                        launch_r = mpi_launch(a.mpirun, xs) + ["-x", "EINC_BF16_GEMM"]
                    else:
                        launch_r = launch
                    outs = []
                    for n in want:
                        outs += ["--output", "%s=%s" % (n, os.path.join(work, n + route + ".npy"))]
                    p = subprocess.run(launch_r + [exe, "--check"] + ins + outs, env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, timeout=300)
                    what = "X=%d %s %s" % (xs, rt, route)
                    if p.returncode != 0:
                        tally.result(False, what + ": run", p.stdout)
                        continue
                    got[route] = {n: np.load(os.path.join(work, n + route + ".npy"))
                                  for n in want}
                    errs = {n: close(got[route][n], want[n]) for n in want}
                    tally.result(all(e <= 1 for e in errs.values()),
                                 what + ": against NumPy (worst %.2f of one bf16 step)"
                                 % max(errs.values()), str(errs))
                if len(got) == 2:
                    d = {n: close(got["dnnl"][n], got["sgemm"][n].astype(np.float64))
                         for n in want}
                    tally.result(all(e <= 1 for e in d.values()),
                                 "X=%d %s: dnnl against sgemm (worst %.2f of one bf16 step)"
                                 % (xs, rt, max(d.values())), str(d))
                if xs == 1 and rt == "threads":
                    p = subprocess.run([exe] + ins, env=dict(os.environ, EINC_BF16_GEMM="blas"),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, timeout=300)
                    tally.result(p.returncode != 0 and "EINC_BF16_GEMM must be" in p.stdout,
                                 "EINC_BF16_GEMM=blas is an error", p.stdout)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
