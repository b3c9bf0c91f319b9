#!/usr/bin/python3
"""check_nonfinite.py - an executable's --check fails on NaN and Inf outputs.

A NaN in both the sharded run and the unsharded reference used to pass
--check (every comparison with NaN is false, so the error never exceeded the
tolerance).  For f32, f64 and bf16 this compiles small 2-device programs whose
outputs are NaN or Inf on random inputs and asserts that
`--random-inputs 1 --check` exits 1 and prints, per bad output,

    check Out: FAILED: K of N elements are NaN or Inf in the run (R in the reference)

with K and R the exact counts where NumPy can predict them (from the
--random-inputs generator reproduced here); that an output which is finite
still gets its `check NAME: max_rel_err=` line in the same run (every output
is reported before the exit); and that a finite program still passes.  With
--mpi the same on 2 MPI ranks.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: check_nonfinite.py --einc PATH [--mpi] [--mpirun PATH]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402

TIMEOUT = 120
I, J = 64, 32
N = I * J
HEADER = "mesh X = 2\ndim I = %d, J = %d\ninput A[I_X, J] : {dtype}\n" % (I, J)

# name -> (body, {output: expected non-finite count in both runs, or None when
# only "some" is predictable, or 0 for an output that must pass}).
# NONPOS stands for the number of elements of A that are <= 0.
NONPOS = "nonpos"
PROGRAMS = {
    # log of a negative number is NaN (log 0 = -Inf); Fine stays finite and
    # must still be checked and reported in the failing run.
    "nan_some": ("Out[I, J] = log(A[I, J])\nFine[I, J] = exp(A[I, J])\n"
                 "output Out\noutput Fine\n", {"Out": NONPOS, "Fine": 0}),
    # every element NaN
    "nan_all": ("Out[I, J] = log(-1 * exp(A[I, J]))\noutput Out\n", {"Out": N}),
    # rsqrt(0) = +Inf wherever A <= 0: an exact count, no overflow threshold
    "inf_zero": ("Out[I, J] = rsqrt(relu(A[I, J]))\noutput Out\n", {"Out": NONPOS}),
    # overflow: exp(1000 a^2) is Inf for |a| above ~0.3 (f32) or ~0.84 (f64);
    # the exact count depends on exp's last bit at the threshold
    "inf_overflow": ("Out[I, J] = exp(1000 * A[I, J] * A[I, J])\noutput Out\n", {"Out": None}),
    # finite: passes
    "finite": ("Out[I, J] = exp(A[I, J]) * A[I, J]\noutput Out\n", {"Out": 0}),
}
FAILED_RE = re.compile(r"^check (\w+): FAILED: (\d+) of (\d+) elements are NaN or Inf in the run "
                       r"\((\d+) in the reference\)$", re.M)
PASSED_RE = re.compile(r"^check (\w+): max_rel_err=(\S+) \(tol (\S+)\)$", re.M)


def splitmix64(x):
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def random_input(seed, name, n, dtype):
    """--random-inputs (runtime/random.c) as exact float64 values; bf16's
    rounding keeps the sign and zero of these values, so f32's serve it."""
    with np.errstate(over="ignore"):
        h = splitmix64(np.uint64(seed ^ fnv1a64(name)) ^ splitmix64(np.arange(n, dtype=np.uint64)))
    if dtype == "f64":
        return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53 * 2.0 - 1.0
    return (h >> np.uint64(40)).astype(np.float64) * 2.0**-24 * 2.0 - 1.0


def run(cmd, cwd):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, "", "(timed out after %d s)" % TIMEOUT
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def check_run(rc, out, err, expect):
    """What is wrong with a --check run of a program whose outputs should give
    `expect` (output -> count, None or 0); [] if nothing."""
    problems = []
    if rc is None:
        return ["did not finish"]
    if "Sanitizer" in err:
        problems.append("sanitizer report")
    failing = any(v != 0 for v in expect.values())
    if rc != (1 if failing else 0):
        problems.append("exit status %s, expected %d" % (rc, 1 if failing else 0))
    failed = {m.group(1): m for m in FAILED_RE.finditer(out)}
    passed = {m.group(1): m for m in PASSED_RE.finditer(out)}
    for name, want in expect.items():
        if want == 0:
            if name not in passed:
                problems.append("no 'check %s: max_rel_err=' line" % name)
            if name in failed:
                problems.append("%s is finite but reported as FAILED" % name)
            continue
        m = failed.get(name)
        if not m:
            problems.append("no 'check %s: FAILED: ...' line on stdout" % name)
            continue
        if name in passed:
            problems.append("%s also got a max_rel_err line" % name)
        run_n, total, ref_n = int(m.group(2)), int(m.group(3)), int(m.group(4))
        if total != N:
            problems.append("%s: %d elements in the message, expected %d" % (name, total, N))
        if want is None:
            if not (0 < run_n <= N and 0 < ref_n <= N):
                problems.append("%s: counts %d and %d, expected some of %d" % (name, run_n, ref_n,
                                                                               N))
        elif run_n != want or ref_n != want:
            problems.append("%s: counts %d (run) and %d (reference), expected %d in both"
                            % (name, run_n, ref_n, want))
        if "'%s'" % name not in err:
            problems.append("stderr does not name '%s'" % name)
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true", help="also run on 2 MPI ranks")
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args()
    einc = os.path.abspath(args.einc)
    runtimes = [("threads", [])]
    if args.mpi:
        runtimes.append(("mpi", mpi_launch(args.mpirun, 2)))

    passed = failed = 0
    work = tempfile.mkdtemp(prefix="einc-nonfinite-")
    try:
        for dtype in ("f32", "f64", "bf16"):
            nonpos = int(np.count_nonzero(random_input(1, "A", N, dtype) <= 0))
            for prog, (body, expect) in PROGRAMS.items():
                expect = {k: nonpos if v == NONPOS else v for k, v in expect.items()}
                src = "%s_%s.ein" % (prog, dtype)
                with open(os.path.join(work, src), "w") as f:
                    f.write(HEADER.format(dtype=dtype) + body)
                for rt, launch in runtimes:
                    title = "%s %s on %s" % (prog, dtype, rt)
                    exe = "%s_%s_%s" % (prog, dtype, rt)
                    rc, out, err = run([einc, src, "-o", exe, "--runtime=" + rt], work)
                    if rc != 0:
                        problems = ["einc failed: " + (out + err).strip()[:2000]]
                    else:
                        rc, out, err = run(launch + ["./" + exe, "--random-inputs", "1",
                                                     "--check"], work)
                        problems = check_run(rc, out, err, expect)
                    if problems:
                        failed += 1
                        print("FAIL %s: %s" % (title, "; ".join(problems)))
                        print("  exit %s\n  stdout: %s\n  stderr: %s"
                              % (rc, out.strip()[:2000], err.strip()[:2000]))
                    else:
                        passed += 1
                        lines = [l for l in out.splitlines() if l.startswith("check ")]
                        print("ok   %s: %s" % (title, " | ".join(lines)))
        print("%d passed, %d failed" % (passed, failed))
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
