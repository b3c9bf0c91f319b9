#!/usr/bin/env python3
"""The HBM as a constraint of the whole-program ILP (docs/propagation.md,
"The memory row").

Every .ein file in the given directory is a case with these lines:

  # hbm-case: BYTES bound|none
      plan the program on tpu-v5p with its hbm_bytes set to BYTES (a profile
      written to a temporary file, passed as --hw PATH.json).  `bound`: the
      plan on the real tpu-v5p (96 GB) must not fit BYTES by the cost pass's
      peak, and the plan under BYTES must fit it, say "memory-bound" in its
      certificate (--dump-ir=json and --explain), and be the fastest by the
      cost pass's step among the forced alternatives that fit.  `none`:
      nothing fits; the plan must be the one planned without the limit and
      the certificate must say that no plan fits.
  # variant: LEFT[...]
      a forced alternative: the statement defining LEFT gets this left side
      (a sharding constraint); the rest is planned under the same BYTES.

The row's own figure for the chosen plan (the --debug-pass line "memory
row of the plan: N bytes") is checked against --dump-cost's breakdown
(params + optimizer state + master weights + state + gradients +
activations kept for the backward pass) plus the inputs (the JSON's
`inputs`), to the byte, after its two documented differences: it leaves
out the params' copies that the forward pass keeps for the backward one
(the regather pass may drop them), and it counts twice a value that the
backward pass read before materialise and reads through a forward copy
after (differences() finds both in the JSON plan).

With --examples, the same comparison on whole models from examples/ on
tpu-v5p, where nothing binds: llama2_13b_train.ein (a repeat of 40 layers
whose activations a LayerStack keeps, every layer counted; Mx and Lse
counted twice) and fortunes_transformer.ein (FSDP: the gathered weights
left out).

Usage: test_ilp_memory.py --einc EINC --hw-dir HW_DIR [--examples DIR] CASES_DIR
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


def directives(path, key):
    with open(path, encoding="utf-8") as f:
        return [line[len(key) + 3:].strip() for line in f if line.startswith("# %s:" % key)]


def plan(einc, path, hw):
    """(--dump-ir=json as a dict, the collectives in order) or raises."""
    rc, out, err = run(einc, path, "--dump-ir=json", "--hw", hw)
    if rc != 0:
        raise RuntimeError("%s --hw %s failed: %s" % (path, hw, err[-2000:]))
    d = json.loads(out)
    colls = ["%s_%s:%s" % (o["op"], "".join(o.get("axes", [])), o["operands"][0]["tensor"])
             for o in d["ops"] if o["op"] in ("AllGather", "ReduceScatter", "AllReduce", "AllToAll")]
    return d, colls


def breakdown(einc, path, hw):
    """The breakdown's classes in bytes per device, from --dump-cost."""
    rc, out, err = run(einc, path, "--dump-cost", "--hw", hw)
    m = re.search(r"^memory breakdown per device: (.*)$", out, re.M)
    if rc != 0 or not m:
        raise RuntimeError("no breakdown for %s: %s" % (path, err[-2000:]))
    got = {}
    for item in m.group(1).split(", "):
        w = re.fullmatch(r"(.+) (\d+) bytes \(.* GiB\)", item)
        if w:
            got[w.group(1)] = float(w.group(2))
    return got


def row_figure(einc, path, hw):
    rc, out, err = run(einc, path, "--dump-ir", "--debug-pass", "--hw", hw)
    m = re.search(r"memory row of the plan: (\d+) bytes per device", err)
    if rc != 0 or not m:
        raise RuntimeError("no memory row in --debug-pass of %s" % path)
    return float(m.group(1))


def variant(path, left, tmp):
    """A copy of `path` whose statement defining left's name has `left` as its left side."""
    name = left.split("[", 1)[0]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new, n = re.subn(r"^%s\[[^\]]*\]" % re.escape(name), left, text, count=1, flags=re.M)
    if n != 1:
        raise RuntimeError("%s: no statement defines %s" % (path, name))
    out = os.path.join(tmp, "%s_%s.ein" % (os.path.basename(path)[:-4], re.sub(r"\W", "_", left)))
    with open(out, "w", encoding="utf-8") as f:
        f.write(new)
    return out


