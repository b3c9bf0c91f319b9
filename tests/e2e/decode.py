#!/usr/bin/python3
"""decode.py - examples/llama2_13b_decode.ein against an independent NumPy
decode step.

The example is one generation step of LLaMA-2 13B (seed 002): B new tokens
at position Pos, each writing its key and value into the KV cache (a
`state`) and attending to positions 0..Pos.  Here it is compiled at small
dims (3 layers, 8 KV heads of 2 query heads each, on its 2x4 mesh) in f32
(the file's bf16 replaced, so that the comparison is tight), run on the
threads runtime from .npy inputs (a full cache, the new token at the last
position S-1), and compared with a NumPy step written the usual way: GQA
heads as [K, M] groups, head vectors of H = 2G entries with rotate_half
rotary embeddings at position Pos, the new key and value in the cache's
last row, softmax over S positions, RMSNorm with eps 1e-5, SwiGLU.  Then
the same executable generates from a prompt with an empty cache
(--generate) and its tokens must equal the unsharded reference's
(--check) and a NumPy greedy decoder's.  Last, the file compiled with
-D T=2 prefills the first 2 prompt tokens in one run (--output Kc, Vc),
and the decode executable given those caches (--prompt-cached 2) must
generate the same tokens and pass --check.  With --mpi, generation and
prefill run again on 4 MPI ranks (-D Y=2: a 2x2 mesh).  The last line is
`N passed, N failed`.

Usage: decode.py --einc PATH --example PATH [--mpi --mpirun PATH]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402

DIMS = {"B": 2, "S": 16, "D": 64, "K": 8, "M": 2, "G": 4, "F": 64, "V": 64, "L": 3}
SCALE = 1 / 11.313708498984761  # the file's 1/sqrt(128), whatever G is


def rmsnorm(v, g):
    return v / np.sqrt(np.mean(v * v, -1, keepdims=True) + 1e-5) * g


def inputs(rng):
    B, S, D, K, M, G, F, V, L = (DIMS[k] for k in "BSDKMGFVL")
    inv = 10000.0 ** (-np.arange(G) * 2.0 / (2 * G))
    pos = np.arange(S)[:, None] * inv
    ins = {"Tok": rng.integers(0, V, (B, 1)).astype(np.int32), "Pos": np.array(S - 1, np.int32),
           "CosT": np.cos(pos), "SinT": np.sin(pos),
           "Kc": rng.standard_normal((L, B, S, K, 2, G)), "Vc": rng.standard_normal((L, B, S, K, 2, G)),
           "Emb": rng.standard_normal((V, D)), "Gf": 1 + 0.1 * rng.standard_normal(D),
           "Wlm": rng.standard_normal((D, V)) / np.sqrt(D),
           "G1": 1 + 0.1 * rng.standard_normal((L, D)), "G2": 1 + 0.1 * rng.standard_normal((L, D))}
    for name, shape, fan_in in (("Wq", (D, K, M, 2, G), D), ("Wk", (D, K, 2, G), D),
                                ("Wv", (D, K, 2, G), D), ("Wo", (K, M, 2, G, D), K * M * 2 * G),
                                ("Wg", (D, F), D), ("Wu", (D, F), D), ("Wd", (F, D), F)):
        ins[name] = rng.standard_normal((L,) + shape) / np.sqrt(fan_in)
    return ins


def step(ins, tok, p, kc, vc):
    """The logits [B, V] of tokens tok [B] at position p; their keys and
    values go into the caches kc, vc [L, B, S, K, 2, G] (in place)."""
    B, S, K, M, G, L = (DIMS[k] for k in "BSKMGL")
    H = 2 * G
    cos, sin = np.concatenate([ins["CosT"][p]] * 2), np.concatenate([ins["SinT"][p]] * 2)

    def rope(v):  # rotate_half
        return v * cos + np.concatenate([-v[..., G:], v[..., :G]], -1) * sin

    x = ins["Emb"][tok]
    for l in range(L):
        xn = rmsnorm(x, ins["G1"][l])
        q = rope(np.einsum("bd,dkmpg->bkmpg", xn, ins["Wq"][l]).reshape(B, K, M, H))
        k_new = rope(np.einsum("bd,dkpg->bkpg", xn, ins["Wk"][l]).reshape(B, K, H))
        v_new = np.einsum("bd,dkpg->bkpg", xn, ins["Wv"][l]).reshape(B, K, H)
        keys = kc[l].reshape(B, S, K, H)  # views: the writes below update the caches
        values = vc[l].reshape(B, S, K, H)
        keys[:, p], values[:, p] = k_new, v_new
        scores = np.einsum("bkmh,bskh->bkms", q, keys) * SCALE
        scores[..., p + 1:] = -np.inf
        pr = np.exp(scores - scores.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = np.einsum("bkms,bskh->bkmh", pr, values).reshape(B, K, M, 2, G)
        y1 = x + np.einsum("bkmpg,kmpgd->bd", o, ins["Wo"][l])
        yn = rmsnorm(y1, ins["G2"][l])
        gate = yn @ ins["Wg"][l]
        x = y1 + (gate / (1 + np.exp(-gate)) * (yn @ ins["Wu"][l])) @ ins["Wd"][l]
    return rmsnorm(x, ins["Gf"]) @ ins["Wlm"]


def reference(ins):
    """The logits [B, V] of one decode step from the inputs' caches."""
    return step(ins, ins["Tok"][:, 0], int(ins["Pos"]), ins["Kc"].copy(), ins["Vc"].copy())


