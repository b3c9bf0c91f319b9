#!/usr/bin/python3
"""hardening.py - the classes of bugs of issue 29, each closed at its root.

Each class is one CTest test (`--class NAME`, docs/reliability.md):

  counts   every count on the command line of einc (and its subcommands)
           and of an executable is decimal only ("010" is ten), without a
           sign, space or anything after the digits, and within its limit;
           a refusal names the flag and its limits.
  fifo     a FIFO (named pipe) named as an input is refused at once, with
           a message, never waited on in open(): an executable's --input,
           --data and the files of a --resume checkpoint; einc's source
           (a pipe with a writer, as `einc <(gen)`, is still read), --hw
           and --load-pass.
  passes   every pipeline is verified, the empty one (--passes=) included,
           and every option that names passes (--passes=, --print-after=)
           checks the names against the registry.

Every command runs with a timeout, so a regression that hangs fails.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: hardening.py --einc PATH --class counts|fifo|passes
"""
import argparse
import json
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


# A 2-device training step: --steps, --log-every, --metrics.
TRAIN = """\
mesh X = 2
dim B = 4, D = 2, E = 2
input In[B_X, D] : f32
input Tgt[B_X, E] : f32
param W[D, E] : f32
Out[B, E] = In[B, D] * W[D, E]
L[] = mean((Out[B, E] - Tgt[B, E]) * (Out[B, E] - Tgt[B, E]))
loss L
optimize W with sgd(lr=0.05)
"""

# Values no count flag takes: another base, a sign, spaces, junk after the
# digits, nothing, a real, more than 64 bits.
NOT_COUNTS = ["0x10", "+5", "-5", " 5", "5 ", "5x", "", "1e3", "99999999999999999999999"]


def build(t, einc, work, name, text, title):
    """Compiles `text` into work/name (-O0: the flags, not the code, are
    tested); the executable's path, or None after a failure."""
    src = os.path.join(work, name + ".ein")
    with open(src, "w") as f:
        f.write(text)
    rc, out, err = run([einc, src, "-O0", "-o", name], work, 300)
    if rc != 0:
        t.result(False, "compile " + title, err)
        return None
    return os.path.join(work, name)


def check_counts(t, einc, work):
    src = os.path.join(work, "mm.ein")
    # einc: "010" is ten, "08" is eight, as written.
    for v, dim in (("010", "dim I = 10,"), ("08", "dim I = 8,")):
        rc, out, _ = expect(t, "einc -D I=%s is decimal" % v, [einc, src, "-D", "I=" + v,
                                                               "--dump-ir"], work, 0)
        t.result(dim in out, "einc -D I=%s gives %s" % (v, dim))
    # Past 64 bits or the limit: the message names the real limit.
    compiler = [
        ([einc, src, "-D"], "I=%s", "-D I wants a count from 1 to 9223372036854775807", ["0", "9223372036854775808"]),
        ([einc, src], "--max-errors=%s", "--max-errors wants a count from 1 to 100000", ["0", "100001"]),
        ([einc, src], "--einsum-unroll=%s", "--einsum-unroll wants a count from 0 to 4096", ["4097"]),
        ([einc, src], "--stream-min=%s", "--stream-min wants a count from 1 to 9223372036854775807", ["0"]),
        ([einc, src], "--meshslice=%s", "--meshslice wants auto, off or a slice count K from 1 to 4096", ["0", "4097"]),
        ([einc, "autotune", src], "--chips=%s", "--chips wants a count from 1 to 1048576", ["0", "1048577"]),
        ([einc, "autotune", "--chips=4", src], "--block=%s", "--block wants a count from 1 to 1048576", ["0"]),
        ([einc, "autotune", "--chips=4", src], "--slices=%s", "--slices wants a count from 1 to 1048576", ["0"]),
        ([einc, "autotune", src], "--mesh=%s", "--mesh wants ROWSxCOLS, two decimal counts from 1 to 1048576", ["0x4", "2x+2"]),
        ([einc, "calibrate", "-o", "p.json"], "--ranks=%s", "--ranks wants a count from 2 to 16", ["1", "17"]),
        ([einc, "calibrate", "-o", "p.json"], "--max-bytes=%s", "--max-bytes wants a count from 65536 to 536870912", ["536870913"]),
        ([einc, "calibrate", "-o", "p.json"], "--repeat=%s", "--repeat wants a count from 3 to 1000", ["2"]),
        ([einc, "calibrate", "-o", "p.json"], "--rounds=%s", "--rounds wants a count from 1 to 15", ["16"]),
    ]
    for cmd, form, says, over in compiler:
        for v in NOT_COUNTS + over:
            arg = form % v
            expect(t, "%s %r refused" % (" ".join(os.path.basename(c) for c in cmd[:2]), arg),
                   cmd + [arg], work, 2, [says])
    t.result(not os.path.exists(os.path.join(work, "p.json")), "einc calibrate ran nothing")

    # The executable: a decimal count is taken as written, a seed up to 2^64 - 1.
    mm = build(t, einc, work, "mm", PROGRAM, "the matmul")
    train = build(t, einc, work, "train", TRAIN, "the training step")
    if mm:
        expect(t, "--repeat 08 --random-inputs 08", [mm, "--repeat", "08", "--random-inputs", "08"],
               work, 0)
        expect(t, "--random-inputs 18446744073709551615",
               [mm, "--random-inputs", "18446744073709551615"], work, 0)
        executable = [
            ("--random-inputs", "0 to 18446744073709551615", ["18446744073709551616"]),
            ("--repeat", "1 to 1000000", ["0", "1000001"]),
            ("--steps", "1 to 1000000000000", ["0", "1000000000001"]),
            ("--log-every", "1 to 1000000000000", ["0"]),
            ("--save-every", "1 to 1000000000000", ["0"]),
            ("--seed", "0 to 18446744073709551615", ["18446744073709551616"]),
            ("--generate", "1 to 1000000", ["0", "1000001"]),
            ("--prompt-cached", "0 to 2147483647", ["2147483648"]),
        ]
        for flag, limits, over in executable:
            for v in NOT_COUNTS + over:
                expect(t, "executable %s %r refused" % (flag, v), [mm, flag + "=" + v], work, 1,
                       ["%s expects a count from %s (decimal), got '%s'" % (flag, limits, v)])
    if train:
        rc, out, err = expect(t, "--steps 010 --log-every 05",
                              [train, "--random-inputs", "1", "--steps", "010", "--log-every", "05",
                               "--metrics", "m.jsonl"], work, 0)
        with open(os.path.join(work, "m.jsonl")) as f:
            steps = [json.loads(line)["step"] for line in f]
        t.result(steps == list(range(1, 11)), "--steps 010 trains ten steps",
                 "steps in m.jsonl: %s" % steps)


