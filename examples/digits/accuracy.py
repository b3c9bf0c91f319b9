#!/usr/bin/python3
"""accuracy.py - test accuracy of digits_mlp.ein's trained params.

Reads the params a training run wrote (`--output W1=DIR/W1.npy` ... or
`--save DIR`) and the test set prepare.py wrote, runs the MLP's forward
pass in NumPy (relu(x W1 + B1) W2 + B2) and prints the share of test images
whose largest logit is their label.  Exit status 1 below --min (if given).

Usage: accuracy.py PARAMS_DIR DATA_DIR [--min 0.95]
"""
import argparse
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("params")
    ap.add_argument("data")
    ap.add_argument("--min", type=float, default=0.0)
    a = ap.parse_args()
    p = {n: np.load(os.path.join(a.params, n + ".npy")).astype(np.float64)
         for n in ("W1", "B1", "W2", "B2")}
    x = np.load(os.path.join(a.data, "test_x.npy")).astype(np.float64)
    y = np.load(os.path.join(a.data, "test_y.npy")).argmax(axis=1)
    logits = np.maximum(x @ p["W1"] + p["B1"], 0) @ p["W2"] + p["B2"]
    acc = float(np.mean(logits.argmax(axis=1) == y))
    print("test accuracy: %.4f (%d of %d images)" % (acc, int(round(acc * len(y))), len(y)))
    return 0 if acc >= a.min else 1


if __name__ == "__main__":
    sys.exit(main())
