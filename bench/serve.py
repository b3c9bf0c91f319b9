#!/usr/bin/env python3
"""Continuous against static batching in --serve (docs/generation.md,
"Continuous batching"), under the same load on 127.0.0.1.

The fortunes decode program (examples/fortunes_serve.ein, 128 characters)
is compiled with `-D B=SLOTS -D S=CACHE` (default 16 slots and a cache of
128 positions; the file itself has 4 and 64) and served two ways:
continuous batching (a finished slot takes the next request at the next
step) and static batching (a batch of B runs until all its rows end).  Each is served with `--random-inputs 1` (untrained
params, greedy: the texts are nonsense but their lengths are what the
requests ask) and `--max-queue` above the request count, and gets the same
load: a fixed number of streamed requests, sent at Poisson arrival times
(or at a fixed interval with --fixed), all drawn from --seed.  Every
request has a timeout, each run a total time cap.

Both batchings run the same executable, the decode program as written
(one position per row, At[B]): continuous batching as served, static
batching with --static-batching (free slots take requests only when no
row runs); --static scalar is the comparison of the runs before
2026-11-30, static batching a second program with every `At[B]` made the
scalar `At[]`.  Chunked prefill (docs/generation.md, "Chunked prefill"):
with --prefill W the executable also links examples/fortunes_prefill.ein
at -D T=W, so both batchings read prompts in chunks of up to W tokens a
step (static batching's first steps prefill its batch);
--prefill-budget N gives both servers that bound on a prefill step's
prompt tokens.  By default (--also-prefill 16) both batchings also run at
--rate with the prefill program at W = 16 as two more rows, with the
share of continuous batching's steps that ran it: on this model a step of
the prefill program costs several decode steps whatever W, and under
continuous arrivals most steps have a prompt to read (docs/generation.md,
"Measured"), which is why --prefill is not the default.

Lengths (--lengths): `lognormal` (default) draws the prompt's characters
and max_tokens from log-normal distributions, prompt median 8 (sigma 0.8,
mean 11), output median 16 (sigma 1.0, mean 26), each clipped to what the
cache allows (prompt 1..S/4, max_tokens 1..S - prompt + 1).  Serving
traces have such long tails: vLLM's benchmark_serving replays ShareGPT
conversations, whose output lengths are right-skewed with a long tail
(most short, a few near the limit); the log-normal is a stand-in with the
parameters above, not a fit to ShareGPT, scaled to the fortunes model's
small cache.  `uniform` is the earlier workload (prompts 2..24, max_tokens
4..S - prompt + 1), for comparison with the 2026-11-28 run.

Per run: requests/s and tokens/s (completions over the span from the
first send to the last answer), time to first token (send to the first
streamed token) and inter-token latency (between streamed tokens; a chunk
of k characters counts as k tokens k-th of its gap apart, the tokenizer
being one character per token) at p50 and p99; the decode steps the
server ran (`einc_iterations_total` of GET /metrics) and of them the
prefill program's (`einc_prefill_steps_total`), the span per step
(ms/step), the requests' slot-steps per step (rows/step: how many of the
B slots did a request's work, counting a step per prompt character: with
--prefill an upper bound, a chunk reading several in one step) and the server's CPU time (user + system,
/proc/PID/stat) per token, and the load generator's (time.process_time)
per token; where device 0's step went (us per step: the program's step,
sampling, bookkeeping, waking the connections, from GET /metrics'
einc_engine_seconds_total, and the HTTP thread's event making,
einc_http_event_seconds_total: docs/generation.md, "Where a step's time
goes"); and, as a diagnosis, the share of the ITL gaps that ended while
the load generator was still sending requests and the p99 ITL of the
others (after the last send).  The load generator (--client c, the
default since 2026-11-30 14:00Z) is serve_load.c (built into
BUILD/bench-bin): one epoll loop in C, a send timer (a timerfd) between
sends; --client loop is its twin in Python (serve_client.py: one thread,
non-blocking sockets and a selector, as vLLM's benchmark_serving drives a
server from one asyncio loop), at about three times its CPU per token.  In
production the clients run elsewhere; here they share the server's 2
cores, so the client that takes least of them is the default (same-run
A/B in docs/generation.md, "Where the ITL tail came from": static
batching's tokens/s 1.11x with c, its p99 ITL 0.58-0.65 ms against
0.79-0.95).  --connections reuse (with --client c, the default since
2026-11-30 17:40Z) keeps a pool of HTTP/1.1 keep-alive connections, as
wrk or aiohttp's ClientSession do, instead of a TCP connection per
request (new, the earlier runs'): at most --pool N (default 2 x slots, so
that with every request due at once the server's queue stays a batch
deep and the connections are reused; a request due while all are busy
waits for one, its time to first token counted from when it was due).
Same-run A/B in docs/performance-history.md, section 17 ("Connections
kept alive"): every step faster, b 26-37% lower in three runs of four
(a / b 16.8 -> 27.5 over 10 rounds).
--client-nice N raises the client's niceness (its thread,
or the C client's process; never the server's): measured no better, not
the default.  The earlier runs' generator (--client threads)
started a Python thread per request as it sent (--prestart: all of them
before the first send), whose thread starts and GIL hand-offs cost the 2
cores about as much per token as the server's HTTP side and slowed the
steps they overlapped (docs/generation.md, "Measured").  Figures are the medians of --repeat runs,
the variants interleaved so that a change in the machine's load hits
both; but the p99 ITL is that of all the runs' gaps pooled, with its 95%
confidence interval (serve_stats.py: a block bootstrap over time, since
a step gives the same gap to all its rows and a slow step or stretch
puts many gaps into the tail at once).  The static/continuous ratio of steps is what scheduling alone gives
(it does not depend on the machine); the tokens/s ratio also carries each
step's cost, and the CPU per token is what a step costs the server
whatever else shares the cores.  The comparison "at equal
p99 inter-token latency": both variants get the same saturating --rate
(the queue holds most requests, so each does all its slots allow), and
the throughput ratio is reported with the two p99 ITLs beside it;
continuous batching also runs at the --match-rates, and the ratio is
also taken from the fastest of its runs (all rates) whose p99 ITL is at
most static batching's, to static batching's saturated throughput.  That
verdict is strict (the pooled p99s decide); beside it the bench prints
each continuous run's p99 minus static's with the difference's 95%
interval, and whether "continuous p99 <= static p99" holds beyond the
noise (the interval below 0), within it, or fails.  --match-rates auto
(the default) follows the machine: a first run sends every request at
once (the queue keeps the slots full) and measures the request rate
continuous batching serves saturated, R; the match rates are 0.5, 0.7,
0.8, 0.9 and 1.0 R.  Why these: a run at rate r makes at most r / R of
the saturated run's tokens/s, and the saturated run makes at most
r_c / r_s (about 2.8, below) times static batching's, so a match rate
below 2 / 2.8 = 0.71 R cannot show 2x whatever its p99; the rates from
0.7 R up, 0.1 R apart, are where the equal-p99 reading is decided, and
0.5 R shows the p99 at half load.  Fixed rates (R1,R2,... requests/s)
ran out of date with the CPU: 120-400/s, chosen when a saturated run
served 350 requests/s, were all far below this CPU's 900-1000 at D =
128.  Seed 002 and Orca (OSDI'22) give the reason to
expect a higher throughput: static batching idles a slot from its row's
end to its batch's, so the gain grows with the slots and the spread of
lengths (E[longest of B] / E[one]).

What a step costs decides how much of that reaches the throughput.  A
step of r busy rows costs about a + b r: a what every step pays whatever
its rows (reading the weights, the barriers), b what each row adds
(its attention over its own prefix, sampling, its streamed event, the
client's read, all on the same 2 cores here).  Seed 002 ("Theoretical
estimates for LLM latency and throughput", equation (1)) writes a small
batch's decode step the same way: the parameters' bytes over the memory
bandwidth, plus the batch times one row's KV cache bytes over it.  Continuous batching's
ratio at equal step time is (r_c / r_s) (a + b r_s) / (a + b r_c); with
these lengths r_c / r_s is about 2.8 (15 of 16 slots against 5.4), so 2x
needs a >= about 20 b.  The fortunes model as trained (D = 128: 1.8 MB
of f32 weights) is far from that on this CPU: the saturated runs of
the idle record of 2026-11-30 (AMD EPYC, 2 cores) give static batching
0.78 ms a step for 5.4 rows and continuous 1.24 ms for 15, so a = 0.52 ms
and b = 0.049 ms (a / b = 10.7).  --width D serves the same program at
-D D=WIDTH -D F=4 WIDTH (the attention's 4 heads of 32 and the caches
unchanged; at 512 the weights are 20 MB, beyond the caches), where a
decode step is bound by reading its weights (a = 5.8 ms, b = 0.016 ms
at 512 in the same hour), the regime of seed 002's equation and of the serving engines'
papers; its results go to serve_wide.

    python3 bench/serve.py --build BUILD [--requests 256] [--rate 1e6] [--fixed]
                           [--slots 16] [--cache 128] [--lengths lognormal|uniform]
                           [--match-rates auto|none|R1,R2] [--repeat 3] [--seed 1]
                           [--time-cap 120] [--client c|loop|threads [--prestart]]
                           [--connections new|reuse [--pool N]] [--client-nice N]
                           [--pos-bound on|off]
                           [--static flag|scalar] [--prefill W] [--prefill-budget N]
                           [--also-prefill W] [--width D] [--json FILE]
"""
import array
import gc
import http.client
import json
import math
import os
import random
import re
import statistics
import subprocess
import tempfile
import threading
import time

