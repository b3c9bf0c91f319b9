#!/usr/bin/env python3
"""Where a continuous-batching step's time goes at 1, 8 and 16 busy rows
(docs/generation.md, "Where a step's time goes").

examples/fortunes_serve.ein is compiled as bench/serve.py compiles it
(`-D B=16 -D S=128`: 16 slots over 4 device threads, a cache of 128) and
served with untrained params (greedy).  For each count n of busy rows, n
streamed requests with a one-character prompt and max_tokens = S - 1 are
sent at once (serve_client.py, one selector loop), four times one after
the other, so nearly every step runs exactly n rows; the table divides over the steps the server ran:
the wall time per step, device 0's phases from GET /metrics
(`einc_engine_seconds_total`: the program's step with its barriers,
sampling, bookkeeping, waking connections; `einc_http_event_seconds_total`:
the HTTP thread making the events' JSON), the server's CPU time (all its
threads, and of it the HTTP thread's: /proc/PID/task/*/schedstat) and the
load generator's own CPU time (time.process_time), each also per busy
row.  Threads that ended before the end (none in a steady run) are not
counted.  Medians of --repeat rounds.

    python3 bench/serve_phases.py --build BUILD [--rows 1,8,16] [--repeat 3]
"""
import os
import statistics
import tempfile
import time

import benchlib
import serve
import serve_client


# Rounds of n requests per server, one after the other: enough steps
# (about 127 each) for the CPU clocks.
ROUNDS = 4


def thread_cpu(pid):
    """(CPU seconds of the server's HTTP thread "einc-http", of all its
    threads), from /proc/PID/task/*/schedstat (Linux: nanoseconds on a CPU,
    finer than /proc's stat ticks of 10 ms)."""
    http = every = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                cpu = int(f.read().split()[0]) * 1e-9
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = f.read().strip()
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
        every += cpu
        if name == "einc-http" or name.startswith("MHD"):  # ours, or libmicrohttpd's own
            http += cpu
    return http, every


def one(exe, n, S):
    """Figures per step of n concurrent long requests against a new server."""
    s = serve.Server(exe, n + 1)
    try:
        before, steps0 = serve.phases(s.port), serve.steps_run(s.port)[0]
        http0, cpu0 = thread_cpu(s.p.pid)
        work = [(0.0, dict(prompt="a", max_tokens=S - 1))] * n
        start = time.monotonic()
        client0 = time.process_time()
        recs = []
        for _ in range(ROUNDS):  # one after the other: n rows busy throughout
            recs += serve_client.run(s.port, work, time.monotonic(), 120.0)
        wall = time.monotonic() - start
        client = time.process_time() - client0
        http, cpu = thread_cpu(s.p.pid)
        after, steps = serve.phases(s.port), serve.steps_run(s.port)[0]
    finally:
        s.stop()
    bad = [r.get("error", r.get("status")) for r in recs if "done" not in r]
    if bad:
        raise benchlib.BenchError("%d of %d requests failed: %s" % (len(bad), n, bad[0]))
    steps -= steps0
    got = {k: 1e6 * (after[k] - before[k]) / steps for k in serve.PHASES}
    got.update(wall=1e6 * wall / steps, server=1e6 * (cpu - cpu0) / steps,
               http=1e6 * (http - http0) / steps,
               client=1e6 * client / steps, tokens=sum(len(r["times"]) for r in recs) / steps)
    return got


def main():
    p = benchlib.parser(__doc__.split("\n")[0], json_results=False)
    p.add_argument("--rows", default="1,8,16", help="busy row counts (default 1,8,16)")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    B, S = 16, 128
    try:
        rows = [int(x) for x in a.rows.split(",")]
    except ValueError:
        raise benchlib.BenchError("--rows wants integers, not %r" % a.rows)
    if not rows or any(not 1 <= n <= B for n in rows) or not 1 <= a.repeat <= 20:
        raise benchlib.BenchError("--rows must be in 1..%d and --repeat 1..20" % B)
    print(benchlib.machine())
    print("# fortunes_serve.ein, %d slots, cache %d, continuous batching, greedy; n requests "
          "(prompt 1 character, max_tokens %d) at once; per step, medians of %d rounds"
          % (B, S, S - 1, a.repeat))
    with tempfile.TemporaryDirectory(prefix="einc-bench-phases-") as tmp:
        exe = os.path.join(tmp, "serve")
        benchlib.run([str(benchlib.einc(a.build)), str(benchlib.ROOT / "examples" /
                      "fortunes_serve.ein"), "-o", exe, "-D", "B=%d" % B, "-D", "S=%d" % S])
        got = {n: [] for n in rows}
        for _ in range(a.repeat):  # interleaved, so a change in the machine's load hits all
            for n in rows:
                got[n].append(one(exe, n, S))
    keys = ["tokens", "wall", "step", "sample", "bookkeep", "wake", "events", "server", "http",
            "client"]
    table = []
    for n in rows:
        m = {k: statistics.median(r[k] for r in got[n]) for k in keys}
        table.append([n] + [m[k] for k in keys] + [m["server"] / n, m["http"] / n,
                                                   m["client"] / n])
    benchlib.table(["busy rows", "tokens/step", "wall us", "step us", "sample us", "bookkeep us",
                    "wake us", "events us", "server CPU us", "of it HTTP thread us",
                    "client CPU us", "server CPU us/row", "HTTP us/row", "client CPU us/row"],
                   table)


if __name__ == "__main__":
    benchlib.main_guard(main)
