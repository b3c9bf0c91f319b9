#!/usr/bin/python3
"""faults.py - a failing device or rank ends the whole job with a message.

Issue 14, item 6: each fault below must end the job with a nonzero status
within 10 s of the fault, with a message naming the device or rank and the
cause, and leave no partial output behind.

threads (one process, a thread per device):
  - an address-space limit (`ulimit -v`) too small for the devices' BLAS
    buffers: refused at start, naming the limit;
  - a limit that the tensors exceed: rt_alloc fails on a device, named
    (OpenBLAS would otherwise retry its own buffer allocation forever);
  - an output on a file system that fills up (a 64 KiB tmpfs): the write
    fails, naming the file and "No space left on device", no temp file left.
MPI (with --mpi; each rank started through a shell that alters only rank 1):
  - rank 1 killed with SIGKILL in the middle of a long --repeat run;
  - rank 1 alone under the address-space limit;
  - rank 1 alone sees a truncated input file (another working directory);
  - the output on the full tmpfs.
A wrong rank count is in bad_inputs.py.

Cases that cannot run here say so and count as skipped, never as passed:
the ulimit cases under ASan (its shadow memory needs terabytes of address
space), the tmpfs cases where mounting is not permitted.
The last line is `N passed, N failed, N skipped`; exit 1 on any failure.

Usage: faults.py --einc PATH [--mpi --mpirun PATH]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import mpi_launch  # noqa: E402

# A job must end within this many seconds of the fault.
FAULT_BOUND = 10.0
# The whole run of one case, fault included, may not take longer (a hang).
CASE_TIMEOUT = 60

SMALL = """\
# faults.py: a small 2-device matmul
mesh X=2
dim I=256, J=256, K=256
input A[I_X, J]: f32
param W[J, K]: f32
C[I_X, K] = A[I, J] * W[J, K]
output C
"""
# 1 GiB of A per device: more than the address-space limit below allows.
HUGE = """\
# faults.py: 1 GiB of input per device
mesh X=2
dim I=16384, J=32768, K=16
input A[I_X, J]: f32
param W[J, K]: f32
C[I_X, K] = A[I, J] * W[J, K]
output C
"""
# ulimit -v for the tensor case, KiB: room for the runtime, its BLAS
# buffers and a few hundred MiB, not for 1 GiB of A.
TENSOR_LIMIT_KIB = 1200000
# ulimit -v for the start-up case: below what two devices' buffers need.
START_LIMIT_KIB = 300000


class Results:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def ok(self, title, detail=""):
        self.passed += 1
        print("ok   %s%s" % (title, ": " + detail if detail else ""))

    def fail(self, title, problems, err=""):
        self.failed += 1
        print("FAIL %s: %s" % (title, "; ".join(problems)))
        if err:
            print("     stderr: " + err.strip().replace("\n", "\n             ")[-1500:])

    def skip(self, title, why):
        self.skipped += 1
        print("skip %s: %s" % (title, why))


def compile_exe(einc, work, name, src, runtime):
    path = os.path.join(work, name + ".ein")
    with open(path, "w") as f:
        f.write(src)
    exe = os.path.join(work, name + ("_mpi" if runtime == "mpi" else ""))
    subprocess.run([einc, path, "-o", exe, "--runtime=" + runtime], check=True)
    return exe


def sanitized(exe):
    """Whether exe was built with AddressSanitizer (it reserves terabytes of
    address space, so a ulimit -v case cannot run)."""
    out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    return "libasan" in out


def run_case(argv, cwd, env=None):
    """Runs argv to the end; returns (rc, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=CASE_TIMEOUT,
                           env=env)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        return None, e.stdout or "", e.stderr or "", time.monotonic() - t0


def judge(res, title, rc, err, dt, names, bound=FAULT_BOUND):
    """The job failed (status != 0), within `bound` s, and stderr names
    every string of `names`."""
    problems = []
    if rc is None:
        problems.append("still running after %d s (a hang)" % CASE_TIMEOUT)
    elif rc == 0:
        problems.append("exit status 0")
    if rc is not None and dt > bound:
        problems.append("took %.1f s, more than %.0f s" % (dt, bound))
    for n in names:
        if n not in (err or ""):
            problems.append("no %r in stderr" % n)
    if problems:
        res.fail(title, problems, err)
    else:
        res.ok(title, "%.2f s, %s" % (dt, (err or "").strip().splitlines()[0][:160]))


def rank1_shell(mpirun, exe, rank1_prefix, args):
    """mpirun of 2 ranks of exe, each through sh; rank 1 runs `rank1_prefix`
    (shell commands) first.  Each rank records its pid in pid.RANK."""
    script = ('echo $$ > pid.$OMPI_COMM_WORLD_RANK; '
              'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then %s; fi; exec "$0" "$@"' % rank1_prefix)
    return mpi_launch(mpirun, 2) + ["sh", "-c", script, exe] + args


def with_tmpfs(work, fn):
    """Calls fn(mountpoint) with a 64 KiB tmpfs mounted there; returns
    None, or the reason it could not be mounted."""
    mnt = os.path.join(work, "full")
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return "cannot mount a tmpfs here (%s)" % (p.stderr.strip() or "not root")
    try:
        fn(mnt)
    finally:
        subprocess.run(["umount", mnt])
    return None


