#!/usr/bin/python3
"""init.py - initial params for fortunes_transformer.ein, as .npy files.

GPT-2's initialisation: weights normal with standard deviation 0.02 (the
output projections Wo and Wd of each layer scaled by 1 / sqrt(2 * layers)),
RMSNorm gains 1.  Writes DIR/NAME.npy for every param and prints the
`--input NAME=DIR/NAME.npy` flags that give them to the executable.

Usage: init.py DIR [SEED]
"""
import os
import sys

import numpy as np

V, T, D, N, H, F, LAYERS = 128, 64, 128, 4, 32, 512, 2


def params(rng):
    p = {"Emb": (V, D), "Pos": (T, D), "Gf": (D,), "Wout": (D, V)}
    for layer in (1, 2):
        p.update({"G%d" % layer: (D,), "Wq%d" % layer: (D, N, H), "Wk%d" % layer: (D, N, H),
                  "Wv%d" % layer: (D, N, H), "Wo%d" % layer: (N, H, D), "M%d" % layer: (D,),
                  "Wu%d" % layer: (D, F), "Wd%d" % layer: (F, D)})
    out = {}
    for name, shape in p.items():
        if name[0] in "GM" and len(shape) == 1:
            out[name] = np.ones(shape, np.float32)
        else:
            std = 0.02 / (np.sqrt(2 * LAYERS) if name[:2] in ("Wo", "Wd") else 1)
            out[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().split("\n")[-1])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    flags = []
    for name, value in params(np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 0)).items():
        path = os.path.join(out, name + ".npy")
        np.save(path, value)
        flags.append("--input %s=%s" % (name, path))
    print(" ".join(flags))


if __name__ == "__main__":
    main()
