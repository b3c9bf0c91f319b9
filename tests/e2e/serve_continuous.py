#!/usr/bin/python3
"""serve_continuous.py - continuous batching in --serve: a decode program
whose position is one per row (`KC[B, At[B], K, H]`) is served with
iteration-level scheduling, driven by Python's http.client on 127.0.0.1.

serve.py's two-layer decoder, with At[B] in place of Pos[] and 3 slots, is
compiled for a 2x2 mesh (and the Pos[] variant beside it).  Checks:
 - --generate of the At[B] program (every row at the same position) makes
   the tokens of the Pos[] program, greedy (and with --mpi, on 4 MPI ranks
   the tokens it makes on threads);
 - 7 concurrent greedy requests of different prompt and output lengths,
   more than the slots (so requests join as others finish), each get
   exactly the text --generate makes for them alone;
 - a request sent while a long one streams gets all its tokens before the
   long one completes; with Pos[] (static batching: a batch runs until all
   its rows end) it completes after, which the check must tell apart, and
   so it does with the At[B] program served with --static-batching;
 - a sampled request, seeded, gets the same text alone and among others;
 - with the logits vocab-sharded (`output Logits[B, V_X]`: each step
   gathers (value, index) pairs or whole rows, whichever are fewer bytes),
   the sampled request (temperature and top-p: whole rows), a top-k 4 one
   (pairs) and 4 greedy ones (pairs), concurrent, get the replicated
   program's texts; alone, a greedy and a top-k request each gather
   pairs once per token, of the closed form's bytes (B * G * K * 16);
 - with --mpi, on 4 MPI ranks (rank 0 serves and broadcasts each step's
   tokens, positions and gather), the same 6 requests, concurrent, get
   the same texts, with replicated and with vocab-sharded logits, and
   SIGTERM to rank 0 ends every rank (mpirun's status 0);
 - more concurrent requests than --max-queue 1 holds get 503, the others
   their text;
 - SIGTERM while 3 long streams run on the 3 slots and 3 requests wait
   (their connections suspended until the engine changes them): the
   running streams end with their text, the 2 waiting whole answers get
   503 and the waiting stream an error event and [DONE], and the server
   exits with status 0;
 - /metrics has einc_running_rows and einc_iterations_total, which counts
   the steps run.
The last line is `N passed, N failed`.

Usage: serve_continuous.py --einc PATH [--mpi --mpirun PATH]
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import serve  # noqa: E402
from e2e_common import Tally, mpi_launch, runtime_args  # noqa: E402
from serve import Server, concurrently, gathers, generate, text_of  # noqa: E402

serve.DIMS.update(B=3, S=192)  # 3 slots, a cache long enough for a long request
S = serve.DIMS["S"]


def compile_variant(a, work, per_row, t, runtime="threads", sharded=False):
    """The decoder with At[B] (per_row) or Pos[], its logits vocab-sharded
    when `sharded`; its executable or None."""
    name = ("cont" if per_row else "static") + ("_sharded" if sharded else "") + "_" + runtime
    src = os.path.join(work, name + ".ein")
    with open(src, "w") as f:
        f.write(serve.source(per_row=per_row, sharded=sharded))
    exe = os.path.join(work, name)
    p = subprocess.run([a.einc, src, "-o", exe, "--runtime=" + runtime], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        t.result(False, "einc %s.ein" % name, p.stdout)
        return None
    return exe


def stream_timed(s, fields, first, out):
    """Streams a completion; out gets (text, time its last token arrived);
    `first` is set when the first chunk arrives."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=serve.TIMEOUT)
    text, last = "", 0.0
    try:
        c.request("POST", "/v1/completions", body=json.dumps(dict(fields, stream=True)))
        r = c.getresponse()
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            text += json.loads(line[len("data: "):])["choices"][0]["text"]
            last = time.monotonic()
            first.set()
        out.append((text, last))
    finally:
        first.set()
        c.close()


def joins_running(s, exe, work):
    """Sends a short request while a long one streams: (both texts are
    what --generate makes for them, seconds from the short one's end to
    the long one's, a detail for failures)."""
    # The short one takes 38 steps, the long one 190: a margin either way.
    short = "a shorter one, "
    long_req, short_req = dict(prompt="L", max_tokens=S - 1), dict(prompt=short, max_tokens=24)
    want_long = generate(exe, work, "L", S - 1)
    want_short = generate(exe, work, short, 24)
    first, out = threading.Event(), []
    th = threading.Thread(target=stream_timed, args=(s, long_req, first, out))
    th.start()
    first.wait(timeout=serve.TIMEOUT)
    status, a = s.complete(**short_req)
    short_done = time.monotonic()
    th.join(timeout=2 * serve.TIMEOUT)
    long_text, long_done = out[0] if out else (None, 0)
    return (status == 200 and text_of(a) == want_short and long_text == want_long,
            long_done - short_done, "short %d %r want %r, long %r want %r"
            % (status, a, want_short, long_text, want_long))


