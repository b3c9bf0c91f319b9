"""calib_common.py - what the tests of tests/calibrate share."""
import os
import re
import subprocess
import sys

# One row of an executable's --profile table (runtime/profile.c).
PROFILE_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+|-)\s+([-+0-9.]+%|-)\s+(.*\S)\s*$")

FAILURES = []


def check(cond, what):
    """Records a failed expectation (the test goes on, to report them all)."""
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what)
    return cond


def finish(name):
    if FAILURES:
        print("%s: %d failure(s)" % (name, len(FAILURES)))
        sys.exit(1)
    print("%s: ok" % name)


def run(cmd, expect=0, **kw):
    """Runs cmd; a status other than `expect` fails the test at once."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != expect:
        print("FAIL: %s exited %d (expected %d)\n%s%s" % (" ".join(cmd), r.returncode, expect,
                                                          r.stdout[-3000:], r.stderr[-3000:]))
        sys.exit(1)
    return r


def mpi_prefix(mpirun, n):
    """mpirun for n ranks, as tests/e2e does (root, oversubscription, no leak
    checks inside Open MPI ranks under sanitizers)."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    asan = (asan + ":" if asan else "") + "detect_leaks=0"
    return [mpirun, "-np", str(n), "--allow-run-as-root", "--oversubscribe",
            "-x", "ASAN_OPTIONS=" + asan]


def parse_profile(text):
    """Rows (op, calls, measured ms, predicted ms or None, error % or None, name)."""
    rows = []
    for line in text.splitlines():
        m = PROFILE_ROW.match(line)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), float(m.group(3)),
                         None if m.group(4) == "-" else float(m.group(4)),
                         None if m.group(5) == "-" else float(m.group(5)[:-1]),
                         m.group(6)))
    return rows
