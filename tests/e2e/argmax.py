#!/usr/bin/python3
"""argmax.py - `Next[B] = argmax(L[B, V], V)` against numpy.argmax.

Each case compiles a program whose logits are computed sharded (over the
vocab V, over the batch, or both), runs it on .npy inputs on the threads
runtime (and with --mpi on MPI ranks), and compares the i32 positions with
numpy.argmax of the same logits, element for element.  The inputs make the
hard rows on purpose: ties (the first maximum wins), a row of -inf (0), a
NaN (the first NaN wins, as in NumPy), and a maximum on each device's block
of V in turn.  f32, f64 and bf16 (read exactly: bf16 values are f32 values
with 8 significant bits).  --check must also pass (i32 outputs are compared
exactly).  The last line is `N passed, N failed`.

Usage: argmax.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, runtime_args  # noqa: E402

# (name, mesh, logits sharding, dtype, expression of the argument)
CASES = [
    ("replicated", "X = 1", "B, V", "f32", "L[B, V]"),
    ("vocab_parallel", "X = 2, Y = 2", "B, V_XY", "f32", "L[B, V]"),
    ("batch_and_vocab", "X = 2, Y = 2", "B_X, V_Y", "f64", "L[B, V]"),
    ("expression", "X = 2, Y = 2", "B_Y, V_X", "f32", "1 - L[B, V] * 2"),
    ("bf16", "X = 4", "B, V_X", "bf16", "L[B, V]"),
]
B, V = 8, 32
NPDT = {"f32": np.float32, "f64": np.float64, "bf16": np.float32}


def source(case):
    _, mesh, sh, dt, arg = case
    return ("mesh %s\ndim B = %d, V = %d\ninput L[%s] : %s\nN[B] = argmax(%s, V)\noutput N[B]\n"
            % (mesh, B, V, sh, dt, arg))


def logits(rng, dt):
    x = rng.standard_normal((B, V))
    x[1, [3, 17, 30]] = 9.0               # a tie: the first maximum wins
    x[2, :] = -np.inf                     # a row of -inf: 0
    x[3, [5, 20]] = np.nan                # NaN counts as the maximum, the first one
    for b in range(4, B):                 # the maximum on each quarter of V in turn
        x[b, (b - 4) * (V // 4) + b % (V // 4)] = 8.0
    x = x.astype(NPDT[dt])
    if dt == "bf16":  # values exactly representable in bf16
        x = (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return x


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout


def main():
    a = runtime_args(__doc__)
    rng = np.random.default_rng(3)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-argmax-") as work:
        for case in CASES:
            name, mesh = case[0], case[1]
            n = 1
            for part in mesh.split(","):
                n *= int(part.split("=")[1])
            src = os.path.join(work, name + ".ein")
            with open(src, "w") as f:
                f.write(source(case))
            x = logits(rng, case[3])
            arg = 1 - x.astype(np.float64) * 2 if "*" in case[4] else x
            want = np.argmax(arg, axis=1).astype(np.int32)
            lpath, npath = os.path.join(work, "l.npy"), os.path.join(work, "n.npy")
            np.save(lpath, x)
            for rt, exe, launch in builds(a, src, os.path.join(work, name), n, tally):
                rc, msg = run(launch + [exe, "--input", "L=" + lpath, "--output", "N=" + npath,
                                        "--check"])
                if rc != 0:
                    tally.result(False, "%s (%s): run" % (name, rt), msg)
                    continue
                got = np.load(npath)
                tally.result(got.dtype == np.int32 and np.array_equal(got, want),
                             "%s (%s): %s" % (name, rt, " ".join(map(str, got))),
                             "want %s (%s)" % (" ".join(map(str, want)), got.dtype))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
