#!/usr/bin/python3
"""pipeline_state.py - pipelined inference that keeps a state: a prefill
writing a KV cache per layer (docs/pipeline.md, "States"), against NumPy
and the unpipelined program.

The program is a 4-layer attention + GELU-MLP stack in f64 whose layers
write their keys into the cache `KC[L_Z, B, S, E]` (stacked on the layers,
which Z pipelines: each stage keeps its own layers' cache) at a window of T
positions and attend over the cache up to each token's position.  The
cache starts from random values, so positions before the window (an
earlier prompt's) are read as well as written ones.

1. The prefill (T = 4 tokens at positions 2..5, or per row at its own
   position `At[B]`) compiled with `--microbatches=M` on the meshes below:
   its output H and the cache it leaves (`--output KC=...`) must equal
   NumPy's to 1e-12 relative, and the unpipelined program's (the same
   file with its `_Z` subscripts removed) to 1e-12.
2. Then one decode step (the same file with -D T=1, also pipelined) reads
   the prefill's cache (`--input KC=...`) at the next position: its H and
   cache against NumPy's decode from NumPy's prefill.
   Meshes: Z=2 x X=2 with TP over X inside the stages (F_X); Z=2 x X=2
   with the batch on X (the cache's rows, the per-row positions and the
   input on X, the output gathered: each microbatch's rows go to their
   devices' parts of it); Z=2 x X=2 with the cache length on X (the window
   crosses the shards); Z=4 (one layer per stage); the interleaved
   forward (v = 2).  M from 1 to 4.
3. `--dump-ir` prints the forward schedule table (stage z runs F0 ..
   F(M-1), z slots late); the only transfer between stages is H's
   CollectivePermute (the cache never moves).
4. `--dump-ir=json`'s pipeline `stage_memory` grows with the cache: the
   same program with a longer cache S holds exactly the extra cache rows
   of its stage's layers, |L|/Z x |B| x dS x |E| x 8 bytes (all M
   microbatches' rows, not one microbatch's).

With --mpi, two configurations also run on 4 MPI ranks; --mpi-only runs
only those.  `--quick` (the sanitizer build) runs three configurations.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: pipeline_state.py --einc PATH [--quick] [--mpi [--mpi-only] --mpirun PATH]
"""
import argparse
import json
import os
import re
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, mpi_launch, rel_err, run_merged  # noqa: E402
from train import gelu  # noqa: E402  (einc's tanh GELU)

PROG = """\
mesh {MESH}
dim B = 8, T = 4, S = {S}, D = 8, E = 8, F = 16, L = 4
input In[{BX}, T, D] : f64
input {POSDECL} : i32
state KC[L_Z, {BX}, {SX}, E] : f64
param Wk[L_Z, D, E] : f64
param Win[L_Z, E, F{FX}] : f64
param Wout[L_Z, F{FX}, D] : f64
H[B, T, D] = In[B, T, D] * 1
repeat L {{
  K[B, T, E] = H[B, T, D] * Wk[D, E]
  KC[B, {POS}:T, E] = K[B, T, E]
  Sc[B, T, S] = K[B, T, E] * KC[B, S, E]
  P[B, T, S] = softmax(where(S <= {POS} + T, Sc[B, T, S], -inf), S)
  A[B, T, E] = P[B, T, S] * KC[B, S, E]
  G[B, T, F] = A[B, T, E] * Win[E, F]
  H[B, T, D] = H[B, T, D] + gelu(G[B, T, F]) * Wout[F, D] * 0.5
}}
output H[B, T, D]
"""
B, T, S, D, E, F, L = 8, 4, 8, 8, 8, 16, 4
# name: (mesh line, batch sharding, cache length sharding, F's axis, per-row positions)
MESHES = {
    "Z=2 x X=2, TP on X": ("Z = 2, X = 2", "B", "S", "_X", False),
    "Z=2 x X=2, batch on X, per-row positions": ("Z = 2, X = 2", "B_X", "S", "", True),
    "Z=2 x X=2, cache length on X": ("Z = 2, X = 2", "B", "S_X", "", False),
    "Z=4": ("Z = 4", "B", "S", "", False),
}
NDEV = 4  # every mesh above
START = 2  # the scalar position of the prefill's window
ROW_START = np.array([0, 2, 3, 1, 3, 0, 2, 1], dtype=np.int32)  # per row: the decode's too fit in S


