#!/usr/bin/env python3
"""End-to-end test of the training loop with the hand-written program prog_train.c.

usage: run_train.py --train PROG --train-broken PROG --train-fail PROG --train-pause PROG
                    [--train-mpi PROG --train-fail-mpi PROG --train-pause-mpi PROG]

prog_train.c is linear regression pred = x . W with a mean squared error loss
and SGD with momentum (lr 0.05, momentum 0.9; state W.mom and a step counter
`step`), data parallel over X and model parallel over Y on a 2x2 mesh, B=8,
D=6.  NumPy runs the same steps on the same batches (in order, and shuffled
with --seed through the permutation of docs/runtime.md reproduced here) and
is the oracle for the per-step losses (stdout lines and --metrics) and the
final W, W.mom and step (--output).  Also checked: --save/--resume give the
uninterrupted run's curve and values bit for bit, --check passes and fails
(the variant whose sharded gradient misses its AllReduce), a device failing
at step 3 ends the job with a message and leaves the step-2 checkpoint
resumable, --log-every, and every bad command line or file gives its
message and exit status 1.  A run killed with SIGKILL mid-run (the variant
that pauses in step 6, after its checkpoint of step 3 and its metrics lines
of steps 4 and 5) and resumed with the same --metrics file ends with the
uninterrupted run's metrics and final values, bit for bit; a checkpoint
records its data order (data.txt, its hashes recomputed here) and --resume
refuses another --seed or data set.  With the MPI builds, the same under
`mpirun -np 4` (the kill is of rank 0), and a threads checkpoint resumed
on MPI.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from rt_testlib import expect_error, fail, finish, run

B, D = 8, 6
LR, MU = 0.05, 0.9
N = 20  # dataset rows: 2 batches per epoch, 4 rows left over
M64 = (1 << 64) - 1


# ---- the --seed permutation (runtime/data.c, docs/runtime.md) ----

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def shuffle_index(seed, epoch, n, i):
    """Position i of epoch `epoch`'s permutation of n rows."""
    h = 1
    while h < 31 and (1 << (2 * h)) < n:
        h += 1
    mask = (1 << h) - 1
    keys = [splitmix64(seed ^ splitmix64((4 * epoch + r) & M64)) for r in range(4)]
    x = i
    while True:
        left, right = x >> h, x & mask
        for k in keys:
            left, right = right, left ^ (splitmix64(right ^ k) & mask)
        x = (left << h) | right
        if x < n:
            return x


def batch_rows(step_index, seed):
    """Dataset rows of the batch of 0-based step `step_index`."""
    nb = N // B
    epoch, j = divmod(step_index, nb)
    pos = [j * B + i for i in range(B)]
    if seed is None:
        return pos
    return [shuffle_index(seed, epoch, N, p) for p in pos]


