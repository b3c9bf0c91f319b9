#!/usr/bin/env python3
"""lit.py - golden tests whose expectations live in the .ein files they test.

As LLVM's lit tests do, every `.ein` file under the given files and
directories that carries `# expect...` comment lines is a test; the driver
compiles it with `einc FILE --dump-ir=json` (plus the flags of a `# run:`
line; `--meshslice=off` when there is none) and compares:

  # expect: AllGather_Y:In ReduceScatter_Y:Out
      the collectives einc inserts, in program order, each written
      OP_AXES:TENSOR (the tensor of the value it moves), with the combining
      operator of a non-sum reduction in parentheses (`AllReduce_X(max):A`);
      `# expect: none` for no collective.  Several `# expect:` lines add up.
      A pipeline's stage-to-stage CollectivePermute is written with its
      shift, `CollectivePermute_Z(+1):H`.
  # expect-cost: CollectivePermute_Z(+1):H 1.728 us; AllGather_X:W 94.7 us
      the cost pass's time of inserted collectives, spelled as above, in
      microseconds to 4 significant digits, separated by `;` (each must
      be inserted; use a fixed --hw profile in the `# run:` line).
  # expect-types: Tmp[B_X, F_Y]; Act[B_X, F_Y]; Out[B_X, D]{U_Y}
      the result types of the compute ops (einsums, elementwise ops,
      gathers, reductions), in program order, separated by `;`.
  # expect-outputs: Out[B_X, D_Y]
      the types of the program's outputs, separated by `;`.
  # expect-ops: Elementwise:Cos.pos Gather(zero-outside):Cos
      the compute ops, in program order, each written KIND:TENSOR (the
      result's tensor): Einsum, Gather (`Gather(zero-outside)` for one
      whose index outside the table gives zeros), ScatterAdd, Elementwise
      or MeshSlice.  Several `# expect-ops:` lines add up.
  # expect-error: t.ein:3:1: error: ...
      einc must exit 1 and print this text (the file's own name in front).
  # expect-meshslice: OS LS
      the dataflows of the MeshSlice 2D GEMMs (seed 004), in program order
      (run with a `# run:` line, since the default turns MeshSlice off).
  # expect-warning: t.ein:3:1: warning: ...
      einc must succeed and print this text (the file's own name in
      front); with such lines, every other warning at a line of the file
      is a failure too.
  # run: --hw tpu-v4
      flags for einc (replacing the default --meshslice=off).

Every inserted collective must also carry a reason ("for ...").  The last
line is `N passed, N failed`; exit 1 on any failure.

usage: lit.py EINC PATH...
"""
import json
import os
import subprocess
import sys

COLLECTIVES = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Slice", "CollectivePermute"}
COMPUTE = {"Einsum", "Elementwise", "MeshSlice"}


def directives(path):
    """{key: [values]} of the file's `# key: value` lines for the keys above."""
    keys = ("expect", "expect-types", "expect-outputs", "expect-meshslice", "expect-error", "expect-cost",
            "expect-ops", "expect-warning", "run")
    found = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            for k in keys:
                prefix = "# %s:" % k
                if line.startswith(prefix):
                    found.setdefault(k, []).append(line[len(prefix):].strip())
    return found


def spell(op):
    """`AllReduce_X(max):A` for an inserted collective of the JSON dump,
    `CollectivePermute_Z(+1):H` for a permute."""
    if op["op"] == "CollectivePermute":
        return "%s_%s(%+d):%s" % (op["op"], "".join(op["axes"]), op["delta"], op["operands"][0]["tensor"])
    red = op.get("reduce", "sum")
    return "%s_%s%s:%s" % (op["op"], "".join(op["axes"]), "" if red == "sum" else "(%s)" % red,
                           op["operands"][0]["tensor"])


def op_kind(op):
    """`Gather(zero-outside)`, `Gather`, `ScatterAdd`, or the op's name."""
    if "gather" in op:
        return "Gather(zero-outside)" if op.get("zero_outside") else "Gather"
    return "ScatterAdd" if "scatter_add" in op else op["op"]


def split_list(values, sep):
    return [x.strip() for v in values for x in v.split(sep) if x.strip()]


