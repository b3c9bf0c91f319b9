#!/usr/bin/python3
"""measure.py - MeshSlice against the Collective 2D GEMM, measured and predicted.

Compiles bench/meshslice/llama13b_ffw_2d.ein (the LLaMA-2 13B FFW GEMMs,
D = 5120, F = 13824, f32, 2x2 mesh) with `einc --hw host --meshslice=K`
for every K given (K = 1 is the Collective 2D GEMM: one whole AllGather /
ReduceScatter per direction, nothing overlaps) and with --meshslice=off
(propagate's separate collectives and einsum), on each runtime; runs each
executable with --random-inputs 1 --repeat N --profile, and prints one
markdown table row per run: the cost model's prediction (per-device step
time and the MeshSlice ops' time on the 'host' profile) next to the
measured median run time and the measured median of the two GEMM ops on
device 0.  Rounds alternate over the configurations so that every
configuration sees the same background load (the machine is shared).

Usage: measure.py --einc build/einc [--runtime threads,mpi] [--ks 1,2,4,8]
                  [-D B=256] [--repeat 3] [--rounds 1] [--mpirun mpirun]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "llama13b_ffw_2d.ein")


def sh(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        sys.exit("failed (exit %d): %s\n%s" % (p.returncode, " ".join(cmd), out))
    return out


def predicted(einc, mode, defs, work):
    ir = json.loads(sh([einc, "--hw", "host", "--meshslice=" + mode, "--dump-ir=json"] + defs + [SRC], work))
    gemm = sum(op["cost"]["time"] for op in ir["ops"] if op["op"] in ("MeshSlice", "Einsum"))
    coll = sum(op["cost"]["time"] for op in ir["ops"] if op["op"] in ("AllGather", "ReduceScatter"))
    ks = sorted({op["k"] for op in ir["ops"] if op["op"] == "MeshSlice"})
    return ir["totals"]["step_time"], gemm, coll, ks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--runtime", default="threads,mpi")
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("-D", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args()
    defs = []
    for d in args.D:
        defs += ["-D", d]
    modes = args.ks.split(",") + ["off"]
    runtimes = args.runtime.split(",")
    results = {}
    with tempfile.TemporaryDirectory(prefix="ms_bench_") as work:
        exes = {}
        for rt in runtimes:
            for mode in modes:
                exe = os.path.join(work, "ffw_%s_%s" % (rt, mode))
                sh([args.einc, "--hw", "host", "--meshslice=" + mode, "--runtime=" + rt, "-o", exe]
                   + defs + [SRC], work)
                exes[rt, mode] = exe
        for _ in range(args.rounds):
            for rt in runtimes:
                for mode in modes:
                    cmd = [exes[rt, mode], "--random-inputs", "1", "--repeat", str(args.repeat), "--profile"]
                    if rt == "mpi":
                        cmd = [args.mpirun, "-np", "4", "--allow-run-as-root", "--oversubscribe"] + cmd
                    out = sh(cmd, work)
                    run = float(re.search(r"median time per run: ([0-9.]+) ms", out).group(1))
                    gemm = sum(float(m.group(1)) for m in re.finditer(
                        r"^\s+\d+\s+\d+\s+([0-9.]+)\s+[0-9.]+\s+\S+\s+\S+ = (?:MeshSlice|Einsum) ", out, re.M))
                    results.setdefault((rt, mode), []).append((run, gemm))
        print("| runtime | --meshslice | K chosen | predicted step (ms) | predicted GEMM ops (ms) | "
              "predicted separate collectives (ms) | measured run, median (ms) | measured GEMM ops, device 0 (ms) |")
        print("|---|---|---|---|---|---|---|---|")
        for rt in runtimes:
            for mode in modes:
                step, gemm, coll, ks = predicted(args.einc, mode, defs, work)
                runs = results[rt, mode]
                run = statistics.median(r for r, _ in runs)
                mg = statistics.median(g for _, g in runs)
                print("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f |"
                      % (rt, mode, ",".join(map(str, ks)) or "-", step * 1e3, gemm * 1e3, coll * 1e3, run, mg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
