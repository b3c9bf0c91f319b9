#!/usr/bin/python3
"""generate_int8.py - greedy generation with int8 weights and an int8 KV
cache (seed 002's int8 serving; docs/generation.md, "An int8 KV cache")
against a NumPy decoder that quantizes the same way.

The two-layer decoder of generate.py, with every matmul weight stored as
i8 with one f32 scale per output channel (weight-only int8: `X[B, D] *
f32(Wq[D, K, H]) * Sq[K, H]`) and the KV cache as i8 with static
per-head-channel scales: keys are written as `i8(Kn[B, K, H] * InvKs[K,
H])` and read as `f32(KC[B, S, K, H]) * Ks[K, H]`.  Compiled for one
device and for a 2x2 mesh (heads over Y, the MLP and the vocab over X),
run on the threads runtime (and with --mpi on 4 MPI ranks): --generate's
greedy tokens must equal NumPy's, which rounds to nearest even and
saturates exactly as i8(x) does, and differ from those of the f32 model
(so the quantization is in the numbers, not beside them).
The last line is `N passed, N failed`.

Usage: generate_int8.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, printed_tokens, runtime_args  # noqa: E402
from e2e_common import run_merged as run  # noqa: E402

DIMS = dict(B=2, S=12, D=16, K=4, H=8, V=32, L=2, F=32)
# name: (dims, sharded dims, dims of its per-output-channel scale)
WEIGHTS = {"Wq": ("L, D, K, H", "L, D, K_Y, H", "L, K_Y, H"),
           "Wk": ("L, D, K, H", "L, D, K_Y, H", "L, K_Y, H"),
           "Wv": ("L, D, K, H", "L, D, K_Y, H", "L, K_Y, H"),
           "Wo": ("L, K, H, D", "L, K_Y, H, D", "L, D"),
           "W1": ("L, D, F", "L, D, F_X", "L, F_X"),
           "W2": ("L, F, D", "L, F_X, D", "L, D"),
           "Wlm": ("D, V", "D, V_X", "V_X")}
# the contracted axes of each weight (the rest are its output channels)
CONTRACTED = {"Wq": (1,), "Wk": (1,), "Wv": (1,), "Wo": (1, 2), "W1": (1,), "W2": (1,),
              "Wlm": (0,)}


def source(mesh):
    lines = ["mesh X = %d, Y = %d" % mesh,
             "dim " + ", ".join("%s = %d" % kv for kv in DIMS.items()),
             "input Tok[B] : i32", "input Pos[] : i32", "param Emb[V, D] : f32"]
    for n, (_, sh, sc) in WEIGHTS.items():
        lines += ["param %s[%s] : i8" % (n, sh), "param S%s[%s] : f32" % (n[1:], sc)]
    for n in ("Ks", "InvKs", "Vs", "InvVs"):
        lines.append("param %s[L, K_Y, H] : f32" % n)
    lines += ["state KC[L, B, S, K_Y, H] : i8", "state VC[L, B, S, K_Y, H] : i8",
              "X[B, D] = Emb[Tok[B], D]",
              "repeat L {",
              "  Q[B, K, H] = X[B, D] * f32(Wq[D, K, H]) * Sq[K, H]",
              "  Kn[B, K, H] = X[B, D] * f32(Wk[D, K, H]) * Sk[K, H]",
              "  Vn[B, K, H] = X[B, D] * f32(Wv[D, K, H]) * Sv[K, H]",
              "  KC[B, Pos, K, H] = i8(Kn[B, K, H] * InvKs[K, H])",
              "  VC[B, Pos, K, H] = i8(Vn[B, K, H] * InvVs[K, H])",
              "  Sc[B, K, S] = Q[B, K, H] * f32(KC[B, S, K, H]) * Ks[K, H] / 2.8284271247461903",
              "  P[B, K, S] = softmax(where(S <= Pos[], Sc[B, K, S], -inf), S)",
              "  A[B, K, H] = P[B, K, S] * f32(VC[B, S, K, H]) * Vs[K, H]",
              "  Y1[B, D] = X[B, D] + A[B, K, H] * f32(Wo[K, H, D]) * So[D]",
              "  U[B, F] = Y1[B, D] * f32(W1[D, F]) * S1[F]",
              "  X[B, D] = Y1[B, D] + relu(U[B, F]) * f32(W2[F, D]) * S2[D]",
              "}",
              "Logits[B, V] = X[B, D] * f32(Wlm[D, V]) * Slm[V]",
              "output Logits[B, V]",
              "Next[B] = argmax(Logits[B, V], V)", "output Next[B]"]
    return "\n".join(lines) + "\n"


def quantize(x):
    """i8(x) on f32 values: nearest even, saturated to [-128, 127], NaN to 0."""
    x = np.nan_to_num(np.asarray(x, dtype=np.float32), nan=0.0)
    return np.clip(np.rint(x), -128, 127).astype(np.int8)


def decode(w, prompt, n, int8=True):
    """NumPy's greedy decoder: the tokens after the prompt.  With int8, the
    weights are w[name + 'q'] * w['S' + ...] and the cache holds
    quantize(k * InvKs), read back times Ks; else the f32 weights and cache."""
    B, T0 = prompt.shape
    S, L = DIMS["S"], DIMS["L"]

    def wt(name, l=None):
        if not int8:
            v = w[name + "f"]
            return v if l is None else v[l]
        q, s = w[name].astype(np.float64), w["S" + name[1:]]
        return (q, s) if l is None else (q[l], s[l])

    kc = np.zeros((L, B, S, DIMS["K"], DIMS["H"]))
    vc = np.zeros_like(kc)
    ids = [list(r) for r in prompt]
    for s in range(T0 + n - 1):
        x = w["Emb"][[ids[b][s] for b in range(B)]].astype(np.float64)
        for l in range(L):
            if int8:
                (wq, sq), (wk, sk), (wv, sv) = wt("Wq", l), wt("Wk", l), wt("Wv", l)
                q = np.einsum("bd,dkh->bkh", x, wq) * sq
                kn = (np.einsum("bd,dkh->bkh", x, wk) * sk).astype(np.float32)
                vn = (np.einsum("bd,dkh->bkh", x, wv) * sv).astype(np.float32)
                kc[l, :, s] = quantize(kn * w["InvKs"][l])
                vc[l, :, s] = quantize(vn * w["InvVs"][l])
                keys, vals = kc[l] * w["Ks"][l], vc[l] * w["Vs"][l]
            else:
                q = np.einsum("bd,dkh->bkh", x, wt("Wq", l))
                kc[l, :, s] = np.einsum("bd,dkh->bkh", x, wt("Wk", l))
                vc[l, :, s] = np.einsum("bd,dkh->bkh", x, wt("Wv", l))
                keys, vals = kc[l], vc[l]
            sc = np.einsum("bkh,bskh->bks", q, keys) / np.sqrt(8.0)
            sc[:, :, s + 1:] = -np.inf
            p = np.exp(sc - sc.max(axis=2, keepdims=True))
            p /= p.sum(axis=2, keepdims=True)
            a = np.einsum("bks,bskh->bkh", p, vals)
            if int8:
                (wo, so), (w1, s1), (w2, s2) = wt("Wo", l), wt("W1", l), wt("W2", l)
                y1 = x + np.einsum("bkh,khd->bd", a, wo) * so
                x = y1 + (np.maximum((y1 @ w1) * s1, 0) @ w2) * s2
            else:
                y1 = x + np.einsum("bkh,khd->bd", a, wt("Wo", l))
                x = y1 + np.maximum(y1 @ wt("W1", l), 0) @ wt("W2", l)
        if s + 1 >= T0:
            if int8:
                wl, sl = wt("Wlm")
                logits = (x @ wl) * sl
            else:
                logits = x @ wt("Wlm")
            for b in range(B):
                ids[b].append(int(np.argmax(logits[b])))
    return np.array([r[T0:] for r in ids])


def weights(rng, work):
    """Random f32 weights quantized to i8 with per-output-channel scales,
    and static cache scales, saved in `work`: (arrays, --input flags).
    w[name + 'f'] keeps each f32 original for the f32 model."""
    w, args = {}, []
    L, K, H, D = DIMS["L"], DIMS["K"], DIMS["H"], DIMS["D"]
    w["Emb"] = rng.standard_normal((DIMS["V"], D)).astype(np.float32)
    for n, (shape, _, _) in WEIGHTS.items():
        dims = [DIMS[d.strip()] for d in shape.split(",")]
        f = rng.standard_normal(dims) / np.sqrt(dims[-2] if len(dims) > 1 else 1)
        f = (f * (0.3 if n in ("Wo", "W2") else 1)).astype(np.float32)
        axes = CONTRACTED[n]
        s = (np.abs(f).max(axis=axes, keepdims=True) / 127).astype(np.float32)
        w[n] = quantize(f / s)
        w["S" + n[1:]] = np.squeeze(s, axis=axes)
        w[n + "f"] = f.astype(np.float64)
    # Keys and values are about unit normal: 4 sigma maps to 127, so a few
    # saturate; each head channel has its own static scale.
    for c in ("K", "V"):
        s = (rng.uniform(3.0, 4.0, (L, K, H)) / 127).astype(np.float32)
        w[c + "s"], w["Inv" + c + "s"] = s, (1 / s).astype(np.float32)
    for n, v in w.items():
        if n.endswith("f"):
            continue
        path = os.path.join(work, n + ".npy")
        np.save(path, v)
        args += ["--input", "%s=%s" % (n, path)]
    return w, args


def main():
    a = runtime_args(__doc__)
    rng = np.random.default_rng(21)
    tally = Tally()
    B, V, N, T0 = DIMS["B"], DIMS["V"], 8, 3
    with tempfile.TemporaryDirectory(prefix="einc-gen8-") as work:
        w, args = weights(rng, work)
        prompt = rng.integers(0, V, size=(B, T0), dtype=np.int32)
        ppath = os.path.join(work, "prompt.npy")
        np.save(ppath, prompt)
        want = decode(w, prompt, N)
        f32 = decode(w, prompt, N, int8=False)
        tally.result(not np.array_equal(want, f32), "the int8 model's tokens differ from the f32 "
                     "model's: %s vs %s" % (want.tolist(), f32.tolist()))
        for mesh in ((1, 1), (2, 2)):
            tag = "mesh%dx%d" % mesh
            src = os.path.join(work, tag + ".ein")
            with open(src, "w") as f:
                f.write(source(mesh))
            for rt, exe, launch in builds(a, src, os.path.join(work, tag), mesh[0] * mesh[1], tally):
                rc, out = run(launch + [exe, "--prompt-ids", ppath, "--generate", str(N)] + args)
                got = printed_tokens(out, B) if rc == 0 else None
                tally.result(rc == 0 and got == want.tolist(),
                             "int8 weights and KV cache, greedy, %s (%s): %s" % (tag, rt, got),
                             "want %s\n%s" % (want.tolist(), out))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
