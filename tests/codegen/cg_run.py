"""Helpers shared by e2e.py and ein_e2e.py: run a command, and run an einc
executable on .npy inputs and compare its .npy outputs with NumPy."""
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
