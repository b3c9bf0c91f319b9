#!/usr/bin/python3
"""run_cases.py - compiles each generated case with einc, runs it, compares with NumPy.

For every case of gen_cases.py (or a shard or subset of them): write the
.ein file, compile it (`einc case.ein -o case [--runtime=mpi]`), write random
inputs as .npy with NumPy, run the executable with --input/--output (under
mpirun for MPI), and compare every output with the NumPy reference computed
in float64 from the same inputs.

An output passes when its dtype and shape are right and, elementwise,
|out - ref| <= rtol * |ref| + atol, with rtol 1e-4 (f32), 1e-10 (f64) or 2e-2
(bf16, stored as '<f4' holding bf16 values) and
atol = rtol * max|ref|: rounding of a sum is relative to the size of its
terms, not of the (possibly cancelled) result, and the largest output is
a fair proxy for that scale.

--hw NAME compiles for that hardware profile (einc's default otherwise);
--per-axis keeps only the cases whose plan has a collective whose mesh
axes work along different dims (seed 001's AllGather_XY of [B_X, D_Y]:
JSON ops with "dims"), so both runtimes' per-axis collectives are checked
against NumPy on whole programs.

The last line printed is `N passed, N failed`; the exit status is 1 if any
case failed (its source and the error are printed above).

Usage: run_cases.py --einc PATH [--runtime threads|mpi] [--shard I/N]
                    [--mesh-sizes 2,4] [--every K] [--only NAME] [--keep DIR]
                    [--hw NAME] [--per-axis]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402
import gen_cases  # noqa: E402

# bf16: every stored value is rounded to 8 significant bits (relative error
# 2^-9), and a case chains a few of them; 2e-2 of the output's magnitude is
# the budget (the executable's own --check allows 1e-2 against a bf16 reference).
RTOL = {"f32": 1e-4, "f64": 1e-10, "bf16": 2e-2}
# bf16 files are '<f4' holding bf16 values (docs/runtime.md).
NPDTYPE = {"f32": np.float32, "f64": np.float64, "bf16": np.float32}


def round_bf16(a):
    """f32 values rounded to the nearest bf16 (ties to even), still as f32."""
    u = np.array(a, dtype=np.float32).view(np.uint32)  # a copy, keeps rank 0
    u = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return u.view(np.float32).reshape(np.shape(a))
TIMEOUT = 120  # seconds for one compile or one run; far above what a case takes


def gelu(x):
    # The tanh approximation, as codegen/elementwise.c emits it.
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


FUNCS = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0),
    "gelu": gelu, "silu": lambda x: x * sigmoid(x), "sigmoid": sigmoid, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "neg": np.negative, "abs": np.abs,
    "softmax": lambda x, axis: softmax(x, axis),
}


def reference(case, arrays):
    """Runs the case's NumPy statements on float64 copies of the inputs."""
    size_of = {case["letters"][d]: n for d, n in case["sizes"].items()}

    def bc(x, src, dst):
        # x has labels `src` (a subset of `dst`): transpose and broadcast it to `dst`.
        x = np.asarray(x, dtype=np.float64)
        order = sorted(range(len(src)), key=lambda i: dst.index(src[i]))
        x = np.transpose(x, order) if src else x
        x = x.reshape([size_of[c] if c in src else 1 for c in dst])
        return np.broadcast_to(x, [size_of[c] for c in dst])

    env = dict(FUNCS)
    env.update(np=np, bc=bc, es=lambda spec, *ops: np.einsum(spec, *ops, optimize=True),
               iota=lambda c: np.arange(size_of[c], dtype=np.float64), inf=np.inf)
    env.update({k: v if v.dtype == np.int32 else v.astype(np.float64) for k, v in arrays.items()})
    for line in case["reference"]:
        exec(line, env)  # noqa: S102 - our own generated code
    return {name: np.asarray(env[name]) for name in case["outputs"]}


def compare(name, out, ref, dtype):
    """None if `out` matches `ref`, else a message saying how it differs."""
    want = NPDTYPE[dtype]
    if out.dtype != want:
        return "output %s: dtype %s, expected %s" % (name, out.dtype, np.dtype(want))
    if out.shape != ref.shape:
        return "output %s: shape %s, expected %s" % (name, out.shape, ref.shape)
    if out.size == 0:
        return None
    o = out.astype(np.float64)
    if not np.all(np.isfinite(o)):
        return "output %s: non-finite values" % name
    if dtype == "bf16" and np.any(out.view(np.uint32) & np.uint32(0xFFFF)):
        return "output %s: bf16 output holds values that are not bf16" % name
    rtol = RTOL[dtype]
    atol = rtol * float(np.max(np.abs(ref))) + 1e-300
    ratio = np.abs(o - ref) / (atol + rtol * np.abs(ref))
    worst = float(np.max(ratio))
    if worst > 1.0:
        at = np.unravel_index(int(np.argmax(ratio)), ref.shape)
        return ("output %s: mismatch at %s: got %.9g, expected %.9g (%.3g x tolerance; "
                "max|ref| = %.4g)" % (name, tuple(int(i) for i in at), o[at], ref[at], worst,
                                      float(np.max(np.abs(ref)))))
    return None


def run(cmd, cwd, timeout=TIMEOUT):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace")
        return -1, out + "\n(timed out after %d s)" % timeout


def einc_flags(case, args):
    """The flags every einc run of `case` takes (sizes, the case's own, --hw)."""
    flags = []
    for d in case["defines"]:
        flags += ["-D", d]
    flags += case["flags"]
    if args.hw:
        flags += ["--hw", args.hw]
    return flags