def source(mesh, s=S):
    mesh_line, bx, sx, fx, rows = MESHES[mesh]
    return PROG.format(MESH=mesh_line, S=s, BX=bx, SX=sx, FX=fx,
                       POSDECL=("At[%s]" % bx) if rows else "Pos[]", POS="At[B]" if rows else "Pos[]")


def forward(w, x, kc, start):
    """NumPy's run of the program: H after the layers, and the cache, for
    the tokens x [B, t, D] at positions start[b] + 0 .. t-1."""
    h, kc, t = x.copy(), kc.copy(), x.shape[1]
    qpos = start[:, None] + np.arange(t)[None, :]  # [B, t]
    mask = np.arange(kc.shape[2])[None, None, :] <= qpos[:, :, None]  # [B, t, S]
    for l in range(L):
        k = h @ w["Wk"][l]
        for b in range(B):
            kc[l, b, start[b]:start[b] + t] = k[b]
        sc = np.where(mask, np.einsum("bte,bse->bts", k, kc[l]), -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        a = np.einsum("bts,bse->bte", p, kc[l])
        h = h + 0.5 * (gelu(a @ w["Win"][l]) @ w["Wout"][l])
    return h, kc


def run(a, work, exe, rt, inputs, outputs):
    """Runs `exe` (on 4 MPI ranks for mpi) with .npy inputs {name: array};
    returns (exit code, output, {name: array} of `outputs`)."""
    cmd = (mpi_launch(a.mpirun, NDEV) if rt == "mpi" else []) + [exe]
    for k, v in inputs.items():
        path = os.path.join(work, "in_" + k + ".npy")
        np.save(path, v)
        cmd += ["--input", "%s=%s" % (k, path)]
    for k in outputs:
        cmd += ["--output", "%s=%s" % (k, os.path.join(work, "out_" + k + ".npy"))]
    rc, out = run_merged(cmd)
    got = {k: np.load(os.path.join(work, "out_" + k + ".npy")) for k in outputs} if rc == 0 else {}
    return rc, out, got


def compile_prog(a, src, exe, flags, rt="threads"):
    return run_merged([a.einc, src, "-o", exe, "--runtime=" + rt] + flags)


def differences(got, want, what, tol=1e-12):
    """What differs beyond `tol` relative between {name: array}s."""
    out = []
    for k, w in want.items():
        g = got.get(k)
        err = rel_err(g, w) if g is not None and g.shape == w.shape else float("inf")
        if not err <= tol:
            out.append("%s: %s relative error %.3g" % (what, k, err))
    return out


def configs(quick):
    """(mesh, M, schedule) to run on threads."""
    out = [("Z=2 x X=2, TP on X", m, "forward") for m in (1, 2, 4)] + [
        ("Z=2 x X=2, batch on X, per-row positions", 2, "forward"),
        ("Z=2 x X=2, batch on X, per-row positions", 4, "forward"),
        ("Z=2 x X=2, cache length on X", 4, "forward"), ("Z=4", 4, "forward"),
        ("Z=2 x X=2, TP on X", 2, "interleaved")]
    if quick:
        out = [("Z=2 x X=2, TP on X", 2, "forward"), ("Z=2 x X=2, batch on X, per-row positions", 4, "forward"),
               ("Z=4", 2, "forward")]
    return out


def run_prefill_decode(a, work, tally):
    rng = np.random.default_rng(25)
    w = {"Wk": rng.standard_normal((L, D, E)) / np.sqrt(D),
         "Win": rng.standard_normal((L, E, F)) / np.sqrt(E),
         "Wout": rng.standard_normal((L, F, D)) / np.sqrt(F)}
    x = rng.standard_normal((B, T, D))
    x1 = rng.standard_normal((B, 1, D))
    kc0 = rng.standard_normal((L, B, S, E))
    mpi = [("Z=2 x X=2, TP on X", 2, "forward"), ("Z=2 x X=2, batch on X, per-row positions", 4, "forward")]
    todo = ([("threads", c) for c in configs(a.quick)] if not a.mpi_only else []) + \
        ([("mpi", c) for c in mpi] if a.mpi else [])
    unpiped = {}  # mesh: the unpipelined program's prefill outputs
    for rt, (mesh, m, sched) in todo:
        rows = MESHES[mesh][4]
        start = ROW_START if rows else np.full(B, START, dtype=np.int32)
        pos = {"At": start} if rows else {"Pos": np.array(START, dtype=np.int32)}
        pos1 = {"At": start + T} if rows else {"Pos": np.array(START + T, dtype=np.int32)}
        want_h, want_kc = forward(w, x, kc0, start)
        want1_h, want1_kc = forward(w, x1, want_kc, start + T)
        title = "%s, M=%d%s (%s)" % (mesh, m, ", interleaved" if sched == "interleaved" else "", rt)
        src = os.path.join(work, "prefill.ein")
        with open(src, "w") as f:
            f.write(source(mesh))
        flags = ["--microbatches=%d" % m] + (["--schedule=interleaved"] if sched == "interleaved" else [])
        exe = os.path.join(work, "prefill_" + rt)
        rc, out = compile_prog(a, src, exe, flags, rt)
        if rc != 0:
            tally.result(False, title + ": einc", out)
            continue
        rc, out, got = run(a, work, exe, rt, dict(w, In=x, KC=kc0, **pos), ("H", "KC"))
        if rc != 0:
            tally.result(False, title + ": prefill run", out)
            continue
        problems = differences(got, {"H": want_h, "KC": want_kc}, "prefill against NumPy")
        if mesh not in unpiped:  # the same file unpipelined, on threads
            usrc = os.path.join(work, "unpiped.ein")
            with open(usrc, "w") as f:
                f.write(source(mesh).replace("_Z", ""))
            uexe = os.path.join(work, "unpiped")
            urc, uout = compile_prog(a, usrc, uexe, [])
            if urc == 0:
                urc, uout, unpiped[mesh] = run(a, work, uexe, "threads", dict(w, In=x, KC=kc0, **pos), ("H", "KC"))
            if urc != 0:
                problems.append("the unpipelined program failed:\n" + uout)
        if mesh in unpiped:
            problems += differences(got, unpiped[mesh], "prefill against the unpipelined program")
        # One decode step from the prefill's cache, also pipelined.
        exe1 = os.path.join(work, "decode_" + rt)
        rc, out = compile_prog(a, src, exe1, flags + ["-D", "T=1"], rt)
        if rc == 0:
            rc, out, got1 = run(a, work, exe1, rt, dict(w, In=x1, KC=got["KC"], **pos1), ("H", "KC"))
        if rc != 0:
            problems.append("decode step: " + out)
        else:
            problems += differences(got1, {"H": want1_h, "KC": want1_kc}, "decode step against NumPy")
        tally.result(not problems, "%s: prefill's H and cache as NumPy's and the unpipelined program's, "
                     "then a decode step from its cache as NumPy's" % title, "\n".join(problems))


def run_table(a, work, tally):
    """The forward table and the transfers in --dump-ir."""
    src = os.path.join(work, "table.ein")
    with open(src, "w") as f:
        f.write(source("Z=4"))
    rc, out = run_merged([a.einc, src, "--microbatches=2", "--dump-ir"])
    rows = [r.split("|", 1)[1].split() for r in out.splitlines() if re.match(r"#\s+stage \d \|", r)]
    want = [["."] * z + ["F0", "F1"] + ["."] * (3 - z) for z in range(4)]
    moves = re.findall(r"= (AllGather|ReduceScatter|AllReduce|AllToAll|CollectivePermute)_\w+(?:\([^)]*\))? "
                       r"(\w+)", out)
    tally.result(rc == 0 and rows == want and moves == [("CollectivePermute", "H")],
                 "--dump-ir: the forward table of 4 stages and 2 microbatches, H the only transfer",
                 "rows %r, transfers %r\n%s" % (rows, moves, out[-3000:]))


def run_memory(a, work, tally):
    """stage_memory counts the whole cache of the stage's layers."""
    mem = {}
    for s in (8, 72):
        src = os.path.join(work, "mem.ein")
        with open(src, "w") as f:
            f.write(source("Z=2 x X=2, TP on X", s))
        rc, out = run_merged([a.einc, src, "--microbatches=4", "--dump-ir=json"])
        try:
            mem[s] = json.loads(out[out.index("{"):])["totals"]["pipeline"]["stage_memory"]
        except (ValueError, KeyError) as e:
            tally.result(False, "--dump-ir=json's stage_memory, S=%d" % s, "%r\n%s" % (e, out[-3000:]))
            return
    want = L // 2 * B * (72 - 8) * E * 8
    tally.result(mem[72] - mem[8] == want, "stage_memory: a cache longer by 64 positions adds %d bytes "
                 "to the fullest stage (got %g)" % (want, mem[72] - mem[8]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--mpi-only", action="store_true", help="with --mpi: only the MPI configurations")
    a = ap.parse_args()
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-pipestate-") as work:
        run_prefill_decode(a, work, tally)
        if not a.mpi_only:
            run_table(a, work, tally)
            run_memory(a, work, tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
