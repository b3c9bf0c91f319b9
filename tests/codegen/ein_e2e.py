#!/usr/bin/env python3
"""Whole-pipeline codegen tests: compile .ein files with the einc driver
(frontend, propagate, cost, codegen), run each executable on the threads
runtime with --random-inputs 1 --check, and for the programs whose formula is
known here, with .npy inputs compared against NumPy.

usage: ein_e2e.py --einc PATH --workdir DIR FILE.ein...
"""
import argparse
import os
import sys
import zlib

import numpy as np

from cg_run import run, run_check, run_numpy


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


def sat_inputs(rng):
    # Both sides of every clamp and overflow threshold (sigmoid's -87 and
    # 87.33 and exp's 88.72 for f32, 700 and 708 for f64), the gelu
    # argument's cube past them (10 to 12.5), and a NaN.
    edge = np.array([0, 1, -1, 9, -9, 10, -10, 10.5, -10.5, 12, -12, 79, -79, 81, -81,
                     86.9, -86.9, 87.1, -87.1, 87.3, -87.3, 87.36, -87.36, 88, -88,
                     88.8, -88.8, 300, -300, 699, -699, 701, -701, 709, -709, 1000, -1000,
                     np.nan])
    v = np.concatenate([edge, rng.uniform(-200, 200, 64 - edge.size)])
    return {"A": v.astype(np.float32), "B": v.astype(np.float64)}


def sat_expected(x):
    def sig(v):
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-v))

    def gelu(v):
        # The tanh form as x * sigmoid(2u), its identity: 0.5 (1 + tanh(u))
        # cancels to 0 in f64 from x = -9 on, where the value is 1e-28.
        with np.errstate(over="ignore"):
            return v * sig(2 * np.sqrt(2.0 / np.pi) * (v + 0.044715 * v ** 3))
    out = {}
    for src, suffix in (("A", "A"), ("B", "B")):
        v = x[src].astype(np.float64)
        out["S" + suffix], out["L" + suffix], out["G" + suffix] = sig(v), v * sig(v), gelu(v)
    return out


def rows_inputs(rng):
    return {"A": (rng.standard_normal((8, 96)) * 30).astype(np.float32),
            "G": rng.standard_normal(96).astype(np.float32),
            "L": (rng.standard_normal((16, 16)) * 1e4).astype(np.float32),
            "B": (rng.standard_normal((8, 96)) * 30).astype(np.float64)}


def rows_expected(x):
    def softmax(v):
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    a = x["A"].astype(np.float64)
    t, s = np.indices((16, 16))
    return {"P": softmax(a),
            "M": a / np.sqrt((a * a).mean(axis=-1, keepdims=True) + 1e-5) * x["G"],
            "Q": softmax(np.where(s <= t, x["L"].astype(np.float64), -np.inf)),
            "PB": softmax(x["B"])}


def rows_stream_inputs(rng):
    return {"A": (rng.standard_normal((512, 4096)) * 30).astype(np.float32),
            "G": rng.standard_normal(4096).astype(np.float32)}


def rows_stream_expected(x):
    e = rows_expected({"A": x["A"], "G": x["G"], "L": np.zeros((16, 16)), "B": np.zeros((8, 96))})
    return {"P": e["P"], "M": e["M"]}


def ew_stream_inputs(rng):
    return {"A": rng.standard_normal(2097298, dtype=np.float32),
            "B": rng.standard_normal(2097298, dtype=np.float32),
            "X": rng.standard_normal((16400, 128), dtype=np.float32),
            "G": rng.standard_normal(128, dtype=np.float32),
            "Xb": bf16(rng.standard_normal((32768, 128))),
            "Gb": bf16(rng.standard_normal(128)),
            "P": rng.standard_normal(1048614),
            "Q": rng.standard_normal(1048614)}


def ew_stream_expected(x):
    s = x["A"].astype(np.float64) * 2 + x["B"]
    return {"U": s * s + 1,
            "Y": x["X"].astype(np.float64) * x["G"] * 0.5,
            "Yb": bf16(x["Xb"].astype(np.float64) * x["Gb"]),
            "D": x["P"] * x["Q"] + 0.5,
            "Z": np.exp(x["A"].astype(np.float64)) * x["B"]}


