#!/usr/bin/env python3
"""test_calibrate.py - `einc calibrate --quick` writes a profile that einc uses.

Checks: the written JSON has every field the loader needs with positive
figures, the calibration section has the fit of each collective kind with
residuals that agree with its samples (rel_residual = (fitted - measured) /
measured, fitted = the model at the sample's P and size), `einc --hw` loads
it and its --dump-cost times a collective with exactly that fit, a broken
fit is refused with a message naming the field, bad command lines exit 2,
and the elementwise curve's program (kept with --keep) runs on one device
per core with a copy of each add per device of a core, its trace kept, and
the P = 2 collective programs run as 3 processes, their samples the fastest,
and the GEMM program as 2, its curve's points the fastest.
With --mpirun, a quick calibration on MPI ranks too.
"""
import argparse
import json
import math
import os
import re
import tempfile

from calib_common import check, finish, run

KINDS = ["allgather", "reducescatter", "allreduce", "alltoall"]


def model(fit, p, buffer_bytes, runs=None):
    """MeshSlice's T_launch + (P-1) (L_sync + shard/BW), shard = buffer / P (seed 004),
    plus shard / local_bandwidth (the own shard's copy) and (runs - P) seconds_per_run
    (a strided layout's extra runs) when the fit has them, with the small-message fit
    below its size when the profile has one."""
    sm = fit.get("small_messages")
    if sm and buffer_bytes < sm["below_bytes"]:
        fit = sm
    shard = buffer_bytes / p
    t = fit["t_launch"] + (p - 1) * (fit["l_sync"] + shard / fit["bandwidth"])
    if "local_bandwidth" in fit:
        t += shard / fit["local_bandwidth"]
    if runs is not None and runs > p:
        t += (runs - p) * fit.get("seconds_per_run", 0)
    return t


