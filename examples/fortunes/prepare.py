#!/usr/bin/python3
"""prepare.py - the text of Debian's `fortunes` package as character windows.

Reads every fortune file of /usr/share/games/fortunes (the `fortunes`
package; the .dat indexes, the .u8 copies and the two ASCII-art files are
skipped), replaces each byte outside 7-bit ASCII by '?', and cuts the text
into windows of T = 64 characters at a stride of 64.  A character's token
id is its ASCII code (V = 128).  The last 5% of the windows are held out.

Writes into DIR (default: the current directory):
  train_tok.npy  i32 [N, 64]   the characters of each window
  train_nxt.npy  f32 [N, 64]   the character after each one (the target)
  valid_tok.npy, valid_nxt.npy the held-out windows

Usage: prepare.py [DIR]
"""
import os
import sys

import numpy as np

SRC = "/usr/share/games/fortunes"
T = 64
SKIP = {"art", "ascii-art"}


def load():
    """The corpus as uint8 codes 0..127."""
    names = sorted(n for n in os.listdir(SRC)
                   if "." not in n and n not in SKIP and os.path.isfile(os.path.join(SRC, n)))
    if not names:
        sys.exit("prepare.py: no fortune files in %s (install Debian's fortunes package)" % SRC)
    text = b"".join(open(os.path.join(SRC, n), "rb").read() for n in names)
    codes = np.frombuffer(text, dtype=np.uint8).copy()
    codes[codes >= 128] = ord("?")
    return codes, names


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    codes, names = load()
    n = (len(codes) - 1) // T
    tok = codes[: n * T].reshape(n, T).astype(np.int32)
    nxt = codes[1: n * T + 1].reshape(n, T).astype(np.float32)
    held = max(1, n // 20)
    for name, sl in (("train", slice(0, n - held)), ("valid", slice(n - held, n))):
        np.save(os.path.join(out, name + "_tok.npy"), tok[sl])
        np.save(os.path.join(out, name + "_nxt.npy"), nxt[sl])
    print("wrote %d training and %d held-out windows of %d characters from %d files (%d bytes) "
          "to %s" % (n - held, held, T, len(names), len(codes), out))


if __name__ == "__main__":
    main()
