#!/usr/bin/python3
"""llama_layer.py - examples/llama2_layer.ein against an independent NumPy
LLaMA-2 decoder layer.

The NumPy side is written the way the model is usually written, not the way
the .ein file is: the head dim as one axis of 128 (here 2*G) in
[x_0..x_{G-1}, x_G..x_{2G-1}] order, rotary embeddings with rotate_half and
cos/sin tables of the standard frequencies 10000^(-2g/H), RMSNorm with eps
1e-5, the causal mask as -inf above the diagonal, the stable softmax, and
SwiGLU (silu(x Wg) * (x Wu)) Wd.  The example is compiled at small dims
(-D, as its `# check-with:` line) on its 2x2 mesh (DP on X, Megatron TP on
Y), run on .npy inputs on the threads runtime (and on MPI with --mpi), and
its output compared with NumPy in float64.  The last line is
`N passed, N failed`.

Usage: llama_layer.py --einc PATH --example PATH [--mpi --mpirun PATH]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402

# G stays 64 (H = 128): the file scales the scores by 1/sqrt(128).
DIMS = {"B": 2, "T": 32, "S": 32, "D": 128, "N": 4, "G": 64, "F": 256}


def reference(x, cos, sin, w):
    """A LLaMA-2 decoder layer in NumPy (float64)."""
    b, t, d = x.shape
    n, hd = DIMS["N"], 2 * DIMS["G"]

    def rmsnorm(v, g):
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + 1e-5) * g

    def heads(v, wname):  # [B, T, D] @ [D, N*hd] -> [B, T, N, hd]
        return (v @ w[wname].reshape(d, n * hd)).reshape(b, t, n, hd)

    def rotate_half(v):
        return np.concatenate([-v[..., hd // 2:], v[..., :hd // 2]], axis=-1)

    def rope(v):
        c = np.concatenate([cos, cos], axis=-1)[None, :, None, :]
        s = np.concatenate([sin, sin], axis=-1)[None, :, None, :]
        return v * c + rotate_half(v) * s

    xn = rmsnorm(x, w["G1"])
    q, k, v = rope(heads(xn, "Wq")), rope(heads(xn, "Wk")), heads(xn, "Wv")
    scores = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(hd)
    scores = np.where(np.tril(np.ones((t, t), dtype=bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = np.einsum("bnts,bsnh->btnh", p, v).reshape(b, t, n * hd)
    y1 = x + o @ w["Wo"].reshape(n * hd, d)
    yn = rmsnorm(y1, w["G2"])
    g = yn @ w["Wg"]
    return y1 + (g / (1 + np.exp(-g)) * (yn @ w["Wu"])) @ w["Wd"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--example", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    B, T, D, N, G, F = (DIMS[k] for k in "BTDNGF")
    inv = 10000.0 ** (-np.arange(G) * 2.0 / (2 * G))
    ang = np.arange(T)[:, None] * inv[None, :]
    ins = {"X": rng.standard_normal((B, T, D)), "Cos": np.cos(ang), "Sin": np.sin(ang)}
    w = {"G1": 1 + 0.1 * rng.standard_normal(D), "G2": 1 + 0.1 * rng.standard_normal(D)}
    for name, shape, fan_in in (("Wq", (D, N, 2, G), D), ("Wk", (D, N, 2, G), D),
                                ("Wv", (D, N, 2, G), D), ("Wo", (N, 2, G, D), N * 2 * G),
                                ("Wg", (D, F), D), ("Wu", (D, F), D), ("Wd", (F, D), F)):
        w[name] = rng.standard_normal(shape) / np.sqrt(fan_in)
    ins.update(w)
    want = reference(ins["X"], ins["Cos"], ins["Sin"], w)
    passed = failed = 0
    runtimes = ["threads"] + (["mpi"] if a.mpi else [])
    with tempfile.TemporaryDirectory(prefix="einc-llama-") as work:
        for rt in runtimes:
            exe = os.path.join(work, "layer_" + rt)
            cmd = [a.einc, a.example, "-o", exe, "--runtime=" + rt]
            for k, v in DIMS.items():
                cmd += ["-D", "%s=%d" % (k, v)]
            launch = mpi_launch(a.mpirun, 4) if rt == "mpi" else []
            run = launch + [exe, "--output", "Out=" + os.path.join(work, "out.npy")]
            for k, v in ins.items():
                path = os.path.join(work, k + ".npy")
                np.save(path, v.astype(np.float32))
                run += ["--input", "%s=%s" % (k, path)]
            ok = True
            for c in (cmd, run):
                p = subprocess.run(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=300)
                if p.returncode != 0:
                    print("FAIL %s: %s exited %d\n%s" % (rt, " ".join(c), p.returncode, p.stdout))
                    ok = False
                    break
            if ok:
                got = np.load(os.path.join(work, "out.npy")).astype(np.float64)
                err = np.max(np.abs(got - want)) / np.max(np.abs(want))
                ok = got.shape == want.shape and err < 1e-4
                print("%s %s: max |error| / max |ref| = %.3g (tol 1e-4), shape %s" %
                      ("ok  " if ok else "FAIL", rt, err, got.shape))
            passed, failed = passed + ok, failed + (not ok)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
