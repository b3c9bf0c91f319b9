"""Shared helpers of the golden tests: run einc's JSON dump and compare the
inserted collectives and the result types with a seed's listing."""
import json
import subprocess
import sys

COLLECTIVES = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Slice"}


def dump(einc, path):
    """The --dump-ir=json object for `path` (propagation only, MeshSlice off)."""
    cmd = [einc, path, "--dump-ir=json", "--meshslice=off"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr}")
    return json.loads(run.stdout)


def collectives(ir):
    """(op, axes, operand tensor, result type) of every inserted reshard op."""
    out = []
    for op in ir["ops"]:
        if op["op"] in COLLECTIVES:
            out.append((op["op"], "".join(op["axes"]), op["operands"][0]["tensor"], op["result"]["type"]))
    return out


def compute_types(ir):
    """Result type of every Einsum/Elementwise op, in program order."""
    return [op["result"]["type"] for op in ir["ops"] if op["op"] in ("Einsum", "Elementwise")]


def check(einc, path, want_colls, want_types=None, want_outputs=None):
    """Returns a list of failure messages (empty when `path` matches)."""
    ir = dump(einc, path)
    errors = []
    got = collectives(ir)
    if got != want_colls:
        errors.append(f"{path}: collectives\n  got  {got}\n  want {want_colls}")
    for op in ir["ops"]:
        if op["op"] in COLLECTIVES and not (op.get("reason") or "").startswith("for "):
            errors.append(f"{path}: {op['op']} has no reason: {op.get('reason')!r}")
    if want_types is not None and compute_types(ir) != want_types:
        errors.append(f"{path}: compute result types\n  got  {compute_types(ir)}\n  want {want_types}")
    if want_outputs is not None:
        outs = [o["type"] for o in ir["outputs"]]
        if outs != want_outputs:
            errors.append(f"{path}: outputs\n  got  {outs}\n  want {want_outputs}")
    return errors


def main(cases, argv):
    """cases: {file: (collectives, compute types, outputs)}; argv: einc, examples dir."""
    if len(argv) != 3:
        print(f"usage: {argv[0]} EINC EXAMPLES_DIR", file=sys.stderr)
        return 2
    einc, examples = argv[1], argv[2]
    errors = []
    for name, (colls, types, outs) in cases.items():
        errors += check(einc, f"{examples}/{name}", colls, types, outs)
    for e in errors:
        print("FAIL", e)
    print(f"{len(cases) - len({e.split(':')[0] for e in errors})}/{len(cases)} examples match")
    return 1 if errors else 0