def data_hash(path):
    """The hash of a --data file's data that a checkpoint records
    (runtime/data.c): splitmix64 chained over its little-endian 64-bit
    words, the last one zero-padded, from splitmix64(byte count)."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        np.lib.format._read_array_header(fh, version)
        data = fh.read()
    h = splitmix64(len(data))
    for i in range(0, len(data), 8):
        h = splitmix64(h ^ int.from_bytes(data[i:i + 8].ljust(8, b"\0"), "little"))
    return h


def check_permutation():
    """The permutation is one: every epoch of every n visits each row once,
    and it moves with the seed and the epoch."""
    for n in (1, 2, 3, 5, 16, 17, 20, 100, 257):
        for seed, epoch in ((0, 0), (5, 0), (5, 1), (2**63 + 7, 12345)):
            perm = [shuffle_index(seed, epoch, n, i) for i in range(n)]
            if sorted(perm) != list(range(n)):
                fail("shuffle_index(%d, %d, %d) is not a permutation" % (seed, epoch, n))
    a = [shuffle_index(5, 0, 100, i) for i in range(100)]
    for other in ([shuffle_index(5, 1, 100, i) for i in range(100)],
                  [shuffle_index(6, 0, 100, i) for i in range(100)], list(range(100))):
        if a == other:
            fail("the permutation does not change with the epoch and seed")


# ---- the NumPy oracle ----

def train_numpy(x, y, w0, steps, start=0, seed=None, mom0=None, state=None):
    """Steps start+1..steps of prog_train.c in f64; returns the losses of
    those steps, the final W and W.mom.  `state` continues from (W, W.mom)."""
    w = np.array(w0, np.float64)
    mom = np.zeros(D) if mom0 is None else np.array(mom0, np.float64)
    losses = []
    for g in range(start, steps):
        rows = batch_rows(g, seed)
        xb, yb = x[rows].astype(np.float64), y[rows].astype(np.float64)
        r = xb @ w - yb
        losses.append(np.mean(r * r))
        grad = 2.0 / B * xb.T @ r
        mom = MU * mom + grad
        w = w - LR * mom
    return np.array(losses), w, mom


def rel_err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)


def read_metrics(path, tag):
    """The --metrics lines as dicts; checks their keys."""
    rows = []
    with open(path) as f:
        for line in f:
            obj = json.loads(line)
            if sorted(obj) != ["loss", "samples_per_s", "seconds", "step"]:
                fail("%s: metrics line has keys %s" % (tag, sorted(obj)))
            rows.append(obj)
    return rows


def stdout_losses(out):
    """{step: loss} from the `step S/T  loss L  X ms` lines."""
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "step" and parts[2] == "loss" and parts[5] == "ms":
            got[int(parts[1].split("/")[0])] = float(parts[3])
    return got


class Files:
    """The dataset and start values of the tests, in `tmp`."""

    def __init__(self, tmp):
        rng = np.random.default_rng(11)
        self.x = rng.standard_normal((N, D)).astype(np.float32)
        self.y = (self.x @ rng.standard_normal(D) + 0.1 * rng.standard_normal(N)).astype(np.float32)
        self.w0 = (0.1 * rng.standard_normal(D)).astype(np.float32)
        self.mom0 = (0.01 * rng.standard_normal(D)).astype(np.float32)
        self.tmp = tmp
        for name in ("x", "y", "w0", "mom0"):
            np.save(self.path(name), getattr(self, name))

    def path(self, name):
        return os.path.join(self.tmp, name + ".npy")

    def data(self):
        return ["--data", "x=" + self.path("x"), "--data", "y=" + self.path("y")]

    def start(self):
        return self.data() + ["--input", "W=" + self.path("w0")]


def check_training(launch, f, tag, seed=None, steps=7):
    """A run of `steps` steps with every output checked against NumPy."""
    out = {n: os.path.join(f.tmp, "%s_%s.npy" % (tag, n)) for n in ("W", "W.mom", "step", "pred")}
    metrics = os.path.join(f.tmp, tag + ".jsonl")
    cmd = launch + f.start() + ["--steps", str(steps), "--metrics", metrics, "--check"]
    cmd += ["--seed", str(seed)] if seed is not None else []
    for n, p in out.items():
        cmd += ["--output", "%s=%s" % (n, p)]
    p = run(cmd)
    losses, w, mom = train_numpy(f.x, f.y, f.w0, steps, seed=seed)
    rows = read_metrics(metrics, tag)
    if [r["step"] for r in rows] != list(range(1, steps + 1)):
        fail("%s: metrics steps are %s" % (tag, [r["step"] for r in rows]))
    elif rel_err([r["loss"] for r in rows], losses) > 1e-5:
        fail("%s: metrics losses %s differ from NumPy's %s"
             % (tag, [r["loss"] for r in rows], losses))
    for r in rows:
        if not (r["seconds"] > 0 and abs(r["samples_per_s"] * r["seconds"] - B) < 1e-3 * B):
            fail("%s: metrics line %s: samples_per_s is not B / seconds" % (tag, r))
    printed = stdout_losses(p.stdout)
    if sorted(printed) != list(range(1, steps + 1)):
        fail("%s: step lines for steps %s:\n%s" % (tag, sorted(printed), p.stdout))
    elif rel_err([printed[s] for s in sorted(printed)], losses) > 1e-5:
        fail("%s: printed losses differ from NumPy's" % tag)
    if "step %d/%d  loss " % (steps, steps) not in p.stdout:
        fail("%s: no line 'step %d/%d  loss ...':\n%s" % (tag, steps, steps, p.stdout))
    summary = "trained %d steps (1 to %d) in " % (steps, steps)
    if summary not in p.stdout or "samples/s (batch 8, " not in p.stdout:
        fail("%s: no summary line %r:\n%s" % (tag, summary, p.stdout))
    for name, want in (("W", w), ("W.mom", mom)):
        got = np.load(out[name])
        if got.shape != (D,) or rel_err(got, want) > 1e-5:
            fail("%s: final %s %s differs from NumPy's %s" % (tag, name, got, want))
    if np.load(out["step"]).shape != () or float(np.load(out["step"])) != steps:
        fail("%s: the step counter state is %s, expected %d" % (tag, np.load(out["step"]), steps))
    rows = batch_rows(steps - 1, seed)
    want_pred = f.x[rows].astype(np.float64) @ train_numpy(f.x, f.y, f.w0, steps - 1, seed=seed)[1]
    if rel_err(np.load(out["pred"]), want_pred) > 1e-5:
        fail("%s: pred of the last step differs from NumPy's" % tag)
    # --check's f32 tolerance on training: 1e-4 x steps (runtime/check.c).
    tol = " over %d steps (tol %g)" % (steps, 1e-4 * steps)
    for needle in ("check loss curve: max_rel_err=", tol,
                   "check W: max_rel_err=", "check W.mom: max_rel_err=", "check step: max_rel_err=",
                   "check pred: max_rel_err=", "check: largest max_rel_err="):
        if needle not in p.stdout:
            fail("%s: --check output lacks %r:\n%s" % (tag, needle, p.stdout))
    return [r["loss"] for r in read_metrics(metrics, tag)]


def final_values(f, tag):
    return {n: np.load(os.path.join(f.tmp, "%s_%s.npy" % (tag, n))) for n in ("W", "W.mom", "step")}


def outputs_args(f, tag):
    args = []
    for n in ("W", "W.mom", "step"):
        args += ["--output", "%s=%s" % (n, os.path.join(f.tmp, "%s_%s.npy" % (tag, n)))]
    return args


def check_resume(launch, resume_launch, f, tag, full, exact=True):
    """--steps 7 equals --steps K --save D then --resume D --steps 7, for a
    checkpoint at the end of an epoch (K=4) and in the middle of one (K=3).
    `full` is the uninterrupted run's metrics losses (seed 5)."""
    want = train_numpy(f.x, f.y, f.w0, 7, seed=5)
    for k in (3, 4):
        ck = os.path.join(f.tmp, "%s_ck%d" % (tag, k))
        shutil.rmtree(ck, ignore_errors=True)
        run(launch + f.start() + ["--seed", "5", "--steps", str(k), "--save", ck])
        with open(os.path.join(ck, "steps.txt")) as fh:
            if fh.read() != "%d\n" % k:
                fail("%s: steps.txt does not hold %d" % (tag, k))
        if sorted(os.listdir(ck)) != ["W.mom.npy", "W.npy", "data.txt", "hparams.txt", "step.npy",
                                   "steps.txt"]:
            fail("%s: checkpoint holds %s" % (tag, sorted(os.listdir(ck))))
        check_record(ck, f, tag, k, 5)
        metrics = os.path.join(f.tmp, "%s_resumed%d.jsonl" % (tag, k))
        p = run(resume_launch + f.data() + ["--seed", "5", "--resume", ck, "--steps", "7",
                                            "--metrics", metrics, "--check"]
                + outputs_args(f, "%s_r%d" % (tag, k)))
        got = [r["loss"] for r in read_metrics(metrics, tag)]
        steps = [r["step"] for r in read_metrics(metrics, tag)]
        if steps != list(range(k + 1, 8)):
            fail("%s: resumed run's steps are %s, expected %d..7" % (tag, steps, k + 1))
        elif exact and got != full[k:]:
            fail("%s: resumed losses %s differ from the uninterrupted run's %s"
                 % (tag, got, full[k:]))
        elif rel_err(got, full[k:]) > 1e-6:
            fail("%s: resumed losses %s differ from the uninterrupted run's %s"
                 % (tag, got, full[k:]))
        if "step %d/7  loss" % (k + 1) not in p.stdout or "trained %d steps (%d to 7)" % (7 - k, k + 1) not in p.stdout:
            fail("%s: resumed run's lines:\n%s" % (tag, p.stdout))
        vals = final_values(f, "%s_r%d" % (tag, k))
        if rel_err(vals["W"], want[1]) > 1e-5 or rel_err(vals["W.mom"], want[2]) > 1e-5 or vals["step"] != 7:
            fail("%s: resumed run's final values differ from NumPy's" % tag)


