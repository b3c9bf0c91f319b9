#!/usr/bin/python3
"""soak.py - resident memory over many runs of one executable stays flat.

Compiles an example (default: the LLaMA-2 decoder layer at its check-with
sizes, which uses every kind of op: GEMMs, softmax, gather-free attention,
AllGather / ReduceScatter / AllReduce) and runs it with `--repeat N` on the
threads runtime (one process) and, with --mpi, on MPI ranks.  While it runs,
the resident set (VmRSS from /proc, summed over the ranks under MPI) is
sampled every 50 ms.  Warm-up is the first 10% of the wall time (start-up,
first touch of buffers, the allocator's caches filling, OpenBLAS's
buffers); the last 5% is the end of the job (outputs gathered, memory
freed).  The table gives the median RSS over 10-20% of the wall time
(`early`), over 80-95% (`late`), the largest after warm-up, and the ratio
late / early: a leak of one block per run grows it with N, a flat program
stays at 1.00.  docs/reliability.md has the figures.

Usage: bench/soak.py [--build DIR] [--runs N] [--mpi] [--example FILE -D ...] [--json FILE]
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
import benchlib  # noqa: E402


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def children(pid):
    """Every descendant of pid (mpirun's ranks)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def soak(argv, ranks_of):
    """Runs argv, sampling RSS; returns (samples [(t, kib)], seconds, rc)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = []
    while p.poll() is None:
        kib = rss_kib(ranks_of(p.pid))
        if kib:
            samples.append((time.monotonic() - t0, kib))
        time.sleep(0.05)
    out, err = p.communicate()
    if p.returncode != 0:
        raise benchlib.BenchError("%s exited %d: %s" % (argv[0], p.returncode, err.strip()[-500:]))
    return samples, time.monotonic() - t0, out


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def report(title, samples, seconds, runs):
    def window(lo, hi):
        return [k for t, k in samples if lo * seconds <= t < hi * seconds]
    early, late, after = window(0.10, 0.20), window(0.80, 0.95), window(0.10, 0.95)
    if len(early) < 5 or len(late) < 5:
        raise benchlib.BenchError("%s: only %d samples in %.1f s; raise --runs"
                                  % (title, len(samples), seconds))
    e, l = median(early), median(late)
    print("%-8s %8d runs %7.1f s   early %7.1f MiB   late %7.1f MiB   max %7.1f MiB"
          "   late/early %.3f" % (title, runs, seconds, e / 1024, l / 1024, max(after) / 1024,
                                  l / e))
    return e, l


def main():
    ap = benchlib.parser(__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--example", default=str(benchlib.ROOT / "examples" / "llama2_layer.ein"))
    ap.add_argument("-D", action="append", default=None,
                    help="dim overrides (default: the example's # check-with: line)")
    a = ap.parse_args()
    einc = benchlib.einc(a.build)
    defines = a.D
    if defines is None:
        with open(a.example) as f:
            m = re.search(r"^# check-with:(.*)$", f.read(), re.M)
        defines = m.group(1).split()[1::2] if m else []
    dflags = [x for d in defines for x in ("-D", d)]
    with open(a.example) as f:
        mesh = re.search(r"^mesh (.*)$", f.read(), re.M).group(1)
    ndev = 1
    for size in re.findall(r"=\s*(\d+)", mesh):
        ndev *= int(size)
    print("soak: %s %s, %d devices" % (os.path.basename(a.example), " ".join(defines), ndev))
    print(benchlib.machine())
    res = benchlib.Results("soak", "Resident memory over many runs of one executable")
    with tempfile.TemporaryDirectory(prefix="einc-soak-") as work:
        runtimes = ["threads"] + (["mpi"] if a.mpi else [])
        for rt in runtimes:
            exe = os.path.join(work, "soak_" + rt)
            subprocess.run([einc, a.example, "-o", exe, "--runtime=" + rt] + dflags, check=True)
            argv = [exe, "--random-inputs", "1", "--repeat", str(a.runs)]
            if rt == "mpi":
                argv = [a.mpirun, "-np", str(ndev), "--allow-run-as-root", "--oversubscribe"] + argv
                samples, secs, _ = soak(argv, children)
            else:
                samples, secs, _ = soak(argv, lambda pid: [pid])
            early, late = report(rt, samples, secs, a.runs)
            # A flat program stays at late / early = 1.00 (docs/reliability.md, "Soak").
            res.add("resident memory late in %d runs, %s" % (a.runs, rt), round(late / 1024, 1),
                    "MiB", "", late / early)
    res.write(a.json)


if __name__ == "__main__":
    benchlib.main_guard(main)
