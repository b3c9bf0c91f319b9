#!/usr/bin/env python3
"""Memory as a choice on a declared mesh (issue 24, item 3;
driver/plan_declared.c; docs/propagation.md, "The memory row").

Compiles each `# expect-declared: ARGS | TEXT` line of the given .ein
files with `einc FILE --hw tpu-v5p ARGS -o EXE` and checks that einc
exits 0 and says TEXT on stderr: --zero=2 or --remat=layer chosen when
the plan fits only with it, the user's explicit --remat kept, and the
smallest change named when nothing fits.  `dp` in ARGS compiles the
program's DP variant instead (params replicated, AdamW).  Every figure a
line names is then checked against the cost pass: the chosen flags given
by hand print the same peak (`memory: peak ... GiB` of --dump-cost), and
a change the note names does fit.  Exits 1 on a failure.

usage: test_declared_memory.py --einc EINC [--quick] FILE...
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

GIB = 1024.0 ** 3


def dp_variant(text):
    """The program with its params replicated over the mesh (DP) and trained with AdamW."""
    text = re.sub(r"param (\w+)\[([^\]]*)\]", lambda m: f"param {m[1]}[{m[2].replace('_XYZ', '')}]", text)
    return re.sub(r"with sgd\(lr=[0-9.]+\)", "with adamw(lr=0.01)", text)


def peak_gib(einc, path, args):
    """The cost pass's peak per device (GiB) and whether it fits, with ARGS."""
    r = subprocess.run([einc, path, "--hw", "tpu-v5p", *args, "--dump-cost"], capture_output=True, text=True,
                       timeout=600)
    m = re.search(r"^memory: peak (\d+) bytes .*: (fits|does not fit)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"einc {' '.join(args)} --dump-cost: {r.returncode} {r.stderr[-500:]}")
    return int(m[1]) / GIB, m[2] == "fits"


def check_line(einc, src, args, want, work, fails):
    text = open(src).read()
    path = src
    if "dp" in args:
        args = [a for a in args if a != "dp"]
        path = os.path.join(work, "dp.ein")
        with open(path, "w") as fh:
            fh.write(dp_variant(text))
    exe = os.path.join(work, "exe")
    r = subprocess.run([einc, path, "--hw", "tpu-v5p", *args, "-o", exe], capture_output=True, text=True,
                       timeout=600)
    name = f"{os.path.basename(src)} {' '.join(args)}"
    if r.returncode != 0 or want not in r.stderr:
        fails.append(f"{name}: exit {r.returncode}, stderr does not say {want!r}:\n{r.stderr}")
        return
    # The figure of a choice is the cost pass's with the flag given by hand.
    m = re.search(r"fits only with (.*?), ([0-9.]+) GiB per device", r.stderr)
    if m:
        flags = [f for f in ("--zero=2", "--remat=layer") if f in m[1]]
        gib, fits = peak_gib(einc, path, args + flags)
        if not flags or not fits or abs(gib - float(m[2])) > 0.05 * gib:
            fails.append(f"{name}: chose {flags} at {m[2]} GiB; by hand {gib:.3g} GiB, fits {fits}")
    # A change the note names fits when made.
    for define, _ in re.findall(r"-D (\w+=\d+) \(([^)]*)\)", r.stderr):
        extra = ["--remat=layer"] if "with --remat=layer" in r.stderr else []
        gib, fits = peak_gib(einc, path, args + ["-D", define] + extra)
        if not fits:
            fails.append(f"{name}: the note's -D {define} does not fit ({gib:.3g} GiB)")
    print(f"ok {name}: {want}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--quick", action="store_true", help="the first line of each file (under the sanitizers)")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    fails = []
    with tempfile.TemporaryDirectory() as work:
        for src in a.files:
            lines = re.findall(r"^# expect-declared: ([^|]*)\| (.+)$", open(src).read(), re.M)
            for args, want in lines[:1] if a.quick else lines:
                check_line(a.einc, src, args.split(), want.strip(), work, fails)
    for f in fails:
        print("FAIL: " + f)
    print(f"{0 if fails else 1} passed, {1 if fails else 0} failed")
    return int(bool(fails))


if __name__ == "__main__":
    sys.exit(main())
