#!/usr/bin/python3
"""fortunes.py - examples/fortunes_transformer.ein trains on the fortunes text.

1. The loss of the first step (before any update) on the first batch,
   against examples/fortunes/sample.py's NumPy forward pass of the same two
   layers from the same params (init.py): to 1e-4 relative (f32).
2. `--check --steps 2` on shuffled batches: the FSDP+TP run on 2x2 threads
   against the unsharded reference, loss curve, params and AdamW state.
3. 40 steps lower the loss by more than 0.5 nats per character, and the
   checkpoint they save gives sample.py a held-out loss and a sample.

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: fortunes.py --einc PATH --examples DIR
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    a = ap.parse_args()
    scripts = os.path.join(a.examples, "fortunes")
    results = []

    def check(ok, what):
        results.append(bool(ok))
        print("%s %s" % ("ok  " if ok else "FAIL", what))

    def run(cmd):
        return subprocess.run(cmd, capture_output=True, text=True, timeout=900)

    if not os.path.isdir("/usr/share/games/fortunes"):
        print("skipped: Debian's fortunes package is not installed")
        print("0 passed, 0 failed")
        return 0
    spec = importlib.util.spec_from_file_location("sample", os.path.join(scripts, "sample.py"))
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    with tempfile.TemporaryDirectory(prefix="einc-fortunes-") as work:
        p = run(["/usr/bin/python3", os.path.join(scripts, "prepare.py"), work])
        check(p.returncode == 0, "prepare.py: %s" % (p.stdout + p.stderr).strip())
        init = os.path.join(work, "init")
        p = run(["/usr/bin/python3", os.path.join(scripts, "init.py"), init])
        flags = p.stdout.split()
        exe = os.path.join(work, "fortunes")
        p = run([a.einc, os.path.join(a.examples, "fortunes_transformer.ein"), "-o", exe])
        check(p.returncode == 0, "compile: %s" % p.stderr.strip()[-500:])
        data = ["--data", "Tok=%s/train_tok.npy" % work, "--data", "Nxt=%s/train_nxt.npy" % work]

        # 1. the first step's loss against NumPy
        metrics = os.path.join(work, "one.jsonl")
        p = run([exe, *flags, *data, "--steps", "1", "--metrics", metrics])
        if p.returncode == 0:
            got = json.loads(open(metrics).readline())["loss"]
            params = {f[:-4]: np.load(os.path.join(init, f)).astype(np.float64)
                      for f in os.listdir(init)}
            tok = np.load(os.path.join(work, "train_tok.npy"))[:32]
            nxt = np.load(os.path.join(work, "train_nxt.npy"))[:32].astype(np.int64)
            z = sample.logits(params, tok)
            mx = z.max(axis=-1, keepdims=True)
            lse = np.log(np.exp(z - mx).sum(axis=-1)) + mx[..., 0]
            want = np.mean(lse - np.take_along_axis(z, nxt[..., None], axis=-1)[..., 0])
            check(abs(got - want) <= 1e-4 * want, "step 1: loss %.6f, NumPy's forward pass %.6f"
                  % (got, want))
        else:
            check(False, "step 1: %s" % p.stderr.strip()[-500:])

        # 2. sharded against unsharded over 2 shuffled steps (AdamW's first steps
        # move every weight by about lr whatever its gradient's size, so rounding
        # differences grow: few steps keep them inside --check's tolerance)
        p = run([exe, *flags, *data, "--seed", "3", "--steps", "2", "--check"])
        last = [ln for ln in p.stdout.splitlines() if ln.startswith("check: largest")]
        check(p.returncode == 0 and last, "--check over 2 steps: %s" %
              (last[0] if last else p.stderr.strip()[-500:]))

        # 3. 40 steps learn something, and sample.py reads the checkpoint
        metrics, ck = os.path.join(work, "run.jsonl"), os.path.join(work, "ck")
        p = run([exe, *flags, *data, "--seed", "1", "--steps", "40", "--log-every", "40",
                 "--metrics", metrics, "--save", ck])
        if p.returncode == 0:
            losses = [json.loads(ln)["loss"] for ln in open(metrics)]
            check(losses[-1] < losses[0] - 0.5, "40 steps: loss %.3f -> %.3f nats per character"
                  % (losses[0], losses[-1]))
        else:
            check(False, "40 steps: %s" % p.stderr.strip()[-500:])
        p = run(["/usr/bin/python3", os.path.join(scripts, "sample.py"), ck, work, "--chars", "40"])
        check(p.returncode == 0 and "held-out loss" in p.stdout,
              "sample.py: %s" % (p.stdout + p.stderr).strip().replace("\n", " | ")[:300])
    failed = results.count(False)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
