#!/usr/bin/env python3
"""Einsums that sum a few products per element: a loop nest against a GEMM.

Chooses IR_EINSUM_UNROLL_MAX (ir/einsum_unroll.c, docs/codegen.md, "Small
contractions").  Each case is a one-device einc program holding one binary
einsum that contracts K elements, compiled twice with the same einc:
`--einsum-unroll=0` (the baseline: rt_einsum, a GEMM of K, with permute
copies when K sits between the other dims) and `--einsum-unroll=K` (a loop
nest over the result, each element an unrolled sum of K products).  The two
executables run alternately, `--repeat` runs each, `--rounds` times; the
time of one is the median over its rounds of the einsum's per-op time in
`--profile`.  ratio = GEMM time / loop time: above 1 the loop is faster.

  middle  Y[R, A, G] = X[R, K, G] * W[A, K]   A = K, G = 64: the rotary
          embedding's layout (K = 2 there), K between two kept dims of X
  last    Y[M, N] = X[M, K] * W[K, N]          N = 64: a plain GEMM's layout

X has 2^23 / K rows in the middle layout and Y 2^23 elements in the last,
so that the loop's memory traffic is about the same for every K.

    python3 bench/small_contraction.py --build BUILD [--ks 2,4,8,16,32] [--repeat 5] [--rounds 3]
        [--json FILE]
"""
import os
import re
import statistics
import tempfile

import benchlib as bl

ELEMS = 1 << 23  # elements of X (middle) or Y (last): 32 MiB of f32


def program(layout, k):
    if layout == "middle":
        rows = ELEMS // (k * 64)
        return ("dim R = %d, K = %d, A = %d, G = 64\ninput X[R, K, G] : f32\ninput W[A, K] : f32\n"
                "Y[R, A, G] = X[R, K, G] * W[A, K]\noutput Y\n" % (rows, k, k))
    return ("dim M = %d, K = %d, N = 64\ninput X[M, K] : f32\ninput W[K, N] : f32\n"
            "Y[M, N] = X[M, K] * W[K, N]\noutput Y\n" % (ELEMS // 64, k))


def einsum_ms(exe, repeat):
    """The --profile time of the program's Einsum op (ms per call)."""
    out = bl.run([exe, "--random-inputs", "1", "--profile", "--repeat", str(repeat)])
    for line in out.splitlines():
        m = re.match(r"\s+\d+\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+Y = Einsum", line)
        if m:
            return float(m.group(1))
    raise bl.BenchError("no Einsum line in the --profile of %s:\n%s" % (exe, out))


def main():
    p = bl.parser(__doc__)
    p.add_argument("--einc", help="the einc compiler (default BUILD/einc)")
    p.add_argument("--ks", default="2,4,8,16,32", help="contracted extents K")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    einc = a.einc or str(bl.einc(a.build))
    print(bl.machine())
    rows = []
    res = bl.Results("small_contraction", "Small contractions: unrolled loop nests vs GEMM")
    with tempfile.TemporaryDirectory(prefix="einc-contract-") as work:
        for layout in ("middle", "last"):
            for k in (int(x) for x in a.ks.split(",")):
                src = os.path.join(work, "%s%d.ein" % (layout, k))
                with open(src, "w") as f:
                    f.write(program(layout, k))
                exe = {}
                for name, unroll in (("gemm", 0), ("loop", k)):
                    exe[name] = os.path.join(work, "%s%d_%s" % (layout, k, name))
                    bl.run([einc, src, "--einsum-unroll=%d" % unroll, "-o", exe[name]])
                t = {"gemm": [], "loop": []}
                for _ in range(a.rounds):
                    for name in ("gemm", "loop"):
                        t[name].append(einsum_ms(exe[name], a.repeat))
                g, l = statistics.median(t["gemm"]), statistics.median(t["loop"])
                rows.append([layout, k, "%.3f" % g, "%.3f" % l, "%.2f" % (g / l)])
                res.add("loop nest, %s layout, K=%d" % (layout, k), l, "ms", "", g / l)
    bl.table(["layout", "K", "GEMM ms", "loop ms", "ratio GEMM / loop"], rows)
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
