#!/usr/bin/python3
"""fortunes.py - examples/fortunes_transformer.ein trains on the fortunes text.

1. The loss of the first step (before any update) on the first batch,
   against examples/fortunes/sample.py's NumPy forward pass of the same two
   layers from the same params (init.py): to 1e-4 relative (f32).
2. `--check --steps 2` on shuffled batches: the FSDP+TP run on 2x2 threads
   against the unsharded reference, loss curve, params and AdamW state.
3. 40 steps lower the loss by more than 0.5 nats per character, and the
   checkpoint they save gives sample.py a held-out loss and a sample.
4. examples/fortunes_serve.ein, the decode program, reads that checkpoint
   (--params) and continues a prompt greedily as NumPy's forward pass does,
   with --generate and over HTTP (--serve, a POST /v1/completions).

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: fortunes.py --einc PATH --examples DIR
"""
import argparse
import http.client
import importlib.util
import json
import os
import re
import shutil
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
        serve_checks(a, work, ck, sample, run, check)
    failed = results.count(False)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


def serve_checks(a, work, ck, sample, run, check):
    """Step 4: the checkpoint served by the decode program, greedy, against
    NumPy's continuation of the same prompt (sample.py's forward pass)."""
    exe = os.path.join(work, "fortunes_serve")
    p = run([a.einc, os.path.join(a.examples, "fortunes_serve.ein"), "-o", exe])
    check(p.returncode == 0, "compile fortunes_serve.ein: %s" % p.stderr.strip()[-500:])
    if p.returncode != 0:
        return
    # 40 steps of training give a model that continues with spaces: the
    # checkpoint's params are redrawn (weights N(0, 0.2), gains 1, seeded)
    # so that the greedy text varies and a wrong logit shows.
    rng = np.random.default_rng(5)
    rand = os.path.join(work, "ck_random")
    shutil.copytree(ck, rand)
    params = {}
    for f in sorted(os.listdir(ck)):
        if f.endswith(".npy") and "." not in f[:-4]:
            w = np.load(os.path.join(ck, f))
            w = np.ones_like(w) if w.ndim == 1 else rng.normal(0, 0.2, w.shape).astype(w.dtype)
            np.save(os.path.join(rand, f), w)
            params[f[:-4]] = w.astype(np.float64)
    ck = rand
    prompt, n = "The ", 40
    text = [ord(c) for c in prompt]
    for _ in range(n):
        text.append(int(np.argmax(sample.logits(params, np.array([text]))[0, -1])))
    want = "".join(chr(c) for c in text[len(prompt):])

    ids = os.path.join(work, "prompt.npy")
    np.save(ids, np.array([[ord(c) for c in prompt]] * 4, dtype=np.int32))
    p = run([exe, "--params", ck, "--prompt-ids", ids, "--generate", str(n)])
    m = re.search(r"^tokens 0:(.*)$", p.stdout, re.M)
    got = "".join(chr(int(t)) for t in m.group(1).split()) if m else None
    check(len(set(want)) > 5, "NumPy's greedy text varies: %r" % want)
    check(p.returncode == 0 and got == want, "--generate %d from the checkpoint: %r, NumPy %r"
          % (n, got, want))

    srv = subprocess.Popen([exe, "--serve", "--port", "0", "--params", ck], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline().strip()
        port = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line)
        check(port, "--serve: %r" % line)
        if not port:
            return
        c = http.client.HTTPConnection("127.0.0.1", int(port.group(1)), timeout=120)
        c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": n}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        got = body["choices"][0]["text"] if r.status == 200 else body
        check(r.status == 200 and got == want, "POST /v1/completions: %r" % (got,))
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
        srv.stdout.close()
        srv.stderr.close()


if __name__ == "__main__":
    sys.exit(main())