def check_profile(path, ranks, runtime):
    with open(path) as f:
        d = json.load(f)
    check(d.get("name") == "host", "profile name is host")
    check(d.get("status") == "calibrated", "status is calibrated")
    for k in ("bf16", "f32", "f64"):
        check(d["peak_flops"].get(k, 0) > 0, "peak_flops.%s > 0" % k)
    for k in ("hbm_bytes", "hbm_bandwidth", "ici_oneway_bandwidth", "ici_bidi_bandwidth",
              "ici_latency", "dcn_bandwidth"):
        check(isinstance(d.get(k), (int, float)) and d[k] > 0, "%s > 0" % k)
    cal = d["calibration"]
    check(cal["runtime"] == runtime and cal["devices"] == ranks, "calibration runtime/devices")
    check(cal["elementwise_bandwidth"] > 0, "elementwise_bandwidth > 0")
    curve = cal["elementwise_curve"]
    check(len(curve) >= 2 and all(p["bandwidth"] > 0 for p in curve) and
          [p["bytes"] for p in curve] == sorted(p["bytes"] for p in curve),
          "elementwise_curve: ascending sizes, positive bandwidths")
    w = cal.get("elementwise_write_weight", -1)
    check(0 <= w <= 2, "elementwise_write_weight in [0, 2]")
    check(cal["cores"] == os.cpu_count(), "cores recorded")
    for k in ("bf16", "f32", "f64"):
        check(cal["gemm_flops"][k] > 0, "gemm_flops.%s > 0" % k)
    # Every curve has a point at a layer's skinny GEMM (512 x 128 x 512 per
    # device, 67 MFLOP), between the square 256^3 and 512^3: a projection
    # runs at the large GEMMs' rate, which interpolating between the two
    # squares priced a fifth slower (calibrate_internal.h, GEMM_LAYER_FIRST).
    for k in ("bf16", "f32", "f64"):
        flops = [p["flops"] for p in cal["gemm_curve"][k]]
        check(flops == sorted(flops) and 2 * 512 * 128 * 512 in flops and
              all(p["flops_per_s"] > 0 for p in cal["gemm_curve"][k]),
              "gemm_curve.%s: ascending, a point at 512 x 128 x 512" % k)
    fns = cal.get("function_seconds_per_element", {})
    check("gelu" in fns and "exp" in fns, "functions gelu and exp measured")
    check(all(v >= 0 for v in fns.values()), "function costs >= 0")
    fnc = cal.get("function_seconds_per_element_in_cache", {})
    # Only present and non-negative: timed over tens of microseconds, the
    # in-cache figures are noise when other jobs share the cores (exp came
    # out above tanh with the test suite running beside it); the model's
    # use of them is checked in tests/cost/test_cost_rowgroup.c.
    check("exp" in fnc and all(v >= 0 for v in fnc.values()), "function costs in cache >= 0")
    # Likewise timed as a difference of two row groups: present, >= 0.
    check(cal.get("row_pass_seconds_per_element", -1) >= 0,
          "row_pass_seconds_per_element written, >= 0")
    check(cal.get("row_mask_seconds_per_element", -1) >= 0,
          "row_mask_seconds_per_element written, >= 0")
    # The neg loop the streaming figures are relative to: a memory-bound
    # loop of 12 bytes an element, well under a microsecond an element.
    base = cal.get("function_baseline_seconds_per_element", -1)
    check(0 < base < 1e-6, "function_baseline_seconds_per_element %.3g s, in (0, 1e-6)" % base)
    for kind in KINDS:
        fit = cal["collectives"][kind]
        check(fit["t_launch"] >= 0 and fit["l_sync"] >= 0 and fit["bandwidth"] > 0,
              "%s: t_launch, l_sync >= 0, bandwidth > 0" % kind)
        check(fit.get("local_bandwidth", 1) > 0, "%s: local_bandwidth > 0 when present" % kind)
        samples = fit["samples"]
        groups = sorted({s["group"] for s in samples})
        check(groups == sorted({2, ranks}), "%s: groups %s" % (kind, groups))
        check(len(samples) >= 4, "%s: at least 4 samples" % kind)
        if ranks == 4:
            sm = fit.get("small_messages")
            check(sm is not None and sm["below_bytes"] == 1 << 20 and sm["bandwidth"] > 0 and
                  sm["t_launch"] >= 0 and sm["l_sync"] >= 0, "%s: small-message fit" % kind)
        used, sq, worst = 0, 0.0, 0.0
        for s in samples:
            check(s["measured_s"] > 0 and s["buffer_bytes"] >= 8000, "%s: sample positive" % kind)
            fitted = model(fit, s["group"], s["buffer_bytes"], s["runs"])
            check(math.isclose(s["fitted_s"], fitted, rel_tol=1e-6, abs_tol=1e-12),
                  "%s: fitted_s is the model at P=%d, %d bytes" % (kind, s["group"],
                                                                  s["buffer_bytes"]))
            rel = (s["fitted_s"] - s["measured_s"]) / s["measured_s"]
            check(math.isclose(s["rel_residual"], rel, rel_tol=1e-6, abs_tol=1e-9),
                  "%s: rel_residual consistent" % kind)
            if not s["outlier"]:
                used += 1
                sq += rel * rel
                worst = max(worst, abs(rel))
        check(used == fit["samples_used"] and used >= 4, "%s: samples_used" % kind)
        check(math.isclose(fit["rms_rel_residual"], math.sqrt(sq / used), rel_tol=1e-6,
                           abs_tol=1e-9), "%s: rms residual of the samples used" % kind)
        check(math.isclose(fit["max_rel_residual"], worst, rel_tol=1e-6, abs_tol=1e-9),
              "%s: max residual" % kind)
    return d


