#!/usr/bin/env python3
"""Benchmark 4: compile time of the examples and peak memory per device.

Compile time: for each examples/*.ein, the median wall time (and CPU time of
einc and its children, e.g. the linker) of --reps runs of
    einc FILE -o EXE                 (whole pipeline: frontend, passes, LLVM -O3,
                                      object emission, link; target < 200 ms)
    einc FILE -c -o OBJ              (the same without the link)
    einc FILE --dump-ir > /dev/null  (frontend + passes alone)

Peak memory: the --memory example (default examples/llama2_ffw.ein) is
compiled and run with `--random-inputs 1 --stats`; the runtime's peak
rt_alloc bytes per device (inputs, outputs and scratch) is compared with the
largest sum of live shards per device, computed from `--dump-ir=json`: the
inputs and the outputs are live for the whole run (the runtime allocates
them before the program starts), every other value from the op that defines
it to its last use.  Ratio = peak / that bound; target <= 1.3.  The
process's max RSS divided by the devices is printed too: it also counts what
rt_alloc does not (the root's global outputs, OpenBLAS buffers, stacks).

    python3 bench/compile_time.py --build BUILD [--reps 5] [--memory FILE.ein] [--json FILE]
                                  [--only NAME ...] [--no-memory]
    python3 bench/compile_time.py --build BUILD --baseline OTHER_EINC [--reps 5]
                                  [--only NAME ...] [--extra FILE.ein ...]

--baseline compares the front half with another einc binary (e.g. one built
from the commit before a change) instead: for each example, `--dump-ir` and
`--dump-ir=json` of both must be byte-identical, and the ratio is this
einc's median CPU time of `--dump-ir` over the baseline's, the two timed in
alternation in the same run (ratio > 1: this einc is slower).  --extra adds
a program outside examples/ (e.g. tests/fuzz/long_chain.py's chain).

--only keeps the examples whose file name contains NAME (repeatable).  The
time of `einc --help` (loading einc and libLLVM, no compile) is printed too:
it is in every row, and no compile can be faster.
"""
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import benchlib as bl


def timed(cmd, reps):
    """Median wall seconds and median CPU seconds (user + system of einc and
    the processes it starts, e.g. the linker) of reps runs of cmd (stdout
    discarded); BenchError on failure.  CPU time is what a shared machine's
    load does not inflate much; wall time is what a user waits."""
    wall, cpu = [], []
    for _ in range(reps):
        u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run([str(c) for c in cmd], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        wall.append(time.perf_counter() - t0)
        u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime)
        if r.returncode != 0:
            raise bl.BenchError(f"failed: {' '.join(map(str, cmd))}\n{r.stderr[-2000:]}")
    return statistics.median(wall), statistics.median(cpu)


def run_rss(cmd):
    """Runs cmd; returns (stdout, max resident set size in bytes of that process)."""
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read()
        if proc.returncode != 0:
            raise bl.BenchError(f"failed: {' '.join(map(str, cmd))}\n{text[-1000:]}"
                                f"{err.read()[-1000:]}")
    return text, usage.ru_maxrss * 1024


def live_bound(ir):
    """Largest sum of live per-device shard bytes over the ops of IR (JSON dump)."""
    ops = ir["ops"]
    size, last = {}, {}
    for v in ir["inputs"]:
        size[v["name"]] = v["bytes_per_device"]
    for i, op in enumerate(ops):
        for o in op["operands"]:
            size.setdefault(o["name"], o["bytes_per_device"])
            last[o["name"]] = i
        res = op["result"]
        size[res["name"]] = res["bytes_per_device"]
        last.setdefault(res["name"], i)
    always = {v["name"] for v in ir["inputs"]} | {v["name"] for v in ir["outputs"]}
    base = sum(size[n] for n in always)
    best = base
    for i in range(len(ops)):
        live = base
        for j, op in enumerate(ops[:i + 1]):
            n = op["result"]["name"]
            if n not in always and last[n] >= i:
                live += size[n]
        best = max(best, live)
    return best, base


def against_baseline(einc, base, examples, reps):
    """The --baseline table: identical dumps and CPU ratios of --dump-ir."""
    rows, ratios = [], []
    for ex in examples:
        for fmt in ("--dump-ir", "--dump-ir=json"):
            mine, theirs = bl.run([einc, ex, fmt]), bl.run([base, ex, fmt])
            if mine != theirs:
                raise bl.BenchError(f"{ex.name}: {fmt} differs from the baseline's")
        cpu_new, cpu_base = [], []
        for _ in range(reps):  # alternate, so both see the same load
            cpu_base.append(timed([base, ex, "--dump-ir"], 1)[1])
            cpu_new.append(timed([einc, ex, "--dump-ir"], 1)[1])
        b, n = statistics.median(cpu_base), statistics.median(cpu_new)
        ratios.append(n / b if b > 0 else 1.0)
        rows.append([ex.name, "identical", f"{1e3 * b:.0f}", f"{1e3 * n:.0f}", f"{ratios[-1]:.2f}"])
    print(f"\n## --dump-ir against the baseline {base}, median CPU ms of {reps} alternating runs\n")
    bl.table(["example", "dumps (text, json)", "baseline CPU", "this CPU", "ratio"], rows)
    print(f"\ngeometric mean ratio: {statistics.geometric_mean(ratios):.3f}")


