#!/usr/bin/python3
"""generate.py - the generation loop (--generate N --prompt-ids FILE)
against a NumPy decoder with the same weights.

A two-layer decoder (embedding, attention over a KV cache kept as `state`
and written at the position, an MLP, vocab-parallel LM head) is compiled
for a 2x2 mesh (heads over Y, the MLP and the vocab over X) and run on the
threads runtime (and with --mpi on 4 MPI ranks):
 - greedy decoding from a prompt must give NumPy's greedy tokens, token
   for token, and --check (the unsharded run's tokens and final logits)
   must pass; the program's argmax output and the host's argmax of the
   logits are both used (the program with and without `Next`);
 - sampling (--temperature 1.5 --seed 7) must give the same tokens on
   every runtime and in the reference (--check), and other tokens with
   another seed;
 - the report line (time to first token, time per output token, tokens/s)
   is printed, and --generated writes prompt + tokens as i32 [B, T0+N];
 - a prompt and N that need more positions than the cache has are
   refused before the run (sampling.py checks the message); a missing
   prompt, or one of another batch, is refused before the run.
The last line is `N passed, N failed`.

Usage: generate.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, printed_tokens, runtime_args  # noqa: E402
from e2e_common import run_merged as run  # noqa: E402

DIMS = dict(B=2, S=12, D=16, K=4, H=8, V=32, L=2, F=32)
WEIGHTS = {"Emb": "V, D", "Wq": "L, D, K, H", "Wk": "L, D, K, H", "Wv": "L, D, K, H",
           "Wo": "L, K, H, D", "W1": "L, D, F", "W2": "L, F, D", "Wlm": "D, V"}
SHARDED = {"Wq": "L, D, K_Y, H", "Wk": "L, D, K_Y, H", "Wv": "L, D, K_Y, H", "Wo": "L, K_Y, H, D",
           "W1": "L, D, F_X", "W2": "L, F_X, D", "Wlm": "D, V_X"}


def source(argmax):
    lines = ["mesh X = 2, Y = 2", "dim " + ", ".join("%s = %d" % kv for kv in DIMS.items()),
             "input Tok[B] : i32", "input Pos[] : i32"]
    lines += ["param %s[%s] : f32" % (n, SHARDED.get(n, s)) for n, s in WEIGHTS.items()]
    lines += ["state KC[L, B, S, K_Y, H] : f32", "state VC[L, B, S, K_Y, H] : f32",
              "X[B, D] = Emb[Tok[B], D]",
              "repeat L {",
              "  Q[B, K, H] = X[B, D] * Wq[D, K, H]",
              "  KC[B, Pos, K, H] = X[B, D] * Wk[D, K, H]",
              "  VC[B, Pos, K, H] = X[B, D] * Wv[D, K, H]",
              "  Sc[B, K, S] = Q[B, K, H] * KC[B, S, K, H] / 2.8284271247461903",
              "  P[B, K, S] = softmax(where(S <= Pos[], Sc[B, K, S], -inf), S)",
              "  Y1[B, D] = X[B, D] + P[B, K, S] * VC[B, S, K, H] * Wo[K, H, D]",
              "  U[B, F] = Y1[B, D] * W1[D, F]",
              "  X[B, D] = Y1[B, D] + relu(U[B, F]) * W2[F, D]",
              "}",
              "Logits[B, V] = X[B, D] * Wlm[D, V]",
              "output Logits[B, V]"]
    if argmax:
        lines += ["Next[B] = argmax(Logits[B, V], V)", "output Next[B]"]
    return "\n".join(lines) + "\n"


def decode(w, prompt, n, pick=None):
    """NumPy's decoder: the tokens after the prompt, one step per position;
    pick(logits row, step, sequence) chooses each (greedy without it)."""
    B, T0 = prompt.shape
    S, L = DIMS["S"], DIMS["L"]
    kc = np.zeros((L, B, S, DIMS["K"], DIMS["H"]))
    vc = np.zeros_like(kc)
    ids = [list(r) for r in prompt]
    for s in range(T0 + n - 1):
        x = w["Emb"][[ids[b][s] for b in range(B)]]
        for l in range(L):
            q = np.einsum("bd,dkh->bkh", x, w["Wq"][l])
            kc[l, :, s] = np.einsum("bd,dkh->bkh", x, w["Wk"][l])
            vc[l, :, s] = np.einsum("bd,dkh->bkh", x, w["Wv"][l])
            sc = np.einsum("bkh,bskh->bks", q, kc[l]) / np.sqrt(8.0)
            sc[:, :, s + 1:] = -np.inf
            p = np.exp(sc - sc.max(axis=2, keepdims=True))
            p /= p.sum(axis=2, keepdims=True)
            y1 = x + np.einsum("bks,bskh,khd->bd", p, vc[l], w["Wo"][l])
            x = y1 + np.maximum(y1 @ w["W1"][l], 0) @ w["W2"][l]
        if s + 1 >= T0:
            logits = x @ w["Wlm"]
            for b in range(B):
                ids[b].append(pick(logits[b], s, b) if pick else int(np.argmax(logits[b])))
    return np.array([r[T0:] for r in ids])


def weights(rng, work):
    """Random f32 weights saved in `work`: (them in f64, their --input flags)."""
    w, args = {}, []
    for n, shape in WEIGHTS.items():
        dims = [DIMS[d.strip()] for d in shape.split(",")]
        w[n] = rng.standard_normal(dims) / np.sqrt(dims[-2] if len(dims) > 1 else 1)
        # Small residual branches keep the logits from one token's dominance.
        w[n] = (w[n] * (0.3 if n in ("Wo", "W2") else 1)).astype(np.float32)
        path = os.path.join(work, n + ".npy")
        np.save(path, w[n])
        args += ["--input", "%s=%s" % (n, path)]
    return {n: v.astype(np.float64) for n, v in w.items()}, args


def main():
    a = runtime_args(__doc__)
    rng = np.random.default_rng(13)
    tally = Tally()
    B, V, N, T0 = DIMS["B"], DIMS["V"], 6, 4
    with tempfile.TemporaryDirectory(prefix="einc-gen-") as work:
        w64, args = weights(rng, work)
        prompt = rng.integers(0, V, size=(B, T0), dtype=np.int32)
        ppath = os.path.join(work, "prompt.npy")
        np.save(ppath, prompt)
        want = decode(w64, prompt, N)
        sampled = {}
        for argmax in (True, False):
            tag = "argmax" if argmax else "logits"
            src = os.path.join(work, tag + ".ein")
            with open(src, "w") as f:
                f.write(source(argmax))
            for rt, exe, launch in builds(a, src, os.path.join(work, tag), 4, tally):
                gpath = os.path.join(work, "gen.npy")
                cmd = launch + [exe, "--prompt-ids", ppath, "--generate", str(N)] + args
                rc, out = run(cmd + ["--check", "--generated", gpath])
                got = printed_tokens(out, B) if rc == 0 else None
                ok = rc == 0 and got == want.tolist() and "time to first token" in out and \
                    "tokens/s" in out and "check tokens: equal" in out
                saved = np.load(gpath) if ok else None
                ok = ok and saved.dtype == np.int32 and np.array_equal(saved[:, :T0], prompt) and \
                    np.array_equal(saved[:, T0:], want)
                tally.result(ok, "greedy, %s (%s): %s" % (tag, rt, got),
                             "want %s\n%s" % (want.tolist(), out))
                if argmax:
                    # Refusals before the run: no prompt, a prompt of another batch.
                    rc1, out1 = run(launch + [exe, "--generate", "2"] + args)
                    bad = os.path.join(work, "bad.npy")
                    np.save(bad, prompt[:1])
                    rc2, out2 = run(launch + [exe, "--generate", "2", "--prompt-ids", bad] + args)
                    tally.result(rc1 == 1 and "--generate needs --prompt-ids FILE.npy" in out1 and
                                 rc2 == 1 and "expected '<i4' of shape (2, T)" in out2,
                                 "no prompt, or a prompt of another batch, is an error (%s)" % rt,
                                 out1 + out2)
                    continue
                # Sampling: the same on every runtime and in the reference.
                rc, out = run(cmd + ["--temperature", "1.5", "--seed", "7", "--check"])
                got = printed_tokens(out, B) if rc == 0 else None
                sampled[rt] = got
                tally.result(rc == 0 and "check tokens: equal" in out and got != want.tolist(),
                             "sampled, T = 1.5, seed 7 (%s): %s" % (rt, got), out)
                rc, out = run(cmd + ["--temperature", "1.5", "--seed", "8"])
                tally.result(rc == 0 and printed_tokens(out, B) != got,
                             "another seed draws other tokens (%s)" % rt, out)
                # More positions than the cache holds.
                rc, out = run(launch + [exe, "--prompt-ids", ppath, "--generate",
                                        str(DIMS["S"] - T0 + 2)] + args)
                needle = "and the cache holds %d (position input 'Pos' is below %d)" % (DIMS["S"],
                                                                                        DIMS["S"])
                tally.result(rc == 1 and needle in out, "past the cache is an error (%s)" % rt,
                             "exit %s, expected %r in:\n%s" % (rc, needle, out))
        if len(sampled) == 2:
            tally.result(sampled["threads"] == sampled["mpi"], "sampling: threads and MPI agree",
                         "%s vs %s" % (sampled["threads"], sampled["mpi"]))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