import benchlib
import serve_client
import serve_stats

# --match-rates auto's first run and the default --rate of the same-load
# pair: every request at once, in effect, so that the queue holds the rest
# and the slots stay full whatever the machine (a fixed --rate of 1000/s
# no longer did on a Zen 4 EPYC with D = 128: continuous batching ran 11 of
# its 16 slots there, and the a + b rows fit through that pair was wrong).
CALIBRATION_RATE = 1e6
# --also-prefill's window and --prefill-budget's default (docstring).
ALSO_PREFILL_W = 16
PREFILL_BUDGET = 0
# The log-normal workload (docstring): (median, sigma) of prompt and output lengths.
PROMPT_LN = (8.0, 0.8)
OUTPUT_LN = (16.0, 1.0)


def static_source(text):
    """fortunes_serve.ein with the scalar position At[] for every At[B]
    (and the position embedding Pe[D], the same for every row)."""
    return (text.replace("input At[B_X] : i32", "input At[] : i32").replace("At[B]", "At[]")
            .replace("Pe[B, D]", "Pe[D]"))


class Server:
    """An executable serving on a free port; stop() always ends it.
    `exe`: the path, or a list of the path and more flags."""

    def __init__(self, exe, max_queue):
        cmd = list(exe) if isinstance(exe, (list, tuple)) else [str(exe)]
        self.p = subprocess.Popen(cmd + ["--serve", "--port", "0", "--random-inputs", "1",
                                         "--max-queue", str(max_queue)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line.strip())
        if not m:
            self.stop()
            raise benchlib.BenchError("%s did not start: %r" % (exe, line))
        self.port = int(m.group(1))

    def cpu_seconds(self):
        """The server's CPU time so far (user + system, all its threads), from
        /proc/PID/stat (Linux); None elsewhere or once it has ended."""
        try:
            with open("/proc/%d/stat" % self.p.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def one_request(port, fields, timeout, rec, nice=0):
    """Streams one completion; fills rec with sent, token times, status.
    `nice`: this thread's niceness is raised by that much first."""
    serve_client.lower_priority(nice)
    rec["sent"] = time.monotonic()
    rec["times"] = []
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(dict(fields, stream=True)))
        r = c.getresponse()
        rec["status"] = r.status
        last = rec["sent"]
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            k = len(json.loads(line[len("data: "):])["choices"][0]["text"])
            now = time.monotonic()
            rec["times"] += [last + (now - last) * (i + 1) / k for i in range(k)]
            last = now
        rec["done"] = time.monotonic()
    except (OSError, http.client.HTTPException) as e:
        rec["error"] = str(e)
    finally:
        c.close()


def lognormal_len(rng, median, sigma, hi):
    """A log-normal draw with that median and sigma, rounded, clipped to 1..hi."""
    return max(1, min(hi, int(round(rng.lognormvariate(math.log(median), sigma)))))


def workload(n, rate, fixed, seed, lengths, S):
    """[(send offset in seconds, request fields)] for n requests on a cache of S."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        if lengths == "uniform":
            plen = rng.randint(2, 24)
            prompt = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(plen))
            tokens = rng.randint(4, S - plen + 1)
        else:
            plen = lognormal_len(rng, *PROMPT_LN, S // 4)
            prompt = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(plen))
            tokens = lognormal_len(rng, *OUTPUT_LN, S - plen + 1)
        out.append((t, dict(prompt=prompt, max_tokens=tokens)))
        t += 1.0 / rate if fixed else rng.expovariate(rate)
    return out


def pct(xs, q):
    """The q-th percentile of xs (nearest rank), in milliseconds."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return 1000 * xs[serve_stats.rank_index(len(xs), q)]


# The server's einc_engine_seconds_total phases (docs/generation.md,
# "Where a step's time goes") and its HTTP thread's event making.
PHASES = ("step", "sample", "bookkeep", "wake", "events")


def metrics_text(port):
    """GET /metrics's text."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", "/metrics")
        return c.getresponse().read().decode()
    except (OSError, http.client.HTTPException) as e:
        raise benchlib.BenchError("GET /metrics: %s" % e)
    finally:
        c.close()


def phases(port):
    """{phase: seconds so far} of device 0's loop and the HTTP thread's events."""
    text = metrics_text(port)
    got = {k: float(v) for k, v in
           re.findall(r'^einc_engine_seconds_total\{phase="(\w+)"\} (\S+)$', text, re.M)}
    m = re.search(r"^einc_http_event_seconds_total (\S+)$", text, re.M)
    got["events"] = float(m.group(1)) if m else float("nan")
    return {k: got.get(k, float("nan")) for k in PHASES}


def steps_run(port):
    """(steps run so far, of them the prefill program's): the server's
    einc_iterations_total and einc_prefill_steps_total (0 without a
    prefill program), from GET /metrics."""
    text = metrics_text(port)
    m = re.search(r"^einc_iterations_total (\d+)$", text, re.M)
    if not m:
        raise benchlib.BenchError("GET /metrics has no einc_iterations_total")
    pf = re.search(r"^einc_prefill_steps_total (\d+)$", text, re.M)
    return int(m.group(1)), int(pf.group(1)) if pf else 0


def send_at(start, at, port, fields, cap, rec, nice=0):
    """--prestart: sleeps until `at` seconds after `start`, then one_request."""
    wait = start + at - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    if time.monotonic() - start <= cap:
        one_request(port, fields, max(1.0, cap - (time.monotonic() - start)), rec, nice)


def load(exe, work, cap, n, prestart=False, client="loop", c_client=None, nice=0,
         connections="new", pool=0):
    """Runs the workload against one server; the figures as a dict, with
    "gaps": (the ITL gaps' end times, the gaps), two arrays of seconds, for
    serve_stats.
    `client`: "loop" (serve_client.py: one thread, a selector) or "threads"
    (a thread per request) or "c" (serve_load.c, built as `c_client`);
    `prestart`, with threads: every request's thread is started before the
    first send; `nice`: the client's niceness is raised by that much
    (--client-nice); `connections`, with c: "new" or "reuse" (--connections),
    at most `pool` connections if > 0 (--pool)."""
    s = Server(exe, n + 1)
    recs = [dict() for _ in work]
    threads = []
    # No garbage collection while the clients run: a full collection walks
    # every object the bench holds (the earlier runs' records) and stops the
    # Python clients for tens of milliseconds, which the client measures as
    # a gap (a 79 ms p99 ITL at 640/s in the tenth run of one bench).
    collecting = gc.isenabled()
    gc.disable()
    try:
        start = time.monotonic()
        before = phases(s.port)
        client0 = time.process_time()
        c_cpu = None
        if client == "loop":
            start += 0.05
            recs = serve_client.run(s.port, work, start, cap, nice=nice)
        elif client == "c":
            start += 0.05
            recs, c_cpu = serve_client.run_c(c_client, s.port, work, start, cap, nice,
                                             connections=connections, pool=pool)
        elif prestart:
            start += 0.5  # time to start them all
            threads = [threading.Thread(target=send_at, args=(start, at, s.port, f, cap, rec, nice))
                       for (at, f), rec in zip(work, recs)]
            for th in threads:
                th.start()
        for (at, fields), rec in zip(work, recs if client == "threads" and not prestart else []):
            wait = start + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if time.monotonic() - start > cap:
                break
            left = max(1.0, cap - (time.monotonic() - start))
            th = threading.Thread(target=one_request, args=(s.port, fields, left, rec, nice))
            th.start()
            threads.append(th)
        sent = start + work[-1][0] if prestart or client != "threads" else time.monotonic()
        for th in threads:
            th.join(timeout=max(1.0, cap - (time.monotonic() - start)))
        # The C client's own CPU time: this process only waits for it meanwhile.
        client = c_cpu if c_cpu is not None else time.process_time() - client0
        steps, prefill_steps = steps_run(s.port)
        split = phases(s.port)
        cpu = s.cpu_seconds()
    finally:
        if collecting:
            gc.enable()
        s.stop()
    ok = [r for r in recs if r.get("status") == 200 and "done" in r]
    if not ok:
        raise benchlib.BenchError("%s: no request completed" % exe)
    span = max(r["done"] for r in ok) - min(r["sent"] for r in recs if "sent" in r)
    tokens = sum(len(r["times"]) for r in ok)
    # Slot-steps the requests occupied: a request runs one step per prompt
    # character and one per token after the first (its prompt's last step makes that).
    rows = sum(len(f["prompt"]) - 1 + len(r["times"]) for (_, f), r in zip(work, recs)
               if r.get("status") == 200 and "done" in r)
    ttft = [r["times"][0] - r["sent"] for r in ok if r["times"]]
    ends = array.array("d", (b for r in ok for b in r["times"][1:]))
    itl = [b - a for r in ok for a, b in zip(r["times"], r["times"][1:])]
    # The gaps that end after the last request was sent: the load generator
    # (Python threads starting, connecting, sending) no longer shares the cores.
    quiet = [b - a for r in ok for a, b in zip(r["times"], r["times"][1:]) if b > sent]
    return dict(done=len(ok), failed=len(work) - len(ok), rps=len(ok) / span, tps=tokens / span,
                steps=steps, prefill_steps=prefill_steps, step_ms=1000 * span / steps,
                busy=rows / steps,
                cpu_tok=1000 * cpu / tokens if cpu is not None and tokens else float("nan"),
                client_tok=1000 * client / tokens if tokens else float("nan"),
                ttft50=pct(ttft, 50), ttft99=pct(ttft, 99), itl50=pct(itl, 50), itl99=pct(itl, 99),
                sending=100 * (len(itl) - len(quiet)) / max(1, len(itl)), itl99q=pct(quiet, 99),
                gaps=(ends, array.array("d", itl)), **{"us_" + k: 1e6 * (split[k] - before[k]) / steps for k in PHASES})


def compile_variants(einc, src, tmp, a):
    """{variant: [exe, flags...]}: "continuous" and "static" as --prefill and
    --static say, and with --also-prefill W the pair "static, prefill W" and
    "continuous, prefill W" (one executable with the prefill program at
    T = W, static batching its --static-batching)."""
    width = ["D=%d" % a.width, "F=%d" % (4 * a.width)] if a.width else []
    dims = ["-D", "B=%d" % a.slots, "-D", "S=%d" % a.cache, "--pos-bound=" + a.pos_bound] + \
        [x for d in width for x in ("-D", d)]
    budget = ["--prefill-budget", str(a.prefill_budget)] if a.prefill_budget else []
    serve_ein = str(benchlib.ROOT / "examples" / "fortunes_serve.ein")

    def per_row(name, w):
        exe = os.path.join(tmp, name)
        pf = ["--prefill", str(benchlib.ROOT / "examples" / "fortunes_prefill.ein")] + \
            [x for d in ["B=%d" % a.slots, "S=%d" % a.cache, "T=%d" % w] + width
             for x in ("--prefill-define", d)] if w else []
        benchlib.run([str(einc), serve_ein, "-o", exe] + dims + pf)
        return [exe] + (budget if w else [])
    exes = {"continuous": per_row("serve", a.prefill)}
    if a.static == "flag":
        exes["static"] = exes["continuous"] + ["--static-batching"]
    else:
        path = os.path.join(tmp, "static.ein")
        with open(path, "w") as f:
            f.write(static_source(src))
        exes["static"] = [os.path.join(tmp, "static")]
        benchlib.run([str(einc), path, "-o", exes["static"][0]] + dims)
    if a.also_prefill:
        exe = per_row("serve_pf", a.also_prefill)
        exes["static, prefill %d" % a.also_prefill] = exe + ["--static-batching"]
        exes["continuous, prefill %d" % a.also_prefill] = exe
    return exes


def describe(r):
    """A table row's figures for one run."""
    return [r["done"], r["failed"], r["rps"], r["tps"], r["steps"], r["prefill_steps"],
            r["step_ms"], r["busy"],
            r["cpu_tok"], r["client_tok"], r["ttft50"], r["ttft99"], r["itl50"], r["itl99"],
            "%.3g-%.3g" % (r["itl99_lo"], r["itl99_hi"]), r["sending"],
            r["itl99q"]] + [r["us_" + k] for k in PHASES]


def step_fit(st, c):
    """(a, b, need) from static (st) and continuous (c) batching's saturated
    runs: the line a + b rows through their (rows/step, ms/step), and the
    a/b at which continuous batching's tokens per unit of step time reach
    2x static's with these rows, (r_c / r_s)(a + b r_s) / (a + b r_c) = 2
    (docstring).  None when the rows do not separate the runs or 2x is out
    of reach whatever a (r_c <= 2 r_s)."""
    rs, rc = st["busy"], c["busy"]
    if rc - rs < 0.5 or rc <= 2 * rs:
        return None
    b = (c["step_ms"] - st["step_ms"]) / (rc - rs)
    a = st["step_ms"] - b * rs
    # k (a + b rs) >= 2 (a + b rc) with k = rc / rs gives a / b >= rc / (k - 2).
    return a, b, rc / (rc / rs - 2)


def pooled(reps, seed, label):
    """One variant's figures from its --repeat runs: the medians, but the p99
    ITL of all the runs' gaps pooled, with its 95% interval (itl99_lo,
    itl99_hi: serve_stats' block bootstrap, seeded by --seed and `label`)
    and the bootstrap itself ("boot"), all in milliseconds."""
    fig = {k: statistics.median(r[k] for r in reps) for k in reps[0] if k != "gaps"}
    boot = serve_stats.Bootstrap([list(zip(*r["gaps"])) for r in reps],
                                 serve_stats.seeded(seed, label))
    lo, hi = boot.interval()
    fig.update(itl99=1000 * boot.point, itl99_lo=1000 * lo, itl99_hi=1000 * hi, boot=boot)
    return fig


def equal_p99(runs, st):
    """Prints the verdict "at equal p99 ITL" and, per continuous run, the
    p99 difference to static batching's (`st`) with its interval.  The
    verdict is strict (the fastest continuous run whose p99 is at most
    static's: docstring); the interval says whether that holds beyond the
    noise (serve_stats).  Returns (tokens/s ratio or None, (difference ms,
    low, high, words) or None)."""
    cont = [(rate, r, serve_stats.difference(r["boot"], st["boot"]))
            for name, rate, r in runs[1:] if name == "continuous"]
    print("# p99 ITL, continuous - static, ms (95%% CI; the tokens/s ratio): %s"
          % "; ".join("%g/s %+.3g (%+.3g to %+.3g; %.2fx): %s"
                      % (rate, 1000 * d, 1000 * lo, 1000 * hi, r["tps"] / st["tps"],
                         serve_stats.noise_verdict(d, lo, hi)) for rate, r, (d, lo, hi) in cont))
    fits = [(r["tps"], rate, r, d) for rate, r, d in cont if r["itl99"] <= st["itl99"]]
    if not fits:
        print("# at equal p99 ITL: no continuous run had a p99 ITL within static's %.3g ms "
              "(95%% CI %.3g-%.3g): fails" % (st["itl99"], st["itl99_lo"], st["itl99_hi"]))
        return None, None
    tps, rate, r, (d, lo, hi) = max(fits, key=lambda x: x[0])
    words = serve_stats.noise_verdict(d, lo, hi)
    print("# at equal p99 ITL: continuous at %g/s (p99 ITL %.3g ms, 95%% CI %.3g-%.3g) <= "
          "static's %.3g ms (%.3g-%.3g) makes %.2fx static's tokens/s; the p99s' difference "
          "%+.3g ms (95%% CI %+.3g to %+.3g): %s"
          % (rate, r["itl99"], r["itl99_lo"], r["itl99_hi"], st["itl99"], st["itl99_lo"],
             st["itl99_hi"], tps / st["tps"], 1000 * d, 1000 * lo, 1000 * hi, words))
    return tps / st["tps"], (1000 * d, 1000 * lo, 1000 * hi, words)


def main():
    p = benchlib.parser(__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=256, help="requests per run (default 256)")
    p.add_argument("--rate", type=float, default=CALIBRATION_RATE,
                   help="arrivals per second for both variants at the same load (default "
                        "1e6: every request at once, so that both are saturated on any CPU)")
    p.add_argument("--fixed", action="store_true", help="a fixed interval instead of Poisson")
    p.add_argument("--slots", type=int, default=16, help="-D B: slots (default 16; even)")
    p.add_argument("--cache", type=int, default=128, help="-D S: cache positions (default 128)")
    p.add_argument("--lengths", choices=("lognormal", "uniform"), default="lognormal",
                   help="prompt and output length distribution (default lognormal)")
    p.add_argument("--match-rates", default="auto",
                   help="continuous batching's lower rates: auto (default: %s of the request "
                        "rate it serves at --rate, measured by a first run), R1,R2,... "
                        "(requests/s) or none" % "/".join("%g" % f for f in
                                                         serve_stats.AUTO_FRACTIONS))
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each, interleaved; the medians are shown (default 3)")
    p.add_argument("--seed", type=int, default=1, help="the workload's seed")
    p.add_argument("--client", choices=("loop", "c", "threads"), default="c",
                   help="the load generator: serve_load.c, one epoll loop in C (c, default), "
                        "its Python twin (loop: serve_client.py, one thread with a selector) or "
                        "a thread per request (threads: the earlier runs')")
    p.add_argument("--prestart", action="store_true",
                   help="--client threads: start every request's thread before the first send "
                        "(each sleeps until its send time) instead of one per send")
    p.add_argument("--pos-bound", choices=("on", "off"), default="on",
                   help="einc --pos-bound: the attention stops at each row's position (on, "
                        "default) or runs over the whole cache (off: the step before it)")
    p.add_argument("--prefill", type=int, default=0,
                   help="W: serve both batchings with examples/fortunes_prefill.ein at -D T=W "
                        "(chunked prefill); 0: without (default)")
    p.add_argument("--static", choices=("flag", "scalar"), default="flag",
                   help="static batching as the At[B] executable with --static-batching (flag, "
                        "default: the same program as continuous batching) or the program "
                        "with every At[B] made the scalar At[] (scalar: the runs before "
                        "2026-11-30; not with --prefill)")
    p.add_argument("--also-prefill", type=int, default=ALSO_PREFILL_W,
                   help="W: also run both batchings at --rate with the prefill program at "
                        "T = W (extra rows; 0: not) (default %d)" % ALSO_PREFILL_W)
    p.add_argument("--prefill-budget", type=int, default=PREFILL_BUDGET,
                   help="--prefill-budget N for both servers: prompt tokens a prefill step "
                        "reads beyond one per row; 0: no bound (default %d)" % PREFILL_BUDGET)
    p.add_argument("--width", type=int, default=0,
                   help="-D D=WIDTH -D F=4 WIDTH: the model's width and its MLP's (0: the "
                        "file's 128 and 512, default); results as serve_wide")
    p.add_argument("--connections", choices=("reuse", "new"), default="reuse",
                   help="--client c: a pool of HTTP/1.1 keep-alive connections reused from "
                        "answer to answer (reuse, default) or a TCP connection per request (new)")
    p.add_argument("--pool", type=int, default=0,
                   help="--connections reuse: at most N connections (default 2 x --slots)")
    p.add_argument("--client-nice", type=int, default=0,
                   help="raise the load generator's niceness by N (0..19; the servers keep "
                        "theirs) (default 0: measured no better, docs/generation.md)")
    p.add_argument("--time-cap", type=float, default=120.0, help="seconds per run, at most")
    a = p.parse_args()
    mr = a.match_rates.strip().lower()
    auto = mr == "auto"
    try:
        match = [] if auto or mr in ("", "none") else [float(x) for x in mr.split(",")
                                                         if x.strip()]
    except ValueError:
        raise benchlib.BenchError("--match-rates wants auto, none or numbers, not %r"
                                  % a.match_rates)
    a.pool = (a.pool or 2 * a.slots) if a.connections == "reuse" else 0
    if not 0 <= a.client_nice <= 19:
        raise benchlib.BenchError("--client-nice must be 0..19")
    if not 1 <= a.repeat <= 20:
        raise benchlib.BenchError("--repeat must be 1..20")
    if not 1 <= a.requests <= 2000 or a.rate <= 0 or any(r <= 0 for r in match):
        raise benchlib.BenchError("--requests must be 1..2000 and every rate > 0")
    if not 0 <= a.prefill <= 64 or not 0 <= a.also_prefill <= 64 or a.prefill_budget < 0 or \
            (a.prefill and a.static == "scalar"):
        raise benchlib.BenchError("--prefill and --also-prefill must be 0..64, "
                                  "--prefill-budget >= 0, and --static scalar without --prefill")
    if a.width and not 32 <= a.width <= 4096:
        raise benchlib.BenchError("--width must be 32..4096 (or 0: the file's D)")
    if a.slots < 2 or a.slots % 2 or not 32 <= a.cache <= 4096:
        raise benchlib.BenchError("--slots must be even (B is sharded over X = 2) and "
                                  "--cache 32..4096")
    einc = benchlib.einc(a.build)
    src = (benchlib.ROOT / "examples" / "fortunes_serve.ein").read_text()
    S = a.cache
    mean_out = statistics.mean([f["max_tokens"] for _, f in
                                workload(a.requests, a.rate, a.fixed, a.seed, a.lengths, S)])
    print(benchlib.machine())
    print("# %s%d requests, %s arrivals at %g/s, %d slots, cache %d, %s lengths "
          "(max_tokens mean %.1f), greedy; medians of %d interleaved runs; %s%s%s"
          % ("D = %d, F = %d; " % (a.width, 4 * a.width) if a.width else "",
             a.requests, "fixed" if a.fixed else "Poisson", a.rate, a.slots, S, a.lengths,
             mean_out, a.repeat,
             ("chunked prefill W = %d" % a.prefill if a.prefill else "no prefill program") +
             (", static batching " + ("--static-batching" if a.static == "flag" else "At[]")) +
             (", also both with prefill W = %d" % a.also_prefill if a.also_prefill else "") +
             (", --prefill-budget %d" % a.prefill_budget if a.prefill_budget else ""),
             "; client: " + ("one selector loop" if a.client == "loop" else
                                                "serve_load.c" if a.client == "c" else
                                                "a thread per request" +
                                                (", started up front" if a.prestart else "")),
             ("; connections: %s" % a.connections if a.client == "c" else "") +
             (" (a pool of %d)" % a.pool if a.client == "c" and a.pool else "") +
             ("; client niceness +%d" % a.client_nice if a.client_nice else "") +
             ("; --pos-bound=off" if a.pos_bound == "off" else "")))
    loader = benchlib.compile_c(a.build, "serve_load", ["serve_load.c"]) if a.client == "c" \
        else None
    runs = []  # (variant, rate, figures)
    with tempfile.TemporaryDirectory(prefix="einc-bench-serve-") as tmp:
        exes = compile_variants(einc, src, tmp, a)
        if auto:  # continuous batching's capacity on this machine, now
            cal = load(exes["continuous"], workload(a.requests, CALIBRATION_RATE, a.fixed,
                                                    a.seed, a.lengths, S),
                       a.time_cap, a.requests, a.prestart, a.client, loader, a.client_nice,
                       a.connections, a.pool)
            match = serve_stats.auto_rates(cal["rps"])
            print("# --match-rates auto: continuous batching served %.1f requests/s with every "
                  "request sent at once (a first run, not in the table); match rates %s/s, "
                  "%s of it" % (cal["rps"], ",".join("%g" % r for r in match),
                     "/".join("%g" % f for f in serve_stats.AUTO_FRACTIONS)))
        match = [r for r in match if r != a.rate]  # that one is the saturated run
        plan = [("static", a.rate), ("continuous", a.rate)] + [("continuous", r) for r in match] \
            + [(name, a.rate) for name in exes if ", prefill" in name]
        got = {k: [] for k in plan}
        for _ in range(a.repeat):  # interleaved, so a change in the machine's load hits both
            for name, rate in plan:
                work = workload(a.requests, rate, a.fixed, a.seed, a.lengths, S)
                got[(name, rate)].append(load(exes[name], work, a.time_cap, a.requests,
                                             a.prestart, a.client, loader, a.client_nice,
                                             a.connections, a.pool))
        for name, rate in plan:
            runs.append((name, rate, pooled(got[(name, rate)], a.seed, "%s@%g" % (name, rate))))
    benchlib.table(["batching", "rate /s", "done", "failed", "req/s", "tokens/s", "steps",
                    "prefill steps", "ms/step", "rows/step", "server CPU ms/token", "client CPU ms/token",
                    "TTFT p50 ms",
                    "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "ITL p99 95% CI ms",
                    "ITL % while sending",
                    "ITL p99 after sends ms"] + ["us/step " + k for k in PHASES],
                   [[name, rate] + describe(r) for name, rate, r in runs])
    st, c = runs[0][2], runs[1][2]
    same = c["tps"] / st["tps"]
    print("# same load (%g/s): continuous/static tokens/s %.2fx, requests/s %.2fx, TTFT p50 %.2fx, "
          "p99 %.2fx, ITL p50 %.2fx, p99 %.2fx" % (a.rate, same, c["rps"] / st["rps"],
                                                   c["ttft50"] / st["ttft50"],
                                                   c["ttft99"] / st["ttft99"],
                                                   c["itl50"] / st["itl50"],
                                                   c["itl99"] / st["itl99"]))
    print("# decode steps, static/continuous: %.2fx (the slot-steps static batching idles; "
          "the machine's load does not change it); server CPU per token, continuous/static: "
          "%.2fx" % (st["steps"] / c["steps"], c["cpu_tok"] / st["cpu_tok"]))
    fit = step_fit(st, c)
    if fit:
        a_ms, b_ms, need = fit
        print("# a step's cost, a + b rows (the two saturated runs, docstring): a = %.3g ms, "
              "b = %.3g ms a row, a/b = %.3g; 2x at equal step cost needs a/b >= %.3g"
              % (a_ms, b_ms, a_ms / b_ms if b_ms > 0 else math.inf, need))
    matched, diff = equal_p99(runs, st)
    if match:
        # A run at rate R can make at most R x the mean max_tokens tokens/s
        # (greedy, untrained: every request runs to its max_tokens), so a
        # ratio of 2 at equal p99 needs a match rate of at least this.
        need = 2 * st["tps"] / mean_out
        print("# 2x static's tokens/s needs a rate of at least %.0f/s (2 x %.0f tokens/s / %.1f "
              "tokens a request); the highest --match-rates, %g/s, can make at most %.2fx"
              % (need, st["tps"], mean_out, max(match), max(match) * mean_out / st["tps"]))
    pf = [r for name, rate, r in runs if ", prefill" in name]
    if pf:
        print("# both with the prefill program (W = %d), same load (%g/s): continuous/static "
              "tokens/s %.2fx, ITL p99 %.3g against %.3g ms; prefill steps %d of %d and %d of %d"
              % (a.also_prefill, a.rate, pf[1]["tps"] / pf[0]["tps"], pf[1]["itl99"],
                 pf[0]["itl99"], pf[1]["prefill_steps"], pf[1]["steps"], pf[0]["prefill_steps"],
                 pf[0]["steps"]))
    if a.width:
        res = benchlib.Results("serve_wide", "Continuous vs static batching in --serve (the "
                               "fortunes decode program at D = %d, F = %d, untrained, %d slots)"
                               % (a.width, 4 * a.width, a.slots), script="serve")
    else:
        res = benchlib.Results("serve", "Continuous vs static batching in --serve (fortunes, "
                               "untrained, %d slots)" % a.slots)
    target = ">= 2x"
    res.add("tokens/s, continuous / static, same load", round(same, 3), "x", target,
            round(same, 3), "ok" if same >= 2 else "MISS")
    if matched is not None:
        res.add("tokens/s, continuous / static, at equal p99 ITL", round(matched, 3), "x",
                target, round(matched, 3), "ok" if matched >= 2 else "MISS")
        res.add("ITL p99, continuous at the equal-p99 rate - static (95%% CI %.3g to %.3g ms: "
                "%s)" % (diff[1], diff[2], diff[3]), round(diff[0], 3), "ms")
    else:  # recorded, not left out: the target was missed
        res.add("tokens/s, continuous / static, at equal p99 ITL (0: no continuous run's p99 "
                "ITL within static's)", 0, "x", target, 0, "MISS")
    res.add("decode steps, static / continuous, same load", round(st["steps"] / c["steps"], 3),
            "x", ratio=round(st["steps"] / c["steps"], 3))
    cpu = round(c["cpu_tok"] / st["cpu_tok"], 3)
    res.add("server CPU per token, continuous / static, same load", cpu, "x", ratio=cpu)
    if fit and fit[1] > 0:
        res.add("a step's cost: fixed part / per-row part (a/b; 2x needs >= %.3g)" % fit[2],
                round(fit[0] / fit[1], 3), "x")
    for name, rate, r in runs[:2]:
        res.add("tokens/s, %s" % name, round(r["tps"], 1), "tokens/s")
        res.add("ITL p99, %s" % name, round(r["itl99"], 3), "ms")
        res.add("ITL p99 95%% CI low, %s" % name, round(r["itl99_lo"], 3), "ms")
        res.add("ITL p99 95%% CI high, %s" % name, round(r["itl99_hi"], 3), "ms")
        res.add("ITL p99 after the last send, %s" % name, round(r["itl99q"], 3), "ms")
        res.add("TTFT p50, %s" % name, round(r["ttft50"], 1), "ms")
    if pf:
        both = round(pf[1]["tps"] / pf[0]["tps"], 3)
        res.add("tokens/s, continuous / static, both with chunked prefill W = %d, same load"
                % a.also_prefill, both, "x", ratio=both)
        share = round(pf[1]["prefill_steps"] / pf[1]["steps"], 3)
        res.add("share of continuous batching's steps that ran the prefill program (W = %d)"
                % a.also_prefill, share, "x")
    res.write(a.json)


if __name__ == "__main__":
    benchlib.main_guard(main)
