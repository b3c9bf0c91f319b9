"""Helpers shared by the benchmark scripts of bench/ (docs/performance.md).

Benchmarks are run by hand, never by CTest.  Each script builds its C
programs with `cc`/`mpicc` into BUILD/bench-bin (BUILD is an einc build tree,
`--build`, default $EINC_BUILD or ./build), runs them, reads their
`RESULT key=value ...` lines and prints a table of ratios against a baseline
measured in the same run.  With `--json FILE` a script also writes its
headline figures as JSON (`Results`, below): bench/perfdoc.py turns the
files of bench/results/ into docs/performance.md.
"""

import argparse
import datetime
import json
import shlex
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
# The 1-minute load average when the script started (this module is imported
# first): what other jobs were running.  Read at the end instead, it would
# count the benchmark's own threads (a 2-device run alone gives about 2 on
# 2 cores) and label even a quiet run loaded.
LOAD_AT_START = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
CFLAGS = ["-O2", "-std=c17", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE",
          "-Wall", "-Wextra", "-Werror"]


class BenchError(Exception):
    """A benchmark could not be built or run; the message says why."""


def parser(description, json_results=True):
    """An argument parser with the options every script takes: --build, and
    --json unless json_results is False (a script that writes no results file
    must not accept the option and ignore it)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--build", default=os.environ.get("EINC_BUILD", str(ROOT / "build")),
                   help="einc build tree holding runtime/libeinrt.a and driver/einc "
                        "(default $EINC_BUILD or ./build)")
    if json_results:
        add_json_option(p)
    return p


def add_json_option(p):
    """Adds --json FILE to argparse parser p (for the scripts with their own parser)."""
    p.add_argument("--json", metavar="FILE",
                   help="also write the headline figures to FILE as JSON "
                        "(bench/results/<bench>.json feeds docs/performance.md)")


def cpu_model():
    """The 'model name' of /proc/cpuinfo's first CPU with its family and model
    ("AMD EPYC (family 26, model 2)", as `einc calibrate` names the machine),
    or '?' where there is none.  The family and model are what tell CPUs
    apart under a VM, whose model name is often just "AMD EPYC"."""
    fields = {}
    try:
        for line in open("/proc/cpuinfo"):
            if not line.strip():
                break  # the first CPU's block ends at its blank line
            key, _, val = line.partition(":")
            fields[key.strip()] = val.strip()
    except OSError:
        pass
    name = fields.get("model name", "?")
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


# Options whose values are paths on the machine that ran: shown as these words.
_LOCAL_PATHS = {"--build": "BUILD", "--einc": "BUILD/einc", "--json": None}


def command_line(script, argv):
    """The command that ran bench/SCRIPT.py with argv, for a results file: the
    values of --build and --einc become BUILD and BUILD/einc, --json is left
    out (both name local paths that mean nothing on another machine), and
    OPENBLAS_CORETYPE, when set, is shown in front as it was."""
    out, pending = ["python3", f"bench/{script}.py"], None
    if "OPENBLAS_CORETYPE" in os.environ:  # GEMM speed depends on it (performance-history.md)
        out.insert(0, "OPENBLAS_CORETYPE=" + shlex.quote(os.environ["OPENBLAS_CORETYPE"]))
    for arg in argv:
        if pending is not None:
            if _LOCAL_PATHS[pending] is not None:
                out += [pending, _LOCAL_PATHS[pending]]
            pending = None
            continue
        name = arg.split("=", 1)[0]
        if name in _LOCAL_PATHS:
            if "=" in arg:
                if _LOCAL_PATHS[name] is not None:
                    out += [name, _LOCAL_PATHS[name]]
            else:
                pending = name
            continue
        out.append(shlex.quote(arg))
    return " ".join(out)


# Above this much drift, in percent (Results.drift), a run is labelled
# drifted: the machine itself moved away from its figures (bench/perfdoc.py).
DRIFT_PERCENT = 10


class Results:
    """The machine-readable result of one benchmark run, written by --json.

    The file holds: `bench` (the script's name without .py), `title`, the
    `command` as run (`command_line`), `cpu` (/proc/cpuinfo's model name),
    `cores` (os.cpu_count()), `date` (UTC, ISO 8601 to the minute), `load`
    (the 1-minute load average when the script started, LOAD_AT_START: the
    other jobs sharing the machine, not the benchmark's own threads),
    `load_at` ("start") and `rows`: one dict per headline figure with `figure` (what was
    measured), `value` (a number), `unit`, `target` (text such as ">= 0.9x",
    "" when the figure has none), `ratio` (to the baseline measured in the
    same run; None when the figure is not a ratio to one) and `verdict`
    ("ok", "MISS" or "-" when there is no target).  bench/perfdoc.py --check
    refuses a file that lacks one of these fields.  Optional: `drift`, in
    percent, how far a probe of the machine was from the figures the run
    relies on (bench/cost_accuracy.py's drift probe), when it measures one.
    """

    def __init__(self, bench, title, script=None):
        """bench names the results file; script is bench/SCRIPT.py (default: bench)."""
        self.bench = bench
        self.title = title
        self.script = script or bench
        self.rows = []
        self.drift = None

    def add(self, figure, value, unit, target="", ratio=None, verdict="-"):
        """Records one figure; value and ratio are numbers (ratio may be None)."""
        self.rows.append({"figure": figure, "value": value, "unit": unit, "target": target,
                          "ratio": ratio, "verdict": verdict})

    def write(self, path, argv=None):
        """Writes the JSON to path (nothing when path is None)."""
        if path is None:
            return
        argv = list(sys.argv[1:] if argv is None else argv)
        doc = {"bench": self.bench, "title": self.title,
               "command": command_line(self.script, argv),
               "cpu": cpu_model(), "cores": os.cpu_count(),
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
               "load": LOAD_AT_START, "load_at": "start",
               "rows": self.rows}
        if self.drift is not None:
            doc["drift"] = self.drift
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


def main_guard(fn):
    """Runs fn(); a BenchError is printed as one line and exit status 1."""
    try:
        fn()
    except BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        sys.exit(1)


def machine():
    """One line about the machine, printed above every table."""
    model = cpu_model()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    core = os.environ.get("OPENBLAS_CORETYPE", "(unset)")
    return (f"# machine: {model}, {os.cpu_count()} cores, {platform.system()} "
            f"{platform.release()}; OPENBLAS_CORETYPE={core}; load average {load:.2f}")


def bin_dir(build):
    d = Path(build) / "bench-bin"
    d.mkdir(parents=True, exist_ok=True)
    return d


def einrt_lib(build, mpi=False):
    """Path of the runtime library in the build tree; BenchError if not built."""
    name = "libeinrt_mpi.a" if mpi else "libeinrt.a"
    lib = Path(build) / "runtime" / name
    if not lib.exists():
        raise BenchError(f"{lib} not found: build einc first "
                         f"(cmake -S {ROOT} -B {build} -DCMAKE_BUILD_TYPE=Release && "
                         f"cmake --build {build} --target einrt einc)")
    return lib


def einc(build):
    for exe in (Path(build) / "einc", Path(build) / "driver" / "einc"):
        if exe.exists():
            return exe
    raise BenchError(f"{build}/einc not found: build einc first "
                     f"(cmake --build {build} --target einc einrt einrt_mpi)")


def compile_c(build, name, sources, mpi=False, libs=(), runtime=False):
    """Builds BUILD/bench-bin/NAME from bench/SOURCES (rebuilt when older
    than a source or the runtime library); returns the path."""
    if not Path(build).is_dir():
        raise BenchError(f"build tree {build} does not exist (--build)")
    srcs = [BENCH / s for s in sources]
    deps = list(srcs) + [BENCH / "bench_util.h"]
    args = []
    if runtime:
        lib = einrt_lib(build)
        deps += [lib, ROOT / "runtime" / "rt_internal.h"]
        # The libraries the runtime needs, as codegen/link.c links an executable
        # (the HTTP server's libmicrohttpd and cJSON, glibc's vector math).
        args += ["-I", str(ROOT / "runtime"), str(lib), "-lmicrohttpd", "-lcjson", "-lmvec"]
    out = bin_dir(build) / name
    cc = "mpicc" if mpi else os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise BenchError(f"compiler '{cc}' not found")
    if out.exists() and all(out.stat().st_mtime >= d.stat().st_mtime for d in deps):
        return out
    cmd = [cc, *CFLAGS, "-I", str(BENCH), *map(str, srcs), *args, *libs,
           "-lopenblas", "-lpthread", "-lm", "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"building {name} failed:\n{' '.join(cmd)}\n{r.stderr}")
    return out


def mpirun(nranks):
    """The mpirun prefix for nranks ranks on this machine (root needs two flags)."""
    cmd = ["mpirun", "--oversubscribe", "-np", str(nranks)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd


def run(cmd, timeout=1800, env=None):
    """Runs cmd; returns its stdout.  BenchError with stderr on failure."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                           timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout} s: {' '.join(map(str, cmd))}")
    if r.returncode != 0:
        raise BenchError(f"failed (status {r.returncode}): {' '.join(map(str, cmd))}\n"
                         f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def _value(v):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def results(text):
    """The RESULT lines of a benchmark's output as dicts (numbers converted)."""
    out = []
    for line in text.splitlines():
        if line.startswith("RESULT "):
            out.append({k: _value(v) for k, v in
                        (kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)})
    return out


def median_ms(text):
    """The 'median time per run: X ms' of an einc executable's --repeat, in ms."""
    m = re.search(r"median time per run: ([0-9.]+) ms", text)
    if not m:
        raise BenchError(f"no 'median time per run' in the output:\n{text[-1000:]}")
    return float(m.group(1))


def median_run_ms(exe, repeat):
    """Runs einc executable `exe` on random inputs `repeat` times; its median ms per run."""
    return median_ms(run([exe, "--random-inputs", "1", "--repeat", str(repeat)]))


def sizes(defaults, overrides):
    """The dims of `defaults` with the NAME=VALUE strings of `overrides` (-D)
    applied, and the einc -D flags that set them all."""
    dims = dict(defaults)
    for d in overrides:
        k, v = d.split("=")
        dims[k] = int(v)
    return dims, [x for k, v in dims.items() for x in ("-D", "%s=%d" % (k, v))]


def human_bytes(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def table(headers, rows):
    """Prints rows (lists of str/number) under headers as a Markdown table."""
    cells = [[h for h in headers]] + [[fmt(c) for c in r] for r in rows]
    width = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.rjust(width[i]) for i, c in enumerate(r)) + " |"
    print(line(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in width) + "|")
    for r in cells[1:]:
        print(line(r))
    sys.stdout.flush()


def fmt(c):
    if isinstance(c, float):
        return f"{c:.3g}" if abs(c) < 100 else f"{c:.0f}"
    return str(c)


def verdict(ratio, target, higher_is_better=True):
    ok = ratio >= target if higher_is_better else ratio <= target
    return "ok" if ok else "MISS"
