#!/usr/bin/env python3
"""The i8 dtype against NumPy (docs/language.md, "Dtypes and casts"): compile
the programs of int8/ with einc on meshes of 1, 2 and 4 devices (-D X=..),
run each on the threads runtime with .npy inputs ('|i1' for i8 tensors),
and compare with NumPy.

i8(x) is np.clip(np.rint(x), -128, 127).astype(np.int8) with NaN to 0,
computed on the same f32 values, so the casts are compared exactly; f32 of
an i8 is exact.  The weight-only int8 matmul (i8 weights, per-output-
channel f32 scales) is compared within f32 GEMM rounding, with the weights
sharded over F, over the contracted D, and under FSDP (the i8 weights
gathered as i8).  A cast to i8 passes no
gradient: dL/dW of a loss that reads W directly and through i8(W) is the
direct part alone.  --random-inputs fills an i8 input with integers
uniform in [-127, 127], the same on every mesh; a checkpoint saves an i8
param as NumPy int8 and --resume reads it back.  Casts folded into their
GEMM (int8_fold.ein) give what the same cast materialised gives.
Attention over an i8 KV cache (int8_attn.ein: batched over sequences and
heads, the casts folded) matches NumPy and holds no f32 copy of a cache.
int8 x int8 (int8_w8a8.ein: activations quantized per row by the program,
both casts folded) matches NumPy's exact integer sums.

usage: int8_e2e.py --einc PATH --workdir DIR
"""
import os
import re
import shutil
import sys

import numpy as np

from cg_run import main_cases, run, run_outputs


def quantize(x):
    """einc's i8(x) on f32 values: nearest even, saturated, NaN to 0."""
    x = np.asarray(x, dtype=np.float32)
    q = np.clip(np.rint(np.nan_to_num(x, nan=0.0)), -128, 127)
    return q.astype(np.int8)


def compare(what, name, got, want, rtol=0.0, atol=0.0):
    """True if `got` equals `want` (dtype and values) within the tolerances."""
    if got.shape != want.shape or got.dtype != want.dtype:
        print(f"FAIL {what}: {name} is {got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
        return False
    if rtol == 0 and atol == 0:
        ok = np.array_equal(got, want)
    else:
        ok = np.allclose(got, want, rtol=rtol, atol=atol)
    if not ok:
        err = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))
        print(f"FAIL {what}: {name} differs from NumPy (max abs err {err:.3g})")
    return ok


def cast_case(exe, work, what):
    rng = np.random.default_rng(8)
    xf = (rng.standard_normal((8, 32)) * 100).astype(np.float32)
    # ties (x.5) both ways, negatives, saturation both ways, NaN and inf
    xf[0, :16] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, -128.5, 300, -300,
                  np.nan, np.inf, -np.inf, 126.5, -127.5, 0.49999997]
    x = {"Xf": xf, "S": rng.uniform(0.5, 2, 32).astype(np.float32),
         "Qin": rng.integers(-128, 128, (8, 32)).astype(np.int8)}
    got = run_outputs([], exe, work, x, ["Q", "Qs", "R"], what)
    if got is None:
        return False
    want_q = quantize(xf)
    if not np.array_equal(want_q[0, :6], np.array([0, 2, 2, 0, -2, -2], np.int8)):
        print(f"FAIL {what}: the reference does not round ties to even")
        return False
    return (compare(what, "Q", got["Q"], want_q)
            & compare(what, "Qs", got["Qs"], quantize(xf * x["S"]))
            & compare(what, "R", got["R"], x["Qin"].astype(np.float32) * x["S"]))


def matmul_case(exe, work, what):
    rng = np.random.default_rng(9)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    sw = (np.abs(w).max(axis=0) / 127).astype(np.float32)  # per output channel
    wq = quantize(w / sw)
    x = {"Xin": rng.standard_normal((8, 32)).astype(np.float32), "Wq": wq, "Sw": sw}
    got = run_outputs([], exe, work, x, ["Y"], what)
    if got is None:
        return False
    y = (x["Xin"].astype(np.float64) @ wq.astype(np.float64)) * sw
    ok = compare(what, "Y", got["Y"], y.astype(np.float32), 1e-5, 1e-5)
    # the quantized weights are close to the f32 ones, not equal: a
    # program that ignored Wq or the scales would be far from both
    if np.allclose(y, x["Xin"] @ w, rtol=1e-5, atol=1e-5):
        print(f"FAIL {what}: quantization left the weights unchanged; the test tells nothing")
        ok = False
    return ok


