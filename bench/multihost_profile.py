#!/usr/bin/env python3
"""multihost_profile.py - a cost profile for MPI over TCP between two hosts.

The cost model prices a collective from the profile einc compiles for.
`einc calibrate --runtime=mpi` measures that profile through whatever
launcher it is given, so calibrating through a launcher that puts the
ranks on two hosts measures the link between them.  This script does it
on one machine: two network namespaces joined by a veth pair stand for two
hosts (tests/e2e/multihost.py's setup: TCP only, two slots per host, ranks
alternating between the hosts), and it calibrates twice with the same
options:

  shm   mpirun on one host (Open MPI's shared-memory transport);
  tcp   mpirun across the two namespaces (--mca btl tcp,self).

It prints the fitted collective parameters of both profiles side by side
(launch time, per-step latency, bandwidth; seed 001's ring model as
docs/cost-model.md, "Calibration", fits it) and then, for each --examples
program on a 2x2 mesh (4 ranks), the collectives' measured time per run on
each link next to what each profile predicts for it: the time summed over
the program's collectives (MeshSlice loops included) and the whole run,
each the median of --repeat runs (--profile), the fastest of --rounds
processes.  A profile sees its link when its
prediction for that link is close and the other link's profile is not.

    python3 bench/multihost_profile.py --build build
    python3 bench/multihost_profile.py --build build --keep /tmp/profiles   # keep the JSON
    python3 bench/multihost_profile.py --build build --profiles /tmp/profiles   # reuse it

Needs root (network namespaces) and mpirun; exits 2 with the reason
without them.  About 4 minutes on the 2-core VM.
"""
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import benchlib  # noqa: E402

ROOT = benchlib.ROOT
COLLECTIVES = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll")
# One --profile row: op, calls, measured ms, predicted ms, error, name.
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+|-)\s+([-+0-9.]+%|-)\s+(.*)$")
SHM = "mpirun --allow-run-as-root --oversubscribe --bind-to core:overload-allowed --map-by core"