def expf_inputs(rng):
    edge = [88.72, 88.73, -87.33, -87.34, -103.97, -103.98, 0.0, np.nan, np.inf, -np.inf]
    # around the lower bound, where k = -254 makes both factors +0
    edge += [-104.0, -150.0, -175.9, -176.0, -176.1, -1e30]
    edge += [s * 2.0 ** k for k in range(-24, 7) for s in (1, -1)]
    z = np.concatenate([edge, rng.uniform(-110, 95, 128 - len(edge))])
    return {"Z": z.astype(np.float32)}


def expf_expected(x):
    # exp rounded once to f32: past 88.7228 that is inf
    with np.errstate(over="ignore"):
        return {"E": np.exp(x["Z"].astype(np.float64)).astype(np.float32)}


def bf16(v):
    """f32 values rounded to bf16 (nearest even), as f32: exact in a bf16 input."""
    b = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def contract_inputs(rng):
    f32 = np.float32
    return {"Q": rng.standard_normal((4, 6, 4, 2, 16), dtype=f32),
            "Cos": rng.standard_normal((6, 16), dtype=f32),
            "Sin": rng.standard_normal((6, 16), dtype=f32),
            "A": rng.standard_normal((4, 2, 6, 3, 8)),
            "W": rng.standard_normal((3, 2, 16)),
            "Xb": bf16(rng.standard_normal((4, 6, 2, 16))),
            "Rb": bf16(rng.standard_normal((2, 2))),
            "E": rng.standard_normal((4, 6, 4), dtype=f32),
            "V": rng.standard_normal(4, dtype=f32)}


def contract_expected(x):
    q = x["Q"].astype(np.float64)
    rot = np.subtract.outer(np.arange(2), np.arange(2)).astype(np.float64)  # P2 - P
    qr = (q * x["Cos"][None, :, None, None, :]
          + np.einsum("btnpg,ap->btnag", q, rot) * x["Sin"][None, :, None, None, :])
    xb = x["Xb"].astype(np.float64)
    yb = xb + np.einsum("btpg,ap->btag", xb, x["Rb"].astype(np.float64))
    return {"Qr": qr,
            "C": np.einsum("bktjh,jkg->bthg", x["A"], x["W"]),
            "Yb": yb,
            "Z": np.einsum("btd,d->bt", x["E"].astype(np.float64), x["V"])}


NUMPY = {"mlp": (mlp_inputs, mlp_expected, 1e-4, 1e-3),
         # Yb's bf16 products and sums are exact in f32, rounded once to
         # bf16 when stored: within 2^-9 relative
         "contract": (contract_inputs, contract_expected, 4e-3, 1e-6),
         "rows": (rows_inputs, rows_expected, 1e-5, 1e-30),
         "rows_stream": (rows_stream_inputs, rows_stream_expected, 1e-5, 1e-30),
         "ew_stream": (ew_stream_inputs, ew_stream_expected, 1e-5, 1e-30),
         # within 2 f32 ulps of exp (NumPy's own expf is within 2), denormal
         # results within one denormal step (1.4e-45)
         "expf": (expf_inputs, expf_expected, 2.4e-7, 1.5e-45),
         "act": (act_inputs, act_expected, 1e-5, 1e-6),
         "sat": (sat_inputs, sat_expected, 1e-5, 1e-30)}


def check(args, path):
    stem = os.path.splitext(os.path.basename(path))[0]
    work = os.path.join(args.workdir, stem)
    os.makedirs(work, exist_ok=True)
    exe = os.path.join(work, stem)
    if run([args.einc, path, "-o", exe], f"{stem}: einc") is None:
        return False
    if not run_check([], exe, stem):
        return False
    ok = True
    if stem in NUMPY:
        make, expected, rtol, atol = NUMPY[stem]
        x = make(np.random.default_rng(zlib.crc32(stem.encode())))
        ok = run_numpy([], exe, work, x, expected(x), rtol, atol, stem)
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
