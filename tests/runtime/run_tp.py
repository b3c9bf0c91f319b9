#!/usr/bin/env python3
"""End-to-end test of the runtime with the hand-written program prog_tp.c.

usage: run_tp.py --tp PROG --bad BAD_PROG [--bad-op P] [--deadlock P] [--tp-f64 P]
                 [--tp-bf16 P] [--tp-mpi PROG_MPI --bad-mpi BAD_PROG_MPI]
                 [--bad-op-mpi P]

Runs the executable (f32, and the f64 and bf16 builds) on .npy inputs and
compares every output with NumPy;
checks --check, --random-inputs (the generator reproduced here in NumPy),
--repeat, --info, --stats, and that bad command lines and bad files give a
clear error and exit status 1, and that BAD_PROG (a device failing while its
peers wait in a collective), its variant with an AllReduce whose reduce_op
is 7, and the deadlocking program end with a message and status 1, not a
hang.
With the MPI builds, does the same under `mpirun -np 4` and checks that a
wrong rank count fails fast with a message.
"""
import argparse
import os
import sys
import tempfile

import numpy as np

from rt_testlib import expect_error, fail, finish, run

B, D, F = 8, 6, 12


def splitmix64(x):
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def random_f32(seed, name, shape):
    """--random-inputs for an f32 tensor (runtime/random.c)."""
    with np.errstate(over="ignore"):
        idx = np.arange(int(np.prod(shape)), dtype=np.uint64)
        key = np.uint64(seed ^ fnv1a64(name))
        h = splitmix64(key ^ splitmix64(idx))
    v = (h >> np.uint64(40)).astype(np.float64) * 2.0**-24 * 2.0 - 1.0
    return v.astype(np.float32).reshape(shape)


def expected(x, w):
    xw = x.astype(np.float64) @ w.astype(np.float64)
    return {"y": xw, "u": xw.sum(0), "v": xw.sum(0), "t": xw, "q": 2 * w.astype(np.float64).sum(0)}


# Per dtype of the program: the .npy dtype of its files, and the tolerance
# against NumPy's f64 result (bf16 rounds inputs, products and sums).
FILE_DTYPE = {"f32": np.float32, "f64": np.float64, "bf16": np.float32}
TOL = {"f32": 1e-5, "f64": 1e-12, "bf16": 3e-2}