def threads_cases(res, einc, work):
    small = compile_exe(einc, work, "small", SMALL, "threads")
    huge = compile_exe(einc, work, "huge", HUGE, "threads")
    if sanitized(small):
        for t in ("threads: start under ulimit -v", "threads: tensors over ulimit -v"):
            res.skip(t, "AddressSanitizer build: its shadow memory needs more address space "
                     "than any ulimit -v allows")
    else:
        rc, _, err, dt = run_case(["sh", "-c", "ulimit -v %d; exec \"$0\" --random-inputs 1"
                                   % START_LIMIT_KIB, small], work)
        judge(res, "threads: start under ulimit -v", rc, err, dt,
              ["out of memory", "ulimit -v %d KiB" % START_LIMIT_KIB])
        rc, _, err, dt = run_case(["sh", "-c", "ulimit -v %d; exec \"$0\" --random-inputs 1"
                                   % TENSOR_LIMIT_KIB, huge], work)
        judge(res, "threads: tensors over ulimit -v", rc, err, dt,
              ["device ", "out of memory", "rt_alloc of 1073741824 bytes"])
        # The reserve is not so large that a program that fits is refused.
        rc, out, err, dt = run_case(["sh", "-c", "ulimit -v %d; exec \"$0\" --random-inputs 1"
                                     % TENSOR_LIMIT_KIB, small], work)
        if rc == 0:
            res.ok("threads: a program that fits runs under the same ulimit -v")
        else:
            res.fail("threads: a program that fits runs under the same ulimit -v",
                     ["exit %s" % rc], err)

    def full(mnt):
        out = os.path.join(mnt, "c.npy")
        rc, _, err, dt = run_case([small, "--random-inputs", "1", "--output", "C=" + out], work)
        judge(res, "threads: output on a full file system", rc, err, dt,
              [out, "No space left on device"])
        left = os.listdir(mnt)
        if left:
            res.fail("threads: nothing left on the full file system", ["left: %s" % left])
        else:
            res.ok("threads: nothing left on the full file system")
    why = with_tmpfs(work, full)
    if why:
        res.skip("threads: output on a full file system", why)


def mpi_cases(res, einc, mpirun, work):
    small = compile_exe(einc, work, "small", SMALL, "mpi")
    huge = compile_exe(einc, work, "huge", HUGE, "mpi")

    # SIGKILL of rank 1 during a long run: mpirun ends the job and names it.
    for f in ("pid.0", "pid.1"):
        if os.path.exists(os.path.join(work, f)):
            os.unlink(os.path.join(work, f))
    argv = rank1_shell(mpirun, small, ":", ["--random-inputs", "1", "--repeat", "1000000"])
    p = subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    pid1 = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and p.poll() is None:
        try:
            with open(os.path.join(work, "pid.1")) as f:
                pid1 = int(f.read().strip())
            break
        except (OSError, ValueError):
            time.sleep(0.1)
    if pid1 is None:
        p.kill()
        out, err = p.communicate()
        res.fail("mpi: rank 1 killed", ["rank 1 never started"], err)
    else:
        time.sleep(1.0)  # into the --repeat loop
        t0 = time.monotonic()
        os.kill(pid1, signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=CASE_TIMEOUT)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            rc = None
        judge(res, "mpi: rank 1 killed (SIGKILL) mid-run", rc, err, time.monotonic() - t0,
              ["rank 1", "signal 9"])

    if sanitized(small):
        res.skip("mpi: rank 1 over ulimit -v", "AddressSanitizer build: its shadow memory "
                 "needs more address space than any ulimit -v allows")
    else:
        rc, _, err, dt = run_case(rank1_shell(mpirun, huge, "ulimit -v %d" % TENSOR_LIMIT_KIB,
                                              ["--random-inputs", "1"]), work)
        judge(res, "mpi: rank 1 over ulimit -v", rc, err, dt,
              ["device 1 (X=1)", "out of memory", "rt_alloc of 1073741824 bytes"])

    # Rank 1 alone runs in a directory where the input file is truncated.
    rng = np.random.default_rng(0)
    np.save(os.path.join(work, "a.npy"), rng.standard_normal((256, 256), dtype=np.float32))
    np.save(os.path.join(work, "w.npy"), rng.standard_normal((256, 256), dtype=np.float32))
    other = os.path.join(work, "rank1")
    os.makedirs(other, exist_ok=True)
    with open(os.path.join(work, "a.npy"), "rb") as f:
        data = f.read()
    with open(os.path.join(other, "a.npy"), "wb") as f:
        f.write(data[: len(data) // 3])
    shutil.copy(os.path.join(work, "w.npy"), os.path.join(other, "w.npy"))
    rc, _, err, dt = run_case(rank1_shell(mpirun, small, "cd rank1",
                                          ["--input", "A=a.npy", "--input", "W=w.npy"]), work)
    judge(res, "mpi: rank 1 alone reads a truncated input", rc, err, dt, ["a.npy"])

    def full(mnt):
        out = os.path.join(mnt, "c.npy")
        rc, _, err, dt = run_case(mpi_launch(mpirun, 2) + [small, "--random-inputs", "1",
                                                           "--output", "C=" + out], work)
        judge(res, "mpi: output on a full file system", rc, err, dt,
              [out, "No space left on device"])
        if os.listdir(mnt):
            res.fail("mpi: nothing left on the full file system", ["left: %s" % os.listdir(mnt)])
        else:
            res.ok("mpi: nothing left on the full file system")
    why = with_tmpfs(work, full)
    if why:
        res.skip("mpi: output on a full file system", why)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args()
    res = Results()
    work = tempfile.mkdtemp(prefix="einc_faults_")
    try:
        threads_cases(res, os.path.abspath(args.einc), work)
        if args.mpi:
            mpi_cases(res, os.path.abspath(args.einc), args.mpirun, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed, %d skipped" % (res.passed, res.failed, res.skipped))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