def has_per_axis(case, args, work):
    """Whether einc's plan for `case` has a collective whose axes work along
    different dims (the JSON dump lists their "dims")."""
    with open(os.path.join(work, "case.ein"), "w") as f:
        f.write(case["source"])
    cmd = [args.einc, "case.ein", "--dump-ir=json"] + einc_flags(case, args)
    r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=TIMEOUT)
    return r.returncode == 0 and any("dims" in op for op in json.loads(r.stdout)["ops"])


def run_case(case, args, work):
    """Compiles and runs one case in directory `work`; None on success, else the error."""
    src = os.path.join(work, "case.ein")
    with open(src, "w") as f:
        f.write(case["source"])
    cmd = [args.einc, "case.ein", "-o", "case"]
    if args.runtime == "mpi":
        cmd.append("--runtime=mpi")
    cmd += einc_flags(case, args)
    rc, out = run(cmd, work)
    if rc != 0:
        return "einc failed (exit %d): %s\n%s" % (rc, " ".join(cmd), out)

    rng = np.random.default_rng(zlib.crc32(case["name"].encode()))
    arrays = {}
    cmd = []
    if args.runtime == "mpi":
        cmd = mpi_launch(args.mpirun, case["mesh_size"])
    cmd.append("./case")
    for name, shape in case["inputs"]:
        if name in case.get("int_inputs", {}):
            # Gather indices: '<i4' ids over the rows they look up.
            a = rng.integers(0, case["int_inputs"][name], size=shape, dtype=np.int32)
            arrays[name] = a
            np.save(os.path.join(work, "in_%s.npy" % name), a)
            cmd += ["--input", "%s=in_%s.npy" % (name, name)]
            continue
        a = rng.uniform(-1.0, 1.0, size=shape).astype(NPDTYPE[case["dtype"]])
        if case["dtype"] == "bf16":
            a = round_bf16(a)  # so NumPy starts from the values the program reads
        arrays[name] = a
        np.save(os.path.join(work, "in_%s.npy" % name), a)
        cmd += ["--input", "%s=in_%s.npy" % (name, name)]
    for name in case["outputs"]:
        cmd += ["--output", "%s=out_%s.npy" % (name, name)]
    rc, out = run(cmd, work)
    if rc != 0:
        return "executable failed (exit %d): %s\n%s" % (rc, " ".join(cmd), out)

    refs = reference(case, arrays)
    errors = []
    for name in case["outputs"]:
        path = os.path.join(work, "out_%s.npy" % name)
        try:
            got = np.load(path, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - any unreadable output is a failure
            errors.append("output %s: cannot read %s: %s" % (name, path, e))
            continue
        msg = compare(name, got, refs[name], case["dtype"])
        if msg:
            errors.append(msg)
    return "\n".join(errors) if errors else None


def select(cases, args):
    if args.only:
        cases = [c for c in cases if c["name"] in args.only.split(",")]
    if args.mesh_sizes:
        sizes = {int(s) for s in args.mesh_sizes.split(",")}
        cases = [c for c in cases if c["mesh_size"] in sizes]
    if args.every > 1:
        cases = cases[::args.every]
    if args.shard:
        i, n = (int(s) for s in args.shard.split("/"))
        cases = cases[i::n]
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True, help="path of the einc compiler")
    ap.add_argument("--runtime", choices=["threads", "mpi"], default="threads")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--seed", type=int, default=20251122)
    ap.add_argument("--shard", help="I/N: run every N-th case starting at I")
    ap.add_argument("--mesh-sizes", help="only cases whose mesh has one of these device counts")
    ap.add_argument("--every", type=int, default=1, help="then keep every K-th case")
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--keep", help="work in this directory and keep it")
    ap.add_argument("--hw", help="hardware profile einc plans for (einc --hw)")
    ap.add_argument("--per-axis", action="store_true",
                    help="only cases whose plan has a collective with per-axis dims")
    args = ap.parse_args()
    args.einc = os.path.abspath(args.einc)

    cases = select(gen_cases.generate(args.seed), args)
    top = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="einc-e2e-")
    os.makedirs(top, exist_ok=True)
    if args.per_axis:
        cases = [c for c in cases if has_per_axis(c, args, top)]
    if not cases:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)
        print("no case selected")
        print("0 passed, 1 failed")
        return 1
    passed = failed = 0
    t0 = time.time()
    for case in cases:
        work = os.path.join(top, case["name"])
        os.makedirs(work, exist_ok=True)
        err = run_case(case, args, work)
        if err is None:
            passed += 1
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        else:
            failed += 1
            print("FAIL %s (%s, %s, mesh %s%s)" % (
                case["name"], case["category"], case["dtype"],
                " ".join("%s=%d" % m for m in case["mesh"]),
                "".join(", einc -D " + d for d in case["defines"]) +
                "".join(", einc " + f for f in case["flags"]) +
                (", einc --hw " + args.hw if args.hw else "")))
            for line in case["source"].splitlines():
                print("    " + line)
            print("  NumPy reference:")
            for line in case["reference"]:
                print("    " + line)
            print("  error: " + err.replace("\n", "\n    "))
            print("  (files kept in %s)" % work, flush=True)
    if not args.keep and failed == 0:
        shutil.rmtree(top, ignore_errors=True)
    print("%d cases on the %s runtime in %.1f s" % (len(cases), args.runtime, time.time() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
