#!/usr/bin/python3
"""run_sample.py - --generate's token choice (runtime/sample.c) against a
NumPy implementation of the same rule with the same uniform draws.

usage: run_sample.py --tool SAMPLE_ROWS

SAMPLE_ROWS (sample_rows.c) applies rt_sample_row to rows of logits with
rt_sample_uniform's draw for each row; tests/e2e/sample_ref.py draws
with splitmix64 again in Python and applies the rule (sample.c's essay:
greedy; temperature; the top k by logit, ties to the lower index; the
smallest nucleus of mass >= p; the first running sum above u times the
kept sum) in NumPy.  Every token must
agree, for f64 and f32 logits, over settings that make each cut bind
(k = 1, small and large k, k = V; p tiny, middling, 1; both together;
temperatures far below and above 1), over rows with ties, -inf (masked
tokens), a NaN or +inf (greedy then), and all -inf.  Also: the draws are
uniform in [0, 1) (mean and a Kolmogorov-Smirnov distance), top-k never
picks outside the top k, and one seed's tokens differ from another's.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from sample_ref import choose, uniform  # noqa: E402


def rows_of(rng, rows, vocab):
    """Random logits, with some special rows mixed in."""
    x = rng.standard_normal((rows, vocab)) * rng.choice([0.3, 1, 4], size=(rows, 1))
    x[1::7, :vocab // 2] = x[1::7, :1]          # ties with the row's first logit
    x[2::7, 3:vocab - 2] = -np.inf               # masked tokens
    x[3::29, 5] = np.nan                         # NaN: greedy, the NaN's index
    x[4::29, 7] = np.inf                         # +inf: greedy
    x[5::29] = -np.inf                           # nothing left: token 0
    x[6::7] = np.round(x[6::7])                  # many exact ties
    return x


def tool_tokens(tool, dtype, rows, t, k, p, seed):
    text = "%d %d\n" % rows.shape + "\n".join(" ".join(repr(float(v)) for v in r) for r in rows)
    out = subprocess.run([tool, dtype, repr(t), str(k), repr(p), str(seed)], input=text,
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return [int(v) for v in out.stdout.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(2)
    failures = 0
    vocab, nrows = 50, 400
    settings = [(0, 0, 1), (1, 0, 1), (0.3, 0, 1), (5, 0, 1), (1, 1, 1), (1, 3, 1), (1, 49, 1),
                (1, 50, 1), (1, 0, 1e-9), (1, 0, 0.3), (1, 0, 0.9), (2, 10, 0.5), (0.7, 5, 0.95)]
    for dtype in ("f64", "f32"):
        logits = rows_of(rng, nrows, vocab)
        ref = logits.astype(np.float32 if dtype == "f32" else np.float64)
        for t, k, p in settings:
            seed = int(rng.integers(0, 2**63))
            got = tool_tokens(a.tool, dtype, logits, t, k, p, seed)
            want = [choose(ref[r], t, k, p, uniform(seed, r // 4, r % 4)) for r in range(nrows)]
            bad = [r for r in range(nrows) if got[r] != want[r]]
            ok = not bad
            if ok and k > 0 and t > 0:  # never outside the top k of a finite row
                for r in range(nrows):
                    row = ref[r].astype(np.float64)
                    if np.isfinite(row.max()) and not np.isnan(row).any():
                        ok = ok and got[r] in np.argsort(-row, kind="stable")[:k]
            print("%s %s T=%g k=%d p=%g: %d rows agree with NumPy"
                  % ("ok  " if ok else "FAIL", dtype, t, k, p, nrows - len(bad)))
            for r in bad[:3]:
                print("  row %d: tool %d, NumPy %d" % (r, got[r], want[r]))
            failures += not ok
    # The draws: uniform on [0, 1), and another seed draws other tokens.
    u = np.array([uniform(9, s, b) for s in range(2000) for b in range(4)])
    ks = np.max(np.abs(np.sort(u) - (np.arange(len(u)) + 0.5) / len(u)))
    ok = u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01 and ks < 0.02
    print("%s draws: mean %.4f, KS distance %.4f over %d" % ("ok  " if ok else "FAIL", u.mean(),
                                                            ks, len(u)))
    failures += not ok
    flat = np.zeros((nrows, vocab))
    one = tool_tokens(a.tool, "f64", flat, 1, 0, 1, 1)
    two = tool_tokens(a.tool, "f64", flat, 1, 0, 1, 2)
    same = tool_tokens(a.tool, "f64", flat, 1, 0, 1, 1)
    ok = one == same and one != two and sum(x == y for x, y in zip(one, two)) < nrows // 10
    print("%s seeds: seed 1 twice gives the same tokens, seed 2 others" % ("ok  " if ok else "FAIL"))
    failures += not ok
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
