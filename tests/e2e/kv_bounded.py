#!/usr/bin/python3
"""kv_bounded.py - attention that stops at each row's position (a decode
step's causal mask over a KV cache, docs/codegen.md "Contractions bounded
by a position") against NumPy, for rows at different positions.

The program is one decode step of masked attention over K and V caches
(`state`s, loaded from .npy) with heads and a cache long enough that both
contractions run as GEMMs (H = 16 and S = 40, past --einsum-unroll's 8):
`Sc = Q * KC`, `P = softmax(where(S <= At[B], Sc, -inf), S)`, `O = P * VC`.
The rows sit at positions 0, 7, 22 and 39 (the first, a middle, the
last), or all at 22 with a scalar position `At[]` (the program static
batching serves).  Up to three checks per build:
- finite caches: the output and the new caches equal NumPy's;
- NaN in every cache entry past a row's position (a slot's stale tail):
  the output is still NumPy's over each row's prefix, all finite.  Only
  skipping the tail gives that (computed and then masked, 0 * NaN is
  NaN), so this fails if the compiler stops bounding the contractions;
- a program whose mask fills with 0 instead of -inf (`where(S <= At[B],
  Sc, 0)`: the softmax then weighs the tail) with finite caches: NumPy's
  result over the whole cache, so it fails if the compiler bounds a
  contraction the mask does not allow.
On one device and on a 2 x 2 mesh (rows over X, heads over Y), threads
(and with --mpi MPI ranks).  The last line is `N passed, N failed`.

Usage: kv_bounded.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, case_builds, rel_err, runtime_args  # noqa: E402
from e2e_common import run_merged as run  # noqa: E402

DIMS = dict(B=4, S=40, D=32, N=4, H=16)
AT = np.array([0, 7, 22, 39], dtype=np.int32)

# (name, mesh, rows, heads, masked-out value, position declaration)
CASES = [
    ("one_device", "X = 1", "B", "N", "-inf", "At[B]"),
    ("rows_heads", "X = 2, Y = 2", "B_X", "N_Y", "-inf", "At[B_X]"),
    ("zero_fill", "X = 2, Y = 2", "B_X", "N_Y", "0", "At[B_X]"),
    ("scalar_position", "X = 2, Y = 2", "B_X", "N_Y", "-inf", "At[]"),
]
SCALAR_AT = 22  # every row's position with `At[]` (static batching's program)


def positions(case):
    """Each row's position in `case`: AT, or SCALAR_AT for every row."""
    return np.full(DIMS["B"], SCALAR_AT, dtype=np.int32) if case[5] == "At[]" else AT


def source(case):
    _, mesh, b, n, fill, at = case
    return "\n".join([
        "mesh " + mesh,
        "dim " + ", ".join("%s = %d" % kv for kv in DIMS.items()),
        "input X[B, D] : f32",
        "input %s : i32" % at,
        "param Wq[D, %s, H] : f32" % n,
        "param Wk[D, %s, H] : f32" % n,
        "param Wv[D, %s, H] : f32" % n,
        "state KC[%s, S, %s, H] : f32" % (b, n),
        "state VC[%s, S, %s, H] : f32" % (b, n),
        "Q[B, N, H] = X[B, D] * Wq[D, N, H]",
        "KC[B, %s, N, H] = X[B, D] * Wk[D, N, H]" % at.replace("_X", ""),
        "VC[B, %s, N, H] = X[B, D] * Wv[D, N, H]" % at.replace("_X", ""),
        "Sc[B, N, S] = Q[B, N, H] * KC[B, S, N, H] * 0.25",
        "P[B, N, S] = softmax(where(S <= %s, Sc[B, N, S], %s), S)" % (at.replace("_X", ""), fill),
        "O[B, N, H] = P[B, N, S] * VC[B, S, N, H]",
        "output O[B, N, H]",
    ]) + "\n"


def reference(x, w, kc, vc, fill, at):
    """O in float64 after writing each row's key and value at its position at[b]."""
    rows = np.arange(DIMS["B"])
    kc, vc = kc.copy(), vc.copy()
    kc[rows, at] = np.einsum("bd,dnh->bnh", x, w["Wk"])
    vc[rows, at] = np.einsum("bd,dnh->bnh", x, w["Wv"])
    q = np.einsum("bd,dnh->bnh", x, w["Wq"])
    s = np.arange(DIMS["S"])
    out = np.zeros((DIMS["B"], DIMS["N"], DIMS["H"]))
    for b in rows:
        # the row's prefix alone when the tail is masked to -inf (NaN-safe),
        # the whole cache when the mask fills 0
        keep = s <= at[b] if fill == "-inf" else s >= 0
        sc = np.einsum("nh,snh->ns", q[b], kc[b, keep]) * 0.25
        if fill != "-inf":
            sc = np.where(s[None, :] <= at[b], sc, 0.0)
        p = np.exp(sc - sc.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out[b] = np.einsum("ns,snh->nh", p, vc[b, keep])
    return out, kc, vc


def check(case, exe, launch, work, rng, result):
    name, fill = case[0], case[4]
    B, S, D, N, H = (DIMS[k] for k in "BSDNH")
    x = rng.standard_normal((B, D))
    w = {k: rng.standard_normal((D, N, H)) / 4 for k in ("Wq", "Wk", "Wv")}
    files = {k: os.path.join(work, "%s_%s.npy" % (name, k))
             for k in ("X", "At", "KC", "VC", "O", "KCo", "VCo", *w)}
    for k, v in list(w.items()) + [("X", x)]:
        np.save(files[k], v.astype(np.float32))
    at = positions(case)
    np.save(files["At"], np.int32(SCALAR_AT) if case[5] == "At[]" else at)
    tails = [("finite caches", False)] + ([("NaN past each row's position", True)]
                                         if fill == "-inf" else [])
    for what, nan_tail in tails:
        kc, vc = (rng.standard_normal((B, S, N, H)).astype(np.float32) for _ in range(2))
        if nan_tail:
            for b in range(B):
                kc[b, at[b] + 1:] = np.nan
                vc[b, at[b] + 1:] = np.nan
        np.save(files["KC"], kc)
        np.save(files["VC"], vc)
        cmd = launch + [exe] + sum((["--input", "%s=%s" % (k, files[k])]
                                    for k in ("X", "At", "KC", "VC", *w)), [])
        cmd += ["--output", "O=" + files["O"], "--output", "KC=" + files["KCo"],
                "--output", "VC=" + files["VCo"]]
        rc, msg = run(cmd)
        if rc != 0:
            result(False, "%s: %s: exit %d" % (name, what, rc), msg)
            continue
        want, wkc, wvc = reference(x, w, kc.astype(np.float64), vc.astype(np.float64), fill, at)
        got = np.load(files["O"]).astype(np.float64)
        e = rel_err(got, want) if np.all(np.isfinite(got)) else float("inf")
        ek = max(rel_err(np.nan_to_num(np.load(files[k]).astype(np.float64)), np.nan_to_num(r))
                 for k, r in (("KCo", wkc), ("VCo", wvc)))
        result(e < 1e-5 and ek < 1e-6, "%s: %s, rows at %s: max rel error %.2g (caches %.2g)"
               % (name, what, list(at), e, ek), "expected < 1e-5 and < 1e-6")


def main():
    a = runtime_args(__doc__)
    rng = np.random.default_rng(27)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-kvbounded-") as work:
        for case, exe, launch, result in case_builds(
                a, work, CASES, source, lambda c: 1 if c[1] == "X = 1" else 4, tally):
            check(case, exe, launch, work, rng, result)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
