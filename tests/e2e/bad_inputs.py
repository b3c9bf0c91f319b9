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
The cases of issue 14 follow: --output never replaces what is not a regular
file (/dev/null, /dev/full, a FIFO, a socket, a directory, a symbolic link
to a device) and keeps the mode of a file it replaces; einc refuses a mesh
larger than the runtime runs (and one whose size overflows, from the source
or -D, without a crash), accepts and builds one at the limit, refuses
-D I=0 with the documented message, counts errors past the limit, and
reports only the nesting error when the parser gives up.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: bad_inputs.py --einc PATH [--mpi] [--mpirun PATH]
"""
import argparse
import os
import shutil
import socket
import stat
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

    def expect_error(self, title, args, names, launcher=None, leftovers=None, status=1):
        """Runs and checks exit `status` (1; 2 for a bad command line) and that
        stderr mentions every string of `names`.
        `leftovers`: (dir, allowed names) - dir must hold nothing else afterwards."""
        rc, out, err = self.run(args, launcher)
        problems = []
        if rc is None:
            problems.append("did not finish")
        elif rc != status:
            problems.append("exit status %s, expected %d" % (rc, status))
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
    comp.expect_error("einc: unknown --remat", ["bad.ein", "--remat=all", "-o", "x"],
                      ["--remat", "none, elementwise or layer", "'all'"], status=2)
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


def output_path_checks(c, work, good, a, w):
    """Issue 14: an output path that exists and is not a regular file is
    refused before the run, naming the path and what it is, and left as it
    was; a regular file replaced keeps its mode; a new file gets 0666 less
    the umask; a symbolic link is followed; a temp file left by an earlier
    run is not touched."""
    d = os.path.join(work, "outs14")
    os.makedirs(os.path.join(d, "dir.npy"))
    os.mkfifo(os.path.join(d, "fifo.npy"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(os.path.join(d, "sock.npy"))
    os.symlink("/dev/null", os.path.join(d, "null_link.npy"))
    allowed = ["dir.npy", "fifo.npy", "sock.npy", "null_link.npy"]
    for title, path, kind, is_kind in [
            ("output to /dev/null", "/dev/null", "character device", stat.S_ISCHR),
            ("output to /dev/full", "/dev/full", "character device", stat.S_ISCHR),
            ("output to a FIFO", "outs14/fifo.npy", "FIFO", stat.S_ISFIFO),
            ("output to a socket", "outs14/sock.npy", "socket", stat.S_ISSOCK),
            ("output to a directory", "outs14/dir.npy", "directory", stat.S_ISDIR),
            ("output to a link to /dev/null", "outs14/null_link.npy", "character device",
             stat.S_ISCHR)]:
        full = path if path.startswith("/") else os.path.join(work, path)
        if not os.path.exists(full):
            c.report(title, ["%s does not exist on this machine" % path], [], 1, "", "")
            continue
        c.expect_error(title, good + ["--output", "C=" + path], [path, kind, "regular file"],
                       leftovers=(d, allowed))
        if not is_kind(os.stat(full).st_mode):
            c.report(title + ": left as it was", ["%s is no longer a %s" % (path, kind)], [], 1,
                     "", "")
    # --trace writes its file the same way, so it refuses the same paths.
    c.expect_error("--trace to a FIFO", good + ["--trace", "outs14/fifo.npy"],
                   ["outs14/fifo.npy", "FIFO", "regular file"], leftovers=(d, allowed))
    if not stat.S_ISFIFO(os.stat(os.path.join(d, "fifo.npy")).st_mode):
        c.report("--trace to a FIFO: left as it was", ["the FIFO was replaced"], [], 1, "", "")
    if os.listdir(os.path.join(d, "dir.npy")):
        c.report("directory output untouched", ["files appeared inside it"], [], 1, "", "")
    sock.close()

    def good_run(title, out, umask=None):
        """Runs the good program writing C to `out`; returns the problems."""
        old = os.umask(umask) if umask is not None else None
        try:
            rc, o, e = c.run(good + ["--output", "C=" + out])
        finally:
            if old is not None:
                os.umask(old)
        problems = []
        if rc != 0:
            problems.append("exit %s: %s" % (rc, e.strip()[:500]))
        elif not np.allclose(np.load(os.path.join(work, out)), a @ w, rtol=1e-5, atol=1e-6):
            problems.append("wrong result")
        return problems

    # A regular file replaced keeps its permission bits.
    kept = os.path.join(d, "kept.npy")
    with open(kept, "w") as f:
        f.write("old")
    os.chmod(kept, 0o640)
    problems = good_run("", "outs14/kept.npy")
    mode = stat.S_IMODE(os.stat(kept).st_mode)
    if not problems and mode != 0o640:
        problems.append("mode is %o, not 640" % mode)
    c.report("output keeps the mode of the file it replaces", problems, [], 0, "", "")
    # A new file: 0666 less the umask, as a file the user creates.
    problems = good_run("", "outs14/new.npy", umask=0o027)
    mode = stat.S_IMODE(os.stat(os.path.join(d, "new.npy")).st_mode)
    if not problems and mode != 0o640:
        problems.append("mode is %o, not 640 (umask 027)" % mode)
    c.report("a new output gets 0666 less the umask", problems, [], 0, "", "")
    # A link to a regular file: the file is replaced, the link kept.
    with open(os.path.join(d, "target.npy"), "w") as f:
        f.write("old")
    os.symlink("target.npy", os.path.join(d, "link.npy"))
    problems = good_run("", "outs14/link.npy")
    if not os.path.islink(os.path.join(d, "link.npy")):
        problems.append("the link was replaced")
    c.report("output through a symbolic link", problems, [], 0, "", "")
    # A temp file left by a killed run is neither reused nor removed.
    stale = os.path.join(d, "out.npy.tmpAbC123")
    with open(stale, "w") as f:
        f.write("left by a killed run")
    problems = good_run("", "outs14/out.npy")
    with open(stale) as f:
        if f.read() != "left by a killed run":
            problems.append("the stale temp file changed")
    extra = sorted(n for n in os.listdir(d) if ".tmp" in n and n != os.path.basename(stale))
    if extra:
        problems.append("temp files left: " + ", ".join(extra))
    c.report("a stale temp file is not taken for the output", problems, [], 0, "", "")


def compiler_limit_checks(c, einc, work):
    """Issue 14 on einc: the mesh limit, overflowing sizes, -D I=0, the
    error count, the nesting error."""
    sources = {
        "limit_over.ein": "mesh X = 64, Y = 128\ndim I = 8192\ninput A[I_XY]: f32\n"
                          "B[I] = A[I] * 2\noutput B\n",
        "limit_at.ein": "mesh X = 64, Y = 64\ndim I = 4096\ninput A[I_XY]: f32\n"
                        "B[I] = A[I] * 2\noutput B\n",
        "overflow.ein": "mesh X = 4294967296, Y = 4294967296\ndim I = 4\ninput A[I_XY]: f32\n"
                        "B[I] = A[I]\noutput B\n",
        "small.ein": "mesh X = 2, Y = 2\ndim I = 4\ninput A[I_XY]: f32\nB[I] = A[I]\noutput B\n",
        "errors.ein": "dim I = 4\n" + "".join("A%d[I] = Q[I]\n" % i for i in range(25)) +
                      "output A0\n",
        "nested.ein": "dim I = 2\ninput A[I]: f32\nC[I] = " + "(" * 20000 + "A[I]" +
                      ")" * 20000 + "\noutput C\n",
    }
    for name, text in sources.items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    comp = Checker(work, einc, [])
    comp.expect_error("einc: mesh over the runtime's limit", ["limit_over.ein", "-o", "x"],
                      ["limit_over.ein:1:14:", "8192", "at most 4096"])
    comp.expect_error("einc: mesh size overflows 64 bits", ["overflow.ein", "--dump-ir"],
                      ["overflow.ein:1:6:", "at most 4096"])
    comp.expect_error("einc: mesh size overflows through -D",
                      ["small.ein", "-D", "X=4294967296", "-D", "Y=4294967296", "--dump-ir"],
                      ["small.ein:1:6:", "at most 4096"])
    # The largest mesh compiles, and the executable accepts it (the limits agree).
    rc, out, err = comp.run(["limit_at.ein", "-o", "limit_at"])
    problems = [] if rc == 0 else ["einc exit %s" % rc]
    if rc == 0:
        exe = Checker(work, "./limit_at", [])
        rc, out, err = exe.run(["--info"])
        if rc != 0 or "4096 devices" not in out:
            problems.append("the executable refuses it: exit %s %s" % (rc, err.strip()[:300]))
    comp.report("einc and the runtime agree on 4096 devices", problems, [], rc, out, err)
    # -D I=0: a usage error with the message docs/language.md shows.
    rc, out, err = comp.run(["small.ein", "-D", "I=0", "--dump-ir"])
    want = "einc: error: -D I wants a count from 1 to 9223372036854775807 (decimal), not '0'"
    comp.report("einc: -D I=0", [] if rc == 2 and want in err else
                ["exit %s, expected 2 and '%s'" % (rc, want)], [], rc, out, err)
    rc, out, err = comp.run(["errors.ein", "--dump-ir"])
    comp.report("einc: errors past 20 are counted",
                [] if rc == 1 and "errors.ein: ... and 5 more errors" in err and
                err.count(": error: tensor 'Q'") == 20 else ["exit %s or no count line" % rc],
                [], rc, out, err)
    rc, out, err = comp.run(["nested.ein", "--dump-ir"])
    comp.report("einc: nesting error alone",
                [] if rc == 1 and "nested too deeply" in err and "output" not in err and
                err.count("error:") == 1 else ["exit %s or other errors" % rc], [], rc, out, err)
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

        output_path_checks(c, work, good, a, w)
        compiler_checks(c, os.path.abspath(args.einc), work)
        compiler_limit_checks(c, os.path.abspath(args.einc), work)

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
