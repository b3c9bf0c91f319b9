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

With --cpu the time of a kernel is instead the CPU time (user + system)
its executable spends per run: that of a --repeat N run less that of a
--repeat 1 run (inputs, start-up), over N - 1.  On a machine shared with
other jobs the wall time of an op depends on who else holds the core; the
CPU time a process uses does not, stalls on memory included, so the ratio
is steadier there (it is not a wall time: it is what the kernel costs a
core).

With --floor-rows N each kernel also runs on an [N, C] array small enough
to stay in cache (N = 32, C = 2048: 256 KiB in, 256 KiB out), many times;
its time per element times R x C is the kernel's arithmetic floor at the
full size: what it would take if every byte came from cache.  copy time /
floor is then the best ratio the kernel can reach on this CPU however well
its memory traffic overlaps its arithmetic.

    python3 bench/rows.py --build BUILD [--rows 4096] [--cols 4096] [--repeat 10] [--cpu] [--json FILE]
                          [--floor-rows 32]
"""
import os
import re
import resource
import tempfile

import benchlib as bl

PROGRAMS = {
    "copy": "Y[R, C] = X[R, C]",
    "softmax": "Y[R, C] = softmax(X[R, C], C)",
    "rmsnorm": "N[R] = rsqrt(mean(X[R, C] * X[R, C]) + 0.00001)\nY[R, C] = X[R, C] * N[R] * G[C]",
}


def cpu_seconds(cmd):
    """CPU time (user + system) of running cmd to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    bl.run(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def op_time_ms(einc, work, name, body, rows, cols, repeat, cpu):
    src = os.path.join(work, name + ".ein")
    with open(src, "w") as f:
        f.write("dim R = %d, C = %d\ninput X[R, C] : f32\ninput G[C] : f32\n%s\noutput Y\n"
                % (rows, cols, body))
    exe = os.path.join(work, name)
    bl.run([einc, src, "-o", exe])
    if cpu:
        many = cpu_seconds([exe, "--random-inputs", "1", "--repeat", str(repeat)])
        one = cpu_seconds([exe, "--random-inputs", "1", "--repeat", "1"])
        return max(many - one, 1e-9) / (repeat - 1) * 1e3
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
    p.add_argument("--cpu", action="store_true",
                   help="CPU time per run instead of the profile's wall time (see above)")
    p.add_argument("--floor-rows", type=int, default=0,
                   help="also time each kernel on this many rows, in cache (see above)")
    a = p.parse_args()
    if a.cpu and a.repeat < 2:
        p.error("--cpu needs --repeat 2 or more")
    a.einc = a.einc or os.path.join(a.build, "einc")
    print(bl.machine())
    with tempfile.TemporaryDirectory(prefix="einc-rows-") as work:
        t = {k: op_time_ms(a.einc, work, k, v, a.rows, a.cols, a.repeat, a.cpu)
             for k, v in PROGRAMS.items()}
    gb = 2.0 * a.rows * a.cols * 4 / 1e9
    rows = [[k, "%d x %d" % (a.rows, a.cols), "%.3f" % t[k], "%.2f" % (gb / t[k] * 1e3),
             "%.3f" % (t["copy"] / t[k]), bl.verdict(t["copy"] / t[k], 0.7) if k != "copy" else "-"]
            for k in PROGRAMS]
    bl.table(["kernel", "f32 array", "CPU ms" if a.cpu else "ms", "GB/s (2 x array)",
              "ratio to copy", ">=0.7x"], rows)
    res = bl.Results("rows", "Softmax and RMSNorm kernels vs a copy of the same bytes")
    for k in PROGRAMS:
        if k != "copy":
            res.add(f"{k} {a.rows} x {a.cols} f32", gb / t[k] * 1e3, "GB/s", ">= 0.7x copy",
                    t["copy"] / t[k], bl.verdict(t["copy"] / t[k], 0.7))
    res.write(a.json)
    if a.floor_rows <= 0:
        return
    scale = a.rows / a.floor_rows
    with tempfile.TemporaryDirectory(prefix="einc-rows-") as work:
        f = {k: op_time_ms(a.einc, work, k, v, a.floor_rows, a.cols,
                           min(int(a.repeat * scale), 5000), a.cpu) * scale
             for k, v in PROGRAMS.items()}
    print("\narithmetic floor: each kernel on %d x %d (in cache), scaled to %d x %d"
          % (a.floor_rows, a.cols, a.rows, a.cols))
    bl.table(["kernel", "floor ms", "share of its time", "best ratio to copy (copy / floor)"],
             [[k, "%.3f" % f[k], "%.2f" % (f[k] / t[k]), "%.3f" % (t["copy"] / f[k])]
              for k in PROGRAMS if k != "copy"])


if __name__ == "__main__":
    bl.main_guard(main)
