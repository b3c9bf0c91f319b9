#!/usr/bin/python3
"""prefill.py - prefill (T prompt tokens in one run) and decode (one token a
run) from one model description, sharing the KV cache.

One attention layer whose caches are `state`s is written over a dim T of
new tokens: `KC[B, Pos:T, K, H] = Kn[B, T, K, H]` writes the window of T
keys at positions Pos .. Pos+T-1, and the mask `where(S <= Pos[] + T, ...)`
is causal over the cache.  The file is compiled twice, with -D T=4 (prefill)
and -D T=1 (decode), for a 2x2 mesh with the cache sharded over its length
S (blocks of 4 positions, so a window starting at 2 crosses a block
boundary) and over the KV heads; on the threads runtime (and with --mpi on
4 MPI ranks):
 - prefill of 4 tokens at Pos = 2 on a cache that holds 2 earlier
   positions must give, row for row, the outputs of 4 decode runs at
   Pos = 2, 3, 4, 5, and the same caches (--output KC / --input KC carry
   the cache between runs and between the two executables), within 1e-6
   (four rows go through BLAS's gemm, one row through its gemv);
 - one decode run after the prefill must give what a fifth decode run
   gives, and both must match NumPy;
 - a window that passes the cache's end (Pos = 6, T = 4, S = 8) ends the
   run with a message naming the positions.
Then generation through a prefill: a one-layer language model (embedding,
the same attention, LM head, `argmax`) compiled with T = 4 and T = 1.  The
T = 4 executable prefills the caches with the first 4 tokens of a 5-token
prompt in one run (--output KC, VC); the T = 1 executable, given them with
--input and `--generate 4 --prompt-cached 4`, must generate the same
tokens as `--generate 4` from an empty cache (one run per prompt token),
pass its own --check, and count 4 cached tokens; a cached count that
leaves no prompt token to run, and one without the caches, are errors.
The last line is `N passed, N failed`.

Usage: prefill.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, runtime_args  # noqa: E402

B, S, D, K, H = 2, 8, 16, 4, 8
SRC = """mesh X = 2, Y = 2
dim B = %d, S = %d, D = %d, K = %d, H = %d, T = 4
input X0[B, T, D] : f32
input Pos[] : i32
param Wq[D, K_Y, H] : f32
param Wk[D, K_Y, H] : f32
param Wv[D, K_Y, H] : f32
state KC[B, S_X, K_Y, H] : f32
state VC[B, S_X, K_Y, H] : f32
Q[B, T, K, H] = X0[B, T, D] * Wq[D, K, H]
KC[B, Pos:T, K, H] = X0[B, T, D] * Wk[D, K, H]
VC[B, Pos:T, K, H] = X0[B, T, D] * Wv[D, K, H]
Sc[B, T, K, S] = Q[B, T, K, H] * KC[B, S, K, H] / 4
P[B, T, K, S] = softmax(where(S <= Pos[] + T, Sc[B, T, K, S], -inf), S)
O[B, T, K, H] = P[B, T, K, S] * VC[B, S, K, H]
output O[B, T, K, H]
""" % (B, S, D, K, H)


# A one-layer language model over the same cache: token [B, T] in, the
# greedy next token of each position out.
LM = """mesh X = 2, Y = 2
dim B = %d, S = %d, D = %d, K = %d, H = %d, V = 32, T = 4
input Tok[B, T] : i32
input Pos[] : i32
param Emb[V, D] : f32
param Wq[D, K_Y, H] : f32
param Wk[D, K_Y, H] : f32
param Wv[D, K_Y, H] : f32
param Wo[K_Y, H, D] : f32
param Wlm[D, V] : f32
state KC[B, S_X, K_Y, H] : f32
state VC[B, S_X, K_Y, H] : f32
X0[B, T, D] = Emb[Tok[B, T], D]
Q[B, T, K, H] = X0[B, T, D] * Wq[D, K, H]
KC[B, Pos:T, K, H] = X0[B, T, D] * Wk[D, K, H]
VC[B, Pos:T, K, H] = X0[B, T, D] * Wv[D, K, H]
Sc[B, T, K, S] = Q[B, T, K, H] * KC[B, S, K, H] / 4
P[B, T, K, S] = softmax(where(S <= Pos[] + T, Sc[B, T, K, S], -inf), S)
O[B, T, K, H] = P[B, T, K, S] * VC[B, S, K, H]
Y[B, T, D] = X0[B, T, D] + O[B, T, K, H] * Wo[K, H, D]
Lg[B, T, V] = Y[B, T, D] * Wlm[D, V]
Next[B, T] = argmax(Lg[B, T, V], V)
output Next
""" % (B, S, D, K, H)


def generation_checks(a, work, rng, tally):
    """Generation through a prefill run (the docstring's second part)."""
    def path(name):
        return os.path.join(work, "lm_" + name + ".npy")

    shapes = {"Emb": (32, D), "Wq": (D, K, H), "Wk": (D, K, H), "Wv": (D, K, H),
              "Wo": (K, H, D), "Wlm": (D, 32)}
    params = []
    for n, s in shapes.items():
        np.save(path(n), (rng.standard_normal(s) / 2).astype(np.float32))
        params += ["--input", "%s=%s" % (n, path(n))]
    prompt = rng.integers(0, 32, (B, 5)).astype(np.int32)
    np.save(path("prompt"), prompt)
    np.save(path("head"), prompt[:, :4].copy())
    np.save(path("zero"), np.array(0, np.int32))
    exes = {}
    for t in (4, 1):
        src = os.path.join(work, "lm_t%d.ein" % t)
        with open(src, "w") as f:
            f.write(LM.replace("T = 4", "T = %d" % t))
        for rt, exe, launch in builds(a, src, os.path.join(work, "lm_t%d" % t), 4, tally):
            exes[(t, rt)] = launch + [exe]

    def run(cmd):
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300)

    gen = ["--generate", "4", "--prompt-ids", path("prompt")]  # positions 0..7 of S = 8
    for rt in ["threads"] + (["mpi"] if a.mpi else []):
        if (4, rt) not in exes or (1, rt) not in exes:
            continue
        plain = run(exes[(1, rt)] + params + gen + ["--generated", path("plain_" + rt)])
        pre = run(exes[(4, rt)] + params + ["--input", "Tok=" + path("head"), "--input",
                                            "Pos=" + path("zero"), "--output",
                                            "KC=" + path("kc_" + rt), "--output",
                                            "VC=" + path("vc_" + rt)])
        if plain.returncode or pre.returncode:
            tally.result(False, "generation through a prefill (%s)" % rt, plain.stdout + pre.stdout)
            continue
        cached = run(exes[(1, rt)] + params + gen +
                     ["--prompt-cached", "4", "--input", "KC=" + path("kc_" + rt), "--input",
                      "VC=" + path("vc_" + rt), "--generated", path("cached_" + rt), "--check"])
        same = cached.returncode == 0 and np.array_equal(np.load(path("plain_" + rt)),
                                                         np.load(path("cached_" + rt)))
        tally.result(same and "check tokens: equal" in cached.stdout and
                     "prompt 5 tokens, 4 of them cached" in cached.stdout,
                     "prefill of 4 prompt tokens, then --generate 4 --prompt-cached 4, gives "
                     "the tokens of --generate 4 from an empty cache (%s)" % rt,
                     "exit %d:\n%s" % (cached.returncode, cached.stdout))
        whole = run(exes[(1, rt)] + params + gen + ["--prompt-cached", "5", "--input",
                                                    "KC=" + path("kc_" + rt), "--input",
                                                    "VC=" + path("vc_" + rt)])
        needle = "--prompt-cached 5: the prompt has 5 tokens, and the last one must be run"
        tally.result(whole.returncode == 1 and needle in whole.stdout,
                     "--prompt-cached of the whole prompt is an error (%s)" % rt, whole.stdout)
        bare = run(exes[(1, rt)] + params + gen + ["--prompt-cached", "4"])
        needle = "state 'KC' holds the cache of the first 4 positions: give it with --input KC="
        tally.result(bare.returncode == 1 and needle in bare.stdout,
                     "--prompt-cached without the caches is an error (%s)" % rt, bare.stdout)