def to_bf16(a):
    """Rounds f32 values to bf16 (nearest even), as the runtime does on reading."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def compare(outs, x, w, tag, dtype):
    if dtype == "bf16":
        x, w = to_bf16(x), to_bf16(w)
    for name, want in expected(x, w).items():
        got = np.load(outs[name])
        if got.dtype != FILE_DTYPE[dtype] or got.shape != want.shape:
            fail("%s: %s has %s %s, expected %s %s"
                 % (tag, name, got.dtype, got.shape, FILE_DTYPE[dtype], want.shape))
            continue
        err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
        if err > TOL[dtype]:
            fail("%s: output %s differs from NumPy: rel err %g" % (tag, name, err))


def check_run(launch, tmp, tag, dtype="f32"):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((B, D)).astype(FILE_DTYPE[dtype])
    w = rng.standard_normal((D, F)).astype(FILE_DTYPE[dtype])
    xp, wp = os.path.join(tmp, "x.npy"), os.path.join(tmp, "w.npy")
    np.save(xp, x)
    np.save(wp, w)
    outs = {n: os.path.join(tmp, "%s_%s.npy" % (tag, n)) for n in "yuvtq"}
    args = ["--input", "x=" + xp, "--input", "w=" + wp]
    for n, p in outs.items():
        args += ["--output", "%s=%s" % (n, p)]
    p = run(launch + args + ["--check", "--stats", "--repeat", "3"])
    compare(outs, x, w, tag, dtype)
    for n in "yuvtq":
        if "check %s: max_rel_err=" % n not in p.stdout:
            fail("%s: --check printed no line for %s:\n%s" % (tag, n, p.stdout))
    if "median time per run:" not in p.stdout or "peak memory per device" not in p.stdout:
        fail("%s: --repeat/--stats output missing:\n%s" % (tag, p.stdout))
    if [f for f in os.listdir(tmp) if ".tmp" in f]:
        fail("%s: temporary files left behind" % tag)
    if dtype != "f32":
        return

    # --random-inputs: each device generates its shard; values equal the global array's.
    p = run(launch + ["--random-inputs", "42", "--check", "--output", "y=" + outs["y"]])
    x = random_f32(42, "x", (B, D))
    w = random_f32(42, "w", (D, F))
    want = x.astype(np.float64) @ w.astype(np.float64)
    err = np.max(np.abs(np.load(outs["y"]) - want)) / np.max(np.abs(want))
    if err > 1e-5:
        fail("%s: --random-inputs y differs from NumPy's regeneration: %g" % (tag, err))
    # Outputs without --output are summarised.
    if "u: f32 (12,) sum=" not in p.stdout:
        fail("%s: no summary line for u:\n%s" % (tag, p.stdout))


def check_errors(prog, tmp):
    xp, wp = os.path.join(tmp, "x.npy"), os.path.join(tmp, "w.npy")
    expect_error([prog, "--input", "x=" + xp], "missing --input w=")
    expect_error([prog, "--input", "x=" + xp, "--input", "w=" + wp, "--input", "z=" + xp],
                 "no input or param named 'z'")
    expect_error([prog, "--input", "x=" + xp, "--input", "x=" + xp, "--input", "w=" + wp],
                 "input 'x' is given twice")
    expect_error([prog, "--random-inputs", "1", "--output", "nope=" + xp], "no output named 'nope'")
    expect_error([prog, "--bogus"], "unknown option")
    expect_error([prog, "--random-inputs", "abc"], "--random-inputs expects a count from 0 to 18446744073709551615 (decimal), got 'abc'")
    expect_error([prog, "--input", "x"], "--input expects NAME=file.npy, got 'x'")
    expect_error([prog, "--check=1"], "--check takes no value")
    # --flag=value spelling works like --flag value.
    run([prog, "--input=x=" + xp, "--input=w=" + wp, "--repeat=2"])
    expect_error([prog, "--repeat", "0", "--random-inputs", "1"], "--repeat expects")
    expect_error([prog, "--random-inputs", "1", "--bind-to", "socket"],
                 "--bind-to expects 'core' or 'none', got 'socket'")
    run([prog, "--random-inputs", "1", "--bind-to", "none"])
    run([prog, "--random-inputs", "1", "--bind-to=core"])
    # How pinned devices that outnumber the CPUs share them (docs/runtime.md, "Waiting").
    run(["env", "EINC_CORE_SHARING=kernel", prog, "--random-inputs", "1"])
    expect_error(["env", "EINC_CORE_SHARING=sometimes", prog, "--random-inputs", "1"],
                 "EINC_CORE_SHARING=sometimes: expected 'items' or 'kernel'")
    run(["env", "EINC_GEMV_ISA=avx2", prog, "--random-inputs", "1"])
    expect_error(["env", "EINC_GEMV_ISA=sse9", prog, "--random-inputs", "1"],
                 "EINC_GEMV_ISA must be portable, avx2, avx512 or avx512vnni (the widest vector set "
                 "the narrow products may use), not 'sse9'")
    expect_error([prog, "--input", "x=" + wp, "--input", "w=" + wp],
                 "tensor 'x': %s has shape (6, 12), expected (8, 6)" % wp)
    bad = os.path.join(tmp, "x64.npy")
    np.save(bad, np.zeros((B, D)))
    expect_error([prog, "--input", "x=" + bad, "--input", "w=" + wp], "has dtype '<f8', expected '<f4'")
    missing_dir = os.path.join(tmp, "no", "such", "dir", "y.npy")
    expect_error([prog, "--random-inputs", "1", "--output", "y=" + missing_dir], "cannot create")
    p = run([prog, "--info"])
    for needle in ["mesh: X=2, Y=2 (4 devices)", "x[8_X, 6]", "w[6, 12_Y]", "v[12_YX]",
                   "AllGather_Y"]:
        if needle not in p.stdout:
            fail("--info lacks %r:\n%s" % (needle, p.stdout))
    garbage = os.path.join(tmp, "garbage.npy")
    with open(garbage, "wb") as f:
        f.write(b"not a numpy file at all")
    expect_error([prog, "--input", "x=" + garbage, "--input", "w=" + wp],
                 "tensor 'x': %s is not a .npy file (bad magic)" % garbage)
    p = run([prog, "--help"])
    if "--random-inputs" not in p.stdout:
        fail("--help lacks --random-inputs")
    # --discard-outputs: the times, no output gathered or printed; with a
    # flag that reads the outputs it is an error.
    shown = run([prog, "--random-inputs", "1", "--profile"]).stdout
    p = run([prog, "--random-inputs", "1", "--profile", "--discard-outputs"])
    if "sum=" not in shown or "sum=" in p.stdout:
        fail("--discard-outputs still prints an output, or the plain run none:\n%s" % p.stdout)
    def op_rows(out):
        return [l.split()[0] for l in out.splitlines() if l.split()[:1] and l.split()[0].isdigit()]
    if not op_rows(shown) or op_rows(p.stdout) != op_rows(shown):
        fail("--discard-outputs changed the --profile table:\n%s" % p.stdout)
    expect_error([prog, "--random-inputs", "1", "--discard-outputs", "--check"],
                 "--discard-outputs runs the program only to time it: it cannot go with --check")
    expect_error([prog, "--random-inputs", "1", "--discard-outputs", "--output",
                  "y=" + os.path.join(tmp, "y.npy")], "cannot go with --output")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", required=True)
    ap.add_argument("--bad", required=True)
    ap.add_argument("--bad-op")
    ap.add_argument("--bad-op-mpi")
    ap.add_argument("--deadlock")
    ap.add_argument("--tp-f64")
    ap.add_argument("--tp-bf16")
    ap.add_argument("--tp-mpi")
    ap.add_argument("--bad-mpi")
    a = ap.parse_args()
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    with tempfile.TemporaryDirectory() as tmp:
        check_run([a.tp], tmp, "threads")
        for dtype, prog in (("f64", a.tp_f64), ("bf16", a.tp_bf16)):
            if prog:
                check_run([prog], tmp, "threads-" + dtype, dtype)
        check_errors(a.tp, tmp)
        expect_error([a.bad, "--random-inputs", "3"],
                     "einrt: error: device 0 (X=0, Y=0): AllReduce (op 17): dim 0 is 4 in the input "
                     "but 3 in the output")
        bad_op_msg = ("einrt: error: device 0 (X=0, Y=0): AllReduce (op 17): unknown reduce_op 7 "
                      "(0 sum, 1 max, 2 min)")
        if a.bad_op:
            expect_error([a.bad_op, "--random-inputs", "3"], bad_op_msg)
        if a.deadlock:
            expect_error([a.deadlock, "--random-inputs", "1"], "deadlock")
        if a.tp_mpi:
            check_run(mpirun + ["-np", "4", a.tp_mpi], tmp, "mpi")
            expect_error(mpirun + ["-np", "2", a.tp_mpi, "--random-inputs", "1"],
                         "the program's mesh has 4 devices but the job has 2 ranks")
            xp = os.path.join(tmp, "x.npy")
            expect_error(mpirun + ["-np", "4", a.tp_mpi, "--input", "x=" + xp, "--input",
                                   "w=" + xp], "tensor 'w'")
        if a.bad_mpi:
            expect_error(mpirun + ["-np", "4", a.bad_mpi, "--random-inputs", "3"],
                         "AllReduce (op 17): dim 0 is 4 in the input but 3 in the output")
        if a.bad_op_mpi:
            expect_error(mpirun + ["-np", "4", a.bad_op_mpi, "--random-inputs", "3"], bad_op_msg)
    return finish("all end-to-end checks passed")


if __name__ == "__main__":
    sys.exit(main())
