#!/usr/bin/env python3
"""Casts against NumPy (docs/language.md, "Dtypes and casts"): compile the
programs of cast/ with einc on meshes of 1, 2 and 4 devices (-D X=..), run
each on the threads runtime with .npy inputs, and compare with NumPy.
bf16 is emulated exactly: round to nearest even on the float32 bit
pattern, as einc's stores do, so the elementwise casts are compared
bit for bit.

usage: cast_e2e.py --einc PATH --workdir DIR
"""
import sys

import numpy as np

from cg_run import main_cases, run_outputs


def bf16(v):
    """f32 values rounded to bf16 (nearest even, NaN kept), as f32."""
    b = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def compare(what, name, got, want, rtol=0.0, atol=0.0):
    """True if `got` equals `want` within the tolerances (0: bit for bit)."""
    if got.shape != want.shape:
        print(f"FAIL {what}: {name} has shape {got.shape}, expected {want.shape}")
        return False
    if rtol == 0 and atol == 0:
        ok = np.array_equal(got, want.astype(got.dtype))
    else:
        ok = np.allclose(got, want, rtol=rtol, atol=atol)
    if not ok:
        err = np.max(np.abs(got.astype(np.float64) - want))
        print(f"FAIL {what}: {name} differs from NumPy (max abs err {err:.3g})")
    return ok


def matmul_case(exe, work, what):
    rng = np.random.default_rng(26)
    x = {"Xb": bf16(rng.standard_normal((8, 32), dtype=np.float32)),
         "W": rng.standard_normal((32, 12), dtype=np.float32),
         "Xf": rng.standard_normal((8, 32), dtype=np.float32),
         "Cb": bf16(rng.standard_normal((8, 32), dtype=np.float32))}
    got = run_outputs([], exe, work, x, ["Y", "Yb", "Rb", "Sb", "P64", "P"], what)
    if got is None:
        return False
    y = x["Xb"].astype(np.float64) @ x["W"].astype(np.float64)
    xf = x["Xf"].astype(np.float64)
    p64 = xf * xf * 3  # products of f32 values are exact in f64; * 3 rounds once
    checks = [
        # the bf16 values are exact in f32: one f32 GEMM from here
        ("Y", got["Y"], y, 1e-5, 1e-5),
        # the cast of the f32 result, bit for bit
        ("Yb", got["Yb"], bf16(got["Y"]), 0, 0),
        ("Rb", got["Rb"], bf16(x["Xf"]), 0, 0),
        # rounded to bf16 before the sum (fused or not), the sum in f32,
        # rounded again when stored: bit for bit
        ("Sb", got["Sb"], bf16(bf16(x["Xf"]) + x["Cb"]), 0, 0),
        ("P64", got["P64"], p64, 0, 0),
        ("P", got["P"], p64.astype(np.float32), 0, 0),
    ]
    ok = True
    for name, g, w, rtol, atol in checks:
        ok &= compare(what, name, g, w, rtol, atol)
    # The cast must round where it is read: without it Sb would be one
    # rounding of Xf + Cb, which differs from the above on these inputs.
    if np.array_equal(bf16(bf16(x["Xf"]) + x["Cb"]), bf16(x["Xf"] + x["Cb"])):
        print(f"FAIL {what}: the inputs do not tell a rounded cast from a missing one")
        ok = False
    return ok


def least_squares(exe, work, what, seed, outputs):
    """Runs exe on random inputs of Loss = sum((Xin Wb - T)^2) with a bf16
    Wb; returns (inputs, outputs, loss, dLoss/dWb) in f64, or None."""
    rng = np.random.default_rng(seed)
    x = {"Xin": rng.standard_normal((8, 16), dtype=np.float32),
         "Wb": bf16(rng.standard_normal((16, 4), dtype=np.float32)),
         "T": rng.standard_normal((8, 4), dtype=np.float32)}
    got = run_outputs([], exe, work, x, outputs, what)
    if got is None:
        return None
    xi, w, t = (x[k].astype(np.float64) for k in ("Xin", "Wb", "T"))
    e = xi @ w - t
    return x, got, np.sum(e * e), 2 * xi.T @ e


def grad_case(exe, work, what):
    r = least_squares(exe, work, what, 27, ["L", "dW"])
    if r is None:
        return False
    x, got, loss, dw = r  # dw: the f32 cotangent of f32(Wb), cast back to bf16
    ok = compare(what, "L", got["L"], np.array(loss), 1e-5, 1e-6)
    # within one bf16 rounding of the exact gradient (the f32 sums may
    # round either side of a bf16 boundary): 2^-8 relative
    ok &= compare(what, "dW", got["dW"], dw, 2.0 ** -8, 1e-6)
    # and a bf16 value: its low 16 bits are zero
    ok &= compare(what, "dW (bf16 bits)", got["dW"], bf16(got["dW"]), 0, 0)
    return ok


def gather_case(exe, work, what):
    rng = np.random.default_rng(28)
    x = {"Tok": rng.integers(0, 10, 8).astype(np.int32),
         "Emb": bf16(rng.standard_normal((10, 16), dtype=np.float32))}
    got = run_outputs([], exe, work, x, ["G", "S", "Sb"], what)
    if got is None:
        return False
    rows = x["Emb"][x["Tok"]]
    # the f32 sum of 16 bf16 values (8 significant bits each) is within
    # f32 rounding of the exact one; Sb is that sum rounded to bf16 (one
    # bf16 rounding either side of a boundary: 2^-8 relative)
    s = rows.astype(np.float64).sum(axis=1)
    return (compare(what, "G", got["G"], rows, 0, 0)
            & compare(what, "S", got["S"], s, 1e-6, 1e-6)
            & compare(what, "Sb", got["Sb"], s, 2.0 ** -8, 1e-6))


def sgd_case(exe, work, what):
    r = least_squares(exe, work, what, 29, ["Loss", "Wb"])
    if r is None:
        return False
    x, got, loss, dw = r
    g = bf16(dw)  # the bf16 gradient, within one bf16 rounding
    w1 = x["Wb"].astype(np.float64) - 0.01 * g
    # within the gradient's bf16 rounding (times lr) plus the update's own
    # rounding to bf16 (half a step, 2^-9 relative; 2^-8 allowed)
    step = 0.01 * 2.0 ** -8 * np.abs(g) + 2.0 ** -8 * np.abs(w1) + 1e-30
    ok = compare(what, "Loss", got["Loss"], np.array(loss), 1e-5, 1e-6)
    if np.any(np.abs(got["Wb"] - w1) > step):
        print(f"FAIL {what}: Wb after one step differs from NumPy by more than a bf16 step")
        ok = False
    # the update moved the params (lr * g is larger than their spacing
    # for most), and they are bf16 values
    moved = np.mean(got["Wb"] != x["Wb"])
    if moved < 0.5:
        print(f"FAIL {what}: only {moved:.0%} of Wb moved in one step")
        ok = False
    return ok & compare(what, "Wb (bf16 bits)", got["Wb"], bf16(got["Wb"]), 0, 0)


CASES = {"cast_matmul": matmul_case, "cast_grad": grad_case, "cast_gather": gather_case,
         "cast_sgd": sgd_case}


if __name__ == "__main__":
    sys.exit(main_cases(CASES, "cast"))
