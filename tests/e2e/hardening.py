#!/usr/bin/python3
"""hardening.py - the classes of bugs of issue 29, each closed at its root.

Each class is one CTest test (`--class NAME`, docs/reliability.md):

  counts   every count on the command line of einc (and its subcommands)
           and of an executable is decimal only ("010" is ten), without a
           sign, space or anything after the digits, and within its limit;
           a refusal names the flag and its limits.
  outputs  no output replaces an input or another output of the same run,
           nor anything but a regular file: einc's -o against its source,
           --hw file and plugins (`einc m.ein -o m.ein`), and /dev/null,
           /dev/full, a FIFO, a directory; an executable's --output,
           --trace, --metrics and --save files against each other and
           against its --input, --data and --resume files.
  fifo     a FIFO (named pipe) named as an input is refused at once, with
           a message, never waited on in open(): an executable's --input,
           --data and the files of a --resume checkpoint, and --metrics
           (written in place) when no process reads it; einc's source
           (a pipe with a writer, as `einc <(gen)`, is still read), --hw
           and --load-pass.
  passes   every pipeline is verified, the empty one (--passes=) included,
           and every option that names passes (--passes=, --print-after=)
           checks the names against the registry.

Every command runs with a timeout, so a regression that hangs fails.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: hardening.py --einc PATH --class counts|fifo|outputs|passes
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

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
            ("--top-k", "1 to 2147483647", ["0", "2147483648"]),
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


def unchanged(t, title, path, before):
    with open(path, "rb") as f:
        t.result(f.read() == before, title + ": the file is unchanged")


def check_outputs(t, einc, work):
    src = os.path.join(work, "mm.ein")
    with open(src, "rb") as f:
        text = f.read()
    os.symlink("mm.ein", os.path.join(work, "link.ein"))
    os.link(src, os.path.join(work, "hard.ein"))
    os.mkfifo(os.path.join(work, "p.fifo"))
    hw = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hw", "tpu-v4.json")
    shutil.copy(hw, os.path.join(work, "prof.json"))
    for out, extra in (("mm.ein", []), ("./mm.ein", []), (src, ["-c"]), ("link.ein", []),
                       ("hard.ein", ["--emit-llvm"])):
        expect(t, "einc mm.ein %s-o %s" % ("".join(e + " " for e in extra), out),
               [einc, "mm.ein", "-O0", "-o", out] + extra, work, 1, ["is the input file"])
    expect(t, "einc --hw prof.json -o prof.json",
           [einc, "mm.ein", "--hw", "prof.json", "-o", "prof.json"], work, 1,
           ["-o prof.json is the input file 'prof.json'"])
    unchanged(t, "einc -o onto its source", src, text)
    for out, kind in (("/dev/null", "a character device"), ("/dev/full", "a character device"),
                      ("p.fifo", "a FIFO (named pipe)"), (".", "a directory")):
        expect(t, "einc -o %s" % out, [einc, "mm.ein", "-O0", "-o", out], work, 1,
               ["-o %s is %s, not a regular file" % (out, kind)])
    expect(t, "einc calibrate -o /dev/full", [einc, "calibrate", "--quick", "-o", "/dev/full"],
           work, 1, ["-o /dev/full is a character device"])

    mm = build(t, einc, work, "mm", PROGRAM, "the matmul")
    train = build(t, einc, work, "train", TRAIN, "the training step")
    rng = np.random.default_rng(3)
    for name, shape in (("a", (4, 6)), ("w", (6, 3)), ("in", (4, 2)), ("tgt", (4, 2)),
                        ("tw", (2, 2))):
        np.save(os.path.join(work, name + ".npy"), rng.standard_normal(shape).astype(np.float32))
    os.link(os.path.join(work, "a.npy"), os.path.join(work, "a_hard.npy"))
    os.symlink("w.npy", os.path.join(work, "w_link.npy"))
    with open(os.path.join(work, "a.npy"), "rb") as f:
        a_bytes = f.read()
    if mm:
        ins = [mm, "--input", "A=a.npy", "--input", "W=w.npy"]
        for title, args, says in (
                ("--output and --trace one new file", ["--output", "C=c.npy", "--trace", "./c.npy"],
                 ["--output C=c.npy and --trace ./c.npy name one file"]),
                ("--output onto --input", ["--output", "C=a.npy"],
                 ["--output C=a.npy and --input A=a.npy name one file", "would replace an input"]),
                ("--output onto a hard link to an --input", ["--output", "C=a_hard.npy"],
                 ["--output C=a_hard.npy and --input A=a.npy name one file"]),
                ("--output onto a symbolic link to an --input", ["--output", "C=w_link.npy"],
                 ["--output C=w_link.npy and --input W=w.npy name one file"]),
                ("--trace onto --input", ["--trace", "a.npy"],
                 ["--trace a.npy and --input A=a.npy name one file"])):
            expect(t, title, ins + args, work, 1, says)
        t.result(not os.path.exists(os.path.join(work, "c.npy")), "a refused run writes nothing")
        unchanged(t, "--output onto --input", os.path.join(work, "a.npy"), a_bytes)
        expect(t, "--output and --trace, two files",
               ins + ["--output", "C=c.npy", "--trace", "t.json"], work, 0)
    if not train:
        return
    ins = [train, "--input", "W=tw.npy", "--data", "In=in.npy", "--data", "Tgt=tgt.npy"]
    expect(t, "a checkpoint to resume from", ins + ["--save", "ck"], work, 0)
    for title, args, says in (
            ("--metrics and --trace one file", ["--metrics", "m.jsonl", "--trace", "m.jsonl"],
             ["--trace m.jsonl and --metrics m.jsonl name one file"]),
            ("--output into the --save checkpoint", ["--save", "ck2", "--output", "W=ck2/W.npy"],
             ["--output W=ck2/W.npy and --save ck2 (ck2/W.npy) name one file"]),
            ("--metrics onto the --save checkpoint's steps", ["--save", "ck", "--metrics",
                                                              "ck/steps.txt"],
             ["--metrics ck/steps.txt and --save ck (ck/steps.txt) name one file"]),
            ("--output onto --data", ["--output", "W=in.npy"],
             ["--output W=in.npy and --data In=in.npy name one file"]),
            ("--metrics onto the --resume checkpoint", ["--resume", "ck", "--steps", "2",
                                                        "--metrics", "ck/W.npy"],
             ["--metrics ck/W.npy and --resume ck (ck/W.npy) name one file"])):
        expect(t, title, ins[:1] + ins[3:] + args if "--resume" in args else ins + args, work, 1,
               says)
    # What stays allowed: --save onto the --resume checkpoint, a param
    # written back over the file it was read from.
    expect(t, "--resume ck --save ck", ins[:1] + ins[3:] + ["--resume", "ck", "--save", "ck",
                                                           "--steps", "2"], work, 0)
    expect(t, "--input W=tw.npy --output W=tw.npy", ins + ["--output", "W=tw.npy"], work, 0)


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
    # --metrics is written in place, not renamed over: a FIFO that no
    # process reads would block open(), and --resume reads it.
    refused("--metrics FIFO without a reader", [train, "--random-inputs", "1", "--metrics", fifo],
            ["--metrics %s: cannot open it for writing: a FIFO (named pipe) that no process reads"
             % fifo])
    refused("--resume --metrics FIFO",
            [train, "--random-inputs", "1", "--resume", "ck", "--steps", "2", "--metrics", fifo],
            ["--metrics %s is a FIFO (named pipe); with --resume it is read" % fifo])
    expect(t, "--resume from the checkpoint restored",
           [train, "--random-inputs", "1", "--resume", "ck", "--steps", "2"], work, 0)


CLASSES = {"counts": check_counts, "fifo": check_fifo, "outputs": check_outputs,
           "passes": check_passes}


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
