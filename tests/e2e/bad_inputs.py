#!/usr/bin/python3
"""bad_inputs.py - an einc executable given bad inputs fails clearly.

Compiles one small sharded program and runs it with broken command lines and
files: wrong shape, wrong dtype, truncated file, not a .npy, missing input,
unknown input name, unwritable output paths, and (with --mpi) a rank count
that differs from the mesh size.  Each check asserts the exit status (1), a
bound on the time (no hang), that the message names the tensor or file at
fault, and, for outputs, that no partial output or temp file is left behind.
A few checks of einc itself follow (a dim that does not divide, a syntax
error, an undefined tensor, a missing source, a -D naming nothing, an
unwritable -o path): exit 1, file:line:col, nothing left behind.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: bad_inputs.py --einc PATH [--mpi] [--mpirun PATH]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402

PROGRAM = """\
# bad-input checks: a 2-device matmul with a sharded input and output
mesh X=2
dim I=4, J=6, K=3
input A[I_X, J]: f32
param W[J, K]: f32
C[I_X, K] = A[I, J] * W[J, K]
output C
"""
TIMEOUT = 60


class Checker:
    def __init__(self, work, exe, launcher):
        self.work, self.exe, self.launcher = work, exe, launcher
        self.passed = self.failed = 0

    def run(self, args, launcher=None):
        cmd = (launcher if launcher is not None else self.launcher) + [self.exe] + args
        try:
            p = subprocess.run(cmd, cwd=self.work, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return None, "", "(timed out after %d s: a hang)" % TIMEOUT
        return (p.returncode, p.stdout.decode("utf-8", "replace"),
                p.stderr.decode("utf-8", "replace"))

    def expect_error(self, title, args, names, launcher=None, leftovers=None):
        """Runs and checks exit 1 and that stderr mentions every string of `names`.
        `leftovers`: (dir, allowed names) - dir must hold nothing else afterwards."""
        rc, out, err = self.run(args, launcher)
        problems = []
        if rc is None:
            problems.append("did not finish")
        elif rc != 1:
            problems.append("exit status %s, expected 1" % rc)
        for n in names:
            if n not in err:
                problems.append("message does not name '%s'" % n)
        if rc is not None and "Sanitizer" in err:
            problems.append("sanitizer report")
        if leftovers:
            d, allowed = leftovers
            extra = sorted(set(os.listdir(d)) - set(allowed))
            if extra:
                problems.append("left behind in %s: %s" % (d, ", ".join(extra)))
        self.report(title, problems, args, rc, out, err)

    def report(self, title, problems, args, rc, out, err):
        if problems:
            self.failed += 1
            print("FAIL %s: %s" % (title, "; ".join(problems)))
            print("  command: %s %s" % (" ".join(self.launcher + [self.exe]), " ".join(args)))
            print("  exit %s\n  stdout: %s\n  stderr: %s" % (rc, out.strip()[:2000],
                                                            err.strip()[:2000]))
        else:
            self.passed += 1
            said = [l for l in err.splitlines() if "error" in l] or [""]
            print("ok   %s: %s" % (title, said[0].strip()))


def write_inputs(work):
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (4, 6)).astype(np.float32)
    w = rng.uniform(-1, 1, (6, 3)).astype(np.float32)
    np.save(os.path.join(work, "a.npy"), a)
    np.save(os.path.join(work, "w.npy"), w)
    np.save(os.path.join(work, "a_shape.npy"), np.zeros((4, 5), np.float32))
    np.save(os.path.join(work, "a_rank.npy"), np.zeros((24,), np.float32))
    np.save(os.path.join(work, "a_f64.npy"), a.astype(np.float64))
    np.save(os.path.join(work, "a_int.npy"), np.zeros((4, 6), np.int32))
    np.save(os.path.join(work, "a_fortran.npy"), np.asfortranarray(a))
    with open(os.path.join(work, "a.npy"), "rb") as f:
        data = f.read()
    with open(os.path.join(work, "a_trunc.npy"), "wb") as f:
        f.write(data[:len(data) - 20])
    with open(os.path.join(work, "a_header_only.npy"), "wb") as f:
        f.write(data[:40])
    with open(os.path.join(work, "a_text.npy"), "w") as f:
        f.write("this is not a numpy file\n" * 4)
    open(os.path.join(work, "a_empty.npy"), "wb").close()
    return a, w


def compiler_checks(c, einc, work):
    """einc itself: bad programs and paths give exit 1, a message with the
    file (and line:col for source errors), and no file left behind."""
    sources = {
        "nodiv.ein": "mesh X=2\ndim I=5, J=4\ninput A[I_X, J]: f32\nB[I, J] = A[I, J]\noutput B\n",
        "syntax.ein": "mesh X=2\ndim I=4\ninput A[I_X]: f32\nB[I] = A[I] +\noutput B\n",
        "undef.ein": "mesh X=2\ndim I=4\ninput A[I_X]: f32\nB[I] = A[I] * Q[I]\noutput B\n",
    }
    for name, text in sources.items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    comp = Checker(work, einc, [])
    before = set(os.listdir(work))
    comp.expect_error("einc: dim does not divide", ["nodiv.ein", "-o", "x"],
                      ["nodiv.ein:3:", "'I'"])
    comp.expect_error("einc: syntax error", ["syntax.ein", "-o", "x"], ["syntax.ein:4:"])
    comp.expect_error("einc: undefined tensor", ["undef.ein", "-o", "x"],
                      ["undef.ein:4:", "'Q'"])
    comp.expect_error("einc: missing source file", ["nothere.ein", "-o", "x"], ["nothere.ein"])
    comp.expect_error("einc: -D names nothing", ["bad.ein", "-D", "Nope=4", "-o", "x"],
                      ["Nope"])
    comp.expect_error("einc: output in a missing directory", ["bad.ein", "-o", "no/dir/x"],
                      ["no/dir/x"])
    os.makedirs(os.path.join(work, "exe_is_dir"))
    comp.expect_error("einc: output path is a directory", ["bad.ein", "-o", "exe_is_dir"],
                      ["exe_is_dir"])
    extra = sorted(set(os.listdir(work)) - before - {"exe_is_dir"})
    comp.report("einc leaves no object or partial file", ["left: " + ", ".join(extra)]
                if extra else [], [], 1, "", "")
    c.passed += comp.passed
    c.failed += comp.failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true", help="also build for MPI and check ranks")
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="einc-bad-")
    try:
        with open(os.path.join(work, "bad.ein"), "w") as f:
            f.write(PROGRAM)
        p = subprocess.run([os.path.abspath(args.einc), "bad.ein", "-o", "bad"], cwd=work,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
        if p.returncode != 0:
            print("einc failed on the test program:\n" + p.stdout.decode())
            print("0 passed, 1 failed")
            return 1
        a, w = write_inputs(work)
        c = Checker(work, "./bad", [])
        good = ["--input", "A=a.npy", "--input", "W=w.npy"]

        # The good run first: the bad ones must fail because of what is bad.
        rc, out, err = c.run(good + ["--output", "C=c.npy"])
        problems = []
        if rc != 0:
            problems.append("exit %s" % rc)
        elif not np.allclose(np.load(os.path.join(work, "c.npy")), a @ w, rtol=1e-5, atol=1e-6):
            problems.append("wrong result")
        c.report("good inputs give the right result", problems, good, rc, out, err)

        c.expect_error("wrong shape", ["--input", "A=a_shape.npy", "--input", "W=w.npy"],
                       ["A", "a_shape.npy"])
        c.expect_error("wrong rank", ["--input", "A=a_rank.npy", "--input", "W=w.npy"],
                       ["A", "a_rank.npy"])
        c.expect_error("wrong dtype (f64 for f32)",
                       ["--input", "A=a_f64.npy", "--input", "W=w.npy"], ["A", "a_f64.npy"])
        c.expect_error("wrong dtype (int32)", ["--input", "A=a_int.npy", "--input", "W=w.npy"],
                       ["A", "a_int.npy"])
        c.expect_error("truncated file", ["--input", "A=a_trunc.npy", "--input", "W=w.npy"],
                       ["a_trunc.npy"])
        c.expect_error("header only", ["--input", "A=a_header_only.npy", "--input", "W=w.npy"],
                       ["a_header_only.npy"])
        c.expect_error("not a .npy", ["--input", "A=a_text.npy", "--input", "W=w.npy"],
                       ["a_text.npy"])
        c.expect_error("empty file", ["--input", "A=a_empty.npy", "--input", "W=w.npy"],
                       ["a_empty.npy"])
        c.expect_error("file does not exist", ["--input", "A=nothere.npy", "--input", "W=w.npy"],
                       ["nothere.npy"])
        c.expect_error("missing input", ["--input", "A=a.npy"], ["W"])
        c.expect_error("unknown input name",
                       good + ["--input", "Q=a.npy"], ["Q"])
        c.expect_error("unknown output name", good + ["--output", "Zed=z.npy"], ["Zed"])
        c.expect_error("input given twice", good + ["--input", "A=a.npy"], ["'A'"])
        c.expect_error("output given twice",
                       good + ["--output", "C=c1.npy", "--output", "C=c2.npy"], ["'C'"],
                       leftovers=(work, set(os.listdir(work))))
        c.expect_error("unknown option", good + ["--bogus"], ["--bogus"])
        c.expect_error("--input without NAME=", ["--input", "a.npy"], ["a.npy"])

        # Fortran-ordered arrays: either read correctly or refused with a clear error.
        rc, out, err = c.run(["--input", "A=a_fortran.npy", "--input", "W=w.npy",
                              "--output", "C=cf.npy"])
        problems = []
        if rc == 0:
            if not np.allclose(np.load(os.path.join(work, "cf.npy")), a @ w, rtol=1e-5,
                               atol=1e-6):
                problems.append("Fortran-ordered input accepted but read wrongly")
        elif rc != 1 or "a_fortran.npy" not in err:
            problems.append("exit %s without naming a_fortran.npy" % rc)
        c.report("Fortran-ordered input", problems, [], rc, out, err)

        # Outputs: unwritable paths fail and leave nothing behind.
        outdir = os.path.join(work, "outs")
        os.makedirs(os.path.join(outdir, "isdir.npy"))
        with open(os.path.join(outdir, "plain"), "w") as f:
            f.write("x")
        allowed = ["isdir.npy", "plain"]
        c.expect_error("output in a missing directory",
                       good + ["--output", "C=outs/missing/c.npy"], ["outs/missing/c.npy"],
                       leftovers=(outdir, allowed))
        c.expect_error("output path is a directory", good + ["--output", "C=outs/isdir.npy"],
                       ["outs/isdir.npy"], leftovers=(outdir, allowed))
        c.expect_error("output under a regular file", good + ["--output", "C=outs/plain/c.npy"],
                       ["outs/plain/c.npy"], leftovers=(outdir, allowed))
        if os.listdir(os.path.join(outdir, "isdir.npy")):
            c.report("directory output path untouched", ["files appeared inside it"], [], 1, "",
                     "")

        compiler_checks(c, os.path.abspath(args.einc), work)

        if args.mpi:
            p = subprocess.run([os.path.abspath(args.einc), "bad.ein", "-o", "bad_mpi",
                                "--runtime=mpi"], cwd=work, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=TIMEOUT)
            if p.returncode != 0:
                c.report("einc --runtime=mpi", ["failed: " + p.stdout.decode()], [], 1, "", "")
            else:
                m = Checker(work, "./bad_mpi", [])
                for n in (1, 3, 4):
                    launch = mpi_launch(args.mpirun, n)
                    rc, out, err = m.run(good, launch)
                    problems = []
                    if rc is None:
                        problems.append("hang")
                    elif rc != 1:
                        problems.append("exit %s with %d ranks on a 2-device mesh, expected 1"
                                        % (rc, n))
                    # The runtime's own message must say what is wrong.
                    both = out + err
                    if "2" not in both or str(n) not in both or "rank" not in both.lower():
                        problems.append("message does not give the rank count and mesh size")
                    m.report("MPI with %d ranks on a 2-device mesh" % n, problems, good, rc,
                             out, err[-1500:])
                c.passed += m.passed
                c.failed += m.failed
                rc, out, err = m.run(good + ["--output", "C=cm.npy"], mpi_launch(args.mpirun, 2))
                problems = []
                if rc != 0:
                    problems.append("exit %s" % rc)
                elif not np.allclose(np.load(os.path.join(work, "cm.npy")), a @ w, rtol=1e-5,
                                     atol=1e-6):
                    problems.append("wrong result")
                else:
                    m2 = Checker(work, "./bad_mpi", mpi_launch(args.mpirun, 2))
                    m2.expect_error("MPI: wrong shape",
                                    ["--input", "A=a_shape.npy", "--input", "W=w.npy"],
                                    ["A", "a_shape.npy"])
                    m2.expect_error("MPI: output in a missing directory",
                                    good + ["--output", "C=outs/missing/c.npy"],
                                    ["outs/missing/c.npy"], leftovers=(outdir, allowed))
                    c.passed += m2.passed
                    c.failed += m2.failed
                c.report("MPI with 2 ranks gives the right result", problems, good, rc, out, err)
        print("%d passed, %d failed" % (c.passed, c.failed))
        return 1 if c.failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
