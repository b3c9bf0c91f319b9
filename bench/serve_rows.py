#!/usr/bin/env python3
"""What streaming the tokens adds to a busy row's cost: bench/serve.py's
a + b rows fit of a step (its docstring), with the answers streamed and
without (docs/performance-history.md, "Serving (issue 27)").

The fortunes decode program is compiled as bench/serve.py compiles it
(`-D B=SLOTS -D S=CACHE`, default 16 and 128) and served with untrained
params (greedy), as continuous batching and with --static-batching.  Each
gets bench/serve.py's log-normal workload with every request sent at once
(the queue keeps the slots full), through the C client (serve_load.c),
twice: "stream": true (a server-sent event per token, the bench's
requests) and "stream": false (one whole answer per request).  Per run:
the span per step (ms/step), the requests' slot-steps per step (rows/step:
one per prompt character after the first and one per token, every request
running to its max_tokens), and device 0's program step per step (us/step
step: GET /metrics' einc_engine_seconds_total).  Per kind of answer, the
fit through its static and continuous medians: a, b and a / b, which is
what the ratio of continuous to static batching's tokens/s depends on.
The variants run interleaved, --repeat rounds, so that a change in the
machine's load hits them all; figures are the medians.  --connections:
a TCP connection per request (new), a pool of --pool keep-alive
connections reused from answer to answer (reuse; default pool 2 x slots,
so that the queue stays a slot-count deep: with every request due at once
an unbounded pool would open one a request and reuse none), or both
(default), as variants of each round.

    python3 bench/serve_rows.py --build BUILD [--repeat 3] [--requests 256]
                                [--slots 16] [--cache 128] [--seed 1]
                                [--connections new|reuse|both] [--pool N]
"""
import os
import statistics
import tempfile
import time

import benchlib
import serve
import serve_client

MODES = ("static", "continuous")


def saturated(exe, loader, work, stream, cap, connections="new", pool=0):
    """One run of `work` against `exe` (a list: the path and its flags),
    through `connections` (run_c's, at most `pool`): ms/step, rows/step
    and the program step's us/step."""
    s = serve.Server(exe, len(work) + 1)
    try:
        steps0, _ = serve.steps_run(s.port)
        step0 = serve.phases(s.port)["step"]
        recs, _ = serve_client.run_c(loader, s.port, work, time.monotonic() + 0.05, cap,
                                     stream=stream, connections=connections, pool=pool)
        steps, _ = serve.steps_run(s.port)
        step = serve.phases(s.port)["step"]
    finally:
        s.stop()
    ok = [(f, r) for (_, f), r in zip(work, recs) if r.get("status") == 200 and "done" in r]
    if len(ok) != len(work):
        raise benchlib.BenchError("%s: %d of %d requests did not complete"
                                  % (exe[0], len(work) - len(ok), len(work)))
    span = max(r["done"] for _, r in ok) - min(r["sent"] for _, r in ok)
    n = steps - steps0
    rows = sum(len(f["prompt"]) - 1 + f["max_tokens"] for f, _ in ok)
    return dict(ms=1000 * span / n, rows=rows / n, step=1e6 * (step - step0) / n)


def main():
    p = benchlib.parser(__doc__, json_results=False)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--slots", type=int, default=16)
    p.add_argument("--cache", type=int, default=128)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--time-cap", type=float, default=120.0)
    p.add_argument("--connections", choices=("new", "reuse", "both"), default="both")
    p.add_argument("--pool", type=int, default=0, help="reuse: connections (default 2 x slots)")
    a = p.parse_args()
    conns = ("new", "reuse") if a.connections == "both" else (a.connections,)
    pool = a.pool or 2 * a.slots
    if not 1 <= a.repeat <= 20 or not 1 <= a.requests <= 2000:
        raise benchlib.BenchError("--repeat must be 1..20 and --requests 1..2000")
    if a.slots < 2 or a.slots % 2 or not 32 <= a.cache <= 4096:
        raise benchlib.BenchError("--slots must be even and --cache 32..4096")
    einc = benchlib.einc(a.build)
    loader = benchlib.compile_c(a.build, "serve_load", ["serve_load.c"])
    work = serve.workload(a.requests, serve.CALIBRATION_RATE, False, a.seed, "lognormal",
                          a.cache)
    print(benchlib.machine())
    print("# %d requests at once, %d slots, cache %d, lognormal lengths, greedy; medians of %d "
          "interleaved rounds; client: serve_load.c, connections %s (reuse: a pool of %d)"
          % (a.requests, a.slots, a.cache, a.repeat, "/".join(conns), pool))
    got = {}
    with tempfile.TemporaryDirectory(prefix="einc-bench-rows-") as tmp:
        exe = os.path.join(tmp, "serve")
        benchlib.run([str(einc), str(benchlib.ROOT / "examples" / "fortunes_serve.ein"), "-o",
                      exe, "-D", "B=%d" % a.slots, "-D", "S=%d" % a.cache])
        for _ in range(a.repeat):
            for conn in conns:
                for stream in (True, False):
                    for mode in MODES:
                        flags = ["--static-batching"] if mode == "static" else []
                        got.setdefault((conn, stream, mode), []).append(
                            saturated([exe] + flags, loader, work, stream, a.time_cap, conn,
                                      pool if conn == "reuse" else 0))
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in got.items()}
    benchlib.table(["connections", "answers", "batching", "ms/step", "rows/step", "us/step step"],
                   [[conn, "streamed" if st else "whole", mode, med[(conn, st, mode)]["ms"],
                     med[(conn, st, mode)]["rows"], med[(conn, st, mode)]["step"]]
                    for conn in conns for st in (True, False) for mode in MODES])
    for conn in conns:
        for st in (True, False):
            s, c = med[(conn, st, "static")], med[(conn, st, "continuous")]
            b = (c["ms"] - s["ms"]) / (c["rows"] - s["rows"])
            print("# %s connections, %s answers: a = %.3g ms, b = %.3g ms a row, a/b = %.3g; the "
                  "program's step adds %.3g us a row"
                  % (conn, "streamed" if st else "whole", s["ms"] - b * s["rows"], b,
                     (s["ms"] - b * s["rows"]) / b if b > 0 else float("inf"),
                     (c["step"] - s["step"]) / (c["rows"] - s["rows"])))


if __name__ == "__main__":
    benchlib.main_guard(main)