def case(einc, hw_dir, path, tmp):
    name = os.path.basename(path)
    base = json.load(open(os.path.join(hw_dir, "tpu-v5p.json"), encoding="utf-8"))
    free, free_colls = plan(einc, path, "tpu-v5p")
    for spec in directives(path, "hbm-case"):
        hbm, kind = spec.split()
        prof = dict(base, name="tpu-v5p-hbm%s" % hbm, hbm_bytes=float(hbm))
        hw = os.path.join(tmp, "hbm%s.json" % hbm)
        with open(hw, "w", encoding="utf-8") as f:
            json.dump(prof, f)
        what = "%s, HBM %s bytes" % (name, hbm)
        d, colls = plan(einc, path, hw)
        text, peak = d["plan"]["text"], d["totals"]["peak_memory"]
        rc, explain, _ = run(einc, path, "--explain", "--hw", hw)
        if kind == "none":
            check("no plan among the candidates fits the HBM" in text, "%s: nothing fits, said: %s" % (what, text))
            pl = d["plan"]
            check(pl.get("memory") == "none fits" and pl["memory_plan"] >= pl["memory_least"] > float(hbm),
                  "%s: the JSON plan's memory figures: %s" % (what, {k: v for k, v in pl.items() if k != "text"}))
            check(colls == free_colls, "%s: the fastest plan kept (%s)" % (what, " ".join(colls)))
            continue
        check(free["totals"]["peak_memory"] > float(hbm),
              "%s: the plan without the limit does not fit (peak %d)" % (what, free["totals"]["peak_memory"]))
        check(peak <= float(hbm), "%s: the plan fits (peak %d)" % (what, peak))
        check("memory-bound: the fastest plan needs" in text, "%s: certificate says memory-bound: %s" % (what, text))
        check(rc == 0 and "memory-bound" in explain, "%s: --explain says memory-bound" % what)
        pl = d["plan"]
        check(pl.get("memory") == "bound" and pl["hbm"] == float(hbm) and pl["memory_plan"] <= float(hbm)
              < pl["memory_fastest"] and pl["fastest"] < pl["objective"],
              "%s: the JSON plan's memory figures: %s" % (what, {k: v for k, v in pl.items() if k != "text"}))
        # The row's figure against the cost pass's accounting of the same plan.
        row, _, _ = compare(einc, path, hw, d, what)
        check(row <= float(hbm), "%s: memory row %d within the HBM" % (what, row))
        step = d["totals"]["step_time"]
        fitting = 0
        for left in directives(path, "variant"):
            vd, _ = plan(einc, variant(path, left, tmp), hw)
            vstep, vpeak = vd["totals"]["step_time"], vd["totals"]["peak_memory"]
            if vpeak > float(hbm):
                print("     %s: variant %s does not fit (peak %d)" % (what, left, vpeak))
                continue
            fitting += 1
            check(step <= vstep * (1 + 1e-6), "%s: chosen step %.4g us <= variant %s's %.4g us"
                  % (what, step * 1e6, left, vstep * 1e6))
        check(fitting > 0, "%s: some forced alternative fits" % what)


RESHARDS = ("AllGather", "AllToAll", "Slice", "AllReduce", "ReduceScatter")


def differences(d):
    """(params' copies, doubly counted) in bytes per device for the plan `d`.

    The row leaves out a param's copy that the forward pass makes and the
    backward pass reads (the regather pass may drop it), and counts a value
    both itself and through such a copy when the backward pass read it
    before materialise and reads the copy after (conservative)."""
    phases = {}
    for o in d["ops"]:
        for x in o["operands"]:
            phases.setdefault(x["name"], set()).add(o["phase"])
    params = {x["name"] for x in d["inputs"] if x["kind"] == "param"}
    args = {x["name"] for x in d["inputs"]}
    copies = {o["result"]["name"] for o in d["ops"] if o["op"] in RESHARDS}
    param_bytes, double, seen = 0, 0, set()
    for o in d["ops"]:
        src = o["operands"][0] if o["operands"] else None
        if o["phase"] != "forward" or o["op"] not in RESHARDS or "backward" not in phases.get(o["result"]["name"], ()):
            continue
        if src["name"] in params:
            param_bytes += o["result"]["bytes_per_device"]
        elif src["name"] not in args | copies | seen and "backward" not in phases.get(src["name"], ()):
            seen.add(src["name"])
            double += src["bytes_per_device"]
    return param_bytes, double


def compare(einc, path, hw, d, name):
    """The row's figure for plan `d` against the cost pass's breakdown."""
    inputs = sum(x["bytes_per_device"] for x in d["inputs"] if x["kind"] == "input")
    cost = inputs + sum(breakdown(einc, path, hw).values())
    row = row_figure(einc, path, hw)
    param_bytes, double = differences(d)
    check(row + param_bytes - double == cost, "%s: memory row %d + params' copies %d - doubly counted %d = "
          "the breakdown's %d" % (name, row, param_bytes, double, cost))
    return row, param_bytes, double


def example(einc, path, expect_copies):
    name = "%s on tpu-v5p" % os.path.basename(path)
    d, _ = plan(einc, path, "tpu-v5p")
    _, param_bytes, _ = compare(einc, path, "tpu-v5p", d, name)
    if expect_copies:
        check(param_bytes > 0, "%s: the forward pass keeps gathered weights (%d bytes)" % (name, param_bytes))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--hw-dir", required=True)
    ap.add_argument("--examples")
    ap.add_argument("cases")
    args = ap.parse_args()
    if args.examples:
        example(args.einc, os.path.join(args.examples, "llama2_13b_train.ein"), False)
        example(args.einc, os.path.join(args.examples, "fortunes_transformer.ein"), True)
    files = sorted(glob.glob(os.path.join(args.cases, "*.ein")))
    check(bool(files), "cases under %s" % args.cases)
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            case(args.einc, args.hw_dir, path, tmp)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
