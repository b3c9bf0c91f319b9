#!/usr/bin/python3
"""sample.py - held-out loss and a sample of fortunes_transformer.ein's params.

Loads the params a training run saved (`--save DIR`), runs the model's
forward pass in NumPy (the same two layers as the .ein file), prints the
cross-entropy in nats per character on the held-out windows prepare.py
wrote, and then generates text from a prompt, one character at a time,
sampling the softmax at a temperature (0: greedy).

Usage: sample.py PARAMS_DIR DATA_DIR [--prompt TEXT] [--chars 300]
                 [--temperature 0.8] [--seed 0]
"""
import argparse
import os
import sys

import numpy as np

LAYERS, N, H = 2, 4, 32


def rmsnorm(x, g):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * g


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def logits(p, tok):
    """[B, T, V] logits of token ids tok [B, T] (T <= 64)."""
    t = tok.shape[1]
    x = p["Emb"][tok] + p["Pos"][:t]
    mask = np.tril(np.ones((t, t), dtype=bool))
    for l in range(1, LAYERS + 1):
        a = rmsnorm(x, p["G%d" % l])
        q, k, v = (np.einsum("btd,dnh->btnh", a, p[w + str(l)]) for w in ("Wq", "Wk", "Wv"))
        sc = np.where(mask, np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(H), -np.inf)
        e = np.exp(sc - sc.max(axis=-1, keepdims=True))
        o = np.einsum("bnts,bsnh->btnh", e / e.sum(axis=-1, keepdims=True), v)
        y = x + np.einsum("btnh,nhd->btd", o, p["Wo%d" % l])
        x = y + gelu(rmsnorm(y, p["M%d" % l]) @ p["Wu%d" % l]) @ p["Wd%d" % l]
    return rmsnorm(x, p["Gf"]) @ p["Wout"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("params")
    ap.add_argument("data")
    ap.add_argument("--prompt", default="The ")
    ap.add_argument("--chars", type=int, default=300)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    p = {f[:-4]: np.load(os.path.join(a.params, f)).astype(np.float64)
         for f in os.listdir(a.params) if f.endswith(".npy") and "." not in f[:-4]}
    tok = np.load(os.path.join(a.data, "valid_tok.npy"))[:256]
    nxt = np.load(os.path.join(a.data, "valid_nxt.npy"))[:256].astype(np.int64)
    z = logits(p, tok)
    mx = z.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z - mx).sum(axis=-1)) + mx[..., 0]
    nll = np.mean(lse - np.take_along_axis(z, nxt[..., None], axis=-1)[..., 0])
    print("held-out loss: %.4f nats per character (%d windows)" % (nll, len(tok)))
    rng = np.random.default_rng(a.seed)
    text = [min(ord(c), 127) for c in a.prompt]
    for _ in range(a.chars):
        last = logits(p, np.array([text[-64:]]))[0, -1]
        if a.temperature <= 0:
            c = int(np.argmax(last))
        else:
            w = np.exp((last - last.max()) / a.temperature)
            c = int(rng.choice(len(w), p=w / w.sum()))
        text.append(c)
    sys.stdout.write(bytes(text).decode("ascii", "replace") + "\n")


if __name__ == "__main__":
    main()
