#!/usr/bin/env python3
"""The plan's certificate (docs/propagation.md, "Certified plans").

For every example, `einc --dump-ir=json` must carry a `plan` whose
objective is at least the best the ILP proved and at least the cost pass's
lower bound (`totals.lower_bound`), and whose text says so in the form the
docs give.  Small programs must be proven optimal.  `--explain` and
`--dump-cost` print the same sentence; `--ilp=off` says the plan is not
proven; a bad `--ilp` value is refused.  Exits 1 on the first failure.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

TEXT = re.compile(r"^plan [0-9.e+]+ (us|ms|s) \(compute and reshards in sequence\), "
                  r"(proven optimal among [0-9,]+ candidate layouts|better than the proven optimum of [0-9,]+ "
                  r"candidate layouts|within [0-9.]+% of the best among [0-9,]+ "
                  r"candidate layouts|not proven \(.+\)|seed 000's [A-Za-z+ ]+ from the strategy portfolio, kept "
                  r"for its shorter step with parameter gathers overlapped; ([0-9.]+% (below|above)|equal to) "
                  r"the ILP's|seed 000's [A-Za-z+ ]+ from the strategy portfolio, .*; not proven against)")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    args = ap.parse_args()
    n = 0
    for path in sorted(glob.glob(os.path.join(args.examples, "*.ein"))):
        for hw in ("host", "tpu-v5p", "tpu-v5e"):
            r = run([args.einc, path, "--hw", hw, "--dump-ir=json"])
            check(r.returncode == 0, f"{path} on {hw}: {r.stderr}")
            d = json.loads(r.stdout)
            p, t = d["plan"], d["totals"]
            name = f"{os.path.basename(path)} on {hw}"
            check(TEXT.match(p["text"]), f"{name}: certificate text '{p['text']}'")
            if p["proof"] != "unproven" and "better than" not in p["text"] and "% below the ILP" not in p["text"]:
                check(p["objective"] >= p["best"] * (1 - 1e-6), f"{name}: objective {p['objective']} below the "
                      f"proven best {p['best']}")
            if "lower_bound" in t:
                check(0 < t["lower_bound"] <= p["objective"] * (1 + 1e-9),
                      f"{name}: lower bound {t['lower_bound']} above the plan {p['objective']}")
                check("lower bound" in p["text"] and "plan/bound" in p["text"], f"{name}: no bound in '{p['text']}'")
            ops = sum(1 for o in d["ops"] if o["op"] in ("Einsum", "Elementwise"))
            if ops <= 8:
                check(p["proof"] == "optimal", f"{name}: a {ops}-op program is not proven optimal: {p['text']}")
            n += 1
    ex = os.path.join(args.examples, "ffw_fsdp_tp.ein")
    for flag in ("--explain", "--dump-cost"):
        r = run([args.einc, ex, "--hw", "tpu-v5p", flag])
        check(r.returncode == 0 and re.search(r"plan .* proven optimal among .*; lower bound .* \(plan/bound",
                                              r.stdout), f"{flag} prints no certificate:\n{r.stdout[:2000]}")
    r = run([args.einc, ex, "--ilp=off", "--dump-ir=json"])
    check(r.returncode == 0 and "not proven (--ilp=off)" in json.loads(r.stdout)["plan"]["text"],
          "--ilp=off does not say the plan is unproven")
    for bad in ("--ilp=fast", "--ilp=0", "--ilp=-1", "--ilp="):
        r = run([args.einc, ex, bad, "--dump-ir"])
        check(r.returncode != 0 and "--ilp wants on, off or a time limit" in r.stderr,
              f"{bad} is not refused clearly: {r.returncode} {r.stderr}")
    print(f"{n} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
