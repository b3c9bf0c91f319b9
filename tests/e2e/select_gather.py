#!/usr/bin/python3
"""select_gather.py - masked sums that select rows at computed positions,
`sum(where(S == Pos[] + T, CosT[S, G], 0), S)`, against NumPy, with the
select-gather pass (a gather of the rows) and without it (the masked sum).

Each case is a small program of one selection: a window of T = 4 rows (a
prefill's rotary rows) or T = 1 (a decode step's), each slot's own row
(`S == At[B]`, continuous batching), the condition written either way
round, tables f32 or bf16, replicated or sharded along S (the gather's
masked local lookup and partial sums) or along G.  Each is compiled with
the default pipeline, whose --dump-ir must show the gather (`zero-outside`)
and no masked sum, and with the pipeline without select-gather, and both
executables are run at positions 0, the middle, the last valid start
|S| - T, and outside the table (past the end, partly past it, negative):
both must equal NumPy's masked sum, whose rows outside [0, |S|) are zero
(so are the gather's: no run-time error), and each other bit for bit.
With --mpi the default build of the cases with a split table or
per-slot rows also runs on MPI ranks.  The last line is
`N passed, N failed`.

Usage: select_gather.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, mpi_launch, run_merged, runtime_args  # noqa: E402

WITHOUT = "--passes=optimize,autodiff,propagate,pipeline,regather,meshslice,cost"

# (name, mesh, dims, position decl, table decl, statement, output, window T or None)
CASES = [
    ("prefill_window", "X = 1", "S = 16, G = 8, T = 4", "Pos[] : i32", "CosT[S, G] : f32",
     "Cos[T, G] = sum(where(S == Pos[] + T, CosT[S, G], 0), S)", "Cos[T, G]", 4),
    ("decode_row", "X = 1", "S = 16, G = 8, T = 1", "Pos[] : i32", "CosT[S, G] : f32",
     "Cos[T, G] = sum(where(S == Pos[] + T, CosT[S, G], 0), S)", "Cos[T, G]", 1),
    ("reversed_bf16", "X = 1", "S = 16, G = 8, T = 4", "Pos[] : i32", "CosT[S, G] : bf16",
     "Cos[T, G] = sum(where(Pos[] + T == S, CosT[S, G], 0), S)", "Cos[T, G]", 4),
    ("table_sharded_s", "X = 2", "S = 16, G = 8, T = 4", "Pos[] : i32", "CosT[S_X, G] : f32",
     "Cos[T, G] = sum(where(S == Pos[] + T, CosT[S, G], 0), S)", "Cos[T, G]", 4),
    ("table_sharded_g", "X = 2", "S = 16, G = 8, T = 4", "Pos[] : i32", "CosT[S, G_X] : f32",
     "Cos[T, G] = sum(where(S == Pos[] + T, CosT[S, G], 0), S)", "Cos[T, G_X]", 4),
    ("per_row", "X = 2", "S = 16, G = 8, B = 4", "At[B] : i32", "CosT[S, G] : f32",
     "Cos[B, G] = sum(where(S == At[B], CosT[S, G], 0), S)", "Cos[B_X, G]", None),
]

# The cases also run on MPI ranks (--mpi): the table's rows split, each
# slot's own row (a few launches keep the test short).
MPI_CASES = ("table_sharded_s", "per_row")


def source(case):
    name, mesh, dims, pos, table, stmt, out, _ = case
    return "mesh %s\ndim %s\ninput %s\ninput %s\n%s\noutput %s\n" % (mesh, dims, pos, table, stmt, out)


def devices(mesh):
    n = 1
    for part in mesh.split(","):
        n *= int(part.split("=")[1])
    return n


def reference(table, rows):
    """NumPy's masked sum: out[i, :] = table[rows[i]] where that row exists, else 0."""
    S = table.shape[0]
    out = np.zeros((len(rows), table.shape[1]), dtype=np.float64)
    for i, r in enumerate(rows):
        if 0 <= r < S:
            out[i] = table[r]
    return out


def main():
    a = runtime_args(__doc__)
    tally = Tally()
    rng = np.random.default_rng(26)
    with tempfile.TemporaryDirectory(prefix="einc-select-gather-") as work:
        for case in CASES:
            name, mesh, window = case[0], case[1], case[7]
            S, G = 16, 8
            src = os.path.join(work, name + ".ein")
            with open(src, "w") as f:
                f.write(source(case))
            dump = run_merged([a.einc, src, "--dump-ir"])[1]
            tally.result("zero-outside" in dump and "where(" not in dump,
                         "%s: --dump-ir shows the gather, no masked sum" % name, dump)
            exes = {}
            for label, flags, rt in (("select-gather", [], "threads"), ("masked sum", [WITHOUT], "threads"),
                                     ("select-gather, mpi", [], "mpi")):
                if rt == "mpi" and (not a.mpi or name not in MPI_CASES):
                    continue
                exe = os.path.join(work, "%s_%d" % (name, len(exes)))
                rc, msg = run_merged([a.einc, src, "-o", exe, "--runtime=" + rt] + flags)
                tally.result(rc == 0, "%s (%s): einc" % (name, label), msg)
                if rc == 0:
                    exes[label] = (exe, mpi_launch(a.mpirun, devices(mesh)) if rt == "mpi" else [])
            table = rng.standard_normal((S, G)).astype(np.float32)
            if "bf16" in case[4]:  # values exactly representable in bf16
                table = (table.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
            tpath, ppath = os.path.join(work, "table.npy"), os.path.join(work, "pos.npy")
            np.save(tpath, table)
            if window:
                # 0, the middle, the last valid start; past the end (whole and
                # partly), negative (whole and partly)
                positions = [0, (S - window) // 2, S - window, S, S - window + 2, -window - 3, -2]
                inputs = [(np.array(p, dtype=np.int32), [p + t for t in range(window)]) for p in positions]
            else:
                at = np.array([0, 7, 15, 16], dtype=np.int32)
                inputs = [(at, list(at)), (np.array([-1, 3, 15, 99], dtype=np.int32), [-1, 3, 15, 99])]
            pname = case[3].split("[")[0]
            for pos, rows in inputs:
                np.save(ppath, pos)
                want = reference(table, rows)
                got = {}
                for label, (exe, launch) in exes.items():
                    opath = os.path.join(work, "out.npy")
                    rc, msg = run_merged(launch + [exe, "--input", "%s=%s" % (pname, ppath),
                                                   "--input", "CosT=" + tpath, "--output", "Cos=" + opath])
                    what = "%s (%s): %s = %s" % (name, label, pname, pos.tolist())
                    if rc != 0:
                        tally.result(False, what, msg)
                        continue
                    got[label] = np.load(opath).astype(np.float64).reshape(want.shape)
                    tally.result(np.array_equal(got[label], want), what + ", equal to NumPy",
                                 "got\n%s\nwant\n%s" % (got[label], want))
                if len(got) >= 2:
                    tally.result(np.array_equal(got["select-gather"], got["masked sum"]),
                                 "%s: %s = %s, the gather equals the masked sum" % (name, pname, pos.tolist()))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