def check(einc, path):
    """A list of failure messages for one file (empty when it matches)."""
    d = directives(path)
    flags = d["run"][-1].split() if "run" in d else ["--meshslice=off"]
    cmd = [einc, path, "--dump-ir=json", *flags]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if "expect-error" in d:
        errors = []
        if run.returncode != 1:
            errors.append("einc exited %d, expected 1" % run.returncode)
        for want in d["expect-error"]:
            if want not in run.stderr:
                errors.append("stderr lacks %r:\n%s" % (want, run.stderr))
        return errors
    if run.returncode != 0:
        return ["%s failed (%d):\n%s" % (" ".join(cmd), run.returncode, run.stderr)]
    ir = json.loads(run.stdout)
    errors = []
    if "expect-warning" in d:
        for want in d["expect-warning"]:
            if want not in run.stderr:
                errors.append("stderr lacks %r:\n%s" % (want, run.stderr))
        name = os.path.basename(path) + ":"
        for line in run.stderr.splitlines():
            said = line[line.find(name):] if name in line else ""
            if ": warning: " in said and not any(said.startswith(w) for w in d["expect-warning"]):
                errors.append("unexpected warning: %s" % line)
    colls = [op for op in ir["ops"] if op["op"] in COLLECTIVES]
    if "expect" in d:
        want = split_list(d["expect"], " ")
        want = [] if want == ["none"] else want
        got = [spell(op) for op in colls]
        if got != want:
            errors.append("collectives\n  got  %s\n  want %s" % (" ".join(got) or "none",
                                                               " ".join(want) or "none"))
    for op in colls:
        if not (op.get("reason") or "").startswith("for "):
            errors.append("%s has no reason: %r" % (spell(op), op.get("reason")))
    if "expect-cost" in d:
        got = {}
        for op in colls:
            got.setdefault(spell(op), []).append("%.4g us" % (op.get("cost", {}).get("time", float("nan")) * 1e6))
        for want in split_list(d["expect-cost"], ";"):
            name, _, t = want.partition(" ")
            if t.strip() not in got.get(name, []):
                errors.append("cost of %s\n  got  %s\n  want %s" % (name, ", ".join(got.get(name, [])) or "none",
                                                                   t.strip()))
    if "expect-types" in d:
        got = [op["result"]["type"] for op in ir["ops"] if op["op"] in COMPUTE]
        want = split_list(d["expect-types"], ";")
        if got != want:
            errors.append("compute result types\n  got  %s\n  want %s" % ("; ".join(got),
                                                                         "; ".join(want)))
    if "expect-ops" in d:
        got = ["%s:%s" % (op_kind(op), op["result"]["tensor"]) for op in ir["ops"] if op["op"] in COMPUTE]
        want = split_list(d["expect-ops"], " ")
        if got != want:
            errors.append("compute ops\n  got  %s\n  want %s" % (" ".join(got), " ".join(want)))
    if "expect-meshslice" in d:
        got = [op.get("dataflow", "?") for op in ir["ops"] if op["op"] == "MeshSlice"]
        want = split_list(d["expect-meshslice"], " ")
        if got != want:
            errors.append("MeshSlice dataflows\n  got  %s\n  want %s" % (" ".join(got) or "none",
                                                                       " ".join(want) or "none"))
    if "expect-outputs" in d:
        got = [o["type"] for o in ir["outputs"]]
        want = split_list(d["expect-outputs"], ";")
        if got != want:
            errors.append("outputs\n  got  %s\n  want %s" % ("; ".join(got), "; ".join(want)))
    return errors


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    einc = argv[1]
    files = []
    for p in argv[2:]:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".ein"))
        else:
            files.append(p)
    files = [f for f in files if any(k.startswith("expect") for k in directives(f))]
    passed = failed = 0
    for f in files:
        errors = check(einc, f)
        name = os.path.relpath(f)
        if errors:
            failed += 1
            print("FAIL %s\n  %s" % (name, "\n  ".join(e.replace("\n", "\n  ") for e in errors)))
        else:
            passed += 1
            print("ok   %s" % name)
    if not files:
        print("no .ein file with '# expect' lines under %s" % " ".join(argv[2:]))
        failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
