#!/usr/bin/python3
"""prepare.py - scikit-learn's handwritten digits as .npy files for digits_mlp.ein.

The data is the copy of the UCI optical digits test set that Debian's
python3-sklearn ships (sklearn/datasets/data/digits.csv.gz: 1797 images of
8x8 pixels with values 0..16, 10 classes); nothing is downloaded.  Pixels
are scaled to [0, 1]; labels become one-hot f32 rows.  A fixed permutation
splits the images into 1440 for training and 357 for testing.

Writes into DIR (default: the current directory):
  train_x.npy  f32 [1440, 64]    train_y.npy  f32 [1440, 10]
  test_x.npy   f32 [357, 64]     test_y.npy   f32 [357, 10]

Usage: prepare.py [DIR]
"""
import gzip
import os
import sys

import numpy as np
import sklearn

TRAIN = 1440


def load():
    """(pixels [1797, 64] in 0..16, labels [1797]) from the bundled CSV."""
    path = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "data", "digits.csv.gz")
    with gzip.open(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1], data[:, -1].astype(np.int64)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    x, y = load()
    order = np.random.default_rng(0).permutation(len(x))
    x = (x[order] / 16.0).astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[y[order]]
    for name, sl in (("train", slice(0, TRAIN)), ("test", slice(TRAIN, None))):
        np.save(os.path.join(out, name + "_x.npy"), x[sl])
        np.save(os.path.join(out, name + "_y.npy"), onehot[sl])
    print("wrote %d training and %d test images to %s" % (TRAIN, len(x) - TRAIN, out))


if __name__ == "__main__":
    main()
