#!/usr/bin/env python3
"""End-to-end check of propagated programs against NumPy: compile each
example (with the collectives propagation inserted) to an SPMD executable,
run it on random inputs, and compare its outputs with NumPy's float64
evaluation of the same program.

usage: check_numerics.py EINC EXAMPLES_DIR WORKDIR
"""
import json
import os
import subprocess
import sys

import numpy as np


def gelu(x):
    """The tanh form of GELU, as the code generator emits it."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def ffw(t):
    return {"Out": gelu(t["In"] @ t["Win"]) @ t["Wout"]}


def matmul(t):
    return {"C": t["A"] @ t["B"]}


def carry(t):
    c = t["A"] @ t["B"]
    return {"S": 0.5 * (c @ t["E1"]) + c @ t["E2"]}


def residual(t):
    h = t["In"] @ t["W1"]
    g = np.maximum(h, 0) * 0.5 + h
    o = g @ t["W2"] + t["In"]
    return {"O": o, "L": np.array(np.sum(o * o))}


def transpose(t):
    return {"T": (t["In"] * 2).T}


HERE = os.path.dirname(os.path.abspath(__file__))


# example -> (reference, -D overrides that keep the run small)
CASES = {
    "ffw_dp.ein": (ffw, ["B=512"]),
    "ffw_fsdp.ein": (ffw, ["B=512"]),
    "ffw_tp.ein": (ffw, ["B=512"]),
    "ffw_fsdp_tp.ein": (ffw, ["B=512"]),
    "matmul_case1_local.ein": (matmul, []),
    "matmul_case2_allgather.ein": (matmul, []),
    "matmul_case2_q9.ein": (matmul, []),
    "matmul_case3_allreduce.ein": (matmul, []),
    "matmul_case3_reducescatter.ein": (matmul, []),
    "matmul_case4_free.ein": (matmul, []),
    "matmul_alltoall.ein": (matmul, []),
    os.path.join(HERE, "programs", "carry.ein"): (carry, []),
    os.path.join(HERE, "programs", "residual.ein"): (residual, []),
    os.path.join(HERE, "programs", "transpose.ein"): (transpose, []),
}


def shape_of(type_str, dims):
    """Global shape of "A[I_X, J]" from the dump's dims."""
    inner = type_str[type_str.index("[") + 1:type_str.index("]")]
    names = [d.strip().split("_")[0] for d in inner.split(",") if d.strip()]
    return tuple(dims[n] for n in names)


def run_case(einc, path, ref, defines, work, seed):
    base = os.path.join(work, os.path.basename(path)[:-4])
    dflags = [x for d in defines for x in ("-D", d)]
    dump = subprocess.run([einc, path, "--dump-ir=json", *dflags], capture_output=True, text=True, timeout=120)
    if dump.returncode:
        return f"{path}: einc --dump-ir failed:\n{dump.stderr}"
    ir = json.loads(dump.stdout)
    collectives = [op["op"] for op in ir["ops"] if op["op"] not in ("Einsum", "Elementwise")]
    dims = {d["name"]: d["size"] for d in ir["dims"]}
    build = subprocess.run([einc, path, *dflags, "-o", base], capture_output=True, text=True, timeout=300)
    if build.returncode:
        return f"{path}: einc -o failed:\n{build.stderr}"
    rng = np.random.default_rng(seed)
    tensors, args = {}, []
    for v in ir["inputs"]:
        a = rng.uniform(-1, 1, shape_of(v["type"], dims)).astype(np.float32)
        f = f"{base}.{v['name']}.npy"
        np.save(f, a)
        tensors[v["name"]] = a.astype(np.float64)
        args += ["--input", f"{v['name']}={f}"]
    want = ref(tensors)
    for name in want:
        args += ["--output", f"{name}={base}.out.{name}.npy"]
    run = subprocess.run([base, *args], capture_output=True, text=True, timeout=300)
    if run.returncode:
        return f"{path}: executable failed:\n{run.stderr}"
    for name, w in want.items():
        got = np.load(f"{base}.out.{name}.npy").astype(np.float64)
        if got.shape != w.shape:
            return f"{path}: {name} has shape {got.shape}, want {w.shape}"
        err = np.max(np.abs(got - w)) / max(np.max(np.abs(w)), 1e-30)
        if not err < 1e-4:
            return f"{path}: {name} differs from NumPy (max error {err:.3g} of max |value|)"
        print(f"ok {os.path.basename(path)}: {name} max error {err:.2g}, collectives {collectives}")
    return None


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    einc, examples, work = argv[1], argv[2], argv[3]
    os.makedirs(work, exist_ok=True)
    failures = []
    for i, (name, (ref, defines)) in enumerate(CASES.items()):
        err = run_case(einc, os.path.join(examples, name), ref, defines, work, 1234 + i)
        if err:
            failures.append(err)
            print("FAIL", err)
    print(f"{len(CASES) - len(failures)}/{len(CASES)} programs match NumPy")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