def load_multihost():
    """tests/e2e/multihost.py as a module: its namespaces and launcher."""
    path = ROOT / "tests" / "e2e" / "multihost.py"
    spec = importlib.util.spec_from_file_location("multihost", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(cmd, timeout=1800):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise benchlib.BenchError("failed (exit %d): %s\n%s%s" % (
            r.returncode, " ".join(cmd), r.stdout[-2000:], r.stderr[-3000:]))
    return r


def is_collective(name):
    return name.split(" = ")[-1].split()[0].split("_")[0] in COLLECTIVES


RUN = re.compile(r"^\s*run\s+([0-9.]+)\s+([0-9.]+|-)")


def profile_seconds(profile_text, runs):
    """{"coll": (measured, predicted), "run": (measured, predicted)}: seconds
    per run of the collectives (MeshSlice loops included: they are
    collectives overlapped with GEMMs) and of the whole run, from a
    --profile table of `runs` runs (an op's times are per call, its calls
    counted over all runs; the run row is per run)."""
    meas = pred = 0.0
    run = (0.0, 0.0)
    for line in profile_text.splitlines():
        m = ROW.match(line)
        if m and (is_collective(m.group(6)) or " = MeshSlice" in m.group(6)):
            per_run = int(m.group(2)) / runs
            meas += float(m.group(3)) * 1e-3 * per_run
            pred += float(m.group(4)) * 1e-3 * per_run if m.group(4) != "-" else 0.0
        r = RUN.match(line)
        if r:
            run = (float(r.group(1)) * 1e-3,
                   float(r.group(2)) * 1e-3 if r.group(2) != "-" else 0.0)
    return {"coll": (meas, pred), "run": run}


def collective_names(profile_text):
    """The collectives of a --profile table, as `Kind_Axes operand`."""
    names = []
    for line in profile_text.splitlines():
        m = ROW.match(line)
        if m and is_collective(m.group(6)):
            names.append(" ".join(m.group(6).split(" = ")[-1].split()[:2]))
    return names


def fits(path):
    """kind -> {large, small} ring fits of a calibrated profile."""
    with open(path) as f:
        return json.load(f)["calibration"]["collectives"]


def describe(fit):
    small = fit.get("small_messages", {})
    return (small.get("t_launch", 0.0), small.get("l_sync", 0.0), small.get("bandwidth", 0.0),
            fit.get("bandwidth", 0.0))


def main():
    # Two hosts' profiles, not figures against a target: no --json results file.
    ap = benchlib.parser(__doc__.split("\n")[0], json_results=False)
    ap.add_argument("--examples", nargs="*",
                    default=["ffw_tp.ein", "ffw_fsdp_tp.ein", "llama2_ffw.ein"],
                    help="programs of examples/ on 4 devices (default: %(default)s)")
    ap.add_argument("--max-bytes", type=int, default=4 << 20,
                    help="largest collective buffer calibrated (default 4 MiB)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", help="directory to copy the two profiles to")
    ap.add_argument("--profiles", help="directory with the two profiles a --keep run left "
                    "(host-mpi-shm.json, host-mpi-tcp.json): no calibration")
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    einc = os.path.join(a.build, "einc")
    if not os.path.exists(einc):
        raise benchlib.BenchError("no %s: build einc first" % einc)
    if not shutil.which(a.mpirun):
        print("cannot run: no %s" % a.mpirun)
        sys.exit(2)
    mh = load_multihost()
    why = mh.setup()
    if why:
        mh.teardown()
        print("cannot run: " + why)
        sys.exit(2)
    work = tempfile.mkdtemp(prefix="einc-multihost-profile-")
    try:
        tcp = mh.write_launcher(work, a.mpirun) + " --allow-run-as-root --oversubscribe"
        links = [("shm", SHM), ("tcp", tcp)]
        profiles = {}
        for link, launcher in links:
            if a.profiles:
                profiles[link] = os.path.join(a.profiles, "host-mpi-%s.json" % link)
                continue
            out = os.path.join(work, "host-mpi-%s.json" % link)
            cmd = [einc, "calibrate", "--runtime=mpi", "--ranks", "4", "--quick",
                   "--max-bytes", str(a.max_bytes), "--name", "host-mpi-" + link,
                   "--mpirun", launcher, "-o", out]
            t0 = time.monotonic()
            run(cmd)
            print("calibrated %s in %.0f s (load average %.2f)" % (
                link, time.monotonic() - t0, os.getloadavg()[0]), flush=True)
            profiles[link] = out
        if a.keep and not a.profiles:
            os.makedirs(a.keep, exist_ok=True)
            for p in profiles.values():
                shutil.copy(p, a.keep)

        print("\nfitted collectives (docs/cost-model.md, \"Calibration\"): small messages "
              "t_launch, l_sync, bandwidth; large messages bandwidth")
        print("%-14s %-5s %10s %10s %12s %12s" % ("collective", "link", "launch_us",
                                                  "step_us", "small_GB/s", "large_GB/s"))
        f = {link: fits(p) for link, p in profiles.items()}
        for kind in sorted(f["shm"]):
            for link in ("shm", "tcp"):
                if kind in f[link]:
                    t, l, bs, bl = describe(f[link][kind])
                    print("%-14s %-5s %10.1f %10.1f %12.3f %12.3f" % (
                        kind, link, t * 1e6, l * 1e6, bs / 1e9, bl / 1e9))

        print("\ntime per run, ms: measured on each link, and what each profile predicts "
              "(fastest of %d processes, median of %d runs each); collectives include the "
              "MeshSlice loops" % (a.rounds, a.repeat))
        print("%-18s %-5s %-12s %10s %12s %12s" % ("example", "link", "what", "measured",
                                                   "shm profile", "tcp profile"))
        summary = []
        for ex in a.examples:
            path = str(ROOT / "examples" / ex)
            exes = {}
            for link, prof in profiles.items():
                exes[link] = os.path.join(work, "%s-%s" % (ex[:-4], link))
                run([einc, path, "--hw", prof, "--runtime=mpi", "-o", exes[link]])
            meas, pred, ops = {}, {}, {}
            for link, launcher in links:
                # The link's own executable, --rounds processes; the other
                # profile's once, for its prediction (embedded in it).
                for prof_link in profiles:
                    for _ in range(a.rounds if prof_link == link else 1):
                        r = run(shlex.split(launcher) + ["-np", "4", exes[prof_link],
                                                         "--random-inputs", "1", "--profile",
                                                         "--repeat", str(a.repeat)])
                        t = profile_seconds(r.stdout, a.repeat)
                        pred[prof_link] = {w: t[w][1] for w in t}
                        ops[prof_link] = collective_names(r.stdout)
                        if prof_link == link:
                            best = meas.get(link)
                            if best is None or t["run"][0] < best["run"]:
                                meas[link] = {w: t[w][0] for w in t}
            for link, _ in links:
                for what in ("coll", "run"):
                    print("%-18s %-5s %-12s %10.3f %12.3f %12.3f" % (
                        ex[:-4], link, "collectives" if what == "coll" else "whole run",
                        meas[link][what] * 1e3, pred["shm"][what] * 1e3,
                        pred["tcp"][what] * 1e3), flush=True)
            summary.append((ex, meas, pred))
            if ops["shm"] != ops["tcp"]:
                print("%-18s (the two profiles plan it differently: %s against %s)" % (
                    ex[:-4], ", ".join(ops["shm"]), ", ".join(ops["tcp"])))
        print()
        for ex, meas, pred in summary:
            ms, mt = meas["shm"]["run"], meas["tcp"]["run"]
            print("%-18s whole run tcp/shm: measured %.2fx, predicted %.2fx; on tcp the shm "
                  "profile is off by %+.0f%%, the tcp profile by %+.0f%%" % (
                      ex[:-4], mt / ms, pred["tcp"]["run"] / pred["shm"]["run"],
                      100 * (pred["shm"]["run"] - mt) / mt, 100 * (pred["tcp"]["run"] - mt) / mt))
    finally:
        mh.teardown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    benchlib.main_guard(main)
