#!/usr/bin/python3
"""gather.py - embedding lookups (`E[B, T, D] = Emb[Tok[B, T], D]`) against
NumPy's Emb[Tok], and out-of-range token ids as runtime errors.

Each case compiles a small program whose i32 indices and table are sharded
in one of the ways seed 000 / Megatron use (ids over the batch, the table's
vocab dim V over one or two mesh axes: the vocab-parallel embedding with
its masked local lookup and AllReduce or ReduceScatter; the table's D
sharded), runs it on .npy inputs (ids as '<i4') on the threads runtime and,
with --mpi, on MPI ranks, and compares every element with NumPy.  Then one
id is set out of range (-1, and V) and the run must exit 1 with a message
naming the index tensor, the id's global position and its value, on every
runtime.  The last line is `N passed, N failed`.

Usage: gather.py --einc PATH [--mpi --mpirun PATH]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402

# (name, mesh, dims, ids sharding, table sharding, output sharding, dtype, statement)
CASES = [
    ("replicated", "X = 1", "B=3, T=5, V=11, D=7", "B, T", "V, D", "B, T, D", "f32",
     "E[B, T, D] = Emb[Tok[B, T], D]"),
    ("ids_sharded", "X = 2", "B=4, T=6, V=32, D=8", "B_X, T", "V, D", "B_X, T, D", "f64",
     "E[B, T, D] = Emb[Tok[B, T], D] * 2"),
    ("vocab_parallel", "X = 2, Y = 2", "B=4, T=8, V=64, D=16", "B_X, T", "V_Y, D", "B_X, T, D", "f32",
     "E[B, T, D] = Emb[Tok[B, T], D]"),
    ("vocab_reduce_scatter", "X = 4", "B=2, T=8, V=64, D=16", "B, T", "V_X, D", "B, T_X, D", "bf16",
     "E[B, T, D] = Emb[Tok[B, T], D]"),
    ("vocab_two_axes", "X = 2, Y = 2", "B=2, T=4, V=48, D=6", "B, T", "V_XY, D", "B, T, D", "f32",
     "E[B, T, D] = Emb[Tok[B, T], D] + 1"),
    ("hidden_sharded", "X = 2, Y = 2", "B=4, T=4, V=10, D=8", "B_X, T", "V, D_Y", "B_X, T, D_Y", "f32",
     "E[B, T, D] = Emb[Tok[B, T], D]"),
    ("summed", "X = 2", "B=4, T=6, V=20, D=8", "B_X, T", "V_X, D", "B, D", "f64",
     "E[B, D] = Emb[Tok[B, T], D] / 6"),
]
NPDT = {"f32": np.float32, "f64": np.float64, "bf16": np.float32}


def devices(mesh):
    n = 1
    for part in mesh.split(","):
        n *= int(part.split("=")[1])
    return n


def source(case):
    name, mesh, dims, ids_sh, tab_sh, out_sh, dt, stmt = case
    lhs = stmt.split("=")[0].strip()
    out = lhs.split("[")[0]
    return ("mesh %s\ndim %s\ninput Tok[%s] : i32\nparam Emb[%s] : %s\n%s\noutput %s[%s]\n" %
            (mesh, dims, ids_sh, tab_sh, dt, stmt, out, out_sh))


def reference(case, tok, emb):
    stmt = case[7]
    e = emb.astype(np.float64)[tok]
    if stmt.endswith("* 2"):
        return e * 2
    if stmt.endswith("+ 1"):
        return e + 1
    if stmt.endswith("/ 6"):
        return e.sum(axis=1) / 6
    return e


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    rng = np.random.default_rng(11)
    passed = failed = 0

    def result(ok, what, detail=""):
        nonlocal passed, failed
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, ("\n    " + detail.replace("\n", "\n    ")) if detail and not ok else ""))
        passed, failed = passed + ok, failed + (not ok)

    with tempfile.TemporaryDirectory(prefix="einc-gather-") as work:
        for case in CASES:
            name, mesh, dims = case[0], case[1], dict(kv.split("=") for kv in case[2].replace(" ", "").split(","))
            B, T, V, D = (int(dims[k]) for k in "BTVD")
            src = os.path.join(work, name + ".ein")
            with open(src, "w") as f:
                f.write(source(case))
            tok = rng.integers(0, V, size=(B, T), dtype=np.int32)
            emb = rng.standard_normal((V, D)).astype(NPDT[case[6]])
            if case[6] == "bf16":  # values exactly representable in bf16
                emb = (emb.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
            want = reference(case, tok, emb)
            tpath, epath = os.path.join(work, "tok.npy"), os.path.join(work, "emb.npy")
            np.save(epath, emb)
            out = case[7].split("[")[0]
            for rt in ["threads"] + (["mpi"] if a.mpi else []):
                exe = os.path.join(work, name + "_" + rt)
                rc, msg = run([a.einc, src, "-o", exe, "--runtime=" + rt])
                if rc != 0:
                    result(False, "%s (%s): einc" % (name, rt), msg)
                    continue
                launch = mpi_launch(a.mpirun, devices(mesh)) if rt == "mpi" else []
                opath = os.path.join(work, "out.npy")
                np.save(tpath, tok)
                cmd = launch + [exe, "--input", "Tok=" + tpath, "--input", "Emb=" + epath,
                                "--output", "%s=%s" % (out, opath)]
                rc, msg = run(cmd)
                if rc != 0:
                    result(False, "%s (%s): run" % (name, rt), msg)
                    continue
                got = np.load(opath).astype(np.float64)
                tol = 1e-2 if case[6] == "bf16" else 1e-6
                err = float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-30)
                result(got.shape == want.shape and err <= tol,
                       "%s (%s): max rel error %.2g" % (name, rt, err), "shape %s vs %s" % (got.shape, want.shape))
                # An id out of range, at a known global position.
                for bad in (-1, V):
                    t2 = tok.copy()
                    t2[B - 1, T - 1] = bad
                    np.save(tpath, t2)
                    rc, msg = run(cmd)
                    needle = "Tok[%d, %d] = %d is out of range: 'Emb' has %d rows" % (B - 1, T - 1, bad, V)
                    result(rc == 1 and needle in msg, "%s (%s): id %d is an error" % (name, rt, bad),
                           "exit %s, expected %r in:\n%s" % (rc, needle, msg))
        # --random-inputs draws ids within the table.
        case = CASES[2]
        src = os.path.join(work, "random.ein")
        with open(src, "w") as f:
            f.write(source(case))
        exe = os.path.join(work, "random")
        rc, msg = run([a.einc, src, "-o", exe])
        rc2, msg2 = run([exe, "--random-inputs", "3", "--check"]) if rc == 0 else (rc, msg)
        result(rc2 == 0 and "max_rel_err=0 " in msg2, "random ids within the table, --check", msg2)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
