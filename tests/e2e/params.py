#!/usr/bin/python3
"""params.py - --params DIR: a decode program serves the params a training
program saved (--save DIR), checked by name, dtype and shape.

A bigram model (an embedding Emb[V, D] and an LM head Wlm[D, V], both
sharded) trains 3 AdamW steps with --save on a 2x2 mesh; a decode program
with the same params, differently sharded, and a KV cache (its logits:
the sum of the cached embeddings through Wlm) takes them with --params:
 - its greedy tokens are NumPy's from the checkpoint's arrays, and its
   --check passes (threads, and with --mpi on 4 MPI ranks);
 - refused before the run, with their messages: a directory that is not a
   checkpoint, a file, a param the checkpoint lacks (the message lists what
   it holds), another shape, another dtype, a param given by --input too,
   --params with --resume, and --params for a program without params.
The last line is `N passed, N failed`.

Usage: params.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, runtime_args  # noqa: E402

TRAIN = """mesh X = 2, Y = 2
dim B = 8, V = 16, D = 8
input Tok[B] : i32
input Tgt[B, V] : f32
param Emb[V, D_Y] : f32
param Wlm[D, V_X] : f32
H[B, D] = Emb[Tok[B], D]
Lg[B, V] = H[B, D] * Wlm[D, V]
L[] = mean((Lg[B, V] - Tgt[B, V]) * (Lg[B, V] - Tgt[B, V]))
loss L
optimize Emb, Wlm with adamw(lr=0.01)
"""

SERVE = """mesh X = 2, Y = 2
dim B = 2, S = 8, V = 16, D = {D}
input Tok[B] : i32
input Pos[] : i32
param Emb[V, D_X] : {DT}
param Wlm[D, V_Y] : {DT}
{EXTRA}state KC[B, S, D_Y] : {DT}
H[B, D] = Emb[Tok[B], D]
KC[B, Pos, D] = H[B, D]
C[B, D] = KC[B, S, D]
Lg[B, V] = C[B, D] * Wlm[D, V]
output Lg[B, V]
"""


def greedy(emb, wlm, prompt, n):
    """NumPy's tokens: the logits of a step are the sum of the embeddings so far."""
    ids = [list(r) for r in prompt]
    for s in range(prompt.shape[1] + n - 1):
        ctx = np.array([emb[r[:s + 1]].sum(0) for r in ids])
        if s + 1 >= prompt.shape[1]:
            for b, t in enumerate(np.argmax(ctx @ wlm, axis=1)):
                ids[b].append(int(t))
    return [r[prompt.shape[1]:] for r in ids]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return p.returncode, p.stdout


def compile_one(a, work, name, text, tally):
    """The threads executable of `text`, or None (a failed compile counted)."""
    src = os.path.join(work, name + ".ein")
    with open(src, "w") as f:
        f.write(text)
    return next((exe for rt, exe, _ in builds(type(a)(**dict(vars(a), mpi=False)), src,
                                             os.path.join(work, name), 4, tally)), None)


def main():
    a = runtime_args(__doc__)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-params-") as work:
        ck = os.path.join(work, "ck")
        train = compile_one(a, work, "train", TRAIN, tally)
        rc, out = run([train, "--random-inputs", "1", "--steps", "3", "--save", ck])
        tally.result(rc == 0 and os.path.exists(os.path.join(ck, "Emb.m.npy")),
                     "training saves a checkpoint with params and AdamW moments", out)
        if rc != 0:
            return tally.finish()
        emb = np.load(os.path.join(ck, "Emb.npy")).astype(np.float64)
        wlm = np.load(os.path.join(ck, "Wlm.npy")).astype(np.float64)
        prompt = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
        ppath = os.path.join(work, "prompt.npy")
        np.save(ppath, prompt)
        want = greedy(emb, wlm, prompt, 4)
        gen = ["--prompt-ids", ppath, "--generate", "4"]
        serve = None
        src = os.path.join(work, "serve.ein")
        with open(src, "w") as f:
            f.write(SERVE.format(D=8, DT="f32", EXTRA=""))
        for rt, exe, launch in builds(a, src, os.path.join(work, "serve"), 4, tally):
            rc, out = run(launch + [exe, "--params", ck, "--check"] + gen)
            got = [[int(t) for t in line.split(":")[1].split()]
                   for line in out.splitlines() if line.startswith("tokens ")]
            tally.result(rc == 0 and got == want and "check tokens: equal" in out,
                         "served from --params: NumPy's tokens %s (%s)" % (want, rt),
                         "got %s\n%s" % (got, out))
            if rt != "threads":
                continue
            serve = exe
        bad = [([serve, "--params", work] + gen,
                "--params %s: cannot open %s/steps.txt" % (work, work)),
               ([serve, "--params", ppath] + gen,
                "--params %s is not a directory (a checkpoint of --save)" % ppath),
               ([serve, "--params", ck, "--input", "Emb=" + os.path.join(ck, "Emb.npy")] + gen,
                "param 'Emb' is given by both --input and --params %s" % ck),
               ([train, "--params", ck, "--resume", ck, "--steps", "4"],
                "--params %s and --resume %s: --resume already reads every param" % (ck, ck))]
        variants = [("D = 4", dict(D=4, DT="f32", EXTRA=""),
                     "tensor 'Emb': %s/Emb.npy has shape (16, 8), expected (16, 4)" % ck),
                    ("f64", dict(D=8, DT="f64", EXTRA=""),
                     "tensor 'Emb': %s/Emb.npy has dtype '<f4', expected '<f8'" % ck),
                    ("a param more", dict(D=8, DT="f32", EXTRA="param Bias[V] : f32\n"),
                     "--params %s: the checkpoint (step 3) has no file for param 'Bias'" % ck)]
        for name, fmt, needle in variants:
            exe = compile_one(a, work, "serve_" + name.replace(" ", "_"), SERVE.format(**fmt),
                              tally)
            bad.append(([exe, "--params", ck] + gen, needle))
        noparams = compile_one(a, work, "noparams", "mesh X = 2\ndim N = 4\ninput A[N] : f32\n"
                               "B[N] = A[N] * A[N]\noutput B\n", tally)
        bad.append(([noparams, "--params", ck, "--random-inputs", "1"],
                    "--params %s: the program has no params" % ck))
        for cmd, needle in bad:
            if None in cmd:
                continue  # its compile failed, counted already
            rc, out = run(cmd)
            tally.result(rc == 1 and needle in out and "tokens 0:" not in out,
                         "refused: %s" % needle.split(": ")[-1][:70],
                         "exit %s, expected %r in:\n%s" % (rc, needle, out))
            if "'Bias'" in needle:
                tally.result(all(n in out for n in ("it holds: ", "Emb", "Wlm", "Emb.m")),
                             "the message lists what the checkpoint holds", out)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
