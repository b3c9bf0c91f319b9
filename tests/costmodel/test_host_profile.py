#!/usr/bin/env python3
"""test_host_profile.py - `--hw host` belongs to the machine einc runs on.

Checks (docs/cost-model.md, "Which file host is"):
- `einc calibrate --machine` reports this machine (cores = os.cpu_count())
  and a cache file under $XDG_CACHE_HOME/einc/ (else ~/.cache/einc/; a
  relative XDG_CACHE_HOME is ignored, as the XDG spec says);
- without a cached profile, `host` is EINC_HW_DIR's host.json: exactly one
  warning naming both machines and the fix when it records another CPU
  model, one when it records none, no warning when it records this machine;
  the warning never fails the compile;
- a cached profile for this machine is used by default and by `--hw host`
  (--dump-cost names the file), with no warning, whatever host.json says; a
  broken one is skipped with one warning;
- with --calibrate: `einc calibrate --quick` without -o writes this machine's
  cache in well under a minute, the profile loads and carries the machine
  and AllReduce samples up to 32 MiB a device (the other kinds' to 8 MiB),
  and an executable built against it still reports measured vs predicted
  times under --profile.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "calibrate"))
from calib_common import check, finish, parse_profile, run  # noqa: E402

EXAMPLE = "ffw_tp.ein"
# `einc calibrate --quick` on the 2-core machine of docs/performance.md takes
# 30-41 s idle (docs/cost-model.md, "Calibration"), more under load; the
# issue asks for "well under a minute".
QUICK_LIMIT_S = 60
# The share of the cores the calibration must have had for its time to be
# judged (check_quick_calibration).
CORES_OURS = 0.75


def env_with(**kw):
    e = dict(os.environ)
    for k, v in kw.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def warnings(stderr):
    return [l for l in stderr.splitlines() if "warning" in l]


def write_profile(path, base, machine):
    """`base` (a profile dict) with "machine" set to `machine` (None: removed)."""
    d = dict(base)
    d.pop("machine", None)
    if machine is not None:
        d["machine"] = machine
    with open(path, "w") as f:
        json.dump(d, f)


def dump_cost(a, env, *extra):
    return run([a.einc, os.path.join(a.examples, EXAMPLE), "--dump-cost", *extra], env=env)


def header(stdout):
    """The profile line of --dump-cost: 'cost: NAME (PATH), mesh ...'."""
    return stdout.splitlines()[0] if stdout else ""


def machine_of(a, env):
    return json.loads(run([a.einc, "calibrate", "--machine"], env=env).stdout)


def check_resolution(a, tmp):
    cache_home = os.path.join(tmp, "cache")
    hw_dir = os.path.join(tmp, "hw")
    os.makedirs(hw_dir)
    env = env_with(XDG_CACHE_HOME=cache_home, EINC_HW_DIR=hw_dir)
    me = machine_of(a, env)
    here = me["machine"]
    check(here["cores"] == os.cpu_count(), "--machine: cores %r" % here["cores"])
    check(here["cpu_model"] and here["isa"], "--machine: cpu model and ISA known: %r" % here)
    check(me["cache"] == os.path.join(cache_home, "einc", "host-%s.json" % me["key"]),
          "--machine: cache path %r under XDG_CACHE_HOME" % me["cache"])
    check(me["cached"] is False, "--machine: nothing cached yet")
    # XDG: a relative XDG_CACHE_HOME is ignored; HOME/.cache is the fallback.
    home = os.path.join(tmp, "home")
    rel = machine_of(a, env_with(XDG_CACHE_HOME="relative/dir", HOME=home))
    check(rel["cache"] == os.path.join(home, ".cache", "einc", "host-%s.json" % me["key"]),
          "relative XDG_CACHE_HOME ignored: %r" % rel["cache"])

    with open(os.path.join(a.hw_dir, "host.json")) as f:
        base = json.load(f)
    host_json = os.path.join(hw_dir, "host.json")

    # Another CPU model: exactly one warning, naming both machines and the fix.
    other = dict(here, cpu_model="Imaginary CPU 9000 (family 99, model 9)")
    write_profile(host_json, base, other)
    for extra in ((), ("--hw", "host")):
        r = dump_cost(a, env, *extra)
        w = warnings(r.stderr)
        check(len(w) == 1, "other machine %s: one warning, got %r" % (extra, r.stderr))
        if w:
            check("Imaginary CPU 9000" in w[0] and me["description"] in w[0],
                  "the warning names both machines: %r" % w[0])
            check("einc calibrate --quick" in w[0] and me["cache"] in w[0],
                  "the warning names the fix and the cache file: %r" % w[0])
        check(host_json in header(r.stdout), "host.json used: %r" % header(r.stdout))
    # Another BLAS kernel set on the same CPU is another machine too.
    write_profile(host_json, base, dict(here, blas_core="NotThisKernel"))
    check(len(warnings(dump_cost(a, env).stderr)) == 1, "other BLAS kernel: one warning")
    # A profile given by path is the user's choice: no warning.
    r = dump_cost(a, env, "--hw", host_json)
    check(warnings(r.stderr) == [], "--hw PATH: no warning, got %r" % r.stderr)
    # No machine recorded: one warning.
    write_profile(host_json, base, None)
    r = dump_cost(a, env)
    w = warnings(r.stderr)
    check(len(w) == 1 and "does not say which machine" in w[0],
          "no machine recorded: one warning, got %r" % r.stderr)
    # This machine: silence.
    write_profile(host_json, base, here)
    r = dump_cost(a, env)
    check(r.stderr == "", "same machine: no warning, got %r" % r.stderr)

    # A cached profile of this machine wins over host.json, with no warning.
    write_profile(host_json, base, other)
    os.makedirs(os.path.dirname(me["cache"]))
    cached = dict(base)
    cached["peak_flops"] = dict(base["peak_flops"], f32=base["peak_flops"]["f32"] / 2)
    write_profile(me["cache"], cached, here)
    check(machine_of(a, env)["cached"] is True, "--machine: cached")
    for extra in ((), ("--hw", "host")):
        r = dump_cost(a, env, *extra)
        check(me["cache"] in header(r.stdout), "cache used %s: %r" % (extra, header(r.stdout)))
        check(r.stderr == "", "cache used %s: no warning, got %r" % (extra, r.stderr))
    # Other profiles by name are not affected by the cache.
    shutil.copy(os.path.join(a.hw_dir, "tpu-v5e.json"), hw_dir)
    r = dump_cost(a, env, "--hw", "tpu-v5e")
    check(r.stdout.startswith("cost: tpu-v5e"), "--hw tpu-v5e unaffected")
    # A broken cache file: skipped with one warning, host.json (this
    # machine's) used.
    write_profile(host_json, base, here)
    with open(me["cache"], "w") as f:
        f.write("{ not json")
    r = dump_cost(a, env)
    w = warnings(r.stderr)
    check(len(w) == 1 and "ignoring the cached profile" in w[0] and me["cache"] in w[0],
          "broken cache: one warning, got %r" % r.stderr)
    check(host_json in header(r.stdout), "broken cache: host.json used")


def check_quick_calibration(a, tmp):
    cache_home = os.path.join(tmp, "qcache")
    env = env_with(XDG_CACHE_HOME=cache_home, EINC_HW_DIR=a.hw_dir)
    me = machine_of(a, env)
    # The load from other processes before we start: calibration's own
    # devices add to it afterwards.
    others = os.getloadavg()[0] / os.cpu_count()
    t0, c0 = time.monotonic(), os.times()
    r = run([a.einc, "calibrate", "--quick"], env=env)
    took, c1 = time.monotonic() - t0, os.times()
    # The share of the cores the calibration's processes got: 0.93 idle on
    # the 2-core EPYC; about half when another calibration test started
    # beside it after the load above was read (65 s then).
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    share = cpu / (took * os.cpu_count())
    print("einc calibrate --quick: %.1f s (load average %.2f per core before, %.0f%% of the "
          "cores during)" % (took, others, 100 * share))
    if others <= 1.0 and share >= CORES_OURS:
        check(took < QUICK_LIMIT_S,
              "calibrate --quick took %.1f s (limit %d)" % (took, QUICK_LIMIT_S))
    else:
        # Every program it runs is slowed by the other processes' load;
        # the time says nothing about einc then.
        print("note: other processes keep the cores busy: the time is not judged")
    check(me["cache"] in r.stderr, "calibrate says where it wrote")
    check(os.path.exists(me["cache"]), "calibrate --quick wrote %s" % me["cache"])
    with open(me["cache"]) as f:
        prof = json.load(f)
    check(prof.get("machine") == me["machine"], "the profile records this machine")
    check(prof["calibration"]["rounds"] >= 2, "quick: at least 2 rounds")
    # Quick's AllReduce reaches 32 MiB a device, past the last-level cache,
    # as a model's activations do, and the other kinds stop at 8 MiB
    # (calibrate/programs.c, QUICK_LARGE_ABOVE), unless free memory caps
    # them (a note on stderr says so then).
    if "capped at" not in r.stderr:
        for kind, fit in prof["calibration"]["collectives"].items():
            sizes = sorted({s["buffer_bytes"] for s in fit["samples"] if s["runs"] == s["group"]})
            top = (32 if kind == "allreduce" else 8) << 20
            check(sizes and sizes[-1] == top,
                  "quick: %s samples up to %d MiB, got %s" % (kind, top >> 20, sizes))
    r = dump_cost(a, env)
    check(me["cache"] in header(r.stdout) and r.stderr == "",
          "the quick profile is host's, silently: %r %r" % (header(r.stdout), r.stderr))
    # An executable built against it still compares measured with predicted.
    exe = os.path.join(tmp, "ffw_tp")
    run([a.einc, os.path.join(a.examples, EXAMPLE), "-o", exe], env=env)
    out = run([exe, "--random-inputs", "1", "--profile", "--repeat", "2"], env=env).stdout
    rows = parse_profile(out)
    check(rows and all(r[3] is not None and r[3] > 0 for r in rows),
          "--profile: every op has a predicted time: %s" % out)
    check("hw profile 'host'" in out, "--profile names the profile")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--hw-dir", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--calibrate", action="store_true", help="run einc calibrate --quick")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="einc-host-")
    try:
        if a.calibrate:
            check_quick_calibration(a, tmp)
        else:
            check_resolution(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish("host_calibrate_quick" if a.calibrate else "host_profile")


if __name__ == "__main__":
    main()
