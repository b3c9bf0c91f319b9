#!/usr/bin/python3
"""pipeline_trace.py - a pipelined program's work items in --trace and its bubble in --profile.

Two training programs pipeline a `repeat L` over mesh axis Z (the layer dim
of the stacked params sharded over Z, docs/pipeline.md): one on a mesh
`Z = 2, X = 2` (two devices per stage, tensor-parallel inside it), one on
`Z = 4` alone.  For each, schedules gpipe, 1f1b and zero-bubble, M = 1
and 4 microbatches, and zb-h2 with M = 4, one training step:

  --trace: every device has exactly 2M spans of cat "pipeline" named
  F0..F{M-1} and B0..B{M-1}, in the order of its stage's schedule written
  here from the schedules' definitions (gpipe: all forwards, then the
  backwards in the same order; 1f1b: Z-1-z warm-up forwards, then one
  forward and one backward in turn, then the remaining backwards;
  docs/pipeline.md "The five schedules"), not read from the compiler; on
  the last stage B m starts after F m ends (its loss needs the forward);
  every "recv wait" span lies inside one item of its device;  zero-bubble
  (whose order the greedy ZB-H1 picks from the stage times) instead has 3M
  spans, F m, B m and W m (the backward's dL/dW half) once each for every
  m, in that order on the device, W m starting after B m ends, the
  microbatches' forwards in order and at most Z microbatches begun and not
  yet through W at any point (ZB-H1 holds what 1F1B holds, Qi et al.
  ICLR'24 section 3); zb-h2 the same with at most 2Z - 1 held and stage
  z running min(2 (Z - z) - 1, M) forwards before its first B (ZB-H2's
  longer warm-up, same section);

  --profile: the line "pipeline: Z stages, M microbatches, <schedule>:
  measured bubble X% (median over N runs), predicted Y%" (Y the cost
  pass's simulated bubble, which codegen embeds), with 0 <= X, Y < 100,
  and "; D devices on C CPUs: core-idle bubble I%" after it when the
  devices outnumber the CPUs (0 <= I <= 100); a per-op row counts the
  calls of every stage: a layer's einsum runs once per layer and
  microbatch, |L| M calls in all, whatever the number of stages.

A program that is not pipelined prints no pipeline line.  No timing is
asserted.  With --mpi the Z = 4 program's trace and profile also run on
4 MPI ranks (the spans reach the root through the ranks' collection).

The last line is `N passed, N failed`; exit 1 on any failure.

Usage: pipeline_trace.py --einc PATH [--mpi --mpirun PATH]
"""
import json
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, mpi_launch, run_merged, runtime_args  # noqa: E402
from pipeline import MLP  # noqa: E402  (its four-layer MLP block, L = 4)

L = 4
PROGRAMS = {
    "Z2X2": ("mesh Z = 2, X = 2", 2, "B_X", "F_X"),
    "Z4": ("mesh Z = 4", 4, "B", "F"),
}


def source(mesh, bshard, fshard):
    """pipeline.py's MLP block trained with SGD; layers over Z."""
    return MLP.format(MESH=mesh[len("mesh "):], IN=bshard + ", D", FX=fshard[1:], OPT="sgd(lr=0.05)")


def expected_order(schedule, Z, z, M):
    """Stage z's items by the schedule's definition."""
    if schedule == "gpipe":
        return ["F%d" % m for m in range(M)] + ["B%d" % m for m in range(M)]
    warm = min(Z - 1 - z, M)
    order = ["F%d" % m for m in range(warm)]
    for i in range(M - warm):
        order += ["F%d" % (warm + i), "B%d" % i]
    return order + ["B%d" % m for m in range(M - warm, M)]


def zero_bubble_problems(items, Z, M, limit):
    """What breaks zero-bubble's rules (module docstring) in one device's
    items (trace spans in the order it ran them), at most `limit`
    microbatches held."""
    names = [e["name"] for e in items]
    want = sorted("%s%d" % (k, m) for k in "FBW" for m in range(M))
    if sorted(names) != want:
        return ["items %s, not F, B and W of each of %d microbatches" % (" ".join(names), M)]
    problems = []
    at = {e["name"]: e for e in items}
    pos = {n: i for i, n in enumerate(names)}
    for m in range(M):
        if not pos["F%d" % m] < pos["B%d" % m] < pos["W%d" % m]:
            problems.append("F%d, B%d, W%d out of order" % (m, m, m))
        b, w = at["B%d" % m], at["W%d" % m]
        if w["ts"] < b["ts"] + b["dur"] - 1e-3:
            problems.append("W%d starts before B%d ends" % (m, m))
    forwards = [n for n in names if n[0] == "F"]
    if forwards != ["F%d" % m for m in range(M)]:
        problems.append("forwards out of order: " + " ".join(forwards))
    held = 0
    for n in names:
        held += 1 if n[0] == "F" else -1 if n[0] == "W" else 0
        if held > limit:
            problems.append("%d microbatches held at %s" % (held, n))
            break
    return problems


