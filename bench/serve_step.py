#!/usr/bin/env python3
"""The serve decode step's cost against its busy rows, with the attention
bounded by each row's position and without (docs/generation.md, "Why the
step cost changed"; docs/codegen.md, "Contractions bounded by a position").

examples/fortunes_serve.ein is compiled as bench/serve.py serves it
(`-D B=16 -D S=128`: 16 slots, a cache of 128), on one device (`-D X=1
-D Y=1`, so that --profile's per-op times are not the barriers of 4
device threads on 2 cores), twice by the same einc: `--pos-bound=on` (the
default) and `--pos-bound=off`.  Each runs `--profile --repeat N` on
untrained params with `busy` rows at position --pos and the others at 0
(a free slot of continuous batching), for busy = 0, 1, 8 and 16; the
table gives the four attention einsums (Sc1, Y1, Sc2, Y2), all ops, and
the median time per run, and the ratio off / on of the step.  With
OPENBLAS_NUM_THREADS=1, as the executable's devices run their GEMMs.

    python3 bench/serve_step.py --build BUILD [--pos 30] [--repeat 300]
"""
import os
import re
import tempfile

import numpy as np

import benchlib

ATTENTION = re.compile(r"^\s+\d+\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+(?:Sc|Y)[12] = Einsum", re.M)
OPS = re.compile(r"^\s+run\s+([\d.]+)", re.M)


def profile(exe, at_file, tok_file, repeat):
    """(attention ms, ops ms, median run ms) of one --profile run."""
    out = benchlib.run([exe, "--random-inputs", "1", "--input", "Tok=" + tok_file,
                        "--input", "At=" + at_file, "--profile", "--repeat", str(repeat)],
                       env={"OPENBLAS_NUM_THREADS": "1"})
    att = sum(float(m.group(1)) for m in ATTENTION.finditer(out))
    ops = OPS.search(out)
    if not ops or att == 0:
        raise benchlib.BenchError("no per-op profile in the output:\n" + out[-1000:])
    return att, float(ops.group(1)), benchlib.median_ms(out)


def main():
    p = benchlib.parser(__doc__.split("\n")[0], json_results=False)
    p.add_argument("--pos", type=int, default=30, help="the busy rows' position (default 30)")
    p.add_argument("--repeat", type=int, default=300)
    a = p.parse_args()
    src = str(benchlib.ROOT / "examples" / "fortunes_serve.ein")
    B, S = 16, 128
    if not 0 <= a.pos < S:
        raise benchlib.BenchError("--pos must be in 0..%d" % (S - 1))
    print(benchlib.machine())
    print("# fortunes_serve.ein, %d slots, cache %d, 1 device; busy rows at position %d, "
          "the others at 0; --profile --repeat %d" % (B, S, a.pos, a.repeat))
    with tempfile.TemporaryDirectory(prefix="einc-servestep-") as work:
        exes = {}
        for mode in ("off", "on"):
            exes[mode] = os.path.join(work, "step_" + mode)
            benchlib.run([benchlib.einc(a.build), src, "-D", "B=%d" % B, "-D", "S=%d" % S,
                          "-D", "X=1", "-D", "Y=1", "--pos-bound=" + mode, "-o", exes[mode]])
        tok = os.path.join(work, "tok.npy")
        np.save(tok, np.zeros(B, dtype=np.int32))
        rows = []
        for busy in (0, 1, 8, 16):
            at = np.zeros(B, dtype=np.int32)
            at[:busy] = a.pos
            at_file = os.path.join(work, "at.npy")
            np.save(at_file, at)
            got = {mode: profile(exes[mode], at_file, tok, a.repeat) for mode in ("off", "on")}
            rows.append([busy, got["off"][0], got["on"][0], got["off"][1], got["on"][1],
                         got["off"][2], got["on"][2], got["off"][2] / got["on"][2]])
    benchlib.table(["busy rows", "attention ms, off", "on", "ops ms, off", "on", "run ms, off",
                    "on", "run off / on"], rows)


if __name__ == "__main__":
    benchlib.main_guard(main)
