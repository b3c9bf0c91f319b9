#!/usr/bin/python3
"""long_chain.py - a chain of many elementwise statements compiles and runs.

Each statement reads only the one before it, so codegen fuses the chain;
fused producers are evaluated recursively, and a chain of 50,000 statements
fused into one loop overflowed einc's stack (`einc -o`, SIGSEGV).  Fusion
groups are now bounded (codegen/plan.c), so the chain becomes a series of
loops.  This compiles such a chain with -o, runs it on 2 devices with
--check, and checks the value: T[i] = T[i-1] * 0.5 + 1 converges to 2 from
any start in [-1, 1).  It also checks --dump-ir (the IR printer) on the
same program.  The last line is `N passed, N failed`.

Usage: long_chain.py --einc PATH [--statements N] [--opt-level 0..3] [--budget S] [--keep DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_chain(path, n):
    with open(path, "w") as f:
        f.write("# %d chained elementwise statements (tests/fuzz/long_chain.py)\n" % n)
        f.write("mesh X = 2\ndim I = 8\ninput T0[I_X] : f32\n")
        for i in range(1, n):
            f.write("T%d[I] = T%d[I] * 0.5 + 1\n" % (i, i - 1))
        f.write("output T%d\n" % (n - 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--statements", type=int, default=100000)
    ap.add_argument("--opt-level", type=int, choices=range(4), default=3,
                    help="einc -O level (the recursion fixed here is before LLVM's passes)")
    ap.add_argument("--budget", type=float, default=900,
                    help="seconds the -o compile may take (docs/performance.md, section 4: "
                    "10^6 statements in 900 s on the 2-core VM); past it the compile is "
                    "stopped and the test fails")
    ap.add_argument("--keep", help="build in this directory and keep it")
    args = ap.parse_args()
    einc = os.path.abspath(args.einc)
    work = args.keep or tempfile.mkdtemp(prefix="einc-chain-")
    os.makedirs(work, exist_ok=True)
    passed = failed = 0

    def report(title, problems, detail=""):
        nonlocal passed, failed
        if problems:
            failed += 1
            print("FAIL %s: %s" % (title, "; ".join(problems)))
            if detail:
                print("  " + detail.strip()[-3000:].replace("\n", "\n  "))
        else:
            passed += 1
            print("ok   %s" % title)

    try:
        n = args.statements
        src = os.path.join(work, "chain.ein")
        write_chain(src, n)

        t0 = time.time()
        p = subprocess.run([einc, src, "--dump-ir"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=600)
        report("einc --dump-ir of %d statements (%.1f s)" % (n, time.time() - t0),
               [] if p.returncode == 0 else ["exit %d" % p.returncode],
               p.stderr.decode("utf-8", "replace"))

        exe = os.path.join(work, "chain")
        t0 = time.time()
        opt = "-O%d" % args.opt_level
        try:
            p = subprocess.run([einc, src, opt, "-o", exe], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=args.budget)
        except subprocess.TimeoutExpired:
            report("einc %s -o of %d statements" % (opt, n),
                   ["not done within the budget of %.0f s" % args.budget])
            raise SystemExit
        took = time.time() - t0
        report("einc %s -o of %d statements (%.1f s)" % (opt, n, took),
               [] if p.returncode == 0 else ["exit %d" % p.returncode],
               p.stdout.decode("utf-8", "replace"))
        if p.returncode != 0:
            raise SystemExit

        out = os.path.join(work, "out.npy")
        p = subprocess.run([exe, "--random-inputs", "1", "--check", "--output",
                            "T%d=%s" % (n - 1, out)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=300)
        text = p.stdout.decode("utf-8", "replace")
        problems = [] if p.returncode == 0 else ["exit %d" % p.returncode]
        if p.returncode == 0:
            got = np.load(out)
            if got.shape != (8,) or not np.allclose(got, 2.0, rtol=0, atol=1e-6):
                problems.append("output %s, expected 2 everywhere" % got)
        report("the chain runs on 2 devices and matches --check and 2.0", problems, text)
    except SystemExit:
        pass
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
