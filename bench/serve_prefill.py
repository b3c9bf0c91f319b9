#!/usr/bin/env python3
"""Time to first token with and without chunked prefill in --serve
(docs/generation.md, "Chunked prefill"), under the same load of long
prompts on 127.0.0.1.

The fortunes decode program (examples/fortunes_serve.ein) is compiled with
`-D B=SLOTS -D S=CACHE` (default 16 slots, a cache of 128) twice with the
same einc: alone (a prompt is read one token per step), and with its
prefill program linked (`--prefill examples/fortunes_prefill.ein
--prefill-define T=W ...`, default W = 16: a slot with prompt left reads
up to W tokens a step while the others decode).  Each is served with
`--random-inputs 1` (greedy) and gets the same load, bench/serve.py's
machinery (its one-loop client, bench/serve_client.py): --requests streamed requests at Poisson arrival times
(--rate, default 8/s, below saturation so that the time to first token is
the prompt's reading rather than the queue's wait), with prompts of
--prompt-min..--prompt-max characters (default 48..96, uniform) and
max_tokens 4..16.  The variants run interleaved, --repeat times; the
table has the medians, and the headline is the ratio of the median time
to first token (without / with), beside the tokens/s, the steps the
server ran and the inter-token latency, which piggybacked prefill chunks
lengthen for the decoding rows (Sarathi's trade-off).

    python3 bench/serve_prefill.py --build BUILD [--window 16] [--requests 64] [--rate 8]
                                   [--slots 16] [--cache 128] [--prompt-min 48]
                                   [--prompt-max 96] [--repeat 3] [--seed 1] [--time-cap 120]
                                   [--json FILE]
"""
import os
import random
import statistics
import tempfile

import benchlib
import serve


def workload(n, rate, seed, lo, hi, S):
    """[(send offset, fields)]: n requests, prompts lo..hi characters long."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        plen = rng.randint(lo, hi)
        prompt = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(plen))
        out.append((t, dict(prompt=prompt, max_tokens=min(rng.randint(4, 16), S - plen + 1))))
        t += rng.expovariate(rate)
    return out


def main():
    p = benchlib.parser(__doc__.split("\n\n")[0])
    p.add_argument("--window", type=int, default=16, help="W, the prefill's tokens per row")
    p.add_argument("--requests", type=int, default=64, help="requests per run (default 64)")
    p.add_argument("--rate", type=float, default=8.0, help="arrivals per second (default 8)")
    p.add_argument("--slots", type=int, default=16, help="-D B: slots (default 16; even)")
    p.add_argument("--cache", type=int, default=128, help="-D S: cache positions (default 128)")
    p.add_argument("--prompt-min", type=int, default=48, help="shortest prompt (default 48)")
    p.add_argument("--prompt-max", type=int, default=96, help="longest prompt (default 96)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each, interleaved (default 3)")
    p.add_argument("--seed", type=int, default=1, help="the workload's seed")
    p.add_argument("--time-cap", type=float, default=120.0, help="seconds per run, at most")
    a = p.parse_args()
    S = a.cache
    if not 1 <= a.repeat <= 20 or not 1 <= a.requests <= 2000 or a.rate <= 0:
        raise benchlib.BenchError("--repeat must be 1..20, --requests 1..2000, --rate > 0")
    if a.slots < 2 or a.slots % 2 or not 32 <= S <= 4096 or not 1 <= a.window <= S:
        raise benchlib.BenchError("--slots must be even, --cache 32..4096, --window 1..cache")
    if not 1 <= a.prompt_min <= a.prompt_max <= S - 4:
        raise benchlib.BenchError("prompts must be 1 <= min <= max <= cache - 4")
    einc = benchlib.einc(a.build)
    ex = benchlib.ROOT / "examples"
    sizes = ["-D", "B=%d" % a.slots, "-D", "S=%d" % S]
    print(benchlib.machine())
    print("# %d requests, Poisson arrivals at %g/s, %d slots, cache %d, prompts %d..%d "
          "characters, max_tokens 4..16, greedy, prefill window %d; medians of %d interleaved "
          "runs" % (a.requests, a.rate, a.slots, S, a.prompt_min, a.prompt_max, a.window,
                    a.repeat))
    names = ("decode only", "chunked prefill")
    got = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="einc-bench-prefill-") as tmp:
        exes = {n: os.path.join(tmp, "v%d" % i) for i, n in enumerate(names)}
        benchlib.run([str(einc), str(ex / "fortunes_serve.ein"), "-o", exes[names[0]]] + sizes)
        benchlib.run([str(einc), str(ex / "fortunes_serve.ein"), "-o", exes[names[1]]] + sizes +
                     ["--prefill", str(ex / "fortunes_prefill.ein"),
                      "--prefill-define", "B=%d" % a.slots, "--prefill-define", "S=%d" % S,
                      "--prefill-define", "T=%d" % a.window])
        work = workload(a.requests, a.rate, a.seed, a.prompt_min, a.prompt_max, S)
        for _ in range(a.repeat):  # interleaved, so a change in the machine's load hits both
            for n in names:
                got[n].append(serve.load(exes[n], work, a.time_cap, a.requests))
    runs = [(n, {k: statistics.median(r[k] for r in got[n]) for k in got[n][0]}) for n in names]
    benchlib.table(["serving", "done", "failed", "tokens/s", "steps", "ms/step",
                    "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms"],
                   [[n, r["done"], r["failed"], r["tps"], r["steps"], r["step_ms"], r["ttft50"],
                     r["ttft99"], r["itl50"], r["itl99"]] for n, r in runs])
    d, c = runs[0][1], runs[1][1]
    ttft = d["ttft50"] / c["ttft50"]
    print("# median TTFT, decode only / chunked prefill: %.2fx (p99 %.2fx); steps %.2fx; "
          "tokens/s chunked / decode only %.2fx; ITL p50 chunked / decode only %.2fx, p99 %.2fx"
          % (ttft, d["ttft99"] / c["ttft99"], d["steps"] / c["steps"], c["tps"] / d["tps"],
             c["itl50"] / d["itl50"], c["itl99"] / d["itl99"]))
    res = benchlib.Results("serve_prefill", "Chunked prefill in --serve: time to first token "
                           "(fortunes, untrained, %d slots, W = %d)" % (a.slots, a.window))
    res.add("TTFT p50, decode only / chunked prefill", round(ttft, 3), "x", ratio=round(ttft, 3))
    r99 = round(d["ttft99"] / c["ttft99"], 3)
    res.add("TTFT p99, decode only / chunked prefill", r99, "x", ratio=r99)
    tps = round(c["tps"] / d["tps"], 3)
    res.add("tokens/s, chunked prefill / decode only", tps, "x", ratio=tps)
    itl = round(c["itl50"] / d["itl50"], 3)
    res.add("ITL p50, chunked prefill / decode only", itl, "x", ratio=itl)
    for n, r in runs:
        res.add("TTFT p50, %s" % n, round(r["ttft50"], 1), "ms")
        res.add("steps, %s" % n, r["steps"], "steps")
    res.write(a.json)


if __name__ == "__main__":
    benchlib.main_guard(main)
