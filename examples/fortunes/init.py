#!/usr/bin/python3
"""init.py - initial params for fortunes_transformer.ein, as .npy files.

GPT-2's initialisation: weights normal with standard deviation 0.02 (the
output projections Wo and Wd of each layer scaled by 1 / sqrt(2 * layers)),
RMSNorm gains 1.  Writes DIR/NAME.npy for every param and prints the
`--input NAME=DIR/NAME.npy` flags that give them to the executable.

With --stacked L, the params of fortunes_pipeline.ein instead: the L
layers' weights stacked on a first dim (G[L, D], Wq[L, D, N, H], ...), as
a `repeat L` block reads them.

Usage: init.py DIR [SEED] [--stacked L]
"""
import os
import sys

import numpy as np

V, T, D, N, H, F, LAYERS = 128, 64, 128, 4, 32, 512, 2


LAYER = {"G": (D,), "Wq": (D, N, H), "Wk": (D, N, H), "Wv": (D, N, H), "Wo": (N, H, D), "M": (D,),
         "Wu": (D, F), "Wd": (F, D)}


def params(rng, stacked=0):
    """The params by name: per layer (G1, Wq1, ...) or, stacked > 0, the
    layers stacked on a first dim of that size (G, Wq, ...)."""
    layers = stacked or LAYERS
    p = {"Emb": (V, D), "Pos": (T, D), "Gf": (D,), "Wout": (D, V)}
    if stacked:
        p.update({name: (stacked,) + shape for name, shape in LAYER.items()})
    else:  # layer by layer, in the order (and so the draws) of the first version
        for layer in (1, 2):
            p.update({"%s%d" % (name, layer): shape for name, shape in LAYER.items()})
    out = {}
    for name, shape in p.items():
        if name[0] in "GM" and len(shape) == (2 if stacked and name != "Gf" else 1):
            out[name] = np.ones(shape, np.float32)
        else:
            std = 0.02 / (np.sqrt(2 * layers) if name[:2] in ("Wo", "Wd") else 1)
            out[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return out


def main():
    args = sys.argv[1:]
    stacked = 0
    if "--stacked" in args:
        i = args.index("--stacked")
        if i + 1 >= len(args) or not args[i + 1].isdigit() or int(args[i + 1]) < 1:
            sys.exit("init.py: --stacked wants a layer count, like --stacked 4")
        stacked = int(args[i + 1])
        del args[i:i + 2]
    if len(args) < 1 or len(args) > 2:
        sys.exit(__doc__.strip().split("\n")[-1])
    out = args[0]
    os.makedirs(out, exist_ok=True)
    flags = []
    seed = int(args[1]) if len(args) > 1 else 0
    for name, value in params(np.random.default_rng(seed), stacked).items():
        path = os.path.join(out, name + ".npy")
        np.save(path, value)
        flags.append("--input %s=%s" % (name, path))
    print(" ".join(flags))


if __name__ == "__main__":
    main()
