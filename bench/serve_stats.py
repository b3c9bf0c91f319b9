"""The statistics of bench/serve.py's "at equal p99 inter-token latency":
the match rates that follow the machine (--match-rates auto), the p99's
confidence interval, and whether "continuous p99 <= static p99" holds
beyond the noise.

The p99 of a variant is the nearest-rank 99th percentile of the ITL gaps
of all its --repeat runs pooled.  Its confidence interval is a
non-overlapping block bootstrap over time (Carlstein, Ann. Statist. 14,
1986; Kuensch, Ann. Statist. 17, 1989), with percentile intervals (Efron
and Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 13).  A
bootstrap over single gaps (or the order-statistic interval of a
quantile, which also assumes independent samples) would be far too
narrow here: the gaps are not independent.  Every row of a step gets the
same gap, so one slow step (a preemption, another job's burst) puts up to
B = 16 gaps into the tail at once, and a slow stretch of the machine
slows many steps in a row.  So each run's gaps are cut, by the time they
end, into blocks of BLOCK_STEPS median gaps (about 32 steps: longer than
a step's rows and about one request's life, 24.6 tokens on average), and
the resamples draw whole blocks, with replacement, from the blocks of all
the runs.  A variant's tail made of a few slow stretches then shows as
the wide interval it is.

The verdict stays the strict one (bench/serve.py): the point estimates
decide.  Beside it the interval of the difference p99(continuous) -
p99(static), from independent resamples of the two, says whether the
verdict holds beyond the noise (the whole interval below 0), within it
(the point at or below 0, the interval reaching above), or fails (the
point above 0; within the noise if the interval reaches 0 or below).
"""
import math
import random

# --match-rates auto: continuous batching's rates as fractions of its own
# saturated request rate, measured on the machine (serve.py's docstring
# gives the choice).
AUTO_FRACTIONS = (0.5, 0.7, 0.8, 0.9, 1.0)
# Bootstrap: the blocks' length in median gaps, resamples, confidence.
BLOCK_STEPS = 32
RESAMPLES = 1000
CONFIDENCE = 0.95
# Only gaps above this quantile of the pooled gaps are kept per block: a
# resample's p99 lies above it unless the resample is far from the data
# (then the whole resample is sorted instead).
KEEP_Q = 0.9


def auto_rates(saturated_rps, fractions=AUTO_FRACTIONS):
    """The match rates (requests/s) for continuous batching: each fraction
    of `saturated_rps`, the request rate continuous batching served at a
    saturating arrival rate on this machine, rounded to 3 significant
    digits; duplicates and rates <= 0 dropped.  ValueError when
    saturated_rps is not positive."""
    if not saturated_rps > 0:
        raise ValueError("the saturated request rate must be positive, not %r" % saturated_rps)
    out = []
    for f in fractions:
        r = f * saturated_rps
        r = float("%.3g" % r)
        if r > 0 and r not in out:
            out.append(r)
    return out


def rank_index(n, q):
    """The 0-based index of the nearest-rank q-th percentile of n sorted
    values: the ceil(q n / 100)-th smallest (the 1e-9 keeps q n = 99.0 from
    rounding up to 100 in floating point)."""
    return min(n - 1, max(0, int(math.ceil(q / 100 * n - 1e-9)) - 1))


def quantile(xs, q):
    """The nearest-rank q-th percentile of xs (any order); nan when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[rank_index(len(s), q)]


def blocks(runs, block_steps=BLOCK_STEPS):
    """Cuts each run's gaps into blocks of consecutive time.  `runs`: one
    list a run of (end time s, gap s) pairs.  A run's blocks are
    block_steps x its median gap long, counted from its first gap's end.
    Returns a list of blocks (lists of gaps), empty blocks left out."""
    out = []
    for run in runs:
        if not run:
            continue
        length = block_steps * quantile([g for _, g in run], 50)
        if not length > 0:
            out.append([g for _, g in run])
            continue
        t0 = min(t for t, _ in run)
        cut = {}
        for t, g in run:
            cut.setdefault(int((t - t0) / length), []).append(g)
        out.extend(cut[k] for k in sorted(cut))
    return out


class Bootstrap:
    """The q-th percentile of a variant's pooled gaps and its block
    bootstrap distribution (module docstring).  `runs` as for blocks();
    `rng` a random.Random (seeded by the caller, so a bench run's
    intervals are reproducible from its gaps)."""

    def __init__(self, runs, rng, q=99, resamples=RESAMPLES, block_steps=BLOCK_STEPS):
        self.q = q
        bl = blocks(runs, block_steps)
        pooled = sorted(g for b in bl for g in b)
        self.n = len(pooled)
        self.point = pooled[rank_index(self.n, q)] if pooled else float("nan")
        self.samples = []
        if not pooled:
            return
        cut = pooled[int(KEEP_Q * (self.n - 1))]
        tops = [sorted((g for g in b if g >= cut), reverse=True) for b in bl]
        for _ in range(resamples):
            pick = rng.choices(range(len(bl)), k=len(bl))
            n = sum(len(bl[i]) for i in pick)
            from_top = n - rank_index(n, q)  # the answer is the from_top-th largest
            top = [g for i in pick for g in tops[i]]
            if len(top) >= from_top:
                top.sort(reverse=True)
                self.samples.append(top[from_top - 1])
            else:  # a resample far from the pooled data: sort all of it
                every = sorted(g for i in pick for g in bl[i])
                self.samples.append(every[rank_index(n, q)])

    def interval(self, confidence=CONFIDENCE):
        """(low, high): the percentile interval of the bootstrap samples."""
        return percentile_interval(self.samples, confidence)


def percentile_interval(samples, confidence=CONFIDENCE):
    """(low, high) of a bootstrap distribution at that confidence (Efron
    and Tibshirani 1993, ch. 13): its (1-c)/2 and (1+c)/2 quantiles;
    (nan, nan) when there are no samples."""
    if not samples:
        return float("nan"), float("nan")
    s = sorted(samples)
    lo = s[max(0, int(math.floor((1 - confidence) / 2 * len(s))))]
    hi = s[min(len(s) - 1, int(math.ceil((1 + confidence) / 2 * len(s))) - 1)]
    return lo, hi


def difference(c, s, confidence=CONFIDENCE):
    """(point, low, high) of p99(c) - p99(s) for two Bootstraps resampled
    independently: the i-th samples paired."""
    d = [a - b for a, b in zip(c.samples, s.samples)]
    lo, hi = percentile_interval(d, confidence)
    return c.point - s.point, lo, hi


def noise_verdict(point, low, high):
    """Whether "continuous p99 <= static p99" holds, from the difference's
    point and interval (module docstring): "holds beyond the noise",
    "holds within the noise", "fails within the noise" or "fails beyond
    the noise".  The strict verdict is the first word."""
    if point <= 0:
        return "holds beyond the noise" if high < 0 else "holds within the noise"
    return "fails within the noise" if low <= 0 else "fails beyond the noise"


def seeded(seed, label):
    """A random.Random for one variant's bootstrap, from the bench's --seed
    and the variant's label (reproducible; independent between variants)."""
    return random.Random("%s/%s" % (seed, label))

