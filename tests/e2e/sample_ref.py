"""sample_ref.py - runtime/sample.c's token choice in NumPy, for the tests
that check it (tests/runtime/run_sample.py, tests/e2e/sampling.py): the
uniform draw of (seed, step, sequence) and the rule of sample.c's essay."""
import numpy as np

M64 = (1 << 64) - 1


def uniform(seed, step, seq):
    """rt_sample_uniform: splitmix64 of the seed and a counter, in [0, 1)."""
    z = (seed + 0x9E3779B97F4A7C15 * ((step * 1000003 + seq + 1) & M64)) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return (z >> 11) * 2.0**-53


def choose(row, t, k, p, u):
    """The token for logits `row`: temperature t (0: greedy), top-k k (0:
    all), top-p p (1: all) and the uniform draw u."""
    row = np.asarray(row).astype(np.float64)
    if t == 0 or np.isnan(row).any() or np.isinf(row.max()):
        return int(np.argmax(row))
    order = np.argsort(-row, kind="stable")  # larger first, ties by index
    k = min(k, len(row)) if k > 0 else len(row)
    c = np.cumsum(np.exp((row[order[:k]] - row.max()) / t))
    n = k if p >= 1 else int(np.argmax(c >= p * c[-1])) + 1
    hit = np.nonzero(u * c[n - 1] < c[:n])[0]
    return int(order[hit[0]] if len(hit) else order[n - 1])