def check_record(ck, f, tag, steps, seed):
    """ck/data.txt records the seed, N, B, the next step's place in the
    order, and each --data file's dtype, shape, hash and path."""
    nb = N // B
    want = ["seed %s" % ("none" if seed is None else seed), "rows %d" % N, "batch %d" % B,
            "next step %d epoch %d batch %d" % (steps + 1, steps // nb, steps % nb),
            "data x dtype <f4 shape (%d, %d) hash %016x path %s" % (N, D, data_hash(f.path("x")),
                                                                   f.path("x")),
            "data y dtype <f4 shape (%d,) hash %016x path %s" % (N, data_hash(f.path("y")),
                                                               f.path("y"))]
    with open(os.path.join(ck, "data.txt")) as fh:
        got = [ln for ln in fh.read().splitlines() if not ln.startswith("#")]
    if got != want:
        fail("%s: %s/data.txt holds %s, expected %s" % (tag, ck, got, want))


def metrics_curve(path):
    """(step, loss) of each line of a --metrics file (loss as written)."""
    with open(path) as fh:
        return [(json.loads(ln)["step"], json.loads(ln)["loss"]) for ln in fh]


def wait_for(cond, proc, seconds):
    """Polls cond() every 10 ms while proc runs; True once it holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if cond():
            return True
        time.sleep(0.01)
    return cond() and proc.poll() is None


def read_text(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def rank0_pid(mpirun_pid):
    """The pid of rank 0 among mpirun's children (OMPI_COMM_WORLD_RANK=0)."""
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % pid) as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open("/proc/%s/environ" % pid, "rb") as fh:
                if b"OMPI_COMM_WORLD_RANK=0" in fh.read().split(b"\0"):
                    return int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return None