def reference(x, pos, w, kc, vc):
    """O for tokens x [B, T, D] at positions pos..; updates kc, vc."""
    T = x.shape[1]
    kc[:, pos:pos + T] = np.einsum("btd,dkh->btkh", x, w["Wk"])
    vc[:, pos:pos + T] = np.einsum("btd,dkh->btkh", x, w["Wv"])
    q = np.einsum("btd,dkh->btkh", x, w["Wq"])
    sc = np.einsum("btkh,bskh->btks", q, kc) / 4
    for t in range(T):
        sc[:, t, :, pos + t + 1:] = -np.inf
    p = np.exp(sc - sc.max(axis=3, keepdims=True))
    p /= p.sum(axis=3, keepdims=True)
    return np.einsum("btks,bskh->btkh", p, vc)


def main():
    a = runtime_args(__doc__)
    rng = np.random.default_rng(21)
    tally = Tally()
    w = {n: (rng.standard_normal((D, K, H)) / 4).astype(np.float32) for n in ("Wq", "Wk", "Wv")}
    tokens = rng.standard_normal((B, 7, D)).astype(np.float32)  # positions 0..6
    with tempfile.TemporaryDirectory(prefix="einc-prefill-") as work:
        def path(name):
            return os.path.join(work, name + ".npy")

        for n, v in w.items():
            np.save(path(n), v)
        src = os.path.join(work, "attn.ein")
        with open(src, "w") as f:
            f.write(SRC)
        exes = {}
        for t in (4, 1):
            tsrc = os.path.join(work, "attn_t%d.ein" % t)
            with open(tsrc, "w") as f:
                f.write(SRC.replace("T = 4", "T = %d" % t))
            for rt, exe, launch in builds(a, tsrc, os.path.join(work, "t%d" % t), 4, tally):
                exes[(t, rt)] = launch + [exe]

        def step(rt, t, pos, x, tag, cache_in):
            """One run: returns O; the caches go to tag_KC / tag_VC."""
            np.save(path("x"), x)
            np.save(path("pos"), np.array(pos, np.int32))
            cmd = exes[(t, rt)] + ["--input", "X0=" + path("x"), "--input", "Pos=" + path("pos"),
                                   "--output", "O=" + path("o")]
            cmd += [x for n in w for x in ("--input", "%s=%s" % (n, path(n)))]
            for c in ("KC", "VC"):
                if cache_in:
                    cmd += ["--input", "%s=%s" % (c, path(cache_in + "_" + c))]
                cmd += ["--output", "%s=%s" % (c, path(tag + "_" + c))]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=300)
            if p.returncode != 0:
                raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout))
            return np.load(path("o"))

        for rt in ["threads"] + (["mpi"] if a.mpi else []):
            if (4, rt) not in exes or (1, rt) not in exes:
                continue
            try:
                # Two decode steps fill positions 0 and 1: the cache both paths start from.
                step(rt, 1, 0, tokens[:, 0:1], "d0", None)
                step(rt, 1, 1, tokens[:, 1:2], "base", "d0")
                # Decode 2..5 one token a run; prefill 2..5 in one run.
                dec, prev = [], "base"
                for pos in range(2, 6):
                    dec.append(step(rt, 1, pos, tokens[:, pos:pos + 1], "d%d" % pos, prev)[:, 0])
                    prev = "d%d" % pos
                pre = step(rt, 4, 2, tokens[:, 2:6], "pre", "base")
                err = float(np.max(np.abs(pre - np.stack(dec, 1))))
                # Not bit for bit: four rows go through gemm, one through gemv.
                caches = all(np.allclose(np.load(path("pre_" + c)), np.load(path("d5_" + c)),
                                         rtol=0, atol=1e-6) for c in ("KC", "VC"))
                tally.result(err < 1e-5 and caches,
                             "prefill of 4 at Pos = 2 equals 4 decode runs (%s): max |diff| %.2g, "
                             "caches %s" % (rt, err, "equal" if caches else "DIFFER"))
                # Then one more token, from either cache, against NumPy.
                after_pre = step(rt, 1, 6, tokens[:, 6:7], "p6", "pre")
                after_dec = step(rt, 1, 6, tokens[:, 6:7], "q6", "d5")
                kc, vc = np.zeros((B, S, K, H)), np.zeros((B, S, K, H))
                w64 = {n: v.astype(np.float64) for n, v in w.items()}
                reference(tokens[:, 0:2].astype(np.float64), 0, w64, kc, vc)
                reference(tokens[:, 2:6].astype(np.float64), 2, w64, kc, vc)
                want = reference(tokens[:, 6:7].astype(np.float64), 6, w64, kc, vc)
                e1 = float(np.max(np.abs(after_pre - want)))
                tally.result(e1 < 1e-5 and np.allclose(after_pre, after_dec, rtol=0, atol=1e-6),
                             "decode after prefill equals decode after decode and NumPy (%s): "
                             "max |error| %.2g" % (rt, e1))
            except RuntimeError as e:
                tally.result(False, "prefill and decode (%s)" % rt, str(e))
                continue
            # A window past the end of the cache.
            np.save(path("pos"), np.array(6, np.int32))
            cmd = exes[(4, rt)] + ["--input", "X0=" + path("x"), "--input", "Pos=" + path("pos")]
            cmd += [x for n in w for x in ("--input", "%s=%s" % (n, path(n)))]
            np.save(path("x"), tokens[:, 0:4])
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=300)
            needle = "write into 'KC': positions Pos = 6 to 9 (a window of 4) are outside its dim 'S' of 8"
            tally.result(p.returncode == 1 and needle in p.stdout,
                         "a window past the cache is an error (%s)" % rt,
                         "exit %d, expected %r in:\n%s" % (p.returncode, needle, p.stdout))
        generation_checks(a, work, rng, tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
