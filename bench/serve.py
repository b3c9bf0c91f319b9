#!/usr/bin/env python3
"""Continuous against static batching in --serve (docs/generation.md,
"Continuous batching"), under the same load on 127.0.0.1.

The fortunes decode program (examples/fortunes_serve.ein: 4 slots, a cache
of 64 positions, 128 characters) is compiled twice with the same einc: as
written, with one position per row At[B] (continuous batching: a finished
slot takes the next request at the next step), and with every `At[B]`
turned into the scalar `At[]` (static batching: a batch of 4 runs until all
its rows end).  Each is served with `--random-inputs 1` (untrained params,
greedy: the texts are nonsense but their lengths are what the requests
ask) and `--max-queue` above the request count, and gets the same load: a
fixed number of requests, sent at Poisson arrival times (or at a fixed
interval with --fixed), each with a prompt of 2..24 characters and
max_tokens from 4 to the cache's room, all drawn from --seed, streamed.
Every request has a timeout, the run a total time cap.

Per variant: requests/s and tokens/s (completions over the span from the
first send to the last answer), time to first token (send to the first
streamed token) and inter-token latency (between streamed tokens; a chunk
of k characters counts as k tokens k-th of its gap apart, the tokenizer
being one character per token) at p50 and p99; then continuous/static
ratios.  Seed 002 and Orca (OSDI'22) give the reason to expect a higher
throughput: static batching idles a slot from its row's end to its batch's.

    python3 bench/serve.py --build BUILD [--requests 48] [--rate 30] [--fixed]
                           [--seed 1] [--time-cap 300]
"""
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import tempfile
import threading
import time

import benchlib

S = 64  # fortunes_serve.ein's cache length (dim S)


def static_source(text):
    """fortunes_serve.ein with the scalar position At[] for every At[B]
    (and the position embedding Pe[D], the same for every row)."""
    return (text.replace("input At[B_X] : i32", "input At[] : i32").replace("At[B]", "At[]")
            .replace("Pe[B, D]", "Pe[D]"))


class Server:
    """An executable serving on a free port; stop() always ends it."""

    def __init__(self, exe, max_queue):
        self.p = subprocess.Popen([str(exe), "--serve", "--port", "0", "--random-inputs", "1",
                                   "--max-queue", str(max_queue)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line.strip())
        if not m:
            self.stop()
            raise benchlib.BenchError("%s did not start: %r" % (exe, line))
        self.port = int(m.group(1))

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def one_request(port, fields, timeout, rec):
    """Streams one completion; fills rec with sent, token times, status."""
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


def workload(n, rate, fixed, seed):
    """[(send offset in seconds, request fields)] for n requests."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        plen = rng.randint(2, 24)
        prompt = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(plen))
        out.append((t, dict(prompt=prompt, max_tokens=rng.randint(4, S - plen + 1))))
        t += 1.0 / rate if fixed else rng.expovariate(rate)
    return out


def pct(xs, q):
    """The q-th percentile of xs (nearest rank), in milliseconds."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return 1000 * xs[min(len(xs) - 1, max(0, int(round(q / 100 * len(xs))) - 1))]


def load(exe, work, cap, n):
    """Runs the workload against one server; the figures as a dict."""
    s = Server(exe, n + 1)
    recs = [dict() for _ in work]
    threads = []
    try:
        start = time.monotonic()
        for (at, fields), rec in zip(work, recs):
            wait = start + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if time.monotonic() - start > cap:
                break
            left = max(1.0, cap - (time.monotonic() - start))
            th = threading.Thread(target=one_request, args=(s.port, fields, left, rec))
            th.start()
            threads.append(th)
        for th in threads:
            th.join(timeout=max(1.0, cap - (time.monotonic() - start)))
    finally:
        s.stop()
    ok = [r for r in recs if r.get("status") == 200 and "done" in r]
    if not ok:
        raise benchlib.BenchError("%s: no request completed" % exe)
    span = max(r["done"] for r in ok) - min(r["sent"] for r in recs if "sent" in r)
    tokens = sum(len(r["times"]) for r in ok)
    ttft = [r["times"][0] - r["sent"] for r in ok if r["times"]]
    itl = [b - a for r in ok for a, b in zip(r["times"], r["times"][1:])]
    return dict(done=len(ok), failed=len(work) - len(ok), rps=len(ok) / span, tps=tokens / span,
                ttft50=pct(ttft, 50), ttft99=pct(ttft, 99), itl50=pct(itl, 50), itl99=pct(itl, 99))


def main():
    p = benchlib.parser(__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=48, help="requests per variant (default 48)")
    p.add_argument("--rate", type=float, default=30.0, help="arrivals per second (default 30)")
    p.add_argument("--fixed", action="store_true", help="a fixed interval instead of Poisson")
    p.add_argument("--seed", type=int, default=1, help="the workload's seed")
    p.add_argument("--time-cap", type=float, default=300.0, help="seconds per variant, at most")
    a = p.parse_args()
    if not 1 <= a.requests <= 1000 or a.rate <= 0:
        raise benchlib.BenchError("--requests must be 1..1000 and --rate > 0")
    einc = benchlib.einc(a.build)
    src = (benchlib.ROOT / "examples" / "fortunes_serve.ein").read_text()
    work = workload(a.requests, a.rate, a.fixed, a.seed)
    print(benchlib.machine())
    print("# %d requests, %s arrivals at %g/s, prompts 2..24, max_tokens 4..%d (greedy)"
          % (a.requests, "fixed" if a.fixed else "Poisson", a.rate, S - 1))
    res = {}
    with tempfile.TemporaryDirectory(prefix="einc-bench-serve-") as tmp:
        for name, text in (("static", static_source(src)), ("continuous", src)):
            path = os.path.join(tmp, name + ".ein")
            with open(path, "w") as f:
                f.write(text)
            exe = os.path.join(tmp, name)
            benchlib.run([str(einc), path, "-o", exe])
            res[name] = load(exe, work, a.time_cap, a.requests)
    rows = [[name, r["done"], r["failed"], r["rps"], r["tps"], r["ttft50"], r["ttft99"],
             r["itl50"], r["itl99"]] for name, r in res.items()]
    benchlib.table(["batching", "done", "failed", "req/s", "tokens/s", "TTFT p50 ms",
                    "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms"], rows)
    c, st = res["continuous"], res["static"]
    print("# continuous/static: requests/s %.2fx, tokens/s %.2fx, TTFT p50 %.2fx, p99 %.2fx, "
          "ITL p50 %.2fx, p99 %.2fx" % (c["rps"] / st["rps"], c["tps"] / st["tps"],
                                        c["ttft50"] / st["ttft50"], c["ttft99"] / st["ttft99"],
                                        c["itl50"] / st["itl50"], c["itl99"] / st["itl99"]))


if __name__ == "__main__":
    benchlib.main_guard(main)