def numpy_generate(ins, prompt, n):
    """Greedy generation of n tokens after prompt [B, T0] from empty caches:
    [B, T0 + n], as --generate does (one step per position)."""
    kc, vc = np.zeros_like(ins["Kc"]), np.zeros_like(ins["Vc"])
    ids = np.concatenate([prompt, np.zeros((prompt.shape[0], n), np.int32)], 1)
    for s in range(prompt.shape[1] + n - 1):
        logits = step(ins, ids[:, s], s, kc, vc)
        if s + 1 >= prompt.shape[1]:
            ids[:, s + 1] = logits.argmax(-1)
    return ids


def sh(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)


def serve(a, work, src, dims, params, ids, rt):
    """Generation on runtime `rt` (threads on the file's 2x4 mesh, or MPI
    on 4 ranks of a 2x2 one): 5 tokens from the 3-token prompt `ids` from
    an empty cache, then again after a -D T=2 build's prefill of its first
    2 tokens (--prompt-cached 2).  Returns (plain tokens or None, output of
    the plain run, whether the cached run made the same tokens and passed
    --check, its output)."""
    mesh = [] if rt == "threads" else ["-D", "Y=2", "--runtime=mpi"]
    launch = [] if rt == "threads" else mpi_launch(a.mpirun, 4)

    def path(name):
        return os.path.join(work, "%s_%s.npy" % (name, rt))

    exe, exe2 = os.path.join(work, "decode_" + rt), os.path.join(work, "prefill_" + rt)
    for c in ([a.einc, src, "-o", exe] + dims + mesh, [a.einc, src, "-o", exe2, "-D", "T=2"] + dims + mesh):
        p = sh(c)
        if p.returncode != 0:
            return None, p.stdout, False, ""
    np.save(path("prompt"), ids)
    np.save(path("head"), ids[:, :2].copy())
    np.save(path("zero"), np.array(0, np.int32))
    gen = launch + [exe, "--prompt-ids", path("prompt"), "--generate", "5", "--check"] + params
    plain = sh(gen + ["--generated", path("plain")])
    if plain.returncode != 0:
        return None, plain.stdout, False, ""
    pre = sh(launch + [exe2, "--input", "Tok=" + path("head"), "--input", "Pos=" + path("zero"),
                       "--output", "Kc=" + path("kc"), "--output", "Vc=" + path("vc")] + params)
    if pre.returncode != 0:
        return np.load(path("plain")), plain.stdout, False, pre.stdout
    cached = sh(gen + ["--prompt-cached", "2", "--input", "Kc=" + path("kc"), "--input",
                       "Vc=" + path("vc"), "--generated", path("cached")])
    same = (cached.returncode == 0 and np.array_equal(np.load(path("plain")), np.load(path("cached")))
            and "check tokens: equal (2 sequences x 5 tokens)" in cached.stdout)
    return np.load(path("plain")), plain.stdout, same, cached.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--example", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    ins = inputs(np.random.default_rng(2))
    want = reference(ins)
    results = []

    def report(ok, what, detail=""):
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, "" if ok or not detail else "\n" + detail))
        results.append(bool(ok))

    with tempfile.TemporaryDirectory(prefix="einc-decode-") as work:
        src = os.path.join(work, "decode_f32.ein")
        with open(a.example, encoding="utf-8") as f, open(src, "w", encoding="utf-8") as g:
            g.write(f.read().replace("bf16", "f32"))
        exe, out = os.path.join(work, "decode"), os.path.join(work, "out.npy")
        dims = [x for k, v in DIMS.items() for x in ("-D", "%s=%d" % (k, v))]
        run = [exe, "--output", "Logits=" + out]
        for k, v in ins.items():
            path = os.path.join(work, k + ".npy")
            np.save(path, v if v.dtype == np.int32 else v.astype(np.float32))
            run += ["--input", "%s=%s" % (k, path)]
        for c in ([a.einc, src, "-o", exe] + dims, run):
            p = sh(c)
            if p.returncode != 0:
                print("FAIL %s exited %d\n%s\n0 passed, 1 failed" % (" ".join(c), p.returncode, p.stdout))
                return 1
        got = np.load(out).astype(np.float64)[:, 0]  # [B, T = 1, V]
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        report(got.shape == want.shape and err < 1e-4,
               "llama2_13b_decode (f32, %s): max |error| / max |ref| = %.3g (tol 1e-4), shape %s" %
               (" ".join("%s=%d" % kv for kv in DIMS.items()), err, got.shape))
        # Generation: the params and tables only; the caches start empty.
        ids = np.random.default_rng(4).integers(0, DIMS["V"], (DIMS["B"], 3)).astype(np.int32)
        params = [x for k in ins if k not in ("Tok", "Pos", "Kc", "Vc")
                  for x in ("--input", "%s=%s" % (k, os.path.join(work, k + ".npy")))]
        want_ids = numpy_generate(ins, ids, 5)
        for rt in ["threads"] + (["mpi"] if a.mpi else []):
            where = "threads, 2x4" if rt == "threads" else "MPI, 4 ranks of a 2x2 mesh"
            tokens, out_plain, cached_ok, out_cached = serve(a, work, src, dims, params, ids, rt)
            report(tokens is not None and "check tokens: equal (2 sequences x 5 tokens)" in out_plain,
                   "llama2_13b_decode generates 5 tokens from a 3-token prompt, equal to the "
                   "unsharded run's (%s)" % where, out_plain)
            report(tokens is not None and np.array_equal(tokens, want_ids),
                   "... and to a NumPy greedy decoder's (%s): %s" %
                   (where, tokens[:, 3:].tolist() if tokens is not None else None),
                   "NumPy: %s" % want_ids[:, 3:].tolist())
            report(cached_ok, "llama2_13b_decode -D T=2 prefills 2 prompt tokens in one run, and "
                   "generation with --prompt-cached 2 makes the same 5 tokens (%s)" % where,
                   out_cached)
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
