"""e2e_common.py - what the end-to-end scripts share: how to start MPI executables.

Leak checking is turned off inside MPI processes: Open MPI's own allocations
are never freed, so under -DEINC_SANITIZE=ON every rank (and every singleton
started without mpirun) would report them.  AddressSanitizer's other checks
stay on, and threads-runtime executables keep leak checking."""
import os


def asan_options_without_leak_check():
    """ASAN_OPTIONS as set in the environment, plus detect_leaks=0."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    return (asan + ":" if asan else "") + "detect_leaks=0"


def no_leak_check_env():
    """The environment for an MPI executable started without mpirun (--info)."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = asan_options_without_leak_check()
    return env


def mpi_launch(mpirun, nranks):
    """The mpirun prefix for `nranks` ranks of an einc executable.  Root and
    more ranks than cores are normal here (containers, CI on two cores)."""
    return [mpirun, "-np", str(nranks), "--allow-run-as-root", "--oversubscribe",
            "-x", "ASAN_OPTIONS=" + asan_options_without_leak_check()]


def runtime_args(doc):
    """Parses the arguments of a script that runs on both runtimes:
    --einc PATH [--mpi --mpirun PATH]."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    return ap.parse_args()


class Tally:
    """Counts checks and prints `ok  what` / `FAIL what` lines (the detail,
    indented, only on failure) and the closing `N passed, N failed`."""

    def __init__(self):
        self.passed = self.failed = 0

    def result(self, ok, what, detail=""):
        extra = ("\n    " + detail.replace("\n", "\n    ")) if detail and not ok else ""
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, extra))
        self.passed += bool(ok)
        self.failed += not ok

    def finish(self):
        """Prints the summary; returns the exit status."""
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed else 0


def builds(a, src, exe_prefix, nranks, tally):
    """Compiles `src` for the threads runtime (and MPI with a.mpi); yields
    (runtime, executable, launch prefix) for each that compiled, a failed
    compile counted in `tally`."""
    import subprocess
    for rt in ["threads"] + (["mpi"] if a.mpi else []):
        exe = exe_prefix + "_" + rt
        p = subprocess.run([a.einc, src, "-o", exe, "--runtime=" + rt], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        if p.returncode != 0:
            tally.result(False, "%s (%s): einc" % (os.path.basename(exe_prefix), rt), p.stdout)
            continue
        yield rt, exe, (mpi_launch(a.mpirun, nranks) if rt == "mpi" else [])


def case_builds(a, work, cases, source, ranks, tally):
    """For each case (a tuple whose first item is its name): writes
    source(case) to WORK/NAME.ein and yields (case, executable, launch
    prefix, result) for each runtime it compiled on (builds), where
    result(ok, what, detail) reports to `tally` with the runtime named."""
    for case in cases:
        src = os.path.join(work, case[0] + ".ein")
        with open(src, "w") as f:
            f.write(source(case))
        for rt, exe, launch in builds(a, src, os.path.join(work, case[0]), ranks(case), tally):
            yield case, exe, launch, (lambda ok, what, why="", rt=rt:
                                      tally.result(ok, "%s (%s)" % (what, rt), why))


def run_merged(cmd, timeout=300):
    """Runs `cmd`; returns (exit code, stdout and stderr merged)."""
    import subprocess
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout


def printed_tokens(out, B):
    """The tokens --generate printed for each of B sequences (`tokens b: ...`
    lines), None for a row it did not print."""
    import re
    rows = [re.search(r"^tokens %d:(.*)$" % b, out, re.M) for b in range(B)]
    return [list(map(int, r.group(1).split())) if r else None for r in rows]


def rel_err(got, want):
    """Max absolute error of `got` over the largest magnitude of `want`."""
    import numpy as np
    return float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-30)
