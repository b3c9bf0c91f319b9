#!/usr/bin/python3
"""serve_bench_stats.py - bench/serve_stats.py, the statistics behind
bench/serve.py's "at equal p99 ITL", on gaps whose answers are known:

- --match-rates auto: the fractions of the saturated request rate,
  rounded, without duplicates; a rate of 0 refused;
- the p99's block bootstrap interval covers the true p99 about as often
  as it says (at least 80% of trials at 95%), for independent gaps and for
  the gaps of steps (every row of a step gets the step's gap, and a few
  steps stall: the p99 rests on a few stalls), where a bootstrap over
  single gaps is too narrow and misses far more often;
- the difference of two p99s and its words: the same distribution is
  within the noise, two far apart are beyond it, either way round.

Usage: serve_bench_stats.py (no arguments; pure Python, a few seconds).
"""
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import serve_stats  # noqa: E402

TRIALS = 25
RESAMPLES = 200


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)
    print("ok: " + what)


def independent_runs(rng, runs=3, n=2000):
    """Exponential gaps (mean 1 ms) one after another; the true p99 is ln 100 ms."""
    out = []
    for _ in range(runs):
        t, run = 0.0, []
        for _ in range(n):
            g = rng.expovariate(1000.0)
            t += g
            run.append((t, g))
        out.append(run)
    return out, math.log(100) / 1000


STALL_P = 0.03  # a step stalls with this probability ...
STALL = (3e-3, 4e-3)  # ... for a uniform time in this range (seconds)


def step_runs(rng, runs=3, steps=300, rows=8):
    """Steps of about 1 ms, each giving its gap to all its rows (their reads
    a few microseconds apart), STALL_P of them stalled.  The true p99 lies
    in the stalls: 3 ms + 1 ms x (1 - 0.01 / STALL_P), 3.67 ms."""
    out = []
    for _ in range(runs):
        t, run = 0.0, []
        for _ in range(steps):
            g = rng.uniform(*STALL) if rng.random() < STALL_P else rng.uniform(0.9e-3, 1.1e-3)
            t += g
            run += [(t + 2e-6 * i, g) for i in range(rows)]
        out.append(run)
    return out, STALL[0] + (STALL[1] - STALL[0]) * (1 - 0.01 / STALL_P)


def coverage(make, seed, block_steps):
    """The share of TRIALS whose 95% interval holds the true p99."""
    rng, hits = random.Random(seed), 0
    for k in range(TRIALS):
        runs, true = make(rng)
        b = serve_stats.Bootstrap(runs, random.Random(k), resamples=RESAMPLES,
                                  block_steps=block_steps)
        lo, hi = b.interval()
        hits += lo <= true <= hi
    return hits / TRIALS


def main():
    check(serve_stats.auto_rates(400.0) == [200.0, 280.0, 320.0, 360.0, 400.0],
          "auto rates: 0.5/0.7/0.8/0.9/1.0 of 400/s")
    check(serve_stats.auto_rates(1234.5, (0.5, 0.5, 1.0)) == [617.0, 1230.0],
          "auto rates: 3 significant digits, duplicates dropped")
    try:
        serve_stats.auto_rates(0.0)
        check(False, "auto rates refuse a saturated rate of 0")
    except ValueError:
        check(True, "auto rates refuse a saturated rate of 0")

    check(serve_stats.quantile([5, 1, 4, 2, 3], 50) == 3 and
          serve_stats.quantile(list(range(1, 101)), 99) == 99,
          "nearest-rank quantiles")

    c = coverage(independent_runs, 1, serve_stats.BLOCK_STEPS)
    check(c >= 0.8, "independent gaps: the 95%% interval holds the true p99 in %.0f%% of "
          "trials" % (100 * c))
    c = coverage(step_runs, 2, serve_stats.BLOCK_STEPS)
    check(c >= 0.8, "steps' gaps with stalls: the block interval holds the true p99 in "
          "%.0f%% of trials" % (100 * c))
    # Blocks shorter than a step's reads (2 us apart): every gap its own
    # block, the bootstrap over single gaps that the module rejects.
    naive = coverage(step_runs, 2, 1e-3)
    check(naive < c - 0.15, "a bootstrap over single gaps holds it in only %.0f%%"
          % (100 * naive))

    rng = random.Random(3)
    a, _ = step_runs(rng)
    b, _ = step_runs(rng)
    ba = serve_stats.Bootstrap(a, random.Random(4), resamples=RESAMPLES)
    bb = serve_stats.Bootstrap(b, random.Random(5), resamples=RESAMPLES)
    d, lo, hi = serve_stats.difference(ba, bb)
    check(lo <= 0 <= hi and serve_stats.noise_verdict(d, lo, hi).endswith("within the noise"),
          "the same distribution twice: the difference %+.2g ms (%+.2g to %+.2g) is noise"
          % (1e3 * d, 1e3 * lo, 1e3 * hi))
    fast = [[(t, g / 2) for t, g in run] for run in a]
    bf = serve_stats.Bootstrap(fast, random.Random(6), resamples=RESAMPLES)
    d, lo, hi = serve_stats.difference(bf, bb)
    check(serve_stats.noise_verdict(d, lo, hi) == "holds beyond the noise",
          "half the gaps: holds beyond the noise (%+.2g ms, %+.2g to %+.2g)"
          % (1e3 * d, 1e3 * lo, 1e3 * hi))
    d, lo, hi = serve_stats.difference(bb, bf)
    check(serve_stats.noise_verdict(d, lo, hi) == "fails beyond the noise",
          "twice the gaps: fails beyond the noise")
    check(serve_stats.noise_verdict(0.0, -1.0, 1.0) == "holds within the noise" and
          serve_stats.noise_verdict(0.5, -1.0, 1.0) == "fails within the noise",
          "equal p99s hold (the strict rule); a positive point fails")
    print("PASS")


if __name__ == "__main__":
    main()
