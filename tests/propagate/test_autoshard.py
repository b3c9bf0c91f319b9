#!/usr/bin/env python3
"""Auto-sharding: `einc plan FILE --chips N [--json]` and `einc FILE --chips N -o EXE`.

On examples/gpt_autoshard.ein (no mesh, no sharding) for several chip
counts and profiles: the JSON table has seed 000's families on every mesh
of N chips, each candidate's figures, and a "chosen" that is one of the
candidates, fits, and is the fastest that fits (within the 0.1% tie, less
memory first); the text table marks the same row.  `--chips N -o` builds an
executable on the chosen mesh that runs and matches the unsharded program.
Misuse is refused clearly.  Exits 1 on the first failure.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

FIELDS = {"family": str, "mesh": dict, "step_time": float, "mfu": float, "memory_per_device": float,
          "fits": bool, "exposed_comm_time": float, "comm_time": float, "bound": str}


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def meshes(n):
    out = [{"X": n}]
    for y in range(2, n // 2 + 1):
        if n % y == 0:
            out.append({"X": n // y, "Y": y})
    return out


def check_table(einc, ein, chips, hw):
    r = run([einc, "plan", ein, "--chips", str(chips), "--hw", hw, "--json"])
    check(r.returncode == 0, f"plan --json on {chips} {hw}: {r.stderr}")
    d = json.loads(r.stdout)
    cands = d["candidates"]
    for c in cands:
        for k, t in FIELDS.items():
            check(k in c and isinstance(c[k], (int, float) if t is float else t), f"field {k} of {c}")
        check(c["bound"] in ("compute", "communication"), f"bound {c['bound']}")
        check(0 < c["mfu"] <= 1 and c["step_time"] > 0, f"figures of {c}")
    seen = {(c["family"], tuple(sorted(c["mesh"].items()))) for c in cands}
    for m in meshes(chips):
        fams = ["DP", "FSDP", "TP"] if len(m) == 1 else ["FSDP+TP", "DP+TP"]
        for f in fams:
            check((f, tuple(sorted(m.items()))) in seen, f"{f} on {m} missing for {chips} chips")
    ch = d["chosen"]
    check(ch in cands, "chosen is not one of the candidates")
    check(ch["fits"], "chosen does not fit")
    fit = [c for c in cands if c["fits"]]
    best = min(c["step_time"] for c in fit)
    check(ch["step_time"] <= best * (1 + 1e-3) + 1e-15,
          f"chosen {ch['family']} {ch['mesh']} at {ch['step_time']} is not the fastest ({best})")
    t = run([einc, "plan", ein, "--chips", str(chips), "--hw", hw])
    star = [l for l in t.stdout.splitlines() if l.startswith("*")]
    mesh = ",".join(f"{k}={v}" for k, v in ch["mesh"].items())
    check(len(star) == 1 and star[0].split()[1] == ch["family"] and star[0].split()[2] == mesh,
          f"the text table marks {star}, the JSON chose {ch['family']} on {mesh}")
    check(re.search(r"^chosen: .* the fastest that fits", t.stdout, re.M), "no 'chosen:' line")
    return ch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    args = ap.parse_args()
    ein = os.path.join(args.examples, "gpt_autoshard.ein")
    n = 0
    for chips, hw in ((4, "host"), (8, "tpu-v5p"), (16, "tpu-v5e"), (6, "h100")):
        ch = check_table(args.einc, ein, chips, hw)
        n += 1
    ch = check_table(args.einc, ein, 4, "host")
    with tempfile.TemporaryDirectory() as work:
        exe = os.path.join(work, "gpt")
        r = run([args.einc, ein, "--chips", "4", "-o", exe])
        check(r.returncode == 0, f"--chips 4 -o: {r.stderr}")
        info = run([exe, "--info"]).stdout
        want = " x ".join(f"{k} = {v}" for k, v in ch["mesh"].items())
        check(re.search(r"^mesh: .*\(4 devices\)", info, re.M), f"--info mesh:\n{info[:400]}")
        for k, v in ch["mesh"].items():
            check(re.search(rf"^mesh: .*\b{k}\D+{v}\b", info, re.M), f"mesh {want} not in --info:\n{info[:400]}")
        r = run([exe, "--random-inputs", "1", "--check", "--check-tol", "1e-3"], cwd=work)
        check(r.returncode == 0, f"the chosen plan's executable fails --check:\n{r.stdout}{r.stderr}")
        n += 1
    meshed = os.path.join(args.examples, "ffw_tp.ein")
    r = run([args.einc, "plan", meshed, "--chips", "4"])
    check(r.returncode == 1 and "plans the mesh itself" in r.stderr and "ffw_tp.ein:" in r.stderr,
          f"a program with a mesh: {r.returncode} {r.stderr}")
    for bad, code, msg in ((["plan", ein], 2, "needs --chips"), ([ein, "--json"], 2, "--json is for"),
                           ([ein, "--chips", "0"], 2, "--chips wants"), ([ein, "--chips", "x"], 2, "--chips wants")):
        r = run([args.einc, *bad])
        check(r.returncode == code and msg in r.stderr, f"einc {' '.join(bad)}: {r.returncode} {r.stderr}")
    print(f"{n + 5} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