def grad_case(exe, work, what):
    rng = np.random.default_rng(10)
    x = {"Xin": rng.standard_normal((8, 16)).astype(np.float32),
         "W": rng.standard_normal((16, 4)).astype(np.float32)}
    got = run_outputs([], exe, work, x, ["L", "dW"], what)
    if got is None:
        return False
    q = quantize(x["W"] * np.float32(50)).astype(np.float64)
    y = x["Xin"].astype(np.float64) @ q
    w = x["W"].astype(np.float64)
    loss = np.sum(y * y) + np.sum(w * w)
    # the quantized path's own gradient (2 X^T Y * 50, straight through)
    # is large: a cast that passed it on would fail the dW check
    return (compare(what, "L", got["L"], np.array(loss, np.float32), 1e-5, 1e-3)
            & compare(what, "dW", got["dW"], (2 * x["W"]).astype(np.float32)))


def same_as_one_device(work, stem, rel, got, what):
    """True unless the 1-device run of `stem` left a different array at `rel`
    (meshes run 1, 2, 4 in order, in sibling work dirs)."""
    first = os.path.join(os.path.dirname(work), f"{stem}_x1", rel)
    if os.path.exists(first) and not np.array_equal(np.load(first), got):
        print(f"FAIL {what}: {rel} differs from the 1-device run's")
        return False
    return True


def random_case(exe, work, what):
    out = os.path.join(work, "out_R.npy")
    if run([exe, "--random-inputs", "7", "--output", f"R={out}"], f"{what}: random") is None:
        return False
    r = np.load(out)
    ok = bool(np.all(r == np.rint(r)) and r.min() >= -127 and r.max() <= 127)
    # 4096 draws over 255 values: every value shows up with overwhelming odds,
    # and the mean is near 0 (its standard error is about 1.2)
    ok &= len(np.unique(r)) >= 250 and abs(float(r.mean())) < 6
    if not ok:
        print(f"FAIL {what}: random i8 values not uniform integers in [-127, 127]")
    return ok and same_as_one_device(work, "int8_random", "out_R.npy", r, what)


def fsdp_case(exe, work, what):
    # The executable describes its plan (--info): on 2 and 4 devices the i8
    # weights must travel as i8, an AllGather of Wq before the cast.
    info = run([exe, "--info"], f"{what}: --info")
    if info is None:
        return False
    if "X=1" not in what and not re.search(r"AllGather\S*\s.*\bWq\b", info):
        print(f"FAIL {what}: no AllGather of Wq in the plan:\n{info}")
        return False
    return matmul_case(exe, work, what)


def checkpoint_case(exe, work, what):
    ck = os.path.join(work, "ck")
    shutil.rmtree(ck, ignore_errors=True)
    if run([exe, "--random-inputs", "3", "--steps", "2", "--save", ck], f"{what}: --save") is None:
        return False
    wq = np.load(os.path.join(ck, "Wq.npy"))
    ok = wq.dtype == np.int8 and wq.shape == (16, 4) and wq.min() >= -127 and wq.max() <= 127
    if ok and not same_as_one_device(work, "int8_checkpoint", os.path.join("ck", "Wq.npy"), wq, what):
        return False
    if not ok:
        print(f"FAIL {what}: the saved i8 param is {wq.dtype}{wq.shape}, not int8 (16, 4) in [-127, 127]")
        return False
    return run([exe, "--random-inputs", "3", "--resume", ck, "--steps", "3"],
               f"{what}: --resume") is not None


def fold_case(exe, work, what):
    """Casts folded into their GEMM (Ya, Yt, Yr, Yv: the runtime converts the
    i8 weights block by block) against the same cast materialised (Yb, its
    f32 copy Wb an output) and NumPy."""
    rng = np.random.default_rng(11)
    x = {"Xin": rng.standard_normal((16, 1536)).astype(np.float32),
         "Xv": rng.standard_normal(1536).astype(np.float32),
         "Wq": rng.integers(-127, 128, (1536, 512)).astype(np.int8),
         "Wtq": rng.integers(-127, 128, (512, 1536)).astype(np.int8),
         "Sw": rng.uniform(0.001, 0.01, 512).astype(np.float32)}
    got = run_outputs([], exe, work, x, ["Ya", "Yb", "Wb", "Yt", "Yv", "Yr"], what)
    if got is None:
        return False
    xin, sw = x["Xin"].astype(np.float64), x["Sw"]
    ya = (xin @ x["Wq"].astype(np.float64)) * sw
    yt = xin @ x["Wtq"].astype(np.float64).T
    yv = x["Xv"].astype(np.float64) @ x["Wq"].astype(np.float64)
    scale = np.max(np.abs(ya))
    # folded and unfolded differ only in the order of the sum over D (the
    # conversion blocks): f32 rounding, far below the NumPy tolerance
    return (compare(what, "Wb", got["Wb"], x["Wq"].astype(np.float32))
            & compare(what, "Ya vs Yb", got["Ya"], got["Yb"], 0, 1e-6 * scale)
            & compare(what, "Ya", got["Ya"], ya.astype(np.float32), 1e-5, 1e-5 * scale)
            & compare(what, "Yt", got["Yt"], yt.astype(np.float32), 1e-5, 1e-5 * np.max(np.abs(yt)))
            & compare(what, "Yr", got["Yr"], yt.astype(np.float32), 1e-5, 1e-5 * np.max(np.abs(yt)))
            & compare(what, "Yv", got["Yv"], yv.astype(np.float32), 1e-5, 1e-5 * np.max(np.abs(yv))))