def check_trace(t, path, Z, ndev, devs_per_stage, schedule, M, what):
    """The --trace checks of the module docstring."""
    try:
        events = json.load(open(path))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        t.result(False, what + ": trace is JSON", str(e))
        return
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "pipeline"]
    for d in range(ndev):
        z = d // devs_per_stage  # Z is the first (major) mesh axis
        mine = [e for e in spans if e["tid"] == d]
        items = [e for e in mine if e["name"] != "recv wait"]
        names = [e["name"] for e in items]
        split = schedule in ("zb-h1", "zb-h2")
        if split:
            limit = Z if schedule == "zb-h1" else 2 * Z - 1
            problems = zero_bubble_problems(items, Z, M, limit)
            if schedule == "zb-h2":
                warm = min(2 * (Z - z) - 1, M)
                first_b = next((i for i, n in enumerate(names) if n[0] == "B"), len(names))
                got = sum(1 for n in names[:first_b] if n[0] == "F")
                if got != warm:
                    problems.append("%d forwards before the first B, not %d" % (got, warm))
            t.result(not problems, "%s: device %d (stage %d) runs F, B and W of every microbatch in "
                     "their order, at most %d held: %s" % (what, d, z, limit, " ".join(names)),
                     "\n".join(problems))
            want = names
        else:
            want = expected_order(schedule, Z, z, M)
        if not split:
            t.result(names == want, "%s: device %d (stage %d) runs %s" % (what, d, z, " ".join(want)),
                     "got " + " ".join(names))
        waits = [e for e in mine if e["name"] == "recv wait"]
        inside = all(any(i["ts"] <= w["ts"] and w["ts"] + w["dur"] <= i["ts"] + i["dur"] + 1e-3
                         for i in items) for w in waits)
        t.result(inside, "%s: device %d's %d receive waits lie inside its items"
                 % (what, d, len(waits)))
        if z == Z - 1 and names == want:
            at = {e["name"]: e for e in items}
            ok = all(at["B%d" % m]["ts"] >= at["F%d" % m]["ts"] + at["F%d" % m]["dur"] - 1e-3
                     for m in range(M))
            t.result(ok, "%s: last stage, device %d: B m starts after F m ends" % (what, d))


def check_profile(t, out, Z, schedule, M, steps, what):
    """The --profile checks of the module docstring."""
    m = re.search(r"^pipeline: (\d+) stages, (\d+) microbatches, (\S+): measured bubble "
                  r"([0-9.]+)% \(median over (\d+) runs?\), predicted ([0-9.]+)%"
                  r"(?:; (\d+) devices on (\d+) CPUs: core-idle bubble ([0-9.]+)%)?$", out, re.M)
    t.result(m is not None, what + ": --profile prints the pipeline line", out[-3000:])
    if not m:
        return
    if m.group(7):
        # More devices than CPUs: the CPUs' idle share, at most 100%.
        t.result(int(m.group(8)) < int(m.group(7)) and 0 <= float(m.group(9)) <= 100,
                 what + ": the core-idle bubble of devices sharing CPUs", m.group(0))
    t.result((int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(5)))
             == (Z, M, schedule, steps), what + ": stages, microbatches, schedule, runs",
             m.group(0))
    bubble, predicted = float(m.group(4)), float(m.group(6))
    t.result(0 <= bubble < 100 and 0 <= predicted < 100,
             what + ": bubble %.1f%%, predicted %.1f%%, in [0, 100)" % (bubble, predicted))
    row = re.search(r"^\s+\d+\s+(\d+)\s+\S+\s+\S+\s+\S+\s+T = Einsum", out, re.M)
    calls = int(row.group(1)) if row else -1
    t.result(calls == L * M * steps, what + ": the layer einsum's calls are |L| M steps = %d"
             % (L * M * steps), "got %d" % calls)


def main():
    a = runtime_args(__doc__)
    t = Tally()
    work = tempfile.mkdtemp(prefix="pptrace")
    for key, (mesh, Z, bshard, fshard) in PROGRAMS.items():
        src = os.path.join(work, key + ".ein")
        with open(src, "w") as f:
            f.write(source(mesh, bshard, fshard))
        ndev = 4
        for schedule in ["gpipe", "1f1b", "zb-h1", "zb-h2"]:
            for M in [4] if schedule == "zb-h2" else [1, 4]:
                what = "%s %s M=%d" % (key, schedule, M)
                runtimes = ["threads"] + (["mpi"] if a.mpi and key == "Z4" else [])
                for rt in runtimes:
                    exe = os.path.join(work, "%s_%s_%d_%s" % (key, schedule, M, rt))
                    code, out = run_merged([a.einc, src, "-o", exe, "--runtime=" + rt,
                                            "--microbatches=%d" % M, "--schedule=" + schedule])
                    if code != 0:
                        t.result(False, what + ": einc", out)
                        continue
                    pre = mpi_launch(a.mpirun, ndev) if rt == "mpi" else []
                    label = what + " (" + rt + ")"
                    tr = exe + ".json"
                    code, out = run_merged(pre + [exe, "--random-inputs", "1", "--trace", tr])
                    t.result(code == 0, label + ": runs with --trace", out)
                    if code == 0:
                        check_trace(t, tr, Z, ndev, ndev // Z, schedule, M, label)
                    steps = 3
                    code, out = run_merged(pre + [exe, "--random-inputs", "1", "--profile",
                                                  "--steps", str(steps)])
                    t.result(code == 0, label + ": runs with --profile", out)
                    if code == 0:
                        check_profile(t, out, Z, schedule, M, steps, label)
    # Not pipelined: the layers replicated, no pipeline line.
    src = os.path.join(work, "plain.ein")
    with open(src, "w") as f:
        f.write(source("mesh X = 2", "B_X", "F").replace("L_Z", "L"))
    exe = os.path.join(work, "plain")
    code, out = run_merged([a.einc, src, "-o", exe])
    if code == 0:
        code, out = run_merged([exe, "--random-inputs", "1", "--profile", "--steps", "2"])
    t.result(code == 0 and "measured_ms" in out and "pipeline:" not in out,
             "not pipelined: --profile prints no pipeline line", out[-2000:])
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
