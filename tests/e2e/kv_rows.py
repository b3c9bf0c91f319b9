#!/usr/bin/python3
"""kv_rows.py - per-row positions in a state write (`KC[B, At[B], K, H]`,
each slot of the batch at its own position, as continuous batching needs)
against NumPy over decode steps, and bad per-row positions as errors.

Each case compiles a decode step of attention whose K and V caches are
`state`s written row by row: row b of the new keys goes to position At[b]
(an i32 input over the batch dim B), and each row attends to its own
prefix (`where(S <= At[B], ...)`).  The steps follow a schedule in which
the rows start at different positions and some restart at 0 midway (a
slot refilled with a new request), so the cache holds stale entries past
a row's position that the mask must hide.  After every step the output
and both caches are compared with NumPy's.  The cases run on one device,
with the caches sharded over the batch and the heads (positions split
like the batch, and replicated), over the heads only, over the length S
(rows at different positions land on different devices), and stacked on
the layers of a `repeat L` block, on threads (and with --mpi on MPI ranks).
Then one row's position past the cache
and a negative one must end the run with exit 1 and a message naming the
row (its global index, on whichever device holds it).
A position computed by a statement (an argmax, over B replicated) must be
resharded to the rows' B_X by the plan, each row landing where its argmax
says.  Per-row windows (`KC[B, At[B]:T, ...]`, chunked prefill's write)
with the cache's length split over X (windows crossing its shards) and
with the rows split over X: two runs, the second over the first's cache,
against NumPy, and a window past the cache's end an error naming its
row.  The last line is `N passed, N failed`.

Usage: kv_rows.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, rel_err, runtime_args  # noqa: E402
from e2e_common import run_merged as run  # noqa: E402

DIMS = dict(B=4, S=8, D=16, K=4, H=8, L=2)
STEPS = 10

# (name, mesh, cache sharding, position declaration, weight sharding of K, layers)
CASES = [
    ("one_device", "X = 1", "B, S, K, H", "At[B]", "K", 0),
    ("batch_heads", "X = 2, Y = 2", "B_X, S, K_Y, H", "At[B_X]", "K_Y", 0),
    ("batch_heads_pos_replicated", "X = 2, Y = 2", "B_X, S, K_Y, H", "At[B]", "K_Y", 0),
    ("heads", "X = 2, Y = 2", "B, S, K_XY, H", "At[B]", "K_XY", 0),
    ("length_sharded", "X = 2, Y = 2", "B, S_X, K_Y, H", "At[B]", "K_Y", 0),
    ("layers", "X = 2, Y = 2", "B_X, S, K_Y, H", "At[B_X]", "K_Y", 2),
]


def source(case):
    _, mesh, cache, at, wk, layers = case
    stack = "L, " if layers else ""
    lines = ["mesh " + mesh, "dim " + ", ".join("%s = %d" % kv for kv in DIMS.items()),
             "input X0[B, D] : f32", "input %s : i32" % at]
    lines += ["param %s[%sD, %s, H] : f32" % (w, stack, wk) for w in ("Wq", "Wk", "Wv")]
    lines.append("param Wo[%s%s, H, D] : f32" % (stack, wk))
    lines += ["state %s[%s%s] : f32" % (c, stack, cache) for c in ("KC", "VC")]
    lines.append("X[B, D] = X0[B, D] * 1")
    body = [
        "Q[B, K, H] = X[B, D] * Wq[D, K, H]",
        "KC[B, At[B], K, H] = X[B, D] * Wk[D, K, H]",
        "VC[B, At[B], K, H] = X[B, D] * Wv[D, K, H]",
        "Sc[B, K, S] = Q[B, K, H] * KC[B, S, K, H] / 4",
        "P[B, K, S] = softmax(where(S <= At[B], Sc[B, K, S], -inf), S)",
        "O[B, K, H] = P[B, K, S] * VC[B, S, K, H]",
        "%s[B, D] = X[B, D] + O[B, K, H] * Wo[K, H, D]" % ("X" if layers else "Y"),
    ]
    if layers:
        lines += ["repeat L {"] + ["  " + b for b in body] + ["}"]
    else:
        lines += body
    lines.append("output %s[B, D]" % ("X" if layers else "Y"))
    return "\n".join(lines) + "\n"


def schedule():
    """Positions [STEPS, B]: rows start at 0, 3, 5 and 1; row 0 restarts
    at step 6 and row 2 at step 3 (its slot refilled: the entries it wrote
    before are stale and must stay masked)."""
    B, S = DIMS["B"], DIMS["S"]
    start, restart = [0, 3, 5, 1], {0: 6, 2: 3}
    at = np.zeros((STEPS, B), dtype=np.int32)
    for b in range(B):
        p = start[b]
        for t in range(STEPS):
            if restart.get(b) == t or p >= S:
                p = 0
            at[t, b] = p
            p += 1
    return at


def reference(x0, at, w, kc, vc, layers):
    """One step: updates kc, vc ([L, B, S, K, H]) in place; returns X."""
    x = x0.astype(np.float64)
    rows = np.arange(len(at))
    for l in range(max(layers, 1)):
        q = np.einsum("bd,dkh->bkh", x, w["Wq"][l])
        kc[l, rows, at] = np.einsum("bd,dkh->bkh", x, w["Wk"][l])
        vc[l, rows, at] = np.einsum("bd,dkh->bkh", x, w["Wv"][l])
        sc = np.einsum("bkh,bskh->bks", q, kc[l]) / 4
        sc = np.where(np.arange(DIMS["S"])[None, None, :] > at[:, None, None], -np.inf, sc)
        p = np.exp(sc - sc.max(axis=2, keepdims=True))
        p /= p.sum(axis=2, keepdims=True)
        x = x + np.einsum("bkh,khd->bd", np.einsum("bks,bskh->bkh", p, vc[l]), w["Wo"][l])
    return x


def check_case(case, exe, launch, work, rng, result):
    """Runs the schedule with `exe`; then the bad positions.  Reports each."""
    name, layers = case[0], case[5]
    nl = max(layers, 1)
    B, S, D, K, H = (DIMS[k] for k in "BSDKH")
    w = {n: rng.standard_normal((nl, D, K, H)) / 4 for n in ("Wq", "Wk", "Wv")}
    w["Wo"] = rng.standard_normal((nl, K, H, D)) / 4
    files = {n: os.path.join(work, n + ".npy") for n in ("X0", "At", "Y", "KC", "VC", *w)}
    for n, v in w.items():
        np.save(files[n], (v if layers else v[0]).astype(np.float32))
    out = "X" if layers else "Y"
    kc, vc = np.zeros((nl, B, S, K, H)), np.zeros((nl, B, S, K, H))
    base = launch + [exe] + sum((["--input", "%s=%s" % (n, files[n])] for n in ("X0", "At", *w)), [])
    base += ["--output", "%s=%s" % (out, files["Y"]), "--output", "KC=" + files["KC"],
             "--output", "VC=" + files["VC"]]
    worst = 0.0
    for t, at in enumerate(schedule()):
        x0 = rng.standard_normal((B, D)).astype(np.float32)
        np.save(files["X0"], x0)
        np.save(files["At"], at)
        cmd = base + (["--input", "KC=" + files["KC"], "--input", "VC=" + files["VC"]] if t else [])
        rc, msg = run(cmd)
        if rc != 0:
            result(False, "%s: step %d" % (name, t), msg)
            return
        want = {out: reference(x0, at, w, kc, vc, layers), "KC": kc if layers else kc[0],
                "VC": vc if layers else vc[0]}
        for n, ref in want.items():
            got = np.load(files["Y" if n == out else n]).astype(np.float64)
            e = rel_err(got, ref) if got.shape == ref.shape else float("inf")
            worst = max(worst, e)
            if e > 1e-5:
                result(False, "%s: step %d, %s" % (name, t, n),
                       "max rel error %.2g, shape %s vs %s" % (e, got.shape, ref.shape))
                return
    result(True, "%s: %d steps, rows at their own positions, max rel error %.2g" % (name, STEPS, worst))
    for row, bad in ((2, S), (3, -1)):
        at = np.array([1, 2, 3, 4], dtype=np.int32)
        at[row] = bad
        np.save(files["At"], at)
        rc, msg = run(base + ["--input", "KC=" + files["KC"], "--input", "VC=" + files["VC"]])
        needle = "write into 'KC': position At[%d] = %d is outside its dim 'S' of %d" % (row, bad, S)
        result(rc == 1 and needle in msg, "%s: At[%d] = %d is an error" % (name, row, bad),
               "exit %s, expected %r in:\n%s" % (rc, needle, msg))


COMPUTED = """mesh X = 2, Y = 2
dim B = 4, S = 8, D = 16, K = 4, H = 8
input X0[B, D] : f32
input Fs[B, S] : f32
param Wk[D, K_Y, H] : f32
state KC[B_X, S, K_Y, H] : f32
Ap[B] = argmax(Fs[B, S], S)
KC[B, Ap[B], K, H] = X0[B, D] * Wk[D, K, H]
Sc[B, K, S] = KC[B, S, K, H] * 1
output Sc
"""


def check_computed(exe, launch, work, rng, result):
    """A position computed by a statement (an argmax, replicated by the
    plan's choice) is brought to the rows' sharding B_X: row b lands at the
    argmax of Fs[b], the rest of the cache stays zero."""
    B, S, D, K, H = 4, 8, 16, 4, 8
    where = rng.permutation(S)[:B]
    fs = np.zeros((B, S), dtype=np.float32)
    fs[np.arange(B), where] = 1
    x0 = rng.standard_normal((B, D)).astype(np.float32)
    wk = rng.standard_normal((D, K, H)).astype(np.float32)
    files = {n: os.path.join(work, "computed_%s.npy" % n) for n in ("Fs", "X0", "Wk", "KC")}
    for n, v in (("Fs", fs), ("X0", x0), ("Wk", wk)):
        np.save(files[n], v)
    rc, msg = run(launch + [exe] + sum((["--input", "%s=%s" % (n, files[n])] for n in ("Fs", "X0", "Wk")),
                                       []) + ["--output", "KC=" + files["KC"]])
    want = np.zeros((B, S, K, H))
    want[np.arange(B), where] = np.einsum("bd,dkh->bkh", x0.astype(np.float64), wk)
    e = rel_err(np.load(files["KC"]).astype(np.float64), want) if rc == 0 else float("inf")
    result(e < 1e-5, "a computed per-row position (argmax), resharded to the rows: rows at %s"
           % list(where), "exit %d, max rel error %.2g\n%s" % (rc, e, msg))


WINDOW = """mesh X = 2, Y = 2
dim B = 4, S = 8, T = 3, D = 16, K = 4, H = 8
input X0[B, T, D] : f32
input %s : i32
param Wk[D, K_Y, H] : f32
state KC[%s, K_Y, H] : f32
KC[B, At[B]:T, K, H] = X0[B, T, D] * Wk[D, K, H]
Sc[B, K, S] = KC[B, S, K, H] * 1
output Sc
"""
# (name, position declaration, cache dims): windows crossing the length's
# shards, and rows split over X with their positions.
WINDOW_CASES = [("window_length_sharded", "At[B]", "B, S_X"),
                ("window_batch_sharded", "At[B_X]", "B_X, S")]


def check_window(name, exe, launch, work, rng, result):
    """Per-row windows (`KC[B, At[B]:T, ...]`): two runs, the second over
    the first's cache with other starts, against NumPy; then a window past
    the cache's end is an error naming its row."""
    B, S, T, D, K, H = 4, 8, 3, 16, 4, 8
    wk = rng.standard_normal((D, K, H)).astype(np.float32)
    files = {n: os.path.join(work, "%s_%s.npy" % (name, n)) for n in ("X0", "At", "Wk", "KC")}
    np.save(files["Wk"], wk)
    want = np.zeros((B, S, K, H))
    base = launch + [exe, "--input", "Wk=" + files["Wk"], "--input", "X0=" + files["X0"],
                     "--input", "At=" + files["At"], "--output", "KC=" + files["KC"]]
    for run_no, starts in enumerate(([0, 3, 5, 2], [3, 0, 1, 5])):
        x0 = rng.standard_normal((B, T, D)).astype(np.float32)
        np.save(files["X0"], x0)
        np.save(files["At"], np.array(starts, dtype=np.int32))
        rc, msg = run(base + (["--input", "KC=" + files["KC"]] if run_no else []))
        rows = np.einsum("btd,dkh->btkh", x0.astype(np.float64), wk)
        for b, p in enumerate(starts):
            want[b, p:p + T] = rows[b]
        e = rel_err(np.load(files["KC"]).astype(np.float64), want) if rc == 0 else float("inf")
        if e > 1e-5:
            result(False, "%s: run %d, starts %s" % (name, run_no, starts),
                   "exit %d, max rel error %.2g\n%s" % (rc, e, msg))
            return
    result(True, "%s: each row's window of %d at its own start, twice" % (name, T))
    np.save(files["At"], np.array([0, 1, S - T + 1, 2], dtype=np.int32))
    rc, msg = run(base + ["--input", "KC=" + files["KC"]])
    needle = ("write into 'KC': positions At[2] = %d to %d (a window of %d) are outside its dim "
              "'S' of %d (valid starts 0..%d)" % (S - T + 1, S, T, S, S - T))
    result(rc == 1 and needle in msg, "%s: a window past the cache's end is an error" % name,
           "exit %s, expected %r in:\n%s" % (rc, needle, msg))


def main():
    a = runtime_args(__doc__)
    rng = np.random.default_rng(27)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-kvrows-") as work:
        for case in CASES:
            src = os.path.join(work, case[0] + ".ein")
            with open(src, "w") as f:
                f.write(source(case))
            ranks = 1 if case[1] == "X = 1" else 4
            for rt, exe, launch in builds(a, src, os.path.join(work, case[0]), ranks, tally):
                check_case(case, exe, launch, work, rng, lambda ok, what, why="": tally.result(
                    ok, "%s (%s)" % (what, rt), why))
        src = os.path.join(work, "computed.ein")
        with open(src, "w") as f:
            f.write(COMPUTED)
        for rt, exe, launch in builds(a, src, os.path.join(work, "computed"), 4, tally):
            check_computed(exe, launch, work, rng, lambda ok, what, why="": tally.result(
                ok, "%s (%s)" % (what, rt), why))
        for name, at, cache in WINDOW_CASES:
            src = os.path.join(work, name + ".ein")
            with open(src, "w") as f:
                f.write(WINDOW % (at, cache))
            for rt, exe, launch in builds(a, src, os.path.join(work, name), 4, tally):
                check_window(name, exe, launch, work, rng, lambda ok, what, why="": tally.result(
                    ok, "%s (%s)" % (what, rt), why))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
