#!/usr/bin/python3
"""grad.py - `G[...] = grad(L, W)` against NumPy's finite differences.

Each case is a .ein program that computes a scalar loss L and outputs it
with the gradients of L with respect to some params and inputs, and an
independent NumPy forward pass of the same loss.  The program runs in f64
on .npy inputs, unsharded and sharded (on threads, and with --mpi on MPI
ranks); every gradient must match NumPy's central differences
(L(w + h e_i) - L(w - h e_i)) / 2h to a relative error of 1e-6 of its
largest element, and L must match NumPy's loss.

  ffw: seed 000's FFW block (einsum, gelu, einsum) with a mean squared
       error; DP, FSDP and TP+FSDP shardings, so the backward einsums get
       the strategies' collectives (AllReduce / ReduceScatter of the
       weights' gradients, gathers of the activations' cotangents).
  attn: RMSNorm (rsqrt of a mean), a causally masked softmax attention (a
       max reduction, exp, a division, `where` with index values, a
       relabelled use K[B, S, E] of Xn[B, T, E]), silu, tanh, a log-softmax
       cross entropy, and a regulariser with abs, maximum, relu, sigmoid,
       sqrt and a min reduction; sequence-sharded.
  emb: an embedding lookup (a gather) whose table is also the output
       projection: the table's gradient is a scatter-add plus an einsum;
       replicated, with the ids batch-sharded, and vocab-parallel.
  ops: max and min reductions (over sharded and unsharded dims), minimum,
       exp, relu, sin, cos, subtraction, division by a reduced tensor.
  repeat: a residual block repeated over N = 3 layers (`repeat N`) with
       stacked params Win[N, D, F] and Wout[N, F, D], a param G read by
       every layer and before the block, and the input's gradient through
       all layers: the backward loop runs over the layers in reverse;
       replicated, DP, FSDP (the stacked params sharded on D) and TP.
  summed: a value whose dims are all summed away downstream (T1[I] enters
       T2[K] = T1[I] * C[K], a sum over I alone): its adjoint is a scalar
       broadcast over I, which was once taken as the adjoint itself, a
       rank-0 value standing for a rank-1 one (found by fuzz_plan); I is
       the first dim declared, as in the finding; replicated and sharded
       with A's and P's J on different axes.
  --remat=elementwise (ffw and repeat) and --remat=layer (repeat) compute
       forward values again in the backward pass instead of keeping them.

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: grad.py --einc PATH [--mpi --mpirun PATH]
(GRAD_ONLY=NAME in the environment runs only case NAME.)
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402

FFW = """\
mesh X = 2, Y = 2
dim B = 8, D = 4, F = 6
input In[{IN}] : f64
input Tgt[B, D] : f64
param Win[{WIN}] : f64
param Wout[{WOUT}] : f64
Tmp[B, F] = In[B, D] * Win[D, F]
Act[B, F] = gelu(Tmp[B, F])
Out[B, D] = Act[B, F] * Wout[F, D]
L[] = mean((Out[B, D] - Tgt[B, D]) * (Out[B, D] - Tgt[B, D]))
dWin[D, F] = grad(L, Win)
dWout[F, D] = grad(L, Wout)
dIn[B, D] = grad(L, In)
output L
output dWin
output dWout
output dIn
"""
FFW_SHARDINGS = {
    "replicated": {"IN": "B, D", "WIN": "D, F", "WOUT": "F, D"},
    "DP": {"IN": "B_XY, D", "WIN": "D, F", "WOUT": "F, D"},
    "FSDP": {"IN": "B_XY, D", "WIN": "D_XY, F", "WOUT": "F, D_XY"},
    "FSDP+TP": {"IN": "B_X, D_Y", "WIN": "D_X, F_Y", "WOUT": "F_Y, D_X"},
    "FSDP --remat=elementwise": {"IN": "B_XY, D", "WIN": "D_XY, F", "WOUT": "F, D_XY",
                                 "_flags": ["--remat=elementwise"]},
}

ATTN = """\
mesh X = 2
dim B = 2, T = 4, S = 4, E = 4, D = 6, V = 5
input Xs[{XS}] : f64
input Lab[B, T, V] : f64
param G[E] : f64
param Wq[E, D] : f64
param Wk[E, D] : f64
param Wv[E, D] : f64
param Wo[D, V] : f64
R[B, T] = rsqrt(mean(Xs[B, T, E] * Xs[B, T, E]) + 0.00001)
Xn[B, T, E] = Xs[B, T, E] * R[B, T] * G[E]
Q[B, T, D] = Xn[B, T, E] * Wq[E, D]
K[B, S, D] = Xn[B, S, E] * Wk[E, D]
V1[B, S, D] = Xn[B, S, E] * Wv[E, D]
Vv[B, S, D] = silu(V1[B, S, D])
Sc[B, T, S] = Q[B, T, D] * K[B, S, D] / 2
P[B, T, S] = softmax(where(S <= T, Sc[B, T, S], -inf), S)
O[B, T, D] = P[B, T, S] * Vv[B, S, D]
Lg[B, T, V] = tanh(O[B, T, D]) * Wo[D, V]
Lp[B, T, V] = log(softmax(Lg[B, T, V], V))
Z[B, T] = min(Lg[B, T, V]) + sqrt(1 + sigmoid(R[B, T]))
Rg[B, T] = maximum(Z[B, T], relu(Z[B, T] - 0.1)) / (1 + Z[B, T] * Z[B, T])
L[] = 0.05 * sum(abs(Wo[D, V])) - mean(Lab[B, T, V] * Lp[B, T, V]) + 0.01 * sum(Rg[B, T])
dWq[E, D] = grad(L, Wq)
dWk[E, D] = grad(L, Wk)
dWv[E, D] = grad(L, Wv)
dWo[D, V] = grad(L, Wo)
dG[E] = grad(L, G)
dXs[B, T, E] = grad(L, Xs)
output L
output dWq
output dWk
output dWv
output dWo
output dG
output dXs
"""
ATTN_SHARDINGS = {"replicated": {"XS": "B, T, E"}, "sequence-parallel": {"XS": "B, T_X, E"}}

# The rest of the vocabulary: max and min reductions taken directly (in
# softmax the max's gradient cancels), minimum, exp, negation, relu, a
# reduction over a sharded dim, and a division by a reduced tensor.
OPS = """\
mesh X = 2
dim I = 4, J = 6
input A[{A}] : f64
param W[I, J] : f64
param U[J] : f64
M[I] = max(A[I, J] * W[I, J], J)
N[J] = min(A[I, J] - W[I, J], I)
P[I, J] = exp(minimum(A[I, J], 0.3) * U[J]) - relu(W[I, J] * U[J]) + sin(W[I, J]) * cos(A[I, J])
Q[I] = sum(P[I, J] * P[I, J], J)
L[] = sum(M[I] * M[I]) - sum(N[J] * U[J]) + sum(P[I, J] / (1 + Q[I]))
dW[I, J] = grad(L, W)
dU[J] = grad(L, U)
dA[I, J] = grad(L, A)
output L
output dW
output dU
output dA
"""
# An embedding lookup whose table is also the output projection (tied
# weights): the table's gradient is the scatter-add of the lookup's
# adjoint (repeated ids add up) plus the einsum's.
EMB = """\
mesh X = 2, Y = 2
dim B = 4, T = 3, V = 8, D = 4, F = 4
input Tok[{TOK}] : i32
input Tgt[B, T, F] : f64
param Emb[{EMB}] : f64
param W[D, F] : f64
E[B, T, D] = Emb[Tok[B, T], D]
Z[B, T, F] = E[B, T, D] * W[D, F]
H[B, T, F] = tanh(Z[B, T, F])
Lg[B, T, V] = H[B, T, F] * Emb[V, F]
L[] = sum((H[B, T, F] - Tgt[B, T, F]) * (H[B, T, F] - Tgt[B, T, F])) + 0.1 * sum(Lg[B, T, V] * Lg[B, T, V])
dEmb[V, D] = grad(L, Emb)
dW[D, F] = grad(L, W)
output L
output dEmb
output dW
"""
EMB_SHARDINGS = {"replicated": {"TOK": "B, T", "EMB": "V, D"},
                 "batch-sharded ids": {"TOK": "B_XY, T", "EMB": "V, D"},
                 "vocab-parallel": {"TOK": "B_X, T", "EMB": "V_Y, D"}}

# A repeated block: the backward loop's layer gradients are stacked, G's
# per-layer gradients are summed over the layers, and dIn goes through
# every layer.
REPEAT = """\
mesh X = 2, Y = 2
dim B = 8, D = 4, F = 6, N = 3
input In[{IN}] : f64
input Tgt[B, D] : f64
param G[D] : f64
param Win[{WIN}] : f64
param Wout[{WOUT}] : f64
X[B, D] = In[B, D] * G[D]
repeat N {{
  Z[B, F] = X[B, D] * Win[D, F]
  H[B, F] = gelu(Z[B, F])
  Y[B, D] = H[B, F] * Wout[F, D]
  X[B, D] = X[B, D] + tanh(Y[B, D]) * G[D]
}}
L[] = mean((X[B, D] - Tgt[B, D]) * (X[B, D] - Tgt[B, D]))
dWin[N, D, F] = grad(L, Win)
dWout[N, F, D] = grad(L, Wout)
dG[D] = grad(L, G)
dIn[B, D] = grad(L, In)
output L
output dWin
output dWout
output dG
output dIn
"""
REPEAT_SHARDINGS = {
    "replicated": {"IN": "B, D", "WIN": "N, D, F", "WOUT": "N, F, D"},
    "DP": {"IN": "B_XY, D", "WIN": "N, D, F", "WOUT": "N, F, D"},
    "FSDP": {"IN": "B_XY, D", "WIN": "N, D_XY, F", "WOUT": "N, F, D_XY"},
    "FSDP+TP": {"IN": "B_X, D", "WIN": "N, D_X, F_Y", "WOUT": "N, F_Y, D_X"},
    "FSDP --remat=elementwise": {"IN": "B_XY, D", "WIN": "N, D_XY, F", "WOUT": "N, F, D_XY",
                                 "_flags": ["--remat=elementwise"]},
    "FSDP+TP --remat=layer": {"IN": "B_X, D", "WIN": "N, D_X, F_Y", "WOUT": "N, F_Y, D_X",
                              "_flags": ["--remat=layer"]},
}

# fuzz_plan's finding (tests/fuzz/corpus/plan/grad_summed_scalar_adjoint).
SUMMED = """\
mesh X = 2, Y = 2
dim I = 4, J = 6, K = 5
input A[{A}] : f64
param P[{P}] : f64
input C[K] : f64
T1[I] = A[J, I] * P[J]
T2[K] = T1[I] * C[K]
L[] = mean(T2[K] * T2[K])
dA[J, I] = grad(L, A)
dP[J] = grad(L, P)
dC[K] = grad(L, C)
output L
output dA
output dP
output dC
"""
SUMMED_SHARDINGS = {"replicated": {"A": "J, I", "P": "J"},
                    "J on X and Y": {"A": "J_X, I", "P": "J_Y"}}

OPS_SHARDINGS = {"replicated": {"A": "I, J"}, "J sharded": {"A": "I, J_X"},
                 "I sharded": {"A": "I_X, J"}}


def gelu(x):
    return x / (1 + np.exp(-2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ffw_loss(v):
    out = gelu(v["In"] @ v["Win"]) @ v["Wout"]
    return np.mean((out - v["Tgt"]) ** 2)


def attn_loss(v):
    x = v["Xs"]
    r = 1 / np.sqrt(np.mean(x * x, axis=-1) + 1e-5)
    xn = x * r[..., None] * v["G"]
    q, k = xn @ v["Wq"], xn @ v["Wk"]
    vv = xn @ v["Wv"]
    vv = vv * sigmoid(vv)
    sc = np.einsum("btd,bsd->bts", q, k) / 2
    t = x.shape[1]
    sc = np.where(np.tril(np.ones((t, t), dtype=bool)), sc, -np.inf)
    o = np.einsum("bts,bsd->btd", softmax(sc, -1), vv)
    lg = np.tanh(o) @ v["Wo"]
    lp = np.log(softmax(lg, -1))
    z = lg.min(axis=-1) + np.sqrt(1 + sigmoid(r))
    rg = np.maximum(z, np.maximum(z - 0.1, 0)) / (1 + z * z)
    return 0.05 * np.abs(v["Wo"]).sum() - np.mean(v["Lab"] * lp) + 0.01 * rg.sum()


def ops_loss(v):
    a, w, u = v["A"], v["W"], v["U"]
    m = (a * w).max(axis=1)
    n = (a - w).min(axis=0)
    p = np.exp(np.minimum(a, 0.3) * u) - np.maximum(w * u, 0) + np.sin(w) * np.cos(a)
    q = (p * p).sum(axis=1)
    return (m * m).sum() - (n * u).sum() + (p / (1 + q[:, None])).sum()


def emb_loss(v):
    h = np.tanh(v["Emb"][v["Tok"]] @ v["W"])
    lg = h @ v["Emb"].T
    return ((h - v["Tgt"]) ** 2).sum() + 0.1 * (lg ** 2).sum()


def repeat_loss(v):
    x = v["In"] * v["G"]
    for l in range(v["Win"].shape[0]):
        h = gelu(x @ v["Win"][l])
        x = x + np.tanh(h @ v["Wout"][l]) * v["G"]
    return np.mean((x - v["Tgt"]) ** 2)


def summed_loss(v):
    t2 = (v["P"] @ v["A"]).sum() * v["C"]
    return np.mean(t2 ** 2)


def numeric_grad(loss, v, name, h=1e-6):
    g = np.zeros_like(v[name])
    for i in np.ndindex(g.shape):
        w = dict(v)
        w[name] = v[name].copy()
        w[name][i] += h
        up = loss(w)
        w[name][i] -= 2 * h
        g[i] = (up - loss(w)) / (2 * h)
    return g


CASES = [
    ("ffw", FFW, FFW_SHARDINGS, ffw_loss,
     {"In": (8, 4), "Tgt": (8, 4), "Win": (4, 6), "Wout": (6, 4)}, ["Win", "Wout", "In"]),
    ("attn", ATTN, ATTN_SHARDINGS, attn_loss,
     {"Xs": (2, 4, 4), "Lab": (2, 4, 5), "G": (4,), "Wq": (4, 6), "Wk": (4, 6), "Wv": (4, 6),
      "Wo": (6, 5)}, ["Wq", "Wk", "Wv", "Wo", "G", "Xs"]),
    ("ops", OPS, OPS_SHARDINGS, ops_loss, {"A": (4, 6), "W": (4, 6), "U": (6,)},
     ["W", "U", "A"]),
    ("emb", EMB, EMB_SHARDINGS, emb_loss,
     {"Tok": (4, 3), "Tgt": (4, 3, 4), "Emb": (8, 4), "W": (4, 4)}, ["Emb", "W"]),
    ("repeat", REPEAT, REPEAT_SHARDINGS, repeat_loss,
     {"In": (8, 4), "Tgt": (8, 4), "G": (4,), "Win": (3, 4, 6), "Wout": (3, 6, 4)},
     ["Win", "Wout", "G", "In"]),
    ("summed", SUMMED, SUMMED_SHARDINGS, summed_loss, {"A": (6, 4), "P": (6,), "C": (5,)},
     ["A", "P", "C"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    passed = failed = 0
    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory(prefix="einc-grad-") as work:
        for name, src, shardings, loss, shapes, wrt in CASES:
            if os.environ.get("GRAD_ONLY") and name != os.environ["GRAD_ONLY"]:
                continue
            vals = {k: rng.standard_normal(s) for k, s in shapes.items()}
            if "Lab" in vals:
                vals["Lab"] = softmax(3 * vals["Lab"], -1)  # target distributions
            if "Tok" in vals:  # ids, some repeated, so scatter-adds accumulate
                vals["Tok"] = rng.integers(0, 8, vals["Tok"].shape).astype(np.int32)
            want_loss = loss(vals)
            want = {w: numeric_grad(loss, vals, w) for w in wrt}
            for k, v in vals.items():
                np.save(os.path.join(work, k + ".npy"), v)
            for sname, subs in shardings.items():
                for rt in ["threads"] + (["mpi"] if a.mpi else []):
                    if rt == "mpi" and sname == "replicated":
                        continue
                    title = "%s %s (%s)" % (name, sname, rt)
                    ein = os.path.join(work, "%s.ein" % name)
                    with open(ein, "w") as f:
                        f.write(src.format(**subs))
                    exe = os.path.join(work, name + "_" + rt)
                    cmd = [a.einc, ein, "-o", exe, "--runtime=" + rt] + subs.get("_flags", [])
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    if p.returncode != 0:
                        print("FAIL %s: einc: %s" % (title, p.stderr.strip()[-2000:]))
                        failed += 1
                        continue
                    nranks = 4 if "Y" in src.split("\n")[0] else 2
                    run = (mpi_launch(a.mpirun, nranks) if rt == "mpi" else []) + [exe]
                    for k in vals:
                        run += ["--input", "%s=%s" % (k, os.path.join(work, k + ".npy"))]
                    outs = ["L"] + ["d" + w for w in wrt]
                    for o in outs:
                        run += ["--output", "%s=%s" % (o, os.path.join(work, "out_%s.npy" % o))]
                    p = subprocess.run(run, capture_output=True, text=True, timeout=300)
                    if p.returncode != 0:
                        print("FAIL %s: run: %s" % (title, p.stderr.strip()[-2000:]))
                        failed += 1
                        continue
                    problems = []
                    got_loss = float(np.load(os.path.join(work, "out_L.npy")))
                    if abs(got_loss - want_loss) > 1e-10 * max(1.0, abs(want_loss)):
                        problems.append("L = %.12g, NumPy %.12g" % (got_loss, want_loss))
                    worst = 0.0
                    for w in wrt:
                        got = np.load(os.path.join(work, "out_d%s.npy" % w))
                        err = np.max(np.abs(got - want[w])) / max(np.max(np.abs(want[w])), 1e-12)
                        worst = max(worst, err)
                        if got.shape != want[w].shape or not err < 1e-6:
                            problems.append("d%s: relative error %.3g" % (w, err))
                    if problems:
                        print("FAIL %s: %s" % (title, "; ".join(problems)))
                        failed += 1
                    else:
                        print("ok   %s: %d gradients, worst relative error %.2g vs finite "
                              "differences" % (title, len(wrt), worst))
                        passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
