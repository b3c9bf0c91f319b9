#!/usr/bin/env python3
"""test_analyze.py - `einc analyze`: the seeds' whole-step limits as goldens.

Every .ein file under the given directories with `# expect-analyze:` lines
is a case.  A line reads

    # expect-analyze: EINC ARGS | FAMILY KEY EXPECTED

run as `einc analyze --json EINC ARGS FILE`; FAMILY is a strategy's
"family" ("plan", "DP", ...) and KEY one of its JSON fields.  EXPECTED is a
number with a relative tolerance ("2550 1%"), an inclusive range
("64..239"), "any" (a critical batch of 0: compute-bound at every batch),
"never" (null), or a word compared as a string.

Then the behaviour around the numbers:
  - the largest batch that fits really fits: compiled at that batch the
    cost pass's peak fits the HBM, and one batch shard more does not;
  - the critical batch is where the phase's matmul time meets its
    communication: at twice that batch the DP step's exposed share drops;
  - bad use is a clear error (no mesh, --chips, -o).
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

failures = 0


def check(cond, msg):
    global failures
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures += 1


def run(einc, *args):
    env = dict(os.environ)
    p = subprocess.run([einc] + list(args), capture_output=True, text=True, env=env, timeout=600)
    return p.returncode, p.stdout, p.stderr


_analyzed = {}


def analyze(einc, path, args):
    """`einc analyze --json ARGS PATH`, once per file and arguments (the
    goldens of one file share the run)."""
    key = (path, tuple(args))
    if key not in _analyzed:
        rc, out, err = run(einc, "analyze", "--json", *args, path)
        _analyzed[key] = (None, err.strip()) if rc != 0 else (json.loads(out), None)
    return _analyzed[key]


def matches(got, want):
    """True if JSON value `got` is what `want` (the line's text) says."""
    m = re.fullmatch(r"([-0-9.eE+]+)\s+([0-9.]+)%", want)
    if m:
        return isinstance(got, (int, float)) and abs(got - float(m.group(1))) <= float(m.group(2)) / 100 * abs(
            float(m.group(1)))
    m = re.fullmatch(r"([0-9.]+)\.\.([0-9.]+)", want)
    if m:
        return isinstance(got, (int, float)) and float(m.group(1)) <= got <= float(m.group(2))
    if want == "any":
        return got == 0
    if want == "never":
        return got is None
    if re.fullmatch(r"[-0-9.eE+]+", want):
        return isinstance(got, (int, float)) and got == float(want)
    return got == want


def goldens(einc, dirs):
    n = 0
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.ein"))):
            for line in open(path, encoding="utf-8"):
                m = re.match(r"#\s*expect-analyze:\s*(.*?)\s*\|\s*(\S+)\s+(\S+)\s+(.+?)\s*$", line)
                if not m:
                    continue
                n += 1
                args, family, key, want = m.group(1).split(), m.group(2), m.group(3), m.group(4)
                j, err = analyze(einc, path, args)
                name = "%s %s: %s %s = %s" % (os.path.basename(path), " ".join(args), family, key, want)
                if j is None:
                    check(False, name + " (einc analyze failed: %s)" % err)
                    continue
                rows = [r for r in j["strategies"] if r["family"] == family]
                got = rows[0].get(key, "<missing>") if rows else "<no such family>"
                check(bool(rows) and matches(got, want), "%s (got %s)" % (name, got))
    check(n >= 10, "%d expect-analyze lines found" % n)


def fits_really_fit(einc, cases):
    """max_batch_fits against compiles at that batch and one shard more."""
    path = os.path.join(cases, "dp_layers_v5p.ein")
    j, err = analyze(einc, path, ["--hw", "tpu-v5e"])
    check(j is not None, "dp_layers_v5p.ein analyzes on tpu-v5e (%s)" % err)
    if j is None:
        return
    plan = [r for r in j["strategies"] if r["family"] == "plan"][0]
    n = plan["max_batch_fits"]
    check(isinstance(n, (int, float)) and n > 0 and n % 8 == 0,
          "max_batch_fits is a positive multiple of the batch's 8 shards (%s)" % n)
    for b, fits in ((int(n), True), (int(n) + 8, False)):
        rc, out, _ = run(einc, "--hw", "tpu-v5e", "--dump-cost", "-D", "B=%d" % b, path)
        ok = rc == 0 and ((": fits" in out) if fits else ("does not fit" in out))
        check(ok, "compiled at B = %d the step %s" % (b, "fits" if fits else "does not fit"))


def critical_is_the_crossing(einc, cases):
    """Below the critical batch the DP step's communication is exposed
    beyond the matmuls; above it the backward matmuls cover it.  On
    tpu-v5p as it is, collective matmul (docs/cost-model.md) makes a plan
    that gathers activations for the weight gradients faster than DP's
    AllReduce at 1024 tokens per chip, so the planner leaves DP there; the
    seed's DP arithmetic is checked on the profile without it."""
    path = os.path.join(cases, "dp_layers_v5p.ein")
    with open(os.path.join(cases, "..", "..", "..", "hw", "tpu-v5p.json")) as f:
        prof = json.load(f)
    prof["collective_matmul"] = False
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(prof, f)
        f.flush()
        outs = [run(einc, "analyze", "--json", "--hw", f.name, "-D", "B=%d" % (per_chip * 8), path)
                for per_chip in (1024, 8192)]
    for (per_chip, bound), (rc, out, _) in zip(((1024, True), (8192, False)), outs):
        j = json.loads(out) if rc == 0 else None
        plan = [r for r in j["strategies"] if r["family"] == "plan"][0] if j else None
        # The backward pass of this program is 2/3 of its matmul time; the
        # gradient AllReduces sit in it.
        ok = plan is not None and abs(plan["critical_batch_per_chip"] - 2550) < 26
        if plan:
            comm = sum(plan["comm_time"].values())
            ok = ok and ((comm > plan["compute_time"] * 2 / 3 * 0.9) if bound else (comm < plan["compute_time"] * 2 / 3))
        check(ok, "at %d tokens per chip the backward pass is %s-bound, and the critical batch stays 2550"
              % (per_chip, "communication" if bound else "compute"))


def optimal_split(einc, cases):
    """Seed 000, "Combining FSDP and TP": at the optimal split of the chips
    between X and Y, X_opt = sqrt(B N M_X / (F M_Y)), the critical batch is
    no larger than on the declared mesh nor on any other integer split of
    the same chips (each compiled as its own program)."""
    path = os.path.join(cases, "fsdp_tp_3d_v5p.ein")
    j, err = analyze(einc, path, ["--hw", "tpu-v5p"])
    check(j is not None, "fsdp_tp_3d_v5p.ein analyzes (%s)" % err)
    if j is None:
        return
    n = 128
    for r in j["strategies"]:
        opt, crit, mesh = r.get("critical_batch_per_chip_opt_mesh"), r.get("critical_batch_per_chip"), r.get("opt_mesh")
        ok = "critical_batch_per_chip_opt_mesh" in r and (opt is None) == (mesh is None)
        if opt is not None:
            ok = ok and abs(mesh["X"] * mesh["Y"] - n) < 1e-6 * n and (crit is None or opt <= crit * (1 + 1e-9))
        check(ok, "%s: the optimal split keeps %d chips and needs no larger batch (%s at %s, declared %s)"
              % (r["family"], n, opt, mesh, crit))
    plan = [r for r in j["strategies"] if r["family"] == "plan"][0]
    opt, x = plan["critical_batch_per_chip_opt_mesh"], plan["opt_mesh"]["X"]
    # F = 32768, M_X = 2 (X over 2), M_Y = 1, B = the critical batch.
    seed_x = (opt * n * n * 2 / (32768 * 1)) ** 0.5
    check(abs(x - seed_x) < 0.06 * seed_x, "X_opt = %.3g, seed 000's sqrt(B N M_X / (F M_Y)) = %.3g" % (x, seed_x))
    src = open(path, encoding="utf-8").read()
    for xs in (4, 8, 16, 32, 64):
        tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "einc_analyze_split_%d.ein" % xs)
        with open(tmp, "w") as f:
            f.write(src.replace("mesh X = 16 over 2, Y = 8", "mesh X = %d over 2, Y = %d" % (xs, n // xs)))
        jf, err = analyze(einc, tmp, ["--hw", "tpu-v5p"])
        os.unlink(tmp)
        forced = [r for r in jf["strategies"] if r["family"] == "plan"][0]["critical_batch_per_chip"] if jf else None
        check(jf is not None and (forced is None or forced >= opt * 0.99),
              "forced X = %d, Y = %d: critical batch %s, not below the optimal split's %.4g" % (xs, n // xs, forced, opt))
    j, _ = analyze(einc, os.path.join(cases, "dp_layers_v5p.ein"), ["--hw", "tpu-v5p"])
    check(j is not None and all("opt_mesh" not in r for r in j["strategies"]),
          "a one-axis mesh has no optimal split")


def errors(einc, cases):
    nomesh = os.path.join(os.environ.get("TMPDIR", "/tmp"), "einc_analyze_nomesh.ein")
    with open(nomesh, "w") as f:
        f.write("dim B = 8, D = 4, E = 4\ninput In[B, D] : f32\nparam W[D, E] : f32\nOut[B, E] = In[B, D] * W[D, E]\n"
                "output Out[B, E]\n")
    rc, out, err = run(einc, "analyze", nomesh)
    check(rc == 1 and "declares no mesh" in err and "einc plan" in err,
          "a program without a mesh: exit 1 and a pointer to einc plan (%d, %s)" % (rc, err.strip()))
    os.unlink(nomesh)
    path = os.path.join(cases, "dp_layers_v5p.ein")
    rc, _, err = run(einc, "analyze", "--chips", "8", path)
    check(rc == 2 and "no --chips" in err, "einc analyze --chips: exit 2 (%d, %s)" % (rc, err.strip()))
    rc, _, err = run(einc, "analyze", "-o", "x", path)
    check(rc == 2, "einc analyze -o: exit 2 (%d)" % rc)
    rc, out, _ = run(einc, "analyze", "--hw", "tpu-v5p", path)
    check(rc == 0 and "critical batch" in out and "2550 tok (X)" in out, "the text table names the limit")
    # A v5p pod (8960 chips) is priced, but no executable runs it.
    pod = os.path.join(cases, "dp_pod_8960_v5p.ein")
    rc, out, err = run(einc, "--hw", "tpu-v5p", "--dump-cost", pod)
    check(rc == 0 and "8960 devices" in out, "a mesh of 8960 devices is priced by --dump-cost (%d, %s)"
          % (rc, err.strip()[:200]))
    exe = os.path.join(os.environ.get("TMPDIR", "/tmp"), "einc_analyze_pod_exe")
    rc, out, err = run(einc, "--hw", "tpu-v5p", "-o", exe, pod)
    check(rc == 1 and "dp_pod_8960_v5p.ein:10:22: error:" in err and "8960 devices" in err
          and "executable runs at most 4096" in err and "without -o einc prices it" in err
          and not os.path.exists(exe), "-o on 8960 devices: a located error naming both limits (%d, %s)"
          % (rc, err.strip()[:300]))


def main():
    einc, cases = sys.argv[1], sys.argv[2]
    dirs = sys.argv[2:]
    goldens(einc, dirs)
    fits_really_fit(einc, cases)
    critical_is_the_crossing(einc, cases)
    optimal_split(einc, cases)
    errors(einc, cases)
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
