#!/usr/bin/env python3
"""Seed 001 question 2 end to end: one AllGather_XY of [B_X, D_Y] on TPU v4.

usage: test_multiaxis.py EINC GOLDEN_FILE [FOLDED_FILE]

Seed 001 ("How to Scale Your Model", part 3, "what if we AllGather over
several axes?" and question 2): on a TPU v4 4x4x4 slice, B = 1024,
D = 4096, bf16, AllGather_XY([B_X, D_Y]) has twice the bandwidth of one
axis and takes 2BD / (2 W_ici) = 46 us.  `einc --hw tpu-v4` on the golden
file tests/golden/cases/seed001_q2_allgather_xy.ein must

1. plan one AllGather over X and Y, X along B and Y along D (the JSON
   dump's "dims");
2. estimate it at 46 us within 10% (einc's formula gives 46.6 us);
3. say in its reason what the collectives along one dim each would take
   (AllGather_Y then AllGather_X: 116.5 us), and in --explain that it is
   one collective over the group of both axes;
4. total 46.6 us for the step in --dump-cost.

With FOLDED_FILE (tests/golden/cases/seed001_folded_axis.ein: the seed's
{X: 16, Y: 4} on a 4x4x4 cube, `X = 16 over 2`), the one AllGather_X of
[B_X, D] has the links of two physical axes and takes the same 46.6 us.
"""
import json
import re
import sys

from einc_checks import Checks, run

SEED_US = 46.0


def check_folded(einc, path, check):
    """The folded axis: one AllGather_X at two axes' bandwidth, 46.6 us."""
    rc, out, err = run(einc, path, "--hw", "tpu-v4", "--meshslice=off", "--dump-ir=json")
    check(rc == 0, "folded: einc --dump-ir=json exits 0 (%s)" % err.strip())
    if rc != 0:
        return
    j = json.loads(out)
    check(j["mesh"][0].get("over") == 2, "folded: the JSON mesh says X is over 2 axes (%s)" % j["mesh"][0])
    colls = [op for op in j["ops"] if op["op"] != "Einsum"]
    check(len(colls) == 1 and colls[0]["op"] == "AllGather" and colls[0]["axes"] == ["X"],
          "folded: one AllGather_X (%s)" % [(op["op"], op["axes"]) for op in colls])
    if len(colls) == 1:
        t_us = colls[0]["cost"]["time"] * 1e6
        check(abs(t_us - 46.6) <= 0.01 * 46.6, "folded: estimated %.2f us, 2BD / (2 W_ici) = 46.6 us" % t_us)


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    einc, path = argv[1], argv[2]
    check = Checks()
    if len(argv) == 4:
        check_folded(einc, argv[3], check)
    rc, out, err = run(einc, path, "--hw", "tpu-v4", "--meshslice=off", "--dump-ir=json")
    check(rc == 0, "einc --dump-ir=json exits 0 (%s)" % err.strip())
    if rc != 0:
        return check.exit_status()
    colls = [op for op in json.loads(out)["ops"] if op["op"] != "Einsum"]
    check(len(colls) == 1, "one collective (found %d)" % len(colls))
    if len(colls) != 1:
        return check.exit_status()
    ag = colls[0]
    check(ag["op"] == "AllGather" and ag["axes"] == ["X", "Y"] and ag.get("dims") == ["B", "D"],
          "AllGather over X along B and Y along D (got %s %s %s)"
          % (ag["op"], ag["axes"], ag.get("dims")))
    t_us = ag["cost"]["time"] * 1e6
    check(abs(t_us - SEED_US) <= 0.1 * SEED_US,
          "estimated %.2f us, seed 001 says %.0f us (within 10%%)" % (t_us, SEED_US))
    check(ag["cost"]["bound"] == "bandwidth", "bandwidth-bound (%s)" % ag["cost"]["bound"])
    m = re.search(r"collectives along one dim each \(AllGather_Y, AllGather_X\) take ([0-9.]+) us",
                  ag["reason"])
    check(m is not None and abs(float(m.group(1)) - 116.5) < 0.1,
          "the reason gives the one-dim plan's 116.5 us: %r" % ag["reason"])
    rc, out, _ = run(einc, path, "--hw", "tpu-v4", "--meshslice=off", "--explain")
    check(rc == 0 and "one collective over the group of all its axes: X along B, Y along D" in out,
          "--explain names the group and each axis's dim")
    rc, out, _ = run(einc, path, "--hw", "tpu-v4", "--meshslice=off", "--dump-cost")
    check(rc == 0 and re.search(r"totals: step 46\.6 us", out) is not None,
          "--dump-cost totals: step 46.6 us")
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
