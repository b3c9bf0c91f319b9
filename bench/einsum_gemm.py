#!/usr/bin/env python3
"""Benchmark 1: local contraction through rt_einsum vs a direct cblas ?gemm.

One device, f32 and f64, M = N = K = --n (2048), three layouts (see
einsum_gemm.c): plain ij,jk->ik, trans ji,kj->ik and permute hid,hdk->ik.
Baseline = the direct cblas call for the layout (einsum_gemm.c); ratio =
BLAS time / rt_einsum time (1.0 = no overhead); target >= 0.9.

    python3 bench/einsum_gemm.py --build BUILD [--n 2048] [--reps 7] [--threads T] [--json FILE]
"""
import os

import benchlib as bl


def main():
    p = bl.parser(__doc__)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    exe = bl.compile_c(a.build, "einsum_gemm", ["einsum_gemm.c"], runtime=True)
    print(bl.machine())
    out = bl.run([exe, a.n, a.reps, a.threads])
    for line in out.splitlines():
        if line.startswith("#"):
            print(line)
    rows = []
    res = bl.Results("einsum_gemm", "Local contraction: rt_einsum vs cblas_?gemm")
    for r in bl.results(out):
        rows.append([r["case"], r["dtype"], r["n"], r["einsum_ms"], r["blas_ms"],
                     r["einsum_gflops"], r["blas_gflops"], f"{r['ratio']:.3f}",
                     bl.verdict(r["ratio"], 0.9), f"{r['max_rel_err']:.1e}"])
        res.add(f"rt_einsum {r['case']} {r['dtype']} N={r['n']}", r["einsum_gflops"], "GFLOP/s",
                ">= 0.9x cblas", r["ratio"], bl.verdict(r["ratio"], 0.9))
    bl.table(["case", "dtype", "N", "rt_einsum ms", "cblas ms", "rt_einsum GFLOP/s",
              "cblas GFLOP/s", "ratio", ">=0.9x", "max rel err"], rows)
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
