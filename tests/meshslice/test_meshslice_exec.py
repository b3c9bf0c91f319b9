#!/usr/bin/python3
"""test_meshslice_exec.py - MeshSlice executables against numpy.einsum.

For every mesh (2x2, 2x4, 4x2, and 2x2x2 with data parallelism on the third
axis Z) and every K in {1, 2, 3, 4, 8}, one program holds three 2D GEMMs
whose shardings imply the three dataflows of seed 004 (Fig. 1, Table 1):

    OS  C1[M, N] = A1[M, D] * B1[D, N]   A1[M_X, D_Y], B1[D_X, N_Y] -> C1[M_X, N_Y]
    LS  C2[M, N] = A2[M, D] * B2[D, N]   A2[M_X, D_Y], B2[D_Y, N_X] -> C2[M_X, N_Y]
    RS  C3[M, N] = A3[M, D] * B3[D, N]   A3[M_Y, D_X], B3[D_X, N_Y] -> C3[M_X, N_Y]

(on 2x2x2, M also carries Z first: M_ZX, M_ZY).  einc compiles it with
--meshslice=K; the test checks in --dump-ir=json that each GEMM became one
MeshSlice op with the expected dataflow, K and (row, column) axes, runs the
executable on random .npy inputs, and compares each output with
numpy.einsum in float64 (max error relative to the largest |value| under
1e-4 for f32).  With --mpirun, the same programs also run on the MPI
runtime.  Sizes are small (each split dim's per-device size is a multiple
of 24, so every K of the list is valid) to keep the test fast.  On threads,
the 2x4 mesh with K = 4 also runs in f64 (to 1e-10) and bf16 (to 3e-2).

Usage: test_meshslice_exec.py EINC [--mpirun PATH] [--only-mpi]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

MESHES = {
    "2x2": ([("X", 2), ("Y", 2)], ""),
    "2x4": ([("X", 2), ("Y", 4)], ""),
    "4x2": ([("X", 4), ("Y", 2)], ""),
    "2x2x2": ([("X", 2), ("Y", 2), ("Z", 2)], "Z"),
}
KS = [1, 2, 3, 4, 8]
# Other dtypes on one mesh and K (threads): tolerance relative to max |C|.
DTYPES = {"f64": 1e-10, "bf16": 3e-2}
EXPECT = {"C1": "OS", "C2": "LS", "C3": "RS"}


def program(mesh, dp, dtype="f32"):
    axes, _ = MESHES[mesh]
    size = dict(axes)
    # Every split dim's per-device size is a multiple of 24 (K = 1, 2, 3, 4, 8).
    span = 24 * max(size["X"], size["Y"]) * (size.get("Z", 1))
    p = ["mesh " + ", ".join("%s = %d" % a for a in axes),
         "dim M = %d, D = %d, N = %d" % (span, 24 * max(size["X"], size["Y"]), 24 * max(size["X"], size["Y"]) + 0),
         "input A1[M_%sX, D_Y] : f32" % dp,
         "param B1[D_X, N_Y] : f32",
         "C1[M, N] = A1[M, D] * B1[D, N]",
         "output C1[M_%sX, N_Y]" % dp,
         "input A2[M_%sX, D_Y] : f32" % dp,
         "param B2[D_Y, N_X] : f32",
         "C2[M, N] = A2[M, D] * B2[D, N]",
         "output C2[M_%sX, N_Y]" % dp,
         "input A3[M_%sY, D_X] : f32" % dp,
         "param B3[D_X, N_Y] : f32",
         "C3[M, N] = A3[M, D] * B3[D, N]",
         "output C3[M_%sX, N_Y]" % dp]
    return "\n".join(p).replace(": f32", ": " + dtype) + "\n", size


def run(cmd, cwd, timeout=300, merge=True):
    """(exit code, output); stderr is left out with merge=False, for output
    that is parsed (einc may warn on stderr, e.g. that the host profile was
    measured on another machine)."""
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT if merge else subprocess.PIPE, timeout=timeout)
    out = p.stdout.decode("utf-8", "replace")
    if not merge and p.returncode != 0:
        out += p.stderr.decode("utf-8", "replace")
    return p.returncode, out


def check_ir(einc, src, k, errors, tag):
    rc, out = run([einc, "--meshslice=%d" % k, "--dump-ir=json", src], os.path.dirname(src), merge=False)
    if rc != 0:
        errors.append("%s: einc --dump-ir=json failed: %s" % (tag, out))
        return
    ir = json.loads(out)
    found = {}
    for op in ir["ops"]:
        if op["op"] == "MeshSlice":
            found[op["result"]["tensor"]] = op
        elif op["op"] in ("AllGather", "ReduceScatter"):
            errors.append("%s: a whole-tensor %s is left: %s" % (tag, op["op"], op["result"]["type"]))
    for t, df in EXPECT.items():
        op = found.get(t)
        if not op:
            errors.append("%s: %s is not a MeshSlice op" % (tag, t))
            continue
        if op["dataflow"] != df or op["k"] != k or op["axes"] != ["X", "Y"]:
            errors.append("%s: %s is MeshSlice %s K=%s axes %s, expected %s K=%d axes [X, Y]"
                          % (tag, t, op["dataflow"], op["k"], op["axes"], df, k))
        kinds = sorted(c["op"] for c in op["collectives"])
        want = ["AllGather", "AllGather"] if df == "OS" else ["AllGather", "ReduceScatter"]
        if kinds != want:
            errors.append("%s: %s has partial collectives %s, expected %s" % (tag, t, kinds, want))


def run_dtypes(einc, work, rng, errors):
    """f64 and bf16 (stored as <f4 .npy) on the 2x4 mesh with K = 4."""
    npass = 0
    for dtype, tol in DTYPES.items():
        text, size = program("2x4", "", dtype)
        src = os.path.join(work, "ms_%s.ein" % dtype)
        with open(src, "w") as f:
            f.write(text)
        exe = os.path.join(work, "ms_%s" % dtype)
        rc, out = run([einc, "--meshslice=4", "-o", exe, src], work)
        if rc != 0:
            errors.append("%s: einc failed: %s" % (dtype, out))
            continue
        M, D = 24 * 4, 24 * 4
        np_t = np.float64 if dtype == "f64" else np.float32
        ins = {}
        cmd = [exe]
        for i in (1, 2, 3):
            for name, shape in (("A%d" % i, (M, D)), ("B%d" % i, (D, D))):
                a = rng.uniform(-1, 1, shape).astype(np_t)
                if dtype == "bf16":  # exactly representable in bf16
                    a = (a.view(np.uint32) & 0xFFFF0000).view(np.float32)
                ins[name] = a
                np.save(os.path.join(work, "%s_%s.npy" % (dtype, name)), a)
                cmd += ["--input", "%s=%s_%s.npy" % (name, dtype, name)]
        for t in EXPECT:
            cmd += ["--output", "%s=%s_%s.npy" % (t, dtype, t)]
        rc, out = run(cmd, work)
        if rc != 0:
            errors.append("%s: run failed (exit %s): %s" % (dtype, rc, out))
            continue
        for t, i in (("C1", 1), ("C2", 2), ("C3", 3)):
            got = np.load(os.path.join(work, "%s_%s.npy" % (dtype, t))).astype(np.float64)
            want = np.einsum("md,dn->mn", ins["A%d" % i].astype(np.float64), ins["B%d" % i].astype(np.float64))
            err = np.max(np.abs(got - want)) / np.max(np.abs(want))
            if not err < tol:
                errors.append("%s: %s (%s) differs from numpy.einsum: rel err %.3g" % (dtype, t, EXPECT[t], err))
            else:
                npass += 1
    return npass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("einc")
    ap.add_argument("--mpirun")
    ap.add_argument("--only-mpi", action="store_true")
    args = ap.parse_args()
    runtimes = [] if args.only_mpi else ["threads"]
    if args.mpirun:
        runtimes.append("mpi")
    rng = np.random.default_rng(7)
    errors = []
    npass = 0
    with tempfile.TemporaryDirectory(prefix="ms_exec_") as work:
        for mesh, (axes, dp) in MESHES.items():
            text, size = program(mesh, dp)
            src = os.path.join(work, "ms_%s.ein" % mesh)
            with open(src, "w") as f:
                f.write(text)
            ndev = int(np.prod([s for _, s in axes]))
            M = 24 * max(size["X"], size["Y"]) * size.get("Z", 1)
            D = N = 24 * max(size["X"], size["Y"])
            ins = {}
            for i in (1, 2, 3):
                ins["A%d" % i] = rng.uniform(-1, 1, (M, D)).astype(np.float32)
                ins["B%d" % i] = rng.uniform(-1, 1, (D, N)).astype(np.float32)
            for name, a in ins.items():
                np.save(os.path.join(work, "%s_%s.npy" % (mesh, name)), a)
            for k in KS:
                tag = "%s K=%d" % (mesh, k)
                check_ir(args.einc, src, k, errors, tag)
                for rt in runtimes:
                    exe = os.path.join(work, "ms_%s_%d_%s" % (mesh, k, rt))
                    rc, out = run([args.einc, "--meshslice=%d" % k, "--runtime=%s" % rt, "-o", exe, src],
                                  work)
                    if rc != 0:
                        errors.append("%s %s: einc failed: %s" % (tag, rt, out))
                        continue
                    cmd = [exe]
                    for name in ins:
                        cmd += ["--input", "%s=%s_%s.npy" % (name, mesh, name)]
                    for t in EXPECT:
                        cmd += ["--output", "%s=%s_%d_%s_%s.npy" % (t, mesh, k, rt, t)]
                    if rt == "mpi":
                        asan = os.environ.get("ASAN_OPTIONS", "")
                        asan = (asan + ":" if asan else "") + "detect_leaks=0"
                        cmd = [args.mpirun, "-np", str(ndev), "--allow-run-as-root", "--oversubscribe",
                               "-x", "ASAN_OPTIONS=" + asan] + cmd
                    rc, out = run(cmd, work)
                    if rc != 0:
                        errors.append("%s %s: run failed (exit %s): %s" % (tag, rt, rc, out))
                        continue
                    for t, i in (("C1", 1), ("C2", 2), ("C3", 3)):
                        got = np.load(os.path.join(work, "%s_%d_%s_%s.npy" % (mesh, k, rt, t)))
                        want = np.einsum("md,dn->mn", ins["A%d" % i].astype(np.float64),
                                         ins["B%d" % i].astype(np.float64))
                        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
                        if got.shape != want.shape or not err < 1e-4:
                            errors.append("%s %s: %s (%s) differs from numpy.einsum: rel err %.3g"
                                          % (tag, rt, t, EXPECT[t], err))
                        else:
                            npass += 1
        if not args.only_mpi:
            npass += run_dtypes(args.einc, work, rng, errors)
    for e in errors:
        print("FAIL", e)
    print("%d outputs match numpy.einsum, %d failures" % (npass, len(errors)))
    return 1 if errors or npass == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