def metric(s, name):
    _, data = s.request("GET", "/metrics")
    for line in data.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def wait_metric(s, name, value):
    """Polls /metrics until `name` reads `value`; whether it did in time."""
    end = time.monotonic() + serve.TIMEOUT
    while time.monotonic() < end:
        if metric(s, name) == value:
            return True
        time.sleep(0.002)
    return False


def check_shutdown(t, exe, work):
    """SIGTERM with every slot running a long stream and 3 requests
    queued: the running ones finish, the queued ones are refused (whole
    answers 503, a stream an error event), the server exits 0."""
    want = generate(exe, work, "q", S)
    s = Server(exe)
    out = [None] * 6

    def one(i):
        if i in (0, 1, 2, 5):
            out[i] = s.stream(prompt="q", max_tokens=S)
        else:
            out[i] = s.complete(prompt="q", max_tokens=S)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    try:
        for th in threads[:3]:
            th.start()
        running = wait_metric(s, "einc_running_rows", 3)
        for th in threads[3:]:
            th.start()
        queued = running and wait_metric(s, "einc_queue_length", 3)
        rc = s.stop() if queued else None
        for th in threads:
            th.join(timeout=2 * serve.TIMEOUT)
    finally:
        s.kill()
    streamed = [o and o[0] == 200 and o[2] and "".join(
        e["choices"][0]["text"] for e in o[1] if "choices" in e) == want for o in out[:3]]
    refused = out[5] and out[5][0] == 200 and out[5][2] and out[5][1] and "error" in out[5][1][-1]
    t.result(queued and rc == 0 and all(streamed) and [o and o[0] for o in out[3:5]] == [503] * 2
             and refused, "SIGTERM with 3 streams running and 3 requests queued: the streams "
             "end with their text, the queued get 503 (a stream an error event), status 0",
             "queued %r, status %r, answers %r" % (queued, rc, out))


def check_mpi(t, exe, launch, reqs, want, what):
    """The server of `exe` under `launch` (mpirun's prefix): `reqs`,
    concurrent, get the texts `want`; /metrics shows no row running after
    them; SIGTERM to rank 0 ends the job with status 0."""
    s = Server(exe, launch=launch)
    try:
        got = concurrently(s, reqs)
        t.result([g[0] for g in got] == [200] * len(reqs) and [text_of(g[1]) for g in got] == want
                 and metric(s, "einc_running_rows") == 0,
                 "4 MPI ranks, %s: %d concurrent requests on 3 slots get their texts alone"
                 % (what, len(reqs)), "got %r\nwant %r" % (got, want))
        rc = s.stop()
        t.result(rc == 0, "4 MPI ranks, %s: SIGTERM to rank 0 ends every rank, status 0" % what,
                 "status %s: %s" % (rc, s.p.stderr.read()))
    finally:
        s.kill()