def main():
    p = bl.parser(__doc__)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--memory", default=str(bl.ROOT / "examples" / "llama2_ffw.ein"))
    p.add_argument("--no-memory", action="store_true", help="skip the peak memory part")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="only the examples whose file name contains NAME")
    p.add_argument("--extra", action="append", default=[], metavar="FILE",
                   help="also this .ein file (repeatable)")
    p.add_argument("--baseline", metavar="EINC",
                   help="compare --dump-ir output and CPU time with this einc binary instead")
    a = p.parse_args()
    einc = bl.einc(a.build)
    examples = [ex for ex in sorted((bl.ROOT / "examples").glob("*.ein"))
                if not a.only or any(n in ex.name for n in a.only)] + [Path(x) for x in a.extra]
    if not examples:
        raise bl.BenchError(f"no matching .ein files in {bl.ROOT / 'examples'}")
    print(bl.machine())
    if a.baseline:
        against_baseline(einc, Path(a.baseline), examples, a.reps)
        return
    start, start_cpu = timed([einc, "--help"], a.reps)
    print(f"\neinc --help (process start, no compile): {1e3 * start:.1f} ms wall, "
          f"{1e3 * start_cpu:.0f} ms CPU")
    rows = []
    res = bl.Results("compile_time", "Compile time and peak memory")
    with tempfile.TemporaryDirectory() as tmp:
        for ex in examples:
            exe = Path(tmp) / ex.stem
            full, full_cpu = timed([einc, ex, "-o", exe], a.reps)
            obj, obj_cpu = timed([einc, ex, "-c", "-o", exe.with_suffix(".o")], a.reps)
            front, front_cpu = timed([einc, ex, "--dump-ir"], a.reps)
            rows.append([ex.name, f"{1e3 * full:.1f}", bl.verdict(full, 0.2, False),
                         f"{1e3 * full_cpu:.0f}", f"{1e3 * obj:.1f}", f"{1e3 * obj_cpu:.0f}",
                         f"{1e3 * front:.1f}", f"{1e3 * front_cpu:.0f}"])
            res.add(f"einc -o {ex.name}", round(1e3 * full, 1), "ms wall", "< 200 ms",
                    None, bl.verdict(full, 0.2, False))
        print(f"\n## compile time, median of {a.reps} runs (wall ms; CPU ms = user + system)\n")
        bl.table(["example", "einc -o", "<200ms", "CPU", "einc -c", "CPU", "--dump-ir", "CPU"],
                 rows)

        mem = Path(a.memory)
        if a.no_memory:
            res.write(a.json)
            return
        if not mem.exists():
            print(f"\n(no {mem}: peak memory not measured)")
            res.write(a.json)
            return
        ir = json.loads(bl.run([einc, mem, "--dump-ir=json"]))
        bound, base = live_bound(ir)
        exe = Path(tmp) / "memory"
        bl.run([einc, mem, "-o", exe])
        out, rss = run_rss([exe, "--random-inputs", "1", "--stats"])
        peaks = [int(v) for v in re.findall(r"device \d+: peak (\d+) bytes", out)]
        if not peaks:
            raise bl.BenchError(f"no peak memory in the output of --stats:\n{out[-1000:]}")
        mib = lambda b: f"{b / 2**20:.1f}"
        mesh = ", ".join(f"{m['name']}={m['size']}" for m in ir["mesh"])
        print(f"\n## peak memory per device, {mem.name} (mesh {mesh})\n")
        bl.table(["device", "peak MiB", "live-shard bound MiB", "inputs+outputs MiB",
                  "ratio", "<=1.3x"],
                 [[d, mib(pk), mib(bound), mib(base), f"{pk / bound:.2f}",
                   bl.verdict(pk / bound, 1.3, False)] for d, pk in enumerate(peaks)])
        worst = max(peaks)
        res.add(f"peak memory of the largest device, {mem.name} (mesh {mesh})",
                round(worst / 2**20, 1), "MiB", "<= 1.3x live shards", worst / bound,
                bl.verdict(worst / bound, 1.3, False))
        print(f"\nwhole process (threads backend, {len(peaks)} devices, plus the global "
              f"outputs, BLAS buffers and thread stacks): max RSS {mib(rss)} MiB = "
              f"{mib(rss / len(peaks))} MiB per device, {rss / len(peaks) / bound:.2f}x the bound")
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
