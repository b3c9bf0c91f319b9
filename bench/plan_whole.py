#!/usr/bin/env python3
"""Whole-model planning: planning time, and the step before and after the ILP.

Planning time: for each examples/*.ein (and --extra files), the median wall
time of --reps runs of `einc FILE --passes=optimize,autodiff,propagate` with the
whole-program ILP (the default) and with `--ilp=off` (the baseline: the
local search alone), their ratio, and the ILP's size and solve time from
`--debug-pass` (candidates, columns, rows, simplex iterations, seconds).

Steps: for each --train program (default examples/fortunes_transformer.ein
and examples/llama2_13b_train.ein at small dims), the cost pass's
estimated step (`--dump-cost` totals) and the measured step on the threads
runtime (`EXE --random-inputs 1 --steps N --metrics`, the median of the
steps after the first), with and without the ILP: after / before.

    python3 bench/plan_whole.py --einc build/einc [--reps 3] [--steps 6] [--json FILE]

Prints the CPU model first: quote the ratios with it.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib as bl

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Issue 24's targets for the whole-program ILP's planning time (seconds).
PLAN_TARGETS_S = {"llama2_13b.ein": 1.0, "llama2_13b_train.ein": 5.0}

TRAIN = [("examples/fortunes_transformer.ein", []),
         ("examples/llama2_13b_train.ein",
          ["-D", "B=4", "-D", "T=64", "-D", "S=64", "-D", "D=256", "-D", "N=4", "-D", "F=512", "-D", "V=128",
           "-D", "L=4"])]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def wall(cmd, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise RuntimeError(" ".join(cmd) + "\n" + r.stderr)
    return statistics.median(times)


def ilp_line(einc, path):
    r = subprocess.run([einc, path, "--passes=optimize,autodiff,propagate", "--debug-pass"], capture_output=True, text=True)
    m = re.search(r"ILP: (\d+) candidate layouts( \(simple ops merged\))?, (\d+) columns, (\d+) rows, "
                  r"(\d+) simplex iterations, ([0-9.e+-]+) s, ([a-z ]+);", r.stderr)
    if not m:
        return "no ILP"
    return (f"{m.group(1)} cands{' merged' if m.group(2) else ''}, {m.group(3)} cols, {m.group(4)} rows, "
            f"{m.group(5)} iters, solve {float(m.group(6)):.3f} s, {m.group(7)}")


def estimated(einc, path, extra):
    r = subprocess.run([einc, path, "--dump-cost", *extra], capture_output=True, text=True)
    m = re.search(r"^totals: step ([0-9.e+-]+) us", r.stdout, re.M)
    return float(m.group(1)) * 1e-6 if m else float("nan")


def measured(einc, path, extra, steps, work, tag):
    exe = os.path.join(work, tag)
    subprocess.run([einc, path, "-o", exe, *extra], check=True, capture_output=True)
    metrics = os.path.join(work, tag + ".jsonl")
    subprocess.run([exe, "--random-inputs", "1", "--steps", str(steps), "--metrics", metrics],
                   check=True, capture_output=True, cwd=work)
    with open(metrics) as f:
        secs = [json.loads(l)["seconds"] for l in f if l.strip()]
    return statistics.median(secs[1:] if len(secs) > 1 else secs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--no-steps", action="store_true")
    bl.add_json_option(ap)
    args = ap.parse_args()
    res = bl.Results("plan_whole", "Whole-model planning: the ILP's time and the steps it buys")
    einc = os.path.abspath(args.einc)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"{'program':32} {'ILP s':>8} {'off s':>8} {'ratio':>6}  ILP")
    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*.ein"))) + args.extra
    for path in files:
        on = wall([einc, path, "--passes=optimize,autodiff,propagate"], args.reps)
        off = wall([einc, path, "--passes=optimize,autodiff,propagate", "--ilp=off"], args.reps)
        print(f"{os.path.basename(path):32} {on:8.3f} {off:8.3f} {on / off:6.2f}  {ilp_line(einc, path)}")
        limit = PLAN_TARGETS_S.get(os.path.basename(path))
        res.add(f"planning time, {os.path.basename(path)}", on, "s",
                f"< {limit:g} s" if limit else "", on / off,
                ("ok" if on < limit else "MISS") if limit else "-")
    if args.no_steps:
        res.write(args.json)
        return 0
    print(f"\n{'program':32} {'est off':>10} {'est ILP':>10} {'after/before':>12} {'meas off':>10} "
          f"{'meas ILP':>10} {'after/before':>12}")
    with tempfile.TemporaryDirectory() as work:
        for rel, extra in TRAIN:
            path = os.path.join(ROOT, rel)
            e_off = estimated(einc, path, extra + ["--ilp=off"])
            e_on = estimated(einc, path, extra)
            m_off = measured(einc, path, extra + ["--ilp=off"], args.steps, work, "off")
            m_on = measured(einc, path, extra, args.steps, work, "on")
            print(f"{os.path.basename(path):32} {e_off*1e3:8.2f}ms {e_on*1e3:8.2f}ms {e_on/e_off:12.3f} "
                  f"{m_off*1e3:8.2f}ms {m_on*1e3:8.2f}ms {m_on/m_off:12.3f}")
            res.add(f"measured step with the ILP, {os.path.basename(path)}", m_on * 1e3, "ms", "",
                    m_on / m_off)
    res.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
