"""rt_testlib.py - what the runtime's end-to-end scripts (run_tp.py,
run_train.py) share: running an executable with a timeout, expecting an
error message, and collecting failures so that one run reports them all."""
import os
import subprocess

FAILURES = []

# Open MPI keeps allocations until exit that LeakSanitizer reports in
# sanitizer builds; they are not the runtime's, so leak checking is off
# for mpirun (ASan's other checks stay on).
MPI_ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")


def fail(msg):
    """Records a failure and goes on."""
    FAILURES.append(msg)
    print("FAIL:", msg)


def run(cmd, expect_rc=0, timeout=60):
    """Runs cmd; a wrong exit status or a hang past `timeout` s is a failure."""
    env = MPI_ENV if cmd[0] == "mpirun" else None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        fail("%s: did not finish in %d s (hang)" % (" ".join(cmd), timeout))
        return subprocess.CompletedProcess(cmd, -1, "", "")
    if p.returncode != expect_rc:
        fail("%s: exit %d, expected %d\nstdout: %s\nstderr: %s"
             % (" ".join(cmd), p.returncode, expect_rc, p.stdout, p.stderr))
    return p


def expect_error(cmd, needle):
    """Runs cmd expecting exit status 1 and `needle` in its stderr."""
    p = run(cmd, expect_rc=1)
    if needle not in p.stderr:
        fail("%s: stderr lacks %r:\n%s" % (" ".join(cmd), needle, p.stderr))
    return p


def finish(success):
    """The exit status of a script: prints the failures' count or `success`."""
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print(success)
    return 0
