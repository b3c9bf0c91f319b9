#!/usr/bin/env python3
"""bench/cost_accuracy.py's figures beside the mean, on rounds whose answers
are known:

- fastest: each op's least time over the rounds, the first round's
  prediction and name kept;
- split_half: the fastest of the even rounds (0, 2, 4) against the fastest
  of the odd ones (1, 3), |a - b| / min(a, b), for the ops whose fastest
  time over all rounds passes the threshold; nothing with one round;
- probe_errors: (predicted - measured) / measured of the probe's two ops.

Exit status 0 when all of that holds.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import cost_accuracy as ca  # noqa: E402


def row(op, meas_ms, name, pred_ms=1.0):
    return (op, 1, meas_ms * 1e-3, pred_ms * 1e-3, name)


def close(a, b):
    return abs(a - b) < 1e-12


def main():
    bad = []
    # Five rounds of two ops: A over 1 ms, B under it in every round.
    times_a = [2.0, 2.4, 2.2, 3.0, 2.6]   # even rounds 2.0 2.2 2.6 -> 2.0; odd 2.4 3.0 -> 2.4
    times_b = [0.5, 0.4, 0.6, 0.7, 0.8]
    rounds = [[row(1, ta, "A = Elementwise X", 9.0), row(2, tb, "B = Einsum X, Y")]
              for ta, tb in zip(times_a, times_b)]
    best = ca.fastest(rounds)
    if (not close(best[0][2], 2.0e-3) or not close(best[1][2], 0.4e-3) or not close(best[0][3], 9.0e-3)
            or best[1][4] != "B = Einsum X, Y"):
        bad.append("fastest: %r" % (best,))
    got = ca.split_half({"ex": rounds}, 1e-3)
    if len(got) != 1 or not close(got[0], (2.4 - 2.0) / 2.0):
        bad.append("split_half: %r, want [0.2] (A only: B is under 1 ms)" % (got,))
    # The faster half may be the odd one: the difference is over the smaller
    # (even rounds 2.4 3.0 2.6 -> 2.4, odd 2.0 2.2 -> 2.0).
    swapped = [rounds[1], rounds[0], rounds[3], rounds[2], rounds[4]]
    got = ca.split_half({"ex": swapped}, 1e-3)
    if len(got) != 1 or not close(got[0], (2.4 - 2.0) / 2.0):
        bad.append("split_half, halves swapped: %r, want [0.2]" % (got,))
    # The threshold is on the fastest of all rounds (B's 0.4 ms passes 0.3:
    # even 0.5, odd 0.4), and examples add up.
    got = sorted(ca.split_half({"one": rounds, "two": rounds}, 0.3e-3))
    if len(got) != 4 or not all(close(g, w) for g, w in zip(got, (0.2, 0.2, 0.25, 0.25))):
        bad.append("split_half over two examples at 0.3 ms: %r" % (got,))
    if ca.split_half({"ex": rounds[:1]}, 1e-3):
        bad.append("split_half with one round is not empty")
    probe = [row(1, 2.0, "PC = Elementwise PA, PB", 1.8), row(2, 10.0, "GC = Einsum GA, GB", 11.0)]
    errs = ca.probe_errors(probe)
    if not close(errs["add"], -0.1) or not close(errs["gemm"], 0.1):
        bad.append("probe_errors: %r, want add -0.1, gemm +0.1" % (errs,))
    for b in bad:
        print("FAIL:", b)
    print("%d failures" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
