#!/usr/bin/env python3
"""Benchmark 6: the attention score contraction btnh,bsnh->bnts through
rt_einsum vs the direct batched cblas_sgemm calls on the same arrays.

Default shape B=1, N=40, T=S=2048, H=128 (LLaMA-2 13B's heads at a 2048
context, one device).  Baseline = one cblas_sgemm per (b, n) with leading
dimension N*H (attention_gemm.c); ratio = baseline time / rt_einsum time;
target >= 0.9.

    python3 bench/attention_gemm.py --build BUILD [--shape B N T S H] [--reps 3] [--threads T]
        [--json FILE]
"""
import os

import benchlib as bl


def main():
    p = bl.parser(__doc__)
    p.add_argument("--shape", type=int, nargs=5, default=[1, 40, 2048, 2048, 128])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    exe = bl.compile_c(a.build, "attention_gemm", ["attention_gemm.c"], runtime=True)
    print(bl.machine())
    out = bl.run([exe, *a.shape, a.reps, a.threads])
    for line in out.splitlines():
        if line.startswith("#"):
            print(line)
    rows = []
    res = bl.Results("attention_gemm", "Attention contraction: rt_einsum vs batched cblas_sgemm")
    for r in bl.results(out):
        rows.append([r["case"], r["einsum_ms"], r["blas_ms"], r["einsum_gflops"], r["blas_gflops"],
                     f"{r['ratio']:.3f}", bl.verdict(r["ratio"], 0.9), f"{r['max_rel_err']:.1e}"])
        res.add(f"rt_einsum {r['case']} shape {'x'.join(map(str, a.shape))}", r["einsum_gflops"],
                "GFLOP/s", ">= 0.9x batched cblas", r["ratio"], bl.verdict(r["ratio"], 0.9))
    bl.table(["case", "rt_einsum ms", "cblas ms", "rt_einsum GFLOP/s", "cblas GFLOP/s", "ratio",
              ">=0.9x", "max rel err"], rows)
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
