#!/usr/bin/env python3
"""README.md's tour, run: every command of its ```console blocks, and the
lines the README says it prints, checked against what it prints.

The convention (README.md follows it; this test refuses a README without
one such block):
  - a ```console block holds commands and their output;
  - a line starting with `$ ` is a command, run with bash from a scratch
    directory; a command ending in a backslash goes on on the next line;
  - the lines after a command, up to the next command, are what it prints
    on stdout, all of it and in order; a line that is only `...` stands for
    any number of lines (none included), and `...` inside a line for any
    text; blank lines at the end of a command's output are not part of it;
  - a command followed by no lines is checked for its exit status only;
  - numbers: integers must be equal, numbers with a fraction or an
    exponent within --rel-tol (default 5%: float sums of a trained loss
    differ by the machine's BLAS kernels and the order of the threads'
    reductions); a figure that depends on the machine (a time, a rate, a
    rounding error) is written `...` in the README.

Every command must exit with status 0.  The scratch directory holds a
symbolic link to each top-level entry of the source tree (examples/,
tests/, bench/, hw/, ...) and `build/einc`, a link to the einc under test,
so the README's paths work as written and what the commands write stays in
the scratch directory; XDG_CACHE_HOME is an empty directory in it, so the
default `--hw host` is the committed hw/host.json on any machine.  Commands skipped, with why: SKIPPED below.

    readme_tour.py --einc BUILD/einc [--mpi] [--readme README.md] [--expect-fail]

Exit status 0 when every command ran and printed what the README says, 1
otherwise (each failure printed with the command, the expected and the
actual lines).  With --expect-fail (the rules' own test, on
tests/docs/fixtures/tour_wrong.md) the reverse: 0 only when every command
fails its check.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# Commands of the tour not run here, by their start, and why.  Not in a
# console block, so not run either: README's two setup commands
# (./quickstart.sh installs packages on a fresh machine, ./test.sh is the
# whole 40-minute suite this test is part of) and the serving section's
# server (it runs until stopped; tests/e2e tests --serve).
SKIPPED = {
    "build/einc calibrate": "rewrites the committed hw/host.json from minutes of timing "
                            "runs; tests/costmodel and tests/calibrate test calibration",
}
# Run only when einc was built with the MPI runtime (--mpi).
NEEDS_MPI = ("mpirun ", "build/einc examples/ffw_fsdp_tp.ein --runtime=mpi")

NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
TIMEOUT_S = 300


def blocks(readme, name):
    """The (line number, lines) of each ```console block of readme's text
    (from file name)."""
    out, cur, start = [], None, 0
    for n, line in enumerate(readme.splitlines(), 1):
        if cur is None and line.strip() == "```console":
            cur, start = [], n
        elif cur is not None and line.strip() == "```":
            out.append((start, cur))
            cur = None
        elif cur is not None:
            cur.append(line)
    if cur is not None:
        raise SystemExit(f"{name}:{start}: ```console block never closed")
    return out