def attn_case(exe, work, what):
    """Attention over an i8 KV cache: the scores Q . (Ks * KC) and the
    values P . VC * Vs, batched over sequences and heads with the casts
    folded, against NumPy; the peak memory holds no f32 copy of a cache."""
    rng = np.random.default_rng(12)
    b, s, k, h = 2, 300, 4, 40
    x = {"Q": rng.standard_normal((b, k, h)).astype(np.float32),
         "P": rng.uniform(0, 1, (b, k, s)).astype(np.float32),
         "KC": rng.integers(-128, 128, (b, s, k, h)).astype(np.int8),
         "VC": rng.integers(-128, 128, (b, s, k, h)).astype(np.int8),
         "Ks": rng.uniform(0.001, 0.02, (k, h)).astype(np.float32),
         "Vs": rng.uniform(0.001, 0.02, (k, h)).astype(np.float32)}
    got = run_outputs([], exe, work, x, ["Sc", "Ov"], what)
    stats = run([exe, "--random-inputs", "1", "--stats"], f"{what}: --stats")
    if got is None or stats is None:
        return False
    f = {n: v.astype(np.float64) for n, v in x.items()}
    sc = np.einsum("bkh,kh,bskh->bks", f["Q"], f["Ks"], f["KC"])
    ov = np.einsum("bks,bskh,kh->bkh", f["P"], f["VC"], f["Vs"])
    # per device: the i8 cache's share times 4 is what an f32 copy would add
    ndev = int(re.search(r"_x(\d+)$", work).group(1))
    copy = 4 * x["KC"].nbytes // ndev
    peak = int(re.search(r"peak memory per device: max (\d+) bytes", stats).group(1))
    ok = peak < copy
    if not ok:
        print(f"FAIL {what}: peak {peak} bytes per device holds an f32 copy of a cache ({copy} bytes)")
    return (ok & compare(what, "Sc", got["Sc"], sc.astype(np.float32), 1e-5, 1e-5 * np.max(np.abs(sc)))
            & compare(what, "Ov", got["Ov"], ov.astype(np.float32), 1e-5, 1e-5 * np.max(np.abs(ov))))


def w8a8_case(exe, work, what):
    """int8 x int8: activations quantized per row by the program (scale
    max |x| / 127), i8 weights with per-channel scales.  The quantized row
    Q1 against NumPy's (the same f32 divisions: at most 1 apart, where a
    quotient sits on a rounding tie); Y1 (one row: the runtime's exact
    i32 sums) and Yb (a batch: f32 GEMM) against NumPy's exact integer
    sums of the program's own quantized rows, scaled in the same order."""
    rng = np.random.default_rng(13)
    w = rng.standard_normal((72, 40)).astype(np.float32)
    sw = (np.abs(w).max(axis=0) / 127).astype(np.float32)
    x = {"X1": rng.standard_normal((1, 72)).astype(np.float32),
         "Xb": rng.standard_normal((5, 72)).astype(np.float32),
         "Wq": quantize(w / sw), "Sw": sw}
    got = run_outputs([], exe, work, x, ["Q1", "Y1", "Yb"], what)
    if got is None:
        return False
    ok = True
    for row, out in (("X1", "Y1"), ("Xb", "Yb")):
        s = (np.abs(x[row]).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
        q = quantize(x[row] / s)
        if row == "X1":
            ok &= compare(what, "Q1", got["Q1"].astype(np.int32), q.astype(np.int32), 0, 1.0)
            q = got["Q1"]  # the program's own quantized row
        exact = q.astype(np.int64) @ x["Wq"].astype(np.int64)  # |sums| < 2^24: exact in f32
        y = (exact.astype(np.float32) * s).astype(np.float32) * sw
        ok &= compare(what, out, got[out], y.astype(np.float32), 1e-6, 1e-6 * np.max(np.abs(y)))
    # W8A8 is not the f32 product: a program that skipped the activations'
    # quantization would match f32 inputs times the dequantized weights
    yf = (x["X1"].astype(np.float64) @ (x["Wq"] * sw).astype(np.float64))
    if np.allclose(got["Y1"], yf, rtol=1e-5, atol=1e-5):
        print(f"FAIL {what}: Y1 equals the unquantized product; the test tells nothing")
        ok = False
    return ok


CASES = {"int8_random": random_case, "int8_cast": cast_case, "int8_matmul_f": matmul_case,
         "int8_matmul_d": matmul_case, "int8_matmul_fsdp": fsdp_case, "int8_grad": grad_case,
         "int8_checkpoint": checkpoint_case, "int8_fold": fold_case, "int8_attn": attn_case,
         "int8_w8a8": w8a8_case}


if __name__ == "__main__":
    sys.exit(main_cases(CASES, "int8"))