def check_stream(work, d, ranks):
    """The elementwise curve (calibrate/stream.c): timed on one device per
    core, each running every op once per device of the full mesh on its
    core, over arrays of one device's size, read from the trace; every size
    has its point, at the bytes a device of the full mesh moves.  The
    functions and the row groups likewise, in fnrow.ein."""
    dirs = os.listdir(work)
    if not check(len(dirs) == 1, "one kept work directory"):
        return
    wd = os.path.join(work, dirs[0])
    nd = min(ranks, len(os.sched_getaffinity(0)))
    per_core = -(-ranks // nd)
    with open(os.path.join(wd, "stream.ein")) as f:
        src = f.read()
    check(re.search(r"^mesh X = %d$" % nd, src, re.M) is not None,
          "stream.ein on %d devices, one per core" % nd)
    dims = [int(v) for v in re.findall(r"^dim E\d+ = (\d+)$", src, re.M)]
    want = sorted(e * nd for e in (1 << 18, 1 << 20, 1 << 22, 1 << 23))
    check(sorted(dims) == want, "stream.ein's arrays: one device's each, got %s" % dims)
    adds = re.findall(r"^EC(\d+)k(\d+)\[", src, re.M)
    check(sorted(adds) == sorted((str(e), str(k)) for e in range(4) for k in range(per_core)),
          "stream.ein: %d adds per size (one per device of a core)" % per_core)
    # The functions and the row groups are timed likewise (fnrow.ein), a
    # copy per device of a core: every function on each of the 4 sizes
    # (neg, which the others are compared with, before each of them), and
    # each row group's first op (the one the trace names the group by).
    with open(os.path.join(wd, "fnrow.ein")) as f:
        src = f.read()
    check(re.search(r"^mesh X = %d$" % nd, src, re.M) is not None,
          "fnrow.ein on %d devices, one per core" % nd)
    fns = set(re.findall(r"^FN(\d+)S(\d+)k(\d+)\[", src, re.M))
    want = {(str(fn), str(i), str(k)) for fn in range(13) for i in range(4)
            for k in range(12 * per_core if fn == 9 else per_core)}
    check(fns == want, "fnrow.ein: every function on every size, %d copies each, "
          "neg 12 times as many" % per_core)
    for op in ("RGLS", "RGHM", "RMUY", "RMMM"):
        got = sorted(re.findall(r"^%sk(\d+)\[" % op, src, re.M))
        check(sorted(got, key=int) == [str(k) for k in range(4 * per_core)],
              "fnrow.ein: row group %s, %d copies 4 times" % (op, per_core))
    for prog in ("stream", "fnrow"):
        check(os.path.exists(os.path.join(wd, prog + ".trace.0.json")), prog + "'s trace kept")
    # The figures from fnrow's trace: libm's tanh (20-30 ns an element)
    # costs more than gelu's polynomial beyond neg, and a pass over a row
    # in cache costs something.
    cal = d["calibration"]
    fns = cal["function_seconds_per_element"]
    check(fns["tanh"] > fns["gelu"] >= 0, "streamed tanh %.3g > gelu %.3g >= 0 s/element"
          % (fns["tanh"], fns["gelu"]))
    check(cal["row_pass_seconds_per_element"] > 0, "row pass %.3g s/element > 0"
          % cal["row_pass_seconds_per_element"])
    # The masked softmax has one member more than the unmasked one (the
    # mask, calibrate/maskpass.c), a comparison of positions.  Its figure
    # is a difference of about one row pass, which a loaded run can time
    # as nothing (maskpass.c clamps it at 0; check_profile checks >= 0).
    check(re.search(r"^RMMMk0\[RMB_X, RMT, RMS\] = where\(RMS <= 2 \* RMT, ", src, re.M) is not None,
          "fnrow.ein: the masked group's mask compares positions")
    curve = d["calibration"]["elementwise_curve"]
    check([p["bytes"] for p in curve] == [12.0 * e for e in (1 << 18, 1 << 20, 1 << 22, 1 << 23)],
          "elementwise_curve: a point per size, at the full mesh's bytes per device")


def check_processes(work, d, ranks):
    """The collective programs whose groups are smaller than the mesh (P = 2
    of 4 devices) run as 3 processes a round, hard links to one executable
    (coll_2_I, coll_2_I.p1, coll_2_I.p2), the groups of the whole mesh as
    one; a sample is the least over the processes: the flat AllGather's
    measured_s is the fastest of the 3 processes' --profile rows."""
    wd = os.path.join(work, os.listdir(work)[0])
    progs = sorted(f[:-4] for f in os.listdir(wd) if re.fullmatch(r"coll_\d+_\d+\.ein", f))
    check(progs, "collective programs kept")
    ag = {(s["group"], s["buffer_bytes"], s["runs"]): s["measured_s"]
          for s in d["calibration"]["collectives"]["allgather"]["samples"]}
    for prog in progs:
        p, i = (int(v) for v in prog.split("_")[1:])
        names = [prog] + (["%s.p1" % prog, "%s.p2" % prog] if p < ranks else [])
        check(not os.path.exists(os.path.join(wd, "%s.p%d" % (prog, len(names)))),
              "%s: %d processes a round" % (prog, len(names)))
        inodes = {os.stat(os.path.join(wd, n)).st_ino for n in names}
        check(len(inodes) == 1, "%s: its processes are links to one executable" % prog)
        times = []
        for n in names:
            with open(os.path.join(wd, n + ".txt.0")) as f:
                times += [float(l.split()[2]) * 1e-3 for l in f
                          if re.search(r" AG\d+\.1 = AllGather_X ", l)]
        size = 8192 * 4 ** i
        if check(len(times) == len(names) and (p, size, p) in ag,
                 "%s: a flat AllGather row per process and its sample" % prog):
            check(math.isclose(ag[(p, size, p)], min(times), rel_tol=1e-6),
                  "%s: the sample %.4g s is the fastest process's, of %s"
                  % (prog, ag[(p, size, p)], times))


def check_compute(work, d):
    """The GEMM program runs as 2 processes a round, links to one executable
    (compute, compute.p1), and a point of the GEMM curve is the fastest
    process's: the f32 1024^3 point is its FLOPs over the least of the two
    processes' GCf323 rows."""
    wd = os.path.join(work, os.listdir(work)[0])
    names = ["compute", "compute.p1"]
    check(all(os.path.exists(os.path.join(wd, n)) for n in names)
          and not os.path.exists(os.path.join(wd, "compute.p2")), "compute: 2 processes a round")
    check(len({os.stat(os.path.join(wd, n)).st_ino for n in names if os.path.exists(
        os.path.join(wd, n))}) == 1, "compute: its processes are links to one executable")
    times = []
    for n in names:
        path = os.path.join(wd, n + ".txt.0")
        if os.path.exists(path):
            with open(path) as f:
                times += [float(l.split()[2]) * 1e-3 for l in f if re.search(r" GCf323 = Einsum ", l)]
    flop = 2.0 * 1024 ** 3
    point = [p["flops_per_s"] for p in d["calibration"]["gemm_curve"]["f32"] if p["flops"] == flop]
    if check(len(times) == 2 and len(point) == 1, "compute: a 1024^3 f32 row per process and its point"):
        check(math.isclose(point[0], flop / min(times), rel_tol=1e-6),
              "compute: the 1024^3 point %.4g FLOP/s is the fastest process's, of %s s"
              % (point[0], times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--mpirun")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prof = os.path.join(tmp, "host.json")
        # --max-bytes 8 MiB: enough sizes over 1 MiB for the two-regime fit;
        # one round of 3 runs: this test checks the fit and the file, not
        # how well they predict (tests/costmodel/test_host_profile.py runs
        # the default --quick).
        # --keep, its work directory in tmp: the elementwise curve's program
        # is checked below.
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        r = run([a.einc, "calibrate", "--quick", "--ranks", "4", "--max-bytes", "8388608",
                 "--rounds", "1", "--repeat", "3", "--keep", "-o", prof],
                env=dict(os.environ, TMPDIR=work))
        check("wrote " + prof in r.stderr, "calibrate reports the file it wrote")
        check(not [f for f in os.listdir(tmp) if ".tmp" in f], "no temporary file left")
        d = check_profile(prof, 4, "threads")
        check_stream(work, d, 4)
        check_processes(work, d, 4)
        check_compute(work, d)

        # einc uses the fit: the AllGather of A[I, J_X] to J (512x256 f32 =
        # 524288 bytes on each of 2 devices, in 512 rows per peer), asked for
        # by the output's sharding so that the plan does not depend on the
        # fit (a matmul's plan is chosen by estimated time on the profile).
        ex = os.path.join(tmp, "gather.ein")
        with open(ex, "w") as f:
            f.write("mesh X = 2\ndim I = 512, J = 256\ninput A[I, J_X] : f32\noutput A[I, J]\n")
        r = run([a.einc, ex, "--hw", prof, "--dump-cost"])
        check("cost: host (" + prof in r.stdout, "--dump-cost names the calibrated profile")
        row = [l for l in r.stdout.splitlines() if " AllGather " in l]
        if check(len(row) == 1, "one AllGather row in --dump-cost"):
            got_us = float(row[0].split()[8])
            # The fit is for 4 devices sharing the cores; a mesh of 2 has a
            # larger share each (cost_measured_contention).
            cal = d["calibration"]
            cores, ndev = cal["cores"], cal["devices"]
            k = (cores / max(ndev, cores)) / (cores / max(2, cores))
            want_us = 1e6 * k * model(cal["collectives"]["allgather"], 2, 512 * 256 * 4, 2 * 512)
            check(math.isclose(got_us, want_us, rel_tol=1e-3),
                  "AllGather time %.4g us is the fit's %.4g us" % (got_us, want_us))

        # Strided samples were timed (not for AllReduce, whose slices are
        # flat), and a gather over the inner dim is priced with its runs:
        # In[B, D_X] -> In[B, D] copies B rows per peer, 2 x 64 runs.
        for kind in KINDS:
            strided = [s for s in cal["collectives"][kind]["samples"] if s["runs"] > s["group"]]
            check(bool(strided) == (kind != "allreduce"), "%s: strided samples" % kind)
        src = os.path.join(tmp, "inner.ein")
        with open(src, "w") as f:
            f.write("mesh X = 2\ndim B = 64, D = 512\ninput In[B, D_X] : f32\noutput In[B, D]\n")
        r = run([a.einc, src, "--hw", prof, "--dump-cost"])
        row = [l for l in r.stdout.splitlines() if " AllGather " in l]
        if check(len(row) == 1, "one AllGather row for the inner-dim gather"):
            got_us = float(row[0].split()[8])
            want_us = 1e6 * k * model(cal["collectives"]["allgather"], 2, 64 * 512 * 4, 2 * 64)
            check(math.isclose(got_us, want_us, rel_tol=1e-3),
                  "inner-dim AllGather time %.4g us is the fit's %.4g us with 128 runs"
                  % (got_us, want_us))

        # einc charges the pass per member of a row group: the softmax's
        # group (max, exp, sum, divide: 4 passes over 256 x 1024 elements
        # per device) moves by exactly the figure's change x those passes,
        # at the 2-device mesh's share of the cores (k, above).
        src = os.path.join(tmp, "softmax.ein")
        with open(src, "w") as f:
            f.write("mesh X = 2\ndim R = 512, C = 1024\ninput A[R_X, C] : f32\n"
                    "Y[R_X, C] = softmax(A[R, C], C)\noutput Y\n")
        # The functions' figures at zero, so that the compute column is
        # the passes alone: a quick calibration on a loaded machine can
        # time exp in cache at microseconds an element, and the passes'
        # 0.5 ms then vanish in the 4 digits --dump-cost prints (the check
        # once read +0 in a loaded CI run).
        cal_copy = json.loads(json.dumps(d["calibration"]))
        for fns in ("function_seconds_per_element", "function_seconds_per_element_in_cache"):
            for fn in d["calibration"].get(fns, {}):
                d["calibration"][fns][fn] = 0
        times = []
        for fig in (0, 1e-9):
            d["calibration"]["row_pass_seconds_per_element"] = fig
            alt = os.path.join(tmp, "pass%d.json" % len(times))
            with open(alt, "w") as f:
                json.dump(d, f)
            r = run([a.einc, src, "--hw", alt, "--dump-cost"])
            rows = [l.split() for l in r.stdout.splitlines() if l.startswith("Y ")]
            times.append(float(rows[0][5]) if len(rows) == 1 else math.nan)
        want_us = 1e6 * k * 1e-9 * 4 * 256 * 1024
        check(times[0] == 0 and math.isclose(times[1], want_us, rel_tol=1e-3),
              "row group's compute %.4g us with a pass of 0, %.4g us with 1 ns, %.4g us wanted"
              % (times[0], times[1], want_us))
        d["calibration"] = cal_copy

        # A broken fit is refused, naming the field.
        d["calibration"]["collectives"]["alltoall"]["bandwidth"] = -1
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump(d, f)
        r = run([a.einc, ex, "--hw", bad, "--dump-cost"], expect=1)
        check("calibration.collectives.alltoall.bandwidth" in r.stderr,
              "bad bandwidth named: " + r.stderr.strip())
        d["calibration"]["collectives"]["alltoall"]["bandwidth"] = 1e9
        for key in ("row_pass_seconds_per_element", "row_mask_seconds_per_element",
                    "function_baseline_seconds_per_element"):
            good = d["calibration"].get(key, 0)
            d["calibration"][key] = -1e-9
            with open(bad, "w") as f:
                json.dump(d, f)
            r = run([a.einc, ex, "--hw", bad, "--dump-cost"], expect=1)
            check("calibration." + key in r.stderr, "negative %s named: %s"
                  % (key, r.stderr.strip()))
            d["calibration"][key] = good

        # Bad command lines.
        # (`einc calibrate` alone is not one: it writes this machine's cache.)
        for args in (["calibrate", "extra-arg"], ["calibrate", "-o", prof, "--ranks", "1"],
                     ["calibrate", "-o", prof, "--runtime=gpu"],
                     ["calibrate", "-o", prof, "--max-bytes", "12"],
                     ["calibrate", "-o", prof, "--ranks"]):
            r = run([a.einc] + args, expect=2)
            check("einc calibrate: error:" in r.stderr, "clear error for %s" % args)
        r = run([a.einc, "calibrate", "-o", os.path.join(tmp, "no", "such", "dir.json"),
                 "--quick", "--ranks", "2"], expect=1)
        check("cannot" in r.stderr, "unwritable output reported: " + r.stderr.strip()[-200:])

        if a.mpirun:
            mprof = os.path.join(tmp, "mpi.json")
            launcher = "%s --allow-run-as-root --oversubscribe -x ASAN_OPTIONS=%s" % (
                a.mpirun, (os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":"))
            run([a.einc, "calibrate", "--quick", "--runtime=mpi", "--ranks", "2",
                 "--max-bytes", "2097152", "--rounds", "1", "--repeat", "3",
                 "--mpirun", launcher, "-o", mprof])
            check_profile(mprof, 2, "mpi")
    finish("test_calibrate")


if __name__ == "__main__":
    main()