# A FIFO open() would wait on forever: a regression times out here.
FIFO_TIMEOUT = 20


def check_fifo(t, einc, work):
    fifo = os.path.join(work, "p.fifo")
    os.mkfifo(fifo)
    src = os.path.join(work, "mm.ein")
    says = "p.fifo is a FIFO (named pipe), not a regular file"

    def refused(title, cmd, words, status=1):
        expect(t, title, cmd, work, status, words, FIFO_TIMEOUT)

    refused("einc FIFO.ein", [einc, fifo, "--dump-ir"], ["'%s' is a FIFO (named pipe)" % fifo])
    os.symlink(fifo, os.path.join(work, "fifo.json"))
    refused("einc --hw FIFO.json", [einc, src, "--hw", "fifo.json"],
            ["hardware profile 'fifo.json' is not a regular file"])
    refused("einc --load-pass=FIFO", [einc, src, "--load-pass=" + fifo],
            ["cannot load pass plugin '%s': not a regular file" % fifo])
    # A pipe with a writer is a source as before (einc <(gen)).
    r, w = os.pipe()
    os.write(w, PROGRAM.encode())
    os.close(w)
    try:
        p = subprocess.run([einc, "/dev/fd/%d" % r, "--dump-ir"], cwd=work, pass_fds=(r,),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=FIFO_TIMEOUT)
        t.result(p.returncode == 0 and b"dim I = 4" in p.stdout, "einc reads a pipe with a writer",
                 p.stderr.decode())
    finally:
        os.close(r)

    mm = build(t, einc, work, "mm", PROGRAM, "the matmul")
    train = build(t, einc, work, "train", TRAIN, "the training step")
    if mm:
        refused("--input A=FIFO", [mm, "--input", "A=p.fifo", "--random-inputs", "1"],
                ["tensor 'A'", says])
    if not train:
        return
    refused("--data In=FIFO", [train, "--data", "In=p.fifo", "--random-inputs", "1"],
            ["--data In", says])
    rc, _, _ = expect(t, "a checkpoint to resume from",
                      [train, "--random-inputs", "1", "--save", "ck"], work, 0)
    if rc != 0:
        return
    # Each file of the checkpoint in turn replaced by a FIFO.
    for name, words in (("steps.txt", ["--resume ck", "steps.txt is a FIFO"]),
                        ("data.txt", ["--resume ck", "data.txt is a FIFO"]),
                        ("W.npy", ["tensor 'W'", "W.npy is a FIFO"])):
        path = os.path.join(work, "ck", name)
        os.rename(path, path + ".saved")
        os.mkfifo(path)
        refused("--resume with %s a FIFO" % name,
                [train, "--random-inputs", "1", "--resume", "ck", "--steps", "2"], words)
        os.unlink(path)
        os.rename(path + ".saved", path)
    expect(t, "--resume from the checkpoint restored",
           [train, "--random-inputs", "1", "--resume", "ck", "--steps", "2"], work, 0)


CLASSES = {"counts": check_counts, "fifo": check_fifo, "passes": check_passes}


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