def main():
    a = runtime_args(__doc__)
    t = Tally()
    with tempfile.TemporaryDirectory() as work:
        cont, static = (compile_variant(a, work, per_row, t) for per_row in (True, False))
        if not cont or not static:
            return t.finish()
        for prompt, n in [("Hello", 12), ("The quick brown fox", 30)]:
            got, want = generate(cont, work, prompt, n), generate(static, work, prompt, n)
            t.result(got == want, "--generate with At[B] = with Pos[] (%r, %d tokens)" % (prompt, n),
                     "%r vs %r" % (got, want))
        mpi = compile_variant(a, work, True, t, "mpi") if a.mpi else None
        if mpi:
            got = generate(mpi, work, "Hello", 12, launch=mpi_launch(a.mpirun, 4))
            want = generate(cont, work, "Hello", 12)
            t.result(got == want, "--generate with At[B] on 4 MPI ranks = on threads",
                     "%r vs %r" % (got, want))
        reqs = [dict(prompt="p" * (1 + 5 * i) + "q", max_tokens=4 + 7 * (i % 4)) for i in range(7)]
        alone = [generate(cont, work, r["prompt"], r["max_tokens"]) for r in reqs]
        s = Server(cont)
        try:
            iters0 = metric(s, "einc_iterations_total")
            got = concurrently(s, reqs)
            t.result(all(g[0] == 200 for g in got) and [text_of(g[1]) for g in got] == alone,
                     "%d concurrent greedy requests on 3 slots each get their text alone" % len(reqs),
                     "got %r\nwant %r" % (got, alone))
            steps = metric(s, "einc_iterations_total")
            running = metric(s, "einc_running_rows")
            # Every token and prompt token past the first of each request is
            # one step of its row; rows share steps, so fewer steps than that.
            most = sum(len(r["prompt"]) + r["max_tokens"] - 1 for r in reqs)
            t.result(iters0 == 0 and running == 0 and steps is not None and
                     max(len(r["prompt"]) + r["max_tokens"] - 1 for r in reqs) <= steps < most,
                     "/metrics: %s steps for %d row-steps, 0 rows running after" % (steps, most),
                     "iterations %r -> %r, running %r" % (iters0, steps, running))
            texts, ahead, detail = joins_running(s, cont, work)
            t.result(texts and ahead > 0, "a request sent while a long one streams ends first "
                     "(%.3f s before it)" % ahead, detail)
            sampled = dict(prompt="Once upon", max_tokens=20, temperature=1.5, top_p=0.9, seed=7)
            one = s.complete(**sampled)
            mixed = concurrently(s, [sampled] + reqs[:4])
            t.result(one[0] == 200 and mixed[0][0] == 200 and text_of(one[1]) == text_of(mixed[0][1]),
                     "a seeded sampled request: the same text alone and among others",
                     "%r vs %r" % (one, mixed[0]))
        finally:
            s.kill()
        topk = dict(prompt="Twice", max_tokens=18, temperature=1.2, top_k=4, seed=9)
        topk_text = generate(cont, work, "Twice", 18, ["--temperature", "1.2", "--top-k", "4",
                                                       "--seed", "9"])
        mixed, want = [sampled, topk] + reqs[:4], [text_of(one[1]), topk_text] + alone[:4]
        sharded = compile_variant(a, work, True, t, sharded=True)
        s = Server(sharded) if sharded else None
        try:  # vocab-sharded logits, pairs or whole rows each step: the same texts
            got = concurrently(s, mixed) if s else None
            t.result(got and [g[0] for g in got] == [200] * 6 and
                     [text_of(g[1]) for g in got] == want,
                     "vocab-sharded logits: the same texts, sampled (whole rows), top-k and "
                     "greedy (pairs), among others", "%r vs %r" % (got, want))
            for req, text, k in [(reqs[2], alone[2], 1), (topk, topk_text, 4)] if s else []:
                # Pairs B * G * K * 16 (B = 3 slots, G = 2) < whole rows 3 * 128 * 4.
                before = gathers(s)
                status, ans = s.complete(**req)
                delta = tuple(x - y for x, y in zip(gathers(s), before))
                n = req["max_tokens"]
                expect = (n, 0, n * 3 * 2 * k * 16, 0)
                t.result(status == 200 and text_of(ans) == text and delta == expect,
                         "vocab-sharded logits, K = %d alone: %d steps gather pairs of %d bytes"
                         % (k, n, 3 * 2 * k * 16), "%r want %r; gathers %r want %r"
                         % (ans, text, delta, expect))
        finally:
            if s:
                s.kill()
        if mpi:  # rank 0 serves; the other ranks follow its broadcasts
            launch = mpi_launch(a.mpirun, 4)
            check_mpi(t, mpi, launch, mixed, want, "replicated logits")
            sharded_mpi = compile_variant(a, work, True, t, "mpi", sharded=True)
            if sharded_mpi:
                check_mpi(t, sharded_mpi, launch, mixed, want, "vocab-sharded logits")
        s = Server(static)
        try:  # the forced alternative: static batching makes it wait
            texts, ahead, detail = joins_running(s, static, work)
            t.result(texts and ahead < 0, "with Pos[] (static batching) it ends after the long one "
                     "(%.3f s)" % -ahead, detail)
        finally:
            s.kill()
        s = Server(cont, ["--static-batching"])
        try:  # the same At[B] program, batches admitted only into an empty batch
            texts, ahead, detail = joins_running(s, cont, work)
            t.result(texts and ahead < 0, "At[B] with --static-batching: it ends after the long "
                     "one as well (%.3f s)" % -ahead, detail)
        finally:
            s.kill()
        s = Server(cont, ["--max-queue", "1"])
        try:
            want = generate(cont, work, "q", S)
            got = concurrently(s, [dict(prompt="q", max_tokens=S)] * 12)
            codes = [g[0] for g in got]
            t.result(503 in codes and 200 in codes and set(codes) <= {200, 503} and
                     all(text_of(g[1]) == want for g in got if g[0] == 200),
                     "beyond --max-queue 1: 503 (%d of 12), the others their text"
                     % codes.count(503), repr(codes))
        finally:
            s.kill()
        check_shutdown(t, cont, work)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
