#!/usr/bin/env python3
"""test_memory.py - --dump-cost's memory breakdown at seed 000's figures.

Every .ein file in the given directory with `# expect-memory:` lines is a
case.  A line reads

    # expect-memory: EINC ARGS | KEY EXPECTED

run as `einc --dump-cost EINC ARGS FILE`.  KEY is one of the breakdown's
figures per device: params_bytes, grads_bytes, moments_bytes,
master_bytes, kept_bytes, cache_bytes (the "memory breakdown per device"
line), bytes_per_param and held_GB (params + optimizer state + master
weights, decimal GB) and held_fits ("fits" or "does not fit" against the
profile's HBM) from the "bytes per param" line.  EXPECTED is a number with
a relative tolerance ("10 0.01%") or words compared as they are.

Then seed 000's question 2: LLaMA-2 13B (examples/llama2_13b_train.ein,
its model and AdamW) with bf16 params and f32 Adam state on one device
(-D X=1 -D Y=1, so per device is the whole model): (2 + 4 + 4) x 13e9 ~
130 GB of params and optimizer state, which does not fit a 96 GB TPU v5p,
so pure data parallelism is out.  The bf16 sibling is made from the
example here (every f32 declaration bf16), so the example stays the one
source of the model.  And the same model in f32 counts 12 bytes per param
(f32 params and moments), which is the accounting the seed's 10 replaces.

Usage: test_memory.py EINC CASES_DIR EXAMPLES_DIR
"""
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from einc_checks import Checks, expect_lines, run  # noqa: E402

check = Checks()


def breakdown(einc, path, args):
    """The breakdown's figures of `einc --dump-cost ARGS path`, or (None, why)."""
    rc, out, err = run(einc, "--dump-cost", *args, path)
    if rc != 0:
        return None, err.strip()[-1000:]
    got = {}
    m = re.search(r"^memory breakdown per device: (.*)$", out, re.M)
    if not m:
        return None, "no breakdown line in:\n" + out[-2000:]
    names = {"params": "params", "gradients": "grads", "optimizer state (moments)": "moments",
             "master weights": "master", "activations kept for the backward pass": "kept",
             "KV cache and state": "cache"}
    for item in m.group(1).split(", "):
        w = re.fullmatch(r"(.+) (\d+) bytes \(.* GiB\)", item)
        if w and w.group(1) in names:
            got[names[w.group(1)] + "_bytes"] = float(w.group(2))
    m = re.search(r"^bytes per param (\S+) = .*; params \+ optimizer state \+ master weights "
                  r"(\S+) GB per device .*: (fits|does not fit)$", out, re.M)
    if m:
        got.update(bytes_per_param=float(m.group(1)), held_GB=float(m.group(2)),
                   held_fits=m.group(3))
    return got, None


def matches(got, want):
    m = re.fullmatch(r"([-0-9.eE+]+)\s+([0-9.]+)%", want)
    if m:
        w = float(m.group(1))
        return isinstance(got, float) and abs(got - w) <= float(m.group(2)) / 100 * abs(w)
    return got == want


def goldens(einc, cases):
    n = 0
    for path, args, rest in expect_lines(cases, "expect-memory"):
        n += 1
        key, want = rest.split(None, 1)
        got, why = breakdown(einc, path, args)
        name = "%s %s: %s = %s" % (os.path.basename(path), " ".join(args), key, want)
        if got is None:
            check(False, "%s (%s)" % (name, why))
            continue
        value = got.get(key, "<missing>")
        check(matches(value, want), "%s (got %s)" % (name, value))
    check(n >= 10, "%d expect-memory lines found" % n)


def llama_question2(einc, examples):
    src = open(os.path.join(examples, "llama2_13b_train.ein"), encoding="utf-8").read()
    one = ["--hw", "tpu-v5p", "-D", "X=1", "-D", "Y=1"]
    with tempfile.TemporaryDirectory(prefix="einc-mem-") as work:
        bf = os.path.join(work, "llama2_13b_train_bf16.ein")
        with open(bf, "w", encoding="utf-8") as f:
            f.write(re.sub(r":\s*f32\b", ": bf16", src))
        got, why = breakdown(einc, bf, one)
        check(got is not None, "LLaMA-2 13B, bf16 params: --dump-cost (%s)" % why)
        if got:
            count = got["params_bytes"] / 2
            check(abs(count - 13.0e9) <= 0.02 * 13.0e9,
                  "LLaMA-2 13B has about 13e9 params (%.4g; seed 000, question 1)" % count)
            check(abs(got["bytes_per_param"] - 10) <= 1e-3,
                  "bf16 params, f32 Adam state: 10 bytes per param (%s)" % got["bytes_per_param"])
            check(abs(got["held_GB"] - 130) <= 0.01 * 130,
                  "params + Adam state ~ 130 GB (seed 000, question 2): %s GB" % got["held_GB"])
            check(got["held_fits"] == "does not fit",
                  "more than a 96 GB TPU v5p: pure data parallelism is out (question 3)")
        got, why = breakdown(einc, os.path.join(examples, "llama2_13b_train.ein"), one)
        check(got is not None and abs(got["bytes_per_param"] - 12) <= 1e-3,
              "the f32 example: 4 + 8 = 12 bytes per param (%s)" %
              (got["bytes_per_param"] if got else why))


def main():
    einc, cases, examples = sys.argv[1:4]
    goldens(einc, cases)
    llama_question2(einc, examples)
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
