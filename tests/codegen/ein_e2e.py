#!/usr/bin/env python3
"""Whole-pipeline codegen tests: compile .ein files with the einc driver
(frontend, propagate, cost, codegen), run each executable on the threads
runtime with --random-inputs 1 --check, and for the programs whose formula is
known here, with .npy inputs compared against NumPy.

usage: ein_e2e.py --einc PATH --workdir DIR FILE.ein...
"""
import argparse
import os
import subprocess
import sys
import zlib

import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# file stem -> (inputs(rng), expected(inputs), rtol, atol)
def mlp_inputs(rng):
    return {"In": rng.standard_normal((64, 128), dtype=np.float32),
            "Win": rng.standard_normal((128, 256), dtype=np.float32),
            "Wout": rng.standard_normal((256, 128), dtype=np.float32)}


def mlp_expected(x):
    return {"Out": (x["In"].astype(np.float64) @ x["Win"]) @ x["Wout"]}


def act_inputs(rng):
    return {"X0": rng.standard_normal((16, 48), dtype=np.float32),
            "Row": rng.standard_normal(48, dtype=np.float32),
            "Col": rng.standard_normal(16, dtype=np.float32)}


def act_expected(x):
    a = x["X0"].astype(np.float64)
    t = a * x["Row"][None, :] + x["Col"][:, None]
    u = sigmoid(t) * 0.5 - np.tanh(a) * 0.25
    return {"V": 1 / np.sqrt(u + 1) + np.maximum(a, 0)}


NUMPY = {"mlp": (mlp_inputs, mlp_expected, 1e-4, 1e-3),
         "act": (act_inputs, act_expected, 1e-5, 1e-6)}


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    if p.returncode != 0:
        print(f"FAIL {what}: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}")
        return None
    return p.stdout


def check(args, path):
    stem = os.path.splitext(os.path.basename(path))[0]
    work = os.path.join(args.workdir, stem)
    os.makedirs(work, exist_ok=True)
    exe = os.path.join(work, stem)
    if run([args.einc, path, "-o", exe], f"{stem}: einc") is None:
        return False
    out = run([exe, "--random-inputs", "1", "--check"], f"{stem}: --check")
    if out is None or "max_rel_err" not in out:
        return False
    ok = True
    if stem in NUMPY:
        make, expected, rtol, atol = NUMPY[stem]
        x = make(np.random.default_rng(zlib.crc32(stem.encode())))
        cmd = [exe]
        for k, v in x.items():
            np.save(os.path.join(work, f"in_{k}.npy"), v)
            cmd += ["--input", f"{k}={os.path.join(work, f'in_{k}.npy')}"]
        want = expected(x)
        for k in want:
            cmd += ["--output", f"{k}={os.path.join(work, f'out_{k}.npy')}"]
        if run(cmd, f"{stem}: npy run") is None:
            return False
        for k, w in want.items():
            got = np.load(os.path.join(work, f"out_{k}.npy"))
            if got.shape != w.shape or not np.allclose(got, w, rtol=rtol, atol=atol):
                print(f"FAIL {stem}: output {k} differs from NumPy")
                ok = False
    print(f"{'ok  ' if ok else 'FAIL'} {stem}{' (numpy)' if stem in NUMPY else ''}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    failed = [f for f in args.files if not check(args, f)]
    print(f"{len(args.files) - len(failed)}/{len(args.files)} programs passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
