#!/usr/bin/env python3
"""End-to-end codegen tests: build each hand-built case of cg_cases.c into an
executable with cg_build_case, run it on the threads runtime (2x2 mesh)

  1. with --random-inputs 1 --check (the sharded run against the one-device
     reference compiled into the same executable), and
  2. with .npy inputs written here, comparing its .npy outputs with NumPy.

usage: e2e.py --builder PATH --workdir DIR [--runtime-dir DIR] [--mpi --launcher CMD]
              [--cases a,b] [-O N]
Exit status 0 if every case passes.
"""
import argparse
import os
import sys
import zlib

import numpy as np

from cg_run import run, run_check, run_numpy

I, J, K, M = 8, 6, 4, 1024


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gelu(x):
    # tanh approximation, as codegen/elementwise.c emits it
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def bf16(x):
    """Round float32 values to bfloat16 (nearest even), back as float32."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32)


def r(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# name -> (inputs(rng) -> dict, expected(inputs) -> dict, rtol, atol)
def case_ew_broadcast(rng):
    return {"A": r(rng, I, J), "B": r(rng, J), "Et": r(rng, J, I)}


def exp_ew_broadcast(x):
    return {"C": x["A"] * x["B"][None, :] + 1.5, "D": x["Et"].T - x["A"]}


def case_ew_funcs(rng):
    return {"A": r(rng, I, J)}


def exp_ew_funcs(x):
    a = x["A"].astype(np.float64)
    p = a * a + 1
    return {"P": p, "exp": np.exp(a), "log": np.log(p), "tanh": np.tanh(a),
            "relu": np.maximum(a, 0), "gelu": gelu(a), "silu": a * sigmoid(a),
            "sigmoid": sigmoid(a), "sqrt": np.sqrt(p), "rsqrt": 1 / np.sqrt(p), "neg": -a,
            "sin": np.sin(a), "cos": np.cos(a)}


def case_ew_fused(rng):
    return {"A": r(rng, I, J), "B": r(rng, J), "C": r(rng, I, J)}


def exp_ew_fused(x):
    a = x["A"].astype(np.float64)
    return {"T3": np.exp(a * x["B"][None, :]) + x["C"], "V": sigmoid(a) ** 2}


def case_einsum(rng):
    return {"A": r(rng, I, K), "W": r(rng, K, J)}


def exp_einsum(x):
    c = x["A"].astype(np.float64) @ x["W"]
    return {"C": c, "S": 0.5 * c.sum(axis=1), "G": c.T}


def case_collectives(rng):
    return {"A": r(rng, I, J), "X": r(rng, I, M), "W": r(rng, M, J)}


def exp_collectives(x):
    p = x["X"].astype(np.float64) @ x["W"]
    return {"AG": x["A"], "AR": p, "RS": p, "SL": p}


def case_alltoall(rng):
    return {"A": r(rng, I, J), "B": r(rng, I, J)}


def exp_alltoall(x):
    return {"S": x["A"] + x["B"]}


def case_bf16(rng):
    return {"A": r(rng, I, K), "W": r(rng, K, J)}


def exp_bf16(x):
    c = bf16(bf16(x["A"]).astype(np.float64) @ bf16(x["W"]))
    return {"G": bf16(gelu(c.astype(np.float32)))}


def case_f64(rng):
    return {"A": r(rng, I, K, dtype=np.float64), "W": r(rng, K, J, dtype=np.float64)}


def exp_f64(x):
    c = 2.0 * x["A"] @ x["W"]
    return {"H": np.tanh(c) - 0.25 * c}


def case_identity(rng):
    return {"A": r(rng, I, J)}


def exp_identity(x):
    return {"A0": x["A"], "A1": x["A"], "N0": -x["A"], "N1": -x["A"]}


def case_ew_wide(rng):
    return {"A": r(rng, I, M), "B": r(rng, M)}


def exp_ew_wide(x):
    return {"S": np.maximum(x["A"], 0) * x["B"][None, :] + x["A"]}


def case_ew_inplace(rng):
    return {"A": r(rng, I, J), "B": r(rng, J)}


def exp_ew_inplace(x):
    a = x["A"].astype(np.float64)
    w = sigmoid(a) ** 4 + x["B"][None, :] + np.tanh(a)
    return {"G": w.T}


CASES = {
    "ew_broadcast": (case_ew_broadcast, exp_ew_broadcast, 1e-6, 1e-6),
    "ew_funcs": (case_ew_funcs, exp_ew_funcs, 1e-5, 1e-6),
    "ew_fused": (case_ew_fused, exp_ew_fused, 1e-5, 1e-6),
    "einsum": (case_einsum, exp_einsum, 1e-5, 1e-5),
    "collectives": (case_collectives, exp_collectives, 1e-5, 1e-5),
    "alltoall": (case_alltoall, exp_alltoall, 1e-6, 1e-6),
    # bf16: one rounding step of the f32 accumulation order may differ
    "bf16": (case_bf16, exp_bf16, 1.6e-2, 1e-2),
    "f64": (case_f64, exp_f64, 1e-12, 1e-12),
    "identity": (case_identity, exp_identity, 0, 0),
    "ew_wide": (case_ew_wide, exp_ew_wide, 1e-6, 1e-6),
    "ew_inplace": (case_ew_inplace, exp_ew_inplace, 1e-5, 1e-6),
}


def check_case(args, name):
    make_inputs, expected, rtol, atol = CASES[name]
    work = os.path.join(args.workdir, name)
    os.makedirs(work, exist_ok=True)
    exe = os.path.join(work, name)
    build = [args.builder, name, exe, f"-O{args.opt}"] + (["--mpi"] if args.mpi else [])
    if args.runtime_dir:
        build += ["--runtime-dir", args.runtime_dir]
    if run(build, f"{name}: build") is None:
        return False
    launch = args.launcher.split() if args.launcher else []
    if not run_check(launch, exe, name):
        return False
    x = make_inputs(np.random.default_rng(zlib.crc32(name.encode())))
    want = expected(x)
    ok = run_numpy(launch, exe, work, x, want, rtol, atol, name)
    print(f"{'ok  ' if ok else 'FAIL'} {name} ({len(want)} outputs)")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builder", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--runtime-dir", default="", help="where libeinrt*.a are (default: built in)")
    ap.add_argument("--launcher", default="", help="e.g. 'mpirun -np 4'")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("-O", dest="opt", type=int, default=2)
    args = ap.parse_args()
    names = [c for c in args.cases.split(",") if c]
    bad = [n for n in names if n not in CASES]
    if bad:
        print(f"unknown cases: {bad}")
        return 2
    failed = [n for n in names if not check_case(args, n)]
    print(f"{len(names) - len(failed)}/{len(names)} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
