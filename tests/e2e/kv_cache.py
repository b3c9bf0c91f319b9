#!/usr/bin/python3
"""kv_cache.py - program state written at a run-time position (a KV cache)
against NumPy, over several decode steps, and bad positions as errors.

Each case compiles a decode step of one-head-group attention whose K and V
caches are `state`s: the new token's keys and values are written at
position `Pos` (an i32 scalar input) with `KC[B, Pos, K, H] = Kn[B, K, H]`,
then the query attends to the filled prefix (`where(S <= Pos[], ...)`).
The step runs T times on the threads runtime (and with --mpi on 4 MPI
ranks), Pos = 0, 1, ..., T-1, each run reading the caches the previous one
wrote (`--input KC=... --output KC=...`); its output and both caches are
compared with NumPy's after every step.  The cases shard the caches over
the batch and the KV heads, over the cache length S (so positions land on
every device's block in turn and cross the blocks' boundaries), over two
axes of S, and stacked on the layers of a `repeat L` block.  Then a
position past the cache (S) and a negative one must end the run with exit
1 and a message naming the state, the position and its value.
The last line is `N passed, N failed`.

Usage: kv_cache.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, rel_err, runtime_args  # noqa: E402
from e2e_common import run_merged as run  # noqa: E402

DIMS = dict(B=2, S=8, D=16, K=4, H=8, L=2)

# (name, cache sharding without L, weight sharding of K, layers)
CASES = [
    ("batch_heads", "B_X, S, K_Y, H", "K_Y", 0),
    ("length_sharded", "B, S_X, K_Y, H", "K_Y", 0),
    ("length_two_axes", "B, S_XY, K, H", "K", 0),
    ("layers", "B_X, S, K_Y, H", "K_Y", 2),
]


def source(case):
    name, cache, wk, layers = case
    dims = ", ".join("%s = %d" % kv for kv in DIMS.items())
    stack = "L, " if layers else ""
    ind = "  " if layers else ""
    lines = ["mesh X = 2, Y = 2", "dim " + dims, "input X0[B, D] : f32", "input Pos[] : i32"]
    for w in ("Wq", "Wk", "Wv"):
        lines.append("param %s[%sD, %s, H] : f32" % (w, stack, wk))
    lines.append("param Wo[%s%s, H, D] : f32" % (stack, wk))
    for c in ("KC", "VC"):
        lines.append("state %s[%s%s] : f32" % (c, stack, cache))
    lines.append("X[B, D] = X0[B, D] * 1")
    if layers:
        lines.append("repeat L {")
    body = [
        "Q[B, K, H] = X[B, D] * Wq[D, K, H]",
        "Kn[B, K, H] = X[B, D] * Wk[D, K, H]",
        "Vn[B, K, H] = X[B, D] * Wv[D, K, H]",
        "KC[B, Pos, K, H] = Kn[B, K, H]",
        "VC[B, Pos[], K, H] = Vn[B, K, H] * 1",  # a computed slice; the position written as Pos[]
        "Sc[B, K, S] = Q[B, K, H] * KC[B, S, K, H] / 4",
        "P[B, K, S] = softmax(where(S <= Pos[], Sc[B, K, S], -inf), S)",
        "O[B, K, H] = P[B, K, S] * VC[B, S, K, H]",
        # the residual stream: carried by the loop, else a new tensor
        "%s[B, D] = X[B, D] + O[B, K, H] * Wo[K, H, D]" % ("X" if layers else "Y"),
    ]
    lines += [ind + b for b in body]
    if layers:
        lines.append("}")
    lines.append("output %s[B, D]" % ("X" if layers else "Y"))
    return "\n".join(lines) + "\n"


def reference(x0, pos, w, kc, vc, layers):
    """One step: updates kc, vc (arrays [L, B, S, K, H]) in place; returns X."""
    x = x0.astype(np.float64)
    for l in range(max(layers, 1)):
        q = np.einsum("bd,dkh->bkh", x, w["Wq"][l])
        kc[l, :, pos] = np.einsum("bd,dkh->bkh", x, w["Wk"][l])
        vc[l, :, pos] = np.einsum("bd,dkh->bkh", x, w["Wv"][l])
        sc = np.einsum("bkh,bskh->bks", q, kc[l]) / 4
        sc[:, :, pos + 1:] = -np.inf
        p = np.exp(sc - sc.max(axis=2, keepdims=True))
        p /= p.sum(axis=2, keepdims=True)
        o = np.einsum("bks,bskh->bkh", p, vc[l])
        x = x + np.einsum("bkh,khd->bd", o, w["Wo"][l])
    return x


def main():
    a = runtime_args(__doc__)
    rng = np.random.default_rng(5)
    tally = Tally()
    result = tally.result
    B, S, D, K, H = (DIMS[k] for k in "BSDKH")

    with tempfile.TemporaryDirectory(prefix="einc-kv-") as work:
        for case in CASES:
            name, layers = case[0], case[3]
            nl = max(layers, 1)
            src = os.path.join(work, name + ".ein")
            with open(src, "w") as f:
                f.write(source(case))
            w = {n: rng.standard_normal((nl, D, K, H)) / 4 for n in ("Wq", "Wk", "Wv")}
            w["Wo"] = rng.standard_normal((nl, K, H, D)) / 4
            paths = {}
            for n, v in w.items():
                paths[n] = os.path.join(work, n + ".npy")
                np.save(paths[n], (v if layers else v[0]).astype(np.float32))
            for rt, exe, launch in builds(a, src, os.path.join(work, name), 4, tally):
                kc = np.zeros((nl, B, S, K, H))
                vc = np.zeros((nl, B, S, K, H))
                cache = {c: os.path.join(work, "%s_%s.npy" % (name, c)) for c in ("KC", "VC")}
                ppath, xpath, opath = (os.path.join(work, f) for f in ("pos.npy", "x0.npy", "x.npy"))
                worst, ok = 0.0, True
                for t in range(S):
                    x0 = rng.standard_normal((B, D)).astype(np.float32)
                    np.save(xpath, x0)
                    np.save(ppath, np.array(t, dtype=np.int32))
                    cmd = launch + [exe, "--input", "X0=" + xpath, "--input", "Pos=" + ppath,
                                    "--output", "%s=%s" % ("X" if layers else "Y", opath)]
                    cmd += sum((["--input", "%s=%s" % (n, p)] for n, p in paths.items()), [])
                    cmd += sum((["--input", "%s=%s" % (c, p)] for c, p in cache.items() if t > 0), [])
                    cmd += sum((["--output", "%s=%s" % (c, p)] for c, p in cache.items()), [])
                    rc, msg = run(cmd)
                    if rc != 0:
                        result(False, "%s (%s): step %d" % (name, rt, t), msg)
                        ok = False
                        break
                    want = reference(x0, t, w, kc, vc, layers)
                    got = {"X": np.load(opath), "KC": np.load(cache["KC"]), "VC": np.load(cache["VC"])}
                    ref = {"X": want, "KC": kc if layers else kc[0], "VC": vc if layers else vc[0]}
                    for n in got:
                        e = rel_err(got[n].astype(np.float64), ref[n])
                        worst = max(worst, e)
                        if got[n].shape != ref[n].shape or e > 1e-5:
                            result(False, "%s (%s): step %d, %s" % (name, rt, t, n),
                                   "max rel error %.2g, shape %s vs %s" % (e, got[n].shape, ref[n].shape))
                            ok = False
                    if not ok:
                        break
                if ok:
                    result(True, "%s (%s): %d steps, max rel error %.2g" % (name, rt, S, worst))
                # A position outside the cache ends the run with a message.
                for bad in (S, -1):
                    np.save(ppath, np.array(bad, dtype=np.int32))
                    rc, msg = run(cmd)
                    needle = "write into '%s': position Pos = %d is outside its dim 'S' of %d" % (
                        "KC", bad, S)
                    result(rc == 1 and needle in msg, "%s (%s): Pos = %d is an error" % (name, rt, bad),
                           "exit %s, expected %r in:\n%s" % (rc, needle, msg))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
