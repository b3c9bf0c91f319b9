#!/usr/bin/python3
"""run_examples.py - compiles every example and runs it with --random-inputs 1 --check.

For each examples/*.ein (or those matching --match): `einc FILE -o EXE` (plus
the -D options of a `# check-with: -D NAME=VALUE ...` line in the file, which
shrinks a full-size model to what this machine runs in seconds), then
`EXE --random-inputs 1 --check` (plus the flags of a `# check-run:` line) (under `mpirun -np <mesh size>` with --runtime
mpi).  A run passes when it exits 0 and prints a `check NAME: max_rel_err=`
line for every output the executable lists in --info, each within its
tolerance.  The last line is `N passed, N failed`; exit 1 on any failure.

Usage: run_examples.py --einc PATH --examples DIR [--runtime threads|mpi]
                       [--match SUBSTRING] [-D NAME=VALUE ...]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch, no_leak_check_env  # noqa: E402

TIMEOUT = 600


def run(cmd, cwd, env=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=TIMEOUT, env=env)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode("utf-8", "replace") + "\n(timed out)"


def check_example(path, args, work):
    """None if the example compiles, runs and checks; else what went wrong."""
    base = os.path.splitext(os.path.basename(path))[0]
    exe = os.path.join(work, base)
    cmd = [args.einc, path, "-o", exe]
    if args.runtime == "mpi":
        cmd.append("--runtime=mpi")
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# check-with:"):
                cmd += line.split(":", 1)[1].split()
    for d in args.D or []:
        cmd += ["-D", d]
    rc, out = run(cmd, work)
    if rc != 0:
        return "einc failed (exit %s): %s\n%s" % (rc, " ".join(cmd), out)
    # --info runs no device code: it is the same for both runtimes, so ask it directly
    # (an MPI executable started without mpirun runs as a singleton).
    rc, info = run([exe, "--info"], work,
                   no_leak_check_env() if args.runtime == "mpi" else None)
    m = re.search(r"^mesh: .*\((\d+) devices?\)", info, re.M)
    outputs = re.findall(r"^\s*output\s+\S+\s+(\w+)\[", info, re.M)
    if rc != 0 or not m or not outputs:
        return "--info failed or unreadable (exit %s):\n%s" % (rc, info)
    launch = []
    if args.runtime == "mpi":
        launch = mpi_launch(args.mpirun, int(m.group(1)))
    cmd = launch + [exe, "--random-inputs", "1", "--check"]
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# check-run:"):
                cmd += line.split(":", 1)[1].split()
    t0 = time.time()
    rc, out = run(cmd, work)
    secs = time.time() - t0
    if rc != 0:
        return "run failed (exit %s): %s\n%s" % (rc, " ".join(cmd), out)
    problems = []
    for name in outputs:
        c = re.search(r"^check %s: max_rel_err=(\S+) \(tol (\S+)\)" % re.escape(name), out, re.M)
        if not c:
            problems.append("no check line for output %s" % name)
        elif not float(c.group(1)) <= float(c.group(2)):
            problems.append("output %s: max_rel_err %s above tolerance %s" %
                            (name, c.group(1), c.group(2)))
    if problems:
        return "; ".join(problems) + "\n" + out
    print("ok   %s (%s, %s devices, %.1f s): %s" % (
        base, args.runtime, m.group(1), secs,
        "; ".join(l for l in out.splitlines() if l.startswith("check "))), flush=True)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True, help="the examples/ directory")
    ap.add_argument("--runtime", choices=["threads", "mpi"], default="threads")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--match", action="append",
                    help="only files whose name contains this (repeatable)")
    ap.add_argument("-D", action="append", help="NAME=VALUE passed to einc for every example")
    args = ap.parse_args()
    args.einc = os.path.abspath(args.einc)
    files = sorted(glob.glob(os.path.join(os.path.abspath(args.examples), "*.ein")))
    if args.match:
        files = [f for f in files if any(s in os.path.basename(f) for s in args.match)]
    if not files:
        print("no example found in %s" % args.examples)
        print("0 passed, 1 failed")
        return 1
    work = tempfile.mkdtemp(prefix="einc-examples-")
    passed = failed = 0
    try:
        for f in files:
            err = check_example(f, args, work)
            if err is None:
                passed += 1
            else:
                failed += 1
                print("FAIL %s (%s): %s" % (os.path.basename(f), args.runtime,
                                           err.replace("\n", "\n    ")), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
