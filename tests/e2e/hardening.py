#!/usr/bin/python3
"""hardening.py - the classes of bugs of issue 29, each closed at its root.

Each class is one CTest test (`--class NAME`, docs/reliability.md):

  passes   every pipeline is verified, the empty one (--passes=) included,
           and every option that names passes (--passes=, --print-after=)
           checks the names against the registry.

Every command runs with a timeout, so a regression that hangs fails.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: hardening.py --einc PATH --class passes
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from bad_inputs import PROGRAM  # noqa: E402  (a 2-device matmul: its frontend IR does not verify)
from e2e_common import Tally  # noqa: E402

TIMEOUT = 60

def run(cmd, cwd, timeout=TIMEOUT):
    """(exit status, stdout, stderr); status None if it timed out (a hang)."""
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "(timed out after %d s: a hang)" % timeout
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def expect(t, title, cmd, cwd, status, says=(), timeout=TIMEOUT):
    """Runs `cmd` and checks its exit status and that stderr holds every
    string of `says`; returns (status, stdout, stderr)."""
    rc, out, err = run(cmd, cwd, timeout)
    problems = []
    if rc != status:
        problems.append("exit status %s, expected %d" % (rc, status))
    problems += ["stderr does not say '%s'" % s for s in says if s not in err]
    if "Sanitizer" in err:
        problems.append("sanitizer report")
    t.result(not problems, title, "; ".join(problems) + "\ncommand: " + " ".join(cmd) +
             "\nstdout: " + out.strip()[:1500] + "\nstderr: " + err.strip()[:1500])
    return rc, out, err


def check_passes(t, einc, work):
    src = os.path.join(work, "mm.ein")
    expect(t, "--passes= verifies the IR it hands on", [einc, src, "--passes=", "--dump-ir"],
           work, 1, ["IR verification failed after the empty pipeline"])
    expect(t, "--passes= -o builds nothing that does not verify",
           [einc, src, "--passes=", "-o", "mm_empty"], work, 1, ["empty pipeline"])
    t.result(not os.path.exists(os.path.join(work, "mm_empty")), "--passes= -o leaves no file")
    expect(t, "--print-after= an unknown pass", [einc, src, "--print-after=nosuch", "--dump-ir"],
           work, 2, ["--print-after: unknown pass 'nosuch'", "--list-passes"])
    expect(t, "--print-after= a known and an unknown pass",
           [einc, src, "--print-after=propagate,regathr"], work, 2,
           ["--print-after: unknown pass 'regathr'"])
    expect(t, "--print-after= an empty name", [einc, src, "--print-after=propagate,"], work, 2,
           ["empty or overlong pass name in --print-after=propagate,"])
    expect(t, "--passes= an empty name", [einc, src, "--passes=propagate,,cost"], work, 2,
           ["empty or overlong pass name in --passes=propagate,,cost"])
    expect(t, "--passes= an unknown pass", [einc, src, "--passes=propagate,nosuch"], work, 2,
           ["--passes: unknown pass 'nosuch'"])
    rc, out, _ = expect(t, "--print-after= a known pass", [einc, src, "--print-after=propagate"],
                        work, 0)
    t.result("*** IR Dump After propagate ***" in out, "--print-after=propagate prints its dump")
    expect(t, "--passes=propagate verifies and runs", [einc, src, "--passes=propagate",
                                                        "--dump-ir"], work, 0)


CLASSES = {"passes": check_passes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--class", dest="cls", required=True, choices=sorted(CLASSES))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="einc_harden_")
    try:
        with open(os.path.join(work, "mm.ein"), "w") as f:
            f.write(PROGRAM)
        t = Tally()
        CLASSES[a.cls](t, os.path.abspath(a.einc), work)
        return t.finish()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