def steps(start, lines, name):
    """The (line number, command, expected lines) of one block of file name."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if line.strip():
                raise SystemExit(f"{name}:{start + 1 + i}: output before any command: {line!r}")
            i += 1
            continue
        where, cmd = start + 1 + i, line[2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        while expected and not expected[-1].strip():
            expected.pop()
        out.append((where, cmd, expected))
    return out


def pattern(line):
    """A regex for one expected line and the numbers it captures, as the
    README writes them; `...` is any text."""
    parts, wants = [], []
    for piece in re.split(r"(\.\.\.)", line.rstrip()):
        if piece == "...":
            parts.append(".*?")
            continue
        pos = 0
        for m in re.finditer(NUMBER, piece):
            # A number glued to a letter before it ("f32", "v5e") is text.
            if m.start() > 0 and (piece[m.start() - 1].isalpha() or piece[m.start() - 1] == "_"):
                continue
            parts.append(re.escape(piece[pos:m.start()]))
            parts.append("(" + NUMBER + ")")
            wants.append(m.group())
            pos = m.end()
        parts.append(re.escape(piece[pos:]))
    return re.compile("".join(parts) + r"\s*"), wants


def line_matches(exp, got, rel_tol):
    """Whether output line got is what expected line exp says."""
    rx, wants = pattern(exp)
    m = rx.fullmatch(got)
    if not m:
        return False
    for want, have in zip(wants, m.groups()):
        if re.fullmatch(r"[-+]?\d+", want):
            if have != want:
                return False
        elif abs(float(have) - float(want)) > rel_tol * abs(float(want)):
            return False
    return True


def output_matches(expected, got, rel_tol):
    """Whether the lines got are what the expected lines say, all of them."""
    memo = {}

    def go(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(expected):
            r = j == len(got)
        elif expected[i].strip() == "...":
            r = any(go(i + 1, k) for k in range(j, len(got) + 1))
        else:
            r = j < len(got) and line_matches(expected[i], got[j], rel_tol) and go(i + 1, j + 1)
        memo[(i, j)] = r
        return r

    sys.setrecursionlimit(max(10000, 4 * (len(expected) + len(got))))
    return go(0, 0)


def scratch(work, einc):
    """Fills work with links to the source tree and build/einc."""
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "build") and not entry.name.startswith("build-"):
            (work / entry.name).symlink_to(entry)
    (work / "build").mkdir()
    (work / "build" / "einc").symlink_to(Path(einc).resolve())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True, help="the einc under test")
    ap.add_argument("--mpi", action="store_true", help="einc has the MPI runtime: run mpirun too")
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--rel-tol", type=float, default=0.05)
    ap.add_argument("--expect-fail", action="store_true",
                    help="the rules' own test: succeed only if every command fails its check")
    a = ap.parse_args()
    name = Path(a.readme).name
    all_steps = [s for start, lines in blocks(Path(a.readme).read_text(), name) for s in steps(start, lines, name)]
    if not all_steps:
        print("README.md has no ```console block with a `$ ` command: nothing to check")
        return 1
    env = dict(os.environ)
    # mpirun as root needs these, and 4 ranks on a 2-core machine need oversubscription.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    failures, ran, skipped = 0, 0, []
    with tempfile.TemporaryDirectory(prefix="readme-tour-") as tmp:
        work = Path(tmp)
        scratch(work, a.einc)
        # An empty cache: `--hw host` (the default) is then the committed
        # hw/host.json, not a calibration of the machine that runs the test.
        env["XDG_CACHE_HOME"] = str(work / "cache")
        for where, cmd, expected in all_steps:
            why = next((w for p, w in SKIPPED.items() if cmd.startswith(p)), None)
            if why is None and not a.mpi and cmd.startswith(NEEDS_MPI):
                why = "einc was built without the MPI runtime"
            if why:
                skipped.append((where, cmd, why))
                continue
            try:
                r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                print(f"FAIL {name}:{where}: `{cmd}` ran over {TIMEOUT_S} s")
                failures += 1
                continue
            ran += 1
            got = r.stdout.splitlines()
            if r.returncode != 0:
                print(f"FAIL {name}:{where}: `{cmd}` exited with {r.returncode}\n"
                      f"stderr:\n{r.stderr[-2000:]}")
                failures += 1
            elif expected and not output_matches(expected, got, a.rel_tol):
                print(f"FAIL {name}:{where}: `{cmd}` printed other lines than the README's\n"
                      "--- README says:\n" + "\n".join(expected) +
                      "\n--- it printed:\n" + "\n".join(got[:60]) +
                      (f"\n({len(got) - 60} more lines)" if len(got) > 60 else "") +
                      ("\n--- stderr:\n" + r.stderr[-1000:] if r.stderr else ""))
                failures += 1
            else:
                print(f"ok   {name}:{where}: {cmd[:100]}")
    for where, cmd, why in skipped:
        print(f"skip {name}:{where}: {cmd[:80]} ({why})")
    print(f"{ran} commands run, {failures} failed, {len(skipped)} skipped")
    if a.expect_fail:
        return 0 if ran and failures == ran else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
