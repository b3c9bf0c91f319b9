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
(--check).  Last, the file compiled with -D T=2 prefills the first 2
prompt tokens in one run (--output Kc, Vc), and the decode executable
given those caches (--prompt-cached 2) must generate the same tokens and
pass --check.  The last line is `N passed, N failed`.

Usage: decode.py --einc PATH --example PATH
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

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


def reference(ins):
    """The logits [B, V] of one decode step."""
    B, S, K, M, G, L = (DIMS[k] for k in "BSKMGL")
    H = 2 * G
    p = int(ins["Pos"])
    cos, sin = np.concatenate([ins["CosT"][p]] * 2), np.concatenate([ins["SinT"][p]] * 2)

    def rope(v):  # rotate_half
        return v * cos + np.concatenate([-v[..., G:], v[..., :G]], -1) * sin

    x = ins["Emb"][ins["Tok"][:, 0]]
    for l in range(L):
        xn = rmsnorm(x, ins["G1"][l])
        q = rope(np.einsum("bd,dkmpg->bkmpg", xn, ins["Wq"][l]).reshape(B, K, M, H))
        k_new = rope(np.einsum("bd,dkpg->bkpg", xn, ins["Wk"][l]).reshape(B, K, H))
        v_new = np.einsum("bd,dkpg->bkpg", xn, ins["Wv"][l]).reshape(B, K, H)
        keys = ins["Kc"][l].reshape(B, S, K, H).copy()
        values = ins["Vc"][l].reshape(B, S, K, H).copy()
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--example", required=True)
    a = ap.parse_args()
    ins = inputs(np.random.default_rng(2))
    want = reference(ins)
    with tempfile.TemporaryDirectory(prefix="einc-decode-") as work:
        src = os.path.join(work, "decode_f32.ein")
        with open(a.example, encoding="utf-8") as f, open(src, "w", encoding="utf-8") as g:
            g.write(f.read().replace("bf16", "f32"))
        exe, out = os.path.join(work, "decode"), os.path.join(work, "out.npy")
        dims = [x for k, v in DIMS.items() for x in ("-D", "%s=%d" % (k, v))]
        cmd = [a.einc, src, "-o", exe] + dims
        run = [exe, "--output", "Logits=" + out]
        for k, v in ins.items():
            path = os.path.join(work, k + ".npy")
            np.save(path, v if v.dtype == np.int32 else v.astype(np.float32))
            run += ["--input", "%s=%s" % (k, path)]
        for c in (cmd, run):
            p = subprocess.run(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
            if p.returncode != 0:
                print("FAIL %s exited %d\n%s\n0 passed, 1 failed" % (" ".join(c), p.returncode, p.stdout))
                return 1
        got = np.load(out).astype(np.float64)[:, 0]  # [B, T = 1, V]
        # Generation from an empty cache: the params and tables only.
        prompt = os.path.join(work, "prompt.npy")
        ids = np.random.default_rng(4).integers(0, DIMS["V"], (DIMS["B"], 3)).astype(np.int32)
        np.save(prompt, ids)
        params = [x for k in ins if k not in ("Tok", "Pos", "Kc", "Vc")
                  for x in ("--input", "%s=%s" % (k, os.path.join(work, k + ".npy")))]
        gen = [exe, "--prompt-ids", prompt, "--generate", "5", "--check"] + params
        plain = os.path.join(work, "plain.npy")
        p = subprocess.run(gen + ["--generated", plain], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        # Prefill of the prompt's first 2 tokens in one run, then generation
        # from its caches.
        exe2 = os.path.join(work, "prefill")
        np.save(os.path.join(work, "head.npy"), ids[:, :2].copy())
        np.save(os.path.join(work, "zero.npy"), np.array(0, np.int32))
        steps = [[a.einc, src, "-o", exe2, "-D", "T=2"] + dims,
                 [exe2, "--input", "Tok=" + os.path.join(work, "head.npy"), "--input",
                  "Pos=" + os.path.join(work, "zero.npy"), "--output",
                  "Kc=" + os.path.join(work, "kc.npy"), "--output",
                  "Vc=" + os.path.join(work, "vc.npy")] + params,
                 gen + ["--prompt-cached", "2", "--input", "Kc=" + os.path.join(work, "kc.npy"),
                        "--input", "Vc=" + os.path.join(work, "vc.npy"), "--generated",
                        os.path.join(work, "cached.npy")]]
        pre = None
        for c in steps:
            pre = subprocess.run(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=300)
            if pre.returncode != 0:
                break
        pre_ok = (pre.returncode == 0 and "check tokens: equal (2 sequences x 5 tokens)" in pre.stdout
                  and os.path.exists(plain) and
                  np.array_equal(np.load(plain), np.load(os.path.join(work, "cached.npy"))))
    err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    ok = got.shape == want.shape and err < 1e-4
    print("%s llama2_13b_decode (f32, %s): max |error| / max |ref| = %.3g (tol 1e-4), shape %s" %
          ("ok  " if ok else "FAIL", " ".join("%s=%d" % kv for kv in DIMS.items()), err, got.shape))
    gen_ok = p.returncode == 0 and "check tokens: equal (2 sequences x 5 tokens)" in p.stdout
    print("%s llama2_13b_decode generates 5 tokens from a 3-token prompt, equal to the unsharded "
          "run's%s" % ("ok  " if gen_ok else "FAIL", "" if gen_ok else "\n" + p.stdout))
    print("%s llama2_13b_decode -D T=2 prefills 2 prompt tokens in one run, and generation "
          "with --prompt-cached 2 makes the same 5 tokens%s" %
          ("ok  " if pre_ok else "FAIL", "" if pre_ok else "\n" + pre.stdout))
    results = [ok, gen_ok, pre_ok]
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