def check_kill(launch, pause, f, tag, every_refusal=True):
    """Kill mid-run and --resume: `pause` (PAUSE_AT=6) saves every 3 steps
    and stops in step 6, after its checkpoint of step 3 and its metrics
    lines of steps 4 and 5; it is then killed with SIGKILL (on MPI, rank 0:
    the rank that writes both).  Resumed from step 3 to 9 with the same
    --metrics file, the file holds the uninterrupted run's steps 1..9 and
    losses, and W, W.mom and step equal its final values, bit for bit: the
    same backend does the same arithmetic on the same batches.  A resume
    with another --seed or data set is refused and leaves the files as
    they are (each refusal once, on one backend: `every_refusal`)."""
    full = os.path.join(f.tmp, tag + "_kill_full.jsonl")
    run(launch + f.start() + ["--seed", "5", "--steps", "9", "--metrics", full]
        + outputs_args(f, tag + "_kill_full"))
    ck = os.path.join(f.tmp, tag + "_kill_ck")
    metrics = os.path.join(f.tmp, tag + "_kill.jsonl")
    shutil.rmtree(ck, ignore_errors=True)
    cmd = pause + f.start() + ["--seed", "5", "--steps", "9", "--metrics", metrics,
                               "--save", ck, "--save-every", "3"]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0") if cmd[0] == "mpirun" else None
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    paused = wait_for(lambda: read_text(os.path.join(ck, "steps.txt")) == "3\n" and
                      read_text(metrics).count("\n") == 5, proc, 30)
    victim = rank0_pid(proc.pid) if cmd[0] == "mpirun" else proc.pid
    if not paused or victim is None:
        proc.kill()
        _, err = proc.communicate()
        return fail("%s: the run to kill did not pause in step 6 after its checkpoint of step 3 "
                    "(exit %s):\n%s" % (tag, proc.returncode, err))
    os.kill(victim, signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return fail("%s: the job did not end within 30 s of the SIGKILL" % tag)
    if proc.returncode == 0:
        fail("%s: the killed run exited 0" % tag)
    want = metrics_curve(full)
    if metrics_curve(metrics) != want[:5]:
        fail("%s: the killed run's metrics are %s, expected steps 1..5 of %s"
             % (tag, metrics_curve(metrics), want))
    check_record(ck, f, tag + " killed", 3, 5)
    # As if the kill had cut a line short (the runtime writes a line with
    # one write(2), so only a crash of the machine could): dropped too.
    with open(metrics, "a") as fh:
        fh.write('{"step": 6, "lo')

    # Another seed, no seed, other data, a --data file missing: refused,
    # and the metrics file is left as it was.
    before = read_text(metrics)
    resume = launch + ["--resume", ck, "--steps", "9", "--metrics", metrics]
    where = os.path.join(ck, "data.txt")
    expect_error(resume + f.data() + ["--seed", "6"],
                 "--resume %s: the checkpoint was trained with --seed 5 (%s), and this run has "
                 "--seed 6; a resumed run must see the batches the uninterrupted run would "
                 "have: give --seed 5" % (ck, where))
    if every_refusal:
        check_refusals(resume, f, ck)
    if read_text(metrics) != before:
        fail("%s: a refused --resume changed the metrics file" % tag)

    # The same data under another name resumes (the record identifies data, not paths).
    moved = os.path.join(f.tmp, "x_moved.npy")
    shutil.copyfile(f.path("x"), moved)
    run(resume + ["--seed", "5", "--data", "x=" + moved, "--data", "y=" + f.path("y")]
        + outputs_args(f, tag + "_kill_resumed"))
    if metrics_curve(metrics) != want:
        fail("%s: after kill and --resume the metrics are %s, the uninterrupted run's %s"
             % (tag, metrics_curve(metrics), want))
    got, ref = final_values(f, tag + "_kill_resumed"), final_values(f, tag + "_kill_full")
    for name in ("W", "W.mom", "step"):
        if got[name].dtype != ref[name].dtype or got[name].tobytes() != ref[name].tobytes():
            fail("%s: after kill and --resume %s is %s, the uninterrupted run's %s"
                 % (tag, name, got[name], ref[name]))


def check_refusals(resume, f, ck):
    """--resume of checkpoint ck (--seed 5) without a seed, with other
    data, without --data y: each refused with its message."""
    where = os.path.join(ck, "data.txt")
    expect_error(resume + f.data(), "the checkpoint was trained with --seed 5 (%s), and this run "
                 "has no --seed (rows in order)" % where)
    other = os.path.join(f.tmp, "x_other.npy")
    x = f.x.copy()
    x[7, 2] += 1
    np.save(other, x)
    expect_error(resume + ["--seed", "5", "--data", "x=" + other, "--data", "y=" + f.path("y")],
                 "--resume %s: --data x is not the data set the checkpoint was trained on: this "
                 "run's file has dtype <f4 shape (20, 6) hash %016x path %s, the checkpoint's "
                 "(%s) dtype <f4 shape (20, 6) hash %016x path %s"
                 % (ck, data_hash(other), other, where, data_hash(f.path("x")), f.path("x")))
    yb = os.path.join(f.tmp, "y_batch.npy")
    np.save(yb, f.y[:B])
    expect_error(resume + ["--seed", "5", "--data", "x=" + f.path("x"), "--input", "y=" + yb],
                 "the checkpoint's run had --data y (%s: y dtype <f4 shape (20,) hash" % where)


def check_options(launch, f, tag):
    """--log-every, no --steps, --save-every, a given state."""
    p = run(launch + f.start() + ["--steps", "7", "--log-every", "3"])
    if sorted(stdout_losses(p.stdout)) != [3, 6, 7]:
        fail("%s: --log-every 3 printed steps %s" % (tag, sorted(stdout_losses(p.stdout))))
    p = run(launch + f.start())
    if sorted(stdout_losses(p.stdout)) != [1] or "step 1/1  loss" not in p.stdout:
        fail("%s: without --steps, not one step:\n%s" % (tag, p.stdout))
    ck = os.path.join(f.tmp, tag + "_every")
    p = run(launch + f.start() + ["--steps", "5", "--save", ck, "--save-every", "2"])
    for s in (2, 4, 5):
        if "saved %s (step %d)" % (ck, s) not in p.stdout:
            fail("%s: no checkpoint line for step %d:\n%s" % (tag, s, p.stdout))
    if "(step 3)" in p.stdout:
        fail("%s: a checkpoint at step 3 with --save-every 2" % tag)
    # A state given with --input starts there instead of at zero.
    metrics = os.path.join(f.tmp, tag + "_mom.jsonl")
    run(launch + f.start() + ["--input", "W.mom=" + f.path("mom0"), "--steps", "3",
                              "--metrics", metrics])
    want = train_numpy(f.x, f.y, f.w0, 3, mom0=f.mom0)[0]
    if rel_err([r["loss"] for r in read_metrics(metrics, tag)], want) > 1e-5:
        fail("%s: a W.mom given with --input was not the start" % tag)


def check_failures(train, broken, fail_prog, f, tag, resume_launch, full):
    """--check fails on a wrong sharded gradient; a device failing at step 3
    ends the job with a message, and its step-2 checkpoint resumes."""
    if broken:
        p = expect_error(broken + f.start() + ["--steps", "4", "--check"],
                         "--check: param 'W' differs from the reference")
        if "check W: max_rel_err=" not in p.stdout or "check: largest max_rel_err=" not in p.stdout:
            fail("%s: the broken program's --check lines:\n%s" % (tag, p.stdout))
    ck = os.path.join(f.tmp, tag + "_failed")
    shutil.rmtree(ck, ignore_errors=True)
    p = expect_error(fail_prog + f.start() + ["--seed", "5", "--steps", "7", "--save", ck,
                                              "--save-every", "2"],
                     "AllReduce (op 4): dim 0 is 3 in the input but 4 in the output")
    if "step 2/7" not in p.stdout or "step 3/7" in p.stdout:
        fail("%s: the failing run's lines:\n%s" % (tag, p.stdout))
    with open(os.path.join(ck, "steps.txt")) as fh:
        if fh.read() != "2\n":
            fail("%s: the failed run's checkpoint is not step 2" % tag)
    metrics = os.path.join(f.tmp, tag + "_after_failure.jsonl")
    run(resume_launch + f.data() + ["--seed", "5", "--resume", ck, "--steps", "7",
                                    "--metrics", metrics])
    got = [r["loss"] for r in read_metrics(metrics, tag)]
    if rel_err(got, full[2:]) > 1e-6:
        fail("%s: resumed after the failure, losses %s differ from %s" % (tag, got, full[2:]))


def check_errors(prog, tp, f, tag):
    t = f.tmp
    start = f.start()

    def npy(name, a):
        path = os.path.join(t, name + ".npy")
        np.save(path, a)
        return path

    if tp:
        expect_error(tp + ["--random-inputs", "1", "--steps", "3"],
                     "--steps: this program does not train (it has no `optimize` statement)")
        expect_error(tp + ["--random-inputs", "1", "--save", os.path.join(t, "d")],
                     "--save: this program does not train")
        expect_error(tp + ["--random-inputs", "1", "--output", "w=" + os.path.join(t, "o.npy")],
                     "'w' is a param of a program that does not train, so it never changes")
    expect_error(prog + start + ["--repeat", "3"], "--repeat: this program trains")
    expect_error(prog + start + ["--steps", "0"], "--steps expects a count from 1 to")
    expect_error(prog + start + ["--steps", "x"], "--steps expects a count")
    expect_error(prog + start + ["--data", "z=" + f.path("x")],
                 "--data z: the program has no input named 'z'; its inputs are: x y")
    expect_error(prog + start + ["--data", "W=" + f.path("w0")],
                 "--data W: 'W' is a param, not an input")
    expect_error(prog + start + ["--data", "W.mom=" + f.path("w0")],
                 "--data W.mom: 'W.mom' is a state, not an input")
    expect_error(prog + start + ["--input", "x=" + f.path("x")],
                 "input 'x' is given by both --input and --data")
    expect_error(prog + start + ["--data", "x=" + f.path("x")],
                 "input 'x' is given twice with --data")
    expect_error(prog + ["--data", "x=" + npy("x64", f.x.astype(np.float64)), "--data",
                         "y=" + f.path("y"), "--input", "W=" + f.path("w0")],
                 "x64.npy has dtype '<f8', expected '<f4'")
    expect_error(prog + ["--data", "x=" + npy("x5", f.x[:, :5]), "--data", "y=" + f.path("y"),
                         "--input", "W=" + f.path("w0")],
                 "--data x: %s has shape (20, 5), expected (N, 6): N >= 8 rows" % os.path.join(t, "x5.npy"))
    expect_error(prog + ["--data", "x=" + npy("xs", f.x[:5]), "--data", "y=" + npy("ys", f.y[:5]),
                         "--input", "W=" + f.path("w0")],
                 "--data x: %s has 5 rows, fewer than the batch of 8 rows a step takes"
                 % os.path.join(t, "xs.npy"))
    expect_error(prog + ["--data", "x=" + f.path("x"), "--data", "y=" + npy("y16", f.y[:16]),
                         "--input", "W=" + f.path("w0")],
                 "--data y: %s has 16 rows but %s has 20" % (os.path.join(t, "y16.npy"), f.path("x")))
    expect_error(prog + ["--data", "x=" + f.path("x"), "--input", "W=" + f.path("w0")],
                 "missing --input y=FILE.npy for input 'y' (or use --data NAME=FILE.npy, or "
                 "--random-inputs SEED)")
    expect_error(prog + f.data(), "missing --input W=FILE.npy for param 'W'")
    expect_error(prog + start + ["--save-every", "2"], "--save-every needs --save DIR")
    expect_error(prog + ["--input", "x=" + npy("xb", f.x[:B]), "--input", "y=" + npy("yb", f.y[:B]),
                         "--input", "W=" + f.path("w0"), "--seed", "3"],
                 "--seed shuffles the rows of --data files, and no --data is given")
    expect_error(prog + start + ["--save", f.path("x")],
                 "--save %s exists and is not a directory" % f.path("x"))
    expect_error(prog + start + ["--metrics", os.path.join(t, "no", "dir", "m.jsonl")],
                 "cannot open it for writing")
    expect_error(prog + start + ["--output", "x=" + os.path.join(t, "o.npy")],
                 "--output x: 'x' is an input, not an output")
    expect_error(prog + start + ["--output", "nope=" + os.path.join(t, "o.npy")],
                 "the program has no output, param or state named 'nope'; it has: loss pred W "
                 "W.mom step")
    ck = os.path.join(t, tag + "_errck")
    shutil.rmtree(ck, ignore_errors=True)
    run(prog + start + ["--steps", "4", "--save", ck])
    expect_error(prog + f.data() + ["--resume", ck, "--steps", "4"],
                 "--resume %s holds 4 steps, and --steps 4 is the step to reach, not a count "
                 "to add" % ck)
    expect_error(prog + start + ["--resume", ck, "--steps", "6"],
                 "param 'W' is given by both --input and --resume")
    os.remove(os.path.join(ck, "W.mom.npy"))
    expect_error(prog + f.data() + ["--resume", ck, "--steps", "6"],
                 "--resume %s: the checkpoint has no file for state 'W.mom'" % ck)
    os.remove(os.path.join(ck, "steps.txt"))
    expect_error(prog + f.data() + ["--resume", ck, "--steps", "6"],
                 "--resume %s: cannot open %s" % (ck, os.path.join(ck, "steps.txt")))
    expect_error(prog + f.data() + ["--resume", os.path.join(t, "nowhere"), "--steps", "6"],
                 "No such file or directory")
    p = run(prog + ["--help"])
    for flag in ("--steps N", "--data NAME=file.npy", "--seed S", "--log-every K",
                 "--metrics FILE.jsonl", "--save DIR", "--save-every K", "--resume DIR"):
        if flag not in p.stdout:
            fail("--help lacks %r" % flag)
    p = run(prog + ["--info"])
    if "trains: each run is one step (--steps); loss: loss" not in p.stdout or \
            "state  f32   W.mom[6_Y]" not in p.stdout:
        fail("--info lacks the training lines:\n%s" % p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--train-broken")
    ap.add_argument("--train-fail", required=True)
    ap.add_argument("--train-pause", required=True)
    ap.add_argument("--train-mpi")
    ap.add_argument("--train-fail-mpi")
    ap.add_argument("--train-pause-mpi")
    ap.add_argument("--tp", help="a program that does not train (prog_tp.c)")
    a = ap.parse_args()
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4"]
    check_permutation()
    with tempfile.TemporaryDirectory() as tmp:
        f = Files(tmp)
        train = [a.train]
        in_order = check_training(train, f, "threads")
        full = check_training(train, f, "threads-seed5", seed=5)
        other = check_training(train, f, "threads-seed6", seed=6)
        if in_order == full or other == full:
            fail("--seed does not change the order of the batches")
        check_resume(train, train, f, "threads", full)
        check_kill(train, [a.train_pause], f, "threads")
        check_options(train, f, "threads")
        check_failures(train, [a.train_broken] if a.train_broken else None, [a.train_fail], f,
                       "threads", train, full)
        check_errors(train, [a.tp] if a.tp else None, f, "threads")
        if a.train_mpi:
            mpi = mpirun + [a.train_mpi]
            mpi_full = check_training(mpi, f, "mpi-seed5", seed=5)
            if rel_err(mpi_full, full) > 1e-6:
                fail("mpi and threads losses differ: %s vs %s" % (mpi_full, full))
            # A checkpoint of the threads backend resumed on MPI ranks.
            check_resume(train, mpi, f, "threads-to-mpi", full, exact=False)
            expect_error(mpi + f.start() + ["--data", "W=" + f.path("w0")],
                         "--data W: 'W' is a param, not an input")
        if a.train_pause_mpi:
            check_kill(mpi, mpirun + [a.train_pause_mpi], f, "mpi", every_refusal=False)
        if a.train_fail_mpi:
            check_failures(mpi, None, mpirun + [a.train_fail_mpi], f, "mpi", mpi, full)
    return finish("all training checks passed")


if __name__ == "__main__":
    sys.exit(main())
