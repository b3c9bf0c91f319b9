#!/usr/bin/env python3
"""Benchmark 7: softmax and RMSNorm rows against a copy of the same bytes.

Each kernel is a one-device einc program over an [R, C] f32 array; its time
is the sum of the per-op times `--profile` measures for the program's ops
(median over --repeat runs).  The baseline is the einc program `Y[R, C] =
X[R, C]`, one read and one write of the array: the memcpy bandwidth of the
same bytes through the same runtime.  A row kernel must read the array and
write its result at least once, so ratio = copy time / kernel time, and
the issue's target is >= 0.7 (the kernel reaches 70% of the copy's
bandwidth).  Softmax is the stable form (max, exp of the difference, sum,
divide); RMSNorm is x * rsqrt(mean(x * x) + eps) * g.

    python3 bench/rows.py --build BUILD [--rows 4096] [--cols 4096] [--repeat 10]
"""
import os
import re
import tempfile

import benchlib as bl

PROGRAMS = {
    "copy": "Y[R, C] = X[R, C]",
    "softmax": "Y[R, C] = softmax(X[R, C], C)",
    "rmsnorm": "N[R] = rsqrt(mean(X[R, C] * X[R, C]) + 0.00001)\nY[R, C] = X[R, C] * N[R] * G[C]",
}


def op_time_ms(einc, work, name, body, rows, cols, repeat):
    src = os.path.join(work, name + ".ein")
    with open(src, "w") as f:
        f.write("dim R = %d, C = %d\ninput X[R, C] : f32\ninput G[C] : f32\n%s\noutput Y\n"
                % (rows, cols, body))
    exe = os.path.join(work, name)
    bl.run([einc, src, "-o", exe])
    out = bl.run([exe, "--random-inputs", "1", "--profile", "--repeat", str(repeat)])
    total = 0.0
    for line in out.splitlines():
        m = re.match(r"\s+\d+\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+(.*)", line)
        if m:
            total += float(m.group(1))
    if total <= 0:
        raise bl.BenchError("no --profile lines from %s:\n%s" % (name, out))
    return total


def main():
    p = bl.parser(__doc__)
    p.add_argument("--einc", help="the einc compiler (default BUILD/einc)")
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args()
    a.einc = a.einc or os.path.join(a.build, "einc")
    print(bl.machine())
    with tempfile.TemporaryDirectory(prefix="einc-rows-") as work:
        t = {k: op_time_ms(a.einc, work, k, v, a.rows, a.cols, a.repeat) for k, v in PROGRAMS.items()}
    gb = 2.0 * a.rows * a.cols * 4 / 1e9
    rows = [[k, "%d x %d" % (a.rows, a.cols), "%.3f" % t[k], "%.2f" % (gb / t[k] * 1e3),
             "%.3f" % (t["copy"] / t[k]), bl.verdict(t["copy"] / t[k], 0.7) if k != "copy" else "-"]
            for k in PROGRAMS]
    bl.table(["kernel", "f32 array", "ms", "GB/s (2 x array)", "ratio to copy", ">=0.7x"], rows)


if __name__ == "__main__":
    bl.main_guard(main)
