#!/usr/bin/env python3
"""calibrate_spread.py - how well `einc calibrate` repeats itself.

Runs `einc calibrate` --runs times back to back (by default --quick, on the
threads runtime) and prints, per calibration, the load average before it,
its seconds, each point of the elementwise curve (GB/s per device at the
bytes a device moves) and the f32 GEMM rate, then per figure the spread
over the calibrations as max / min (docs/performance-history.md, section 5:
the target for the curve is 1.15 under the same load).  The profiles go to
a temporary directory; nothing else is written.

    bench/calibrate_spread.py --einc build/einc --runs 4
    bench/calibrate_spread.py --einc build/einc --runs 3 --args "--runtime=mpi"
    bench/calibrate_spread.py --einc build/einc --runs 2 --full

Exit status 0, or 2 when a calibration fails.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time


def calibrate(einc, out, args, full):
    """Runs one calibration into `out`; (seconds, load before, profile)."""
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    cmd = [einc, "calibrate", "-o", out] + ([] if full else ["--quick"]) + args
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.monotonic() - t0
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        sys.exit(2)
    with open(out) as f:
        return secs, load, json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--args", default="", help="more arguments for einc calibrate")
    ap.add_argument("--full", action="store_true", help="without --quick")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            secs, load, prof = calibrate(a.einc, os.path.join(tmp, "p%d.json" % i),
                                         shlex.split(a.args), a.full)
            cal = prof["calibration"]
            curve = {p["bytes"]: p["bandwidth"] for p in cal["elementwise_curve"]}
            rows.append((secs, load, curve, cal["gemm_flops"]["f32"]))
    sizes = sorted(set().union(*(r[2] for r in rows)))
    head = "run  load   secs  " + "  ".join("%6.0fMiB" % (b / 2**20) for b in sizes) + "  GEMM f32"
    print("elementwise curve, GB/s per device; GEMM f32 GFLOP/s")
    print(head)
    for i, (secs, load, curve, gemm) in enumerate(rows):
        pts = "  ".join("%9.2f" % (curve[b] * 1e-9) if b in curve else "%9s" % "-" for b in sizes)
        print("%3d %5.1f %6.1f  %s  %8.1f" % (i + 1, load, secs, pts, gemm * 1e-9))

    def spread(v):
        return max(v) / min(v) if v and min(v) > 0 else float("nan")

    pts = "  ".join("%9.2f" % spread([r[2][b] for r in rows if b in r[2]]) for b in sizes)
    print("max/min        %s  %8.2f" % (pts, spread([r[3] for r in rows])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
