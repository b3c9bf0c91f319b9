"""Helpers shared by e2e.py and ein_e2e.py: run a command, and run an einc
executable on .npy inputs and compare its .npy outputs with NumPy."""
import argparse
import os
import subprocess

import numpy as np


def run(cmd, what):
    """Runs cmd; returns its output, or None (after printing why) on failure."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    if p.returncode != 0:
        print(f"FAIL {what}: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}")
        return None
    return p.stdout


def run_check(launch, exe, what):
    """The sharded run against the reference compiled into the executable."""
    out = run(launch + [exe, "--random-inputs", "1", "--check"], f"{what}: --check")
    if out is not None and "max_rel_err" not in out:
        print(f"FAIL {what}: --check printed no comparison:\n{out}")
        return False
    return out is not None


def run_outputs(launch, exe, work, inputs, names, what):
    """Writes `inputs` (name -> array) as .npy, runs exe on them; returns
    the outputs in `names` as arrays, or None (after printing why)."""
    cmd = launch + [exe]
    for k, v in inputs.items():
        path = os.path.join(work, f"in_{k}.npy")
        np.save(path, v)
        cmd += ["--input", f"{k}={path}"]
    for k in names:
        cmd += ["--output", f"{k}={os.path.join(work, f'out_{k}.npy')}"]
    if run(cmd, f"{what}: npy run") is None:
        return None
    return {k: np.load(os.path.join(work, f"out_{k}.npy")) for k in names}


def run_numpy(launch, exe, work, inputs, want, rtol, atol, what):
    """Writes `inputs` as .npy, runs exe on them, compares outputs with `want`."""
    outs = run_outputs(launch, exe, work, inputs, list(want), what)
    if outs is None:
        return False
    ok = True
    for k, w in want.items():
        got = outs[k]
        if got.shape != w.shape:
            print(f"FAIL {what}: output {k} has shape {got.shape}, expected {w.shape}")
            ok = False
        elif not np.allclose(got, w, rtol=rtol, atol=atol, equal_nan=True):
            err = np.max(np.abs(got - w))
            print(f"FAIL {what}: output {k} differs from NumPy (max abs err {err:.3g})")
            ok = False
    return ok


def main_cases(cases, subdir, meshes=(1, 2, 4)):
    """The main of a script that compiles each program `subdir`/STEM.ein
    of `cases` (stem -> check(exe, work, what)) on meshes of `meshes`
    devices (-D X=n) and checks its run; returns the exit status."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    failed = 0
    for stem, case in cases.items():
        for n in meshes:
            what = f"{stem} X={n}"
            work = os.path.join(args.workdir, f"{stem}_x{n}")
            os.makedirs(work, exist_ok=True)
            exe = os.path.join(work, stem)
            src = os.path.join(here, subdir, f"{stem}.ein")
            ok = run([args.einc, src, "-D", f"X={n}", "-o", exe], f"{what}: einc") is not None
            ok = ok and case(exe, work, what)
            print(f"{'ok  ' if ok else 'FAIL'} {what}")
            failed += not ok
    total = len(cases) * len(meshes)
    print(f"{total - failed}/{total} runs passed")
    return 1 if failed else 0
