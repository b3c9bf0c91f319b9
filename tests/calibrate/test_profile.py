#!/usr/bin/env python3
"""test_profile.py - an executable's --profile prints every op with measured,
predicted and error columns.

ffw_tp.ein (and matmul_case3_reducescatter.ein) is compiled with --hw tpu-v5e
and without --hw (the default for -o is the host profile); for each: the
table has one row per op of --dump-ir, named as --dump-ir names it
("In.1 = AllGather_Y In"), every row has calls = --repeat, a positive
measured time, the prediction of --dump-cost for that op and profile, and
error = (predicted - measured) / measured; the header names the profile;
and a last line gives the measured peak memory of a device, at least the
params and inputs that --dump-cost counts as resident.  On tpu-v5e ffw_tp.ein
runs at B = 1024, F = 4096, seed 000's TP regime (at its own B = 4096,
F = 1024 the planner shards the batch over Y there, as seed 000's
X_opt = sqrt(B N / F) says to), so that its TP collectives are named.
"""
import argparse
import math
import os
import re
import tempfile

from calib_common import check, finish, parse_profile, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tp_regime = ["-D", "B=1024", "-D", "F=4096"]
        for name, hw, dims in (("ffw_tp.ein", "tpu-v5e", tp_regime), ("ffw_tp.ein", None, []),
                               ("matmul_case3_reducescatter.ein", None, [])):
            ex = os.path.join(a.examples, name)
            exe = os.path.join(tmp, "prog")
            run([a.einc, ex, "-o", exe, "--meshslice=off"] + dims + (["--hw", hw] if hw else []))
            out = run([exe, "--random-inputs", "3", "--profile", "--repeat", "3"]).stdout
            hdr = [l for l in out.splitlines() if l.startswith("profile (")]
            check(len(hdr) == 1 and "hw profile '%s'" % (hw or "host") in hdr[0],
                  "%s: header names the profile %s" % (name, hw or "host"))
            check(re.search(r"^\s+op\s+calls\s+measured_ms\s+predicted_ms\s+error\s+name$", out,
                            re.M) is not None, "%s: column header" % name)
            rows = parse_profile(out)
            labels = [r[5] for r in rows]
            cost = run([a.einc, ex, "--meshslice=off", "--dump-cost", "--dump-ir"] + dims +
                       ["--hw", hw or "host"]).stdout
            # Every op of the IR (its result name) appears, in order.
            results = re.findall(r"^(\S+)\[[^\n]*? = ", cost, re.M)
            results = [r for r in results if not r.startswith(("input", "param", "output"))]
            got = [l.split(" = ")[0] for l in labels]
            check(got == results, "%s: one row per op in order: %s vs %s" % (name, got, results))
            pred = {}
            for line in cost.splitlines():
                f = line.split()
                if len(f) == 10 and re.match(r"^[0-9.e+-]+$", f[8]):
                    pred[f[0]] = float(f[8]) * 1e-3
            for op, calls, meas, p, err, label in rows:
                res = label.split(" = ")[0]
                check(calls == 3, "%s %s: 3 calls" % (name, label))
                check(meas > 0, "%s %s: measured > 0" % (name, label))
                if not check(p is not None and err is not None, "%s %s: predicted and error" %
                             (name, label)):
                    continue
                if res in pred:
                    check(math.isclose(p, pred[res], rel_tol=2e-3, abs_tol=1e-4),
                          "%s %s: predicted %.4f ms is --dump-cost's %.4f ms" % (name, label, p,
                                                                               pred[res]))
                # Both times are printed to 0.1 us, so a short op's error is
                # known only to the interval those roundings leave.
                h = 0.5e-4
                lo = 100 * (p - h - (meas + h)) / (meas + h)
                hi = 100 * (p + h - (meas - h)) / max(meas - h, 1e-12)
                check(lo - 0.05 - 1e-3 * abs(err) <= err <= hi + 0.05 + 1e-3 * abs(err),
                      "%s %s: error column %.1f%% outside [%.1f, %.1f] for predicted %.4f "
                      "measured %.4f" % (name, label, err, lo, hi, p, meas))
            kinds = {l.split(" = ")[1].split()[0] for l in labels}
            if name == "ffw_tp.ein":
                check({"AllGather_Y", "Einsum", "Elementwise", "ReduceScatter_Y"} <= kinds,
                      "ffw_tp: collectives and compute named with their axes: %s" % kinds)
            # The last row adds the ops up per run (each op's calls per run).
            check(re.search(r"^\s+run\s+[0-9.]+\s+[0-9.]+\s+[-+0-9.]+%$", out, re.M) is not None,
                  "%s: per-run row" % name)
            # The measured peak: at least the device's params and inputs
            # (--dump-cost's resident part), which stay allocated.
            m = re.search(r"^peak memory per device: max (\d+) bytes \(device \d+\)$", out, re.M)
            res = re.search(r"^memory: .*\(params ([0-9.e+-]+) GiB, inputs ([0-9.e+-]+) GiB", cost,
                            re.M)
            if check(m is not None and res is not None, "%s: a peak memory line" % name):
                resident = (float(res.group(1)) + float(res.group(2))) * 2 ** 30
                check(int(m.group(1)) >= 0.999 * resident, "%s: measured peak %s bytes >= the "
                      "resident %.0f bytes" % (name, m.group(1), resident))
    finish("test_profile")


if __name__ == "__main__":
    main()
