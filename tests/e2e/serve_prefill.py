#!/usr/bin/python3
"""serve_prefill.py - chunked prefill in --serve (`einc serve.ein --prefill
P.ein`): a prefill program over a window of W tokens per row, each row at
its own position (`KC[B, At[B]:W, ...]`), runs instead of the decode step
while slots have prompts to read.  Driven by Python's http.client on
127.0.0.1.

serve.py's two-layer decoder with At[B] (3 slots, a cache of 48) is the
decode step; the same model written over a window of W = 4 is its prefill
program.  Checks:
 - a prefill program whose window write passes the cache's end stops with
   the per-row window's message naming the row;
 - greedy requests with prompts shorter than, equal to and longer than W
   (1 to 13 tokens), sent one at a time, get the texts the server without
   --prefill gives them, and in fewer steps (einc_iterations_total), of
   which some ran the prefill program (einc_prefill_steps_total);
 - the same requests and a seeded sampled one, concurrent (more than the
   slots, so prompts are read while other rows decode), get those texts;
 - with --prefill-budget 1 the requests one at a time get their texts in
   more steps than without it and fewer than the decode step's; with
   budgets 1 and 3, alone and with --static-batching, the concurrent ones
   get their texts; --prefill-budget without a prefill program, or 0, is
   refused;
 - a prompt within W - 1 positions of the cache's end (its window would
   pass it: the engine runs the decode step there) and one filling the
   cache get their texts; so does a prompt read in a lower row while
   another row runs within W - 1 of the end (the prefill program must not
   run then, whichever row comes first);
 - examples/fortunes_serve.ein with examples/fortunes_prefill.ein (slots
   split over X) gives 5 concurrent requests the texts it gives without;
 - with --mpi, on 4 MPI ranks (rank 0 broadcasts each step's windows),
   the concurrent requests get the same texts;
 - einc refuses a prefill program whose cache differs from the decode
   program's (its length), or that has a scalar position, and one beside a
   decode program with a scalar position, with a located error.
The last line is `N passed, N failed`.

Usage: serve_prefill.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import serve  # noqa: E402
from e2e_common import Tally, mpi_launch, runtime_args  # noqa: E402
from serve import Server, concurrently, text_of  # noqa: E402

serve.DIMS.update(B=3, S=48)
S = serve.DIMS["S"]
W = 4


def window_source(cache="state KC[L, B, S, K_Y, H] : f32", pos="input At[B] : i32",
                  at="At[B]"):
    """serve.py's decoder over a window of T = W tokens per row at At[b]."""
    dims = dict(serve.DIMS, T=W)
    return "\n".join([
        "mesh X = 2, Y = 2",
        "dim " + ", ".join("%s = %d" % kv for kv in dims.items()),
        "input Tok[B, T] : i32", pos,
        "param Emb[V, D] : f32", "param Wq[L, D, K_Y, H] : f32", "param Wk[L, D, K_Y, H] : f32",
        "param Wv[L, D, K_Y, H] : f32", "param Wo[L, K_Y, H, D] : f32",
        "param W1[L, D, F_X] : f32", "param W2[L, F_X, D] : f32", "param Wlm[D, V_X] : f32",
        cache, "state VC[L, B, S, K_Y, H] : f32",
        "X[B, T, D] = Emb[Tok[B, T], D]",
        "repeat L {",
        "  Q[B, T, K, H] = X[B, T, D] * Wq[D, K, H]",
        "  KC[B, %s:T, K, H] = X[B, T, D] * Wk[D, K, H]" % at,
        "  VC[B, %s:T, K, H] = X[B, T, D] * Wv[D, K, H]" % at,
        "  Sc[B, T, K, S] = Q[B, T, K, H] * KC[B, S, K, H] / 2.8284271247461903",
        "  P[B, T, K, S] = softmax(where(S <= %s + T, Sc[B, T, K, S], -inf), S)" % at,
        "  Y1[B, T, D] = X[B, T, D] + P[B, T, K, S] * VC[B, S, K, H] * Wo[K, H, D]",
        "  U[B, T, F] = Y1[B, T, D] * W1[D, F]",
        "  X[B, T, D] = Y1[B, T, D] + relu(U[B, T, F]) * W2[F, D]",
        "}",
        "Logits[B, T, V] = 4 * X[B, T, D] * Wlm[D, V]",
        "output Logits[B, T, V]"]) + "\n"


def write(work, name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def einc(a, args):
    return subprocess.run([a.einc] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)


def build(t, a, work, runtime="threads", prefill=True):
    """The decode step's executable, with the prefill program linked when
    `prefill`; None (and a failed check) if einc fails."""
    name = ("pf" if prefill else "plain") + "_" + runtime
    exe = os.path.join(work, name)
    args = [write(work, "serve.ein", serve.source(per_row=True)), "-o", exe,
            "--runtime=" + runtime]
    if prefill:
        args += ["--prefill", write(work, "window.ein", window_source())]
    p = einc(a, args)
    t.result(p.returncode == 0, "einc serve.ein%s --runtime=%s" %
             (" --prefill window.ein" if prefill else "", runtime), p.stdout)
    return exe if p.returncode == 0 else None


def metric(s, name):
    _, data = s.request("GET", "/metrics")
    m = re.search(r"^%s (\S+)$" % name, data.decode(), re.M)
    return float(m.group(1)) if m else None


def served(exe, reqs, together, launch=(), extra=()):
    """The texts of `reqs` (one at a time, or all at once when `together`)
    and the server's steps and prefill steps; `extra`: more server flags."""
    s = Server(exe, extra, launch=launch)
    try:
        got = concurrently(s, reqs) if together else [s.complete(**r) for r in reqs]
        texts = [text_of(g[1]) if g[0] == 200 else g for g in got]
        return texts, metric(s, "einc_iterations_total"), metric(s, "einc_prefill_steps_total")
    finally:
        s.kill()


def check_window_bounds(t, a, work):
    """The prefill program alone: a row's window past the cache's end."""
    exe = os.path.join(work, "window_alone")
    p = einc(a, [write(work, "window.ein", window_source()), "-o", exe])
    if p.returncode != 0:
        t.result(False, "einc window.ein", p.stdout)
        return
    at = os.path.join(work, "at.npy")
    np.save(at, np.array([0, S - W + 1, 3], dtype=np.int32))
    p = subprocess.run([exe, "--random-inputs", "1", "--input", "At=" + at],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    want = ("write into 'KC': positions At[1] = %d to %d (a window of %d) are outside its dim "
            "'S' of %d (valid starts 0..%d)" % (S - W + 1, S, W, S, S - W))
    t.result(p.returncode == 1 and want in p.stdout,
             "a per-row window past the cache's end: the row's message", p.stdout)


def check_compile_errors(t, a, work):
    """A prefill program that does not fit the decode program."""
    src = write(work, "serve.ein", serve.source(per_row=True))
    static = write(work, "static.ein", serve.source(per_row=False))
    cases = [  # (what, the decode program, the prefill's text, einc's extra flags, want)
        ("its cache of another length (--prefill-define S=40)", src, window_source(),
         ["--prefill-define", "S=40"],
         r"window_bad\.ein:\d+:\d+: error: prefill: state 'KC' must be a state of '.*serve\.ein' "
         r"with the same shape, dtype and sharding"),
        ("a scalar position", src, window_source(pos="input Pos[] : i32", at="Pos").replace(
            "S <= Pos + T", "S <= Pos[] + T"), [],
         r"window_bad\.ein:\d+:\d+: error: prefill: input 'Pos' is neither the window's tokens"),
        ("a decode program with a scalar position (static batching)", static, window_source(), [],
         r"window_bad\.ein:\d+:\d+: error: prefill: '.*static\.ein' writes no state at one "
         r"position per row"),
    ]
    for what, main, text, extra, want in cases:
        exe = os.path.join(work, "bad")
        p = einc(a, [main, "--prefill", write(work, "window_bad.ein", text), "-o", exe] + extra)
        t.result(p.returncode == 1 and re.search(want, p.stdout) and "^" in p.stdout and
                 not os.path.exists(exe),
                 "einc --prefill with %s: a located error" % what, p.stdout)


def check_fortunes(t, a, work):
    """examples/fortunes_serve.ein with and without examples/fortunes_prefill.ein
    (4 slots split over X, so each device writes its own rows' windows)."""
    ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
    exes = [os.path.join(work, "fortunes" + k) for k in ("", "_pf")]
    src = os.path.join(ex, "fortunes_serve.ein")
    for exe, extra in zip(exes, ([], ["--prefill", os.path.join(ex, "fortunes_prefill.ein")])):
        p = einc(a, [src, "-o", exe] + extra)
        if p.returncode != 0:
            t.result(False, "einc fortunes_serve.ein " + " ".join(extra), p.stdout)
            return
    reqs = [dict(prompt=p, max_tokens=n) for p, n in
            [("The ", 12), ("A fortune: ", 9), ("x" * 20, 5), ("What is the meaning of", 7),
             ("q", 4)]]
    want, got = served(exes[0], reqs, True)[0], served(exes[1], reqs, True)
    t.result(got[0] == want and None not in want and got[2] > 0,
             "examples/fortunes_serve.ein with --prefill examples/fortunes_prefill.ein (W = 8): "
             "5 concurrent requests get the texts without", "got %r\nwant %r" % (got, want))


def prompt_beside_end(exe):
    """A prompt read in row 0 while row 1 runs within W - 1 of the cache's
    end (the engine must run the decode step, not the prefill program whose
    window would pass it): A (row 0) ends while B and D (rows 1, 2) run on
    to the end, and C, queued, takes row 0 with a prompt of 40 tokens when
    B is about 46 - (steps between A's start and B's) positions in.  The
    texts of A, B, D, C and whether the server still runs."""
    reqs = [dict(prompt="A", max_tokens=46), dict(prompt="B", max_tokens=S - 1),
            dict(prompt="D", max_tokens=S - 1), dict(prompt="c" * 40, max_tokens=3)]
    out = [None] * len(reqs)

    def one(i):
        out[i] = s.complete(**reqs[i])
    s = Server(exe)
    try:
        threads = []
        for batch, running in (([0], 1), ([1, 2], 3), ([3], None)):
            for i in batch:
                threads.append(threading.Thread(target=one, args=(i,)))
                threads[-1].start()
            end = time.monotonic() + serve.TIMEOUT
            while running and metric(s, "einc_running_rows") != running and \
                    time.monotonic() < end:
                time.sleep(0.0005)
        for th in threads:
            th.join(timeout=2 * serve.TIMEOUT)
        return ([text_of(g[1]) if g and g[0] == 200 else g for g in out],
                s.p.poll() is None)
    finally:
        s.kill()


def check_budget(t, pf, reqs, want, steps, pf_steps, mixed, want_mixed):
    """--prefill-budget: a step's chunks read at most N prompt tokens beyond
    one per row; the texts stay those of the decode step alone."""
    got, b_steps, b_prefill = served(pf, reqs, False, extra=["--prefill-budget", "1"])
    # One request at a time: a prefill step reads 2 of its prompt tokens
    # (budget 1) instead of up to W = 4, so more steps than without the
    # budget and fewer than the decode step alone.
    t.result(got == want and pf_steps < b_steps < steps and b_prefill > 0,
             "--prefill-budget 1, one at a time: the texts, in %s steps (%s of the prefill "
             "program) between --prefill's %s and the decode step's %s"
             % (b_steps, b_prefill, pf_steps, steps), "got %r\nwant %r" % (got, want))
    for budget in ("1", "3"):
        for extra in ([], ["--static-batching"]):
            got = served(pf, mixed, True, extra=["--prefill-budget", budget] + extra)[0]
            t.result(got == want_mixed, "--prefill-budget %s%s, %d concurrent requests on 3 "
                     "slots: the texts without --prefill" % (budget, " --static-batching"
                                                          if extra else "", len(mixed)),
                     "got %r\nwant %r" % (got, want_mixed))


def check_budget_refused(t, plain):
    """--prefill-budget without a prefill program, or of 0: an error."""
    for flags, want in ((["--prefill-budget", "2"], "none is linked"),
                        (["--prefill-budget", "0"], "--prefill-budget expects a count")):
        p = subprocess.run([plain, "--serve", "--port", "0", "--random-inputs", "1"] + flags,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        t.result(p.returncode == 1 and "einrt: error:" in p.stdout and want in p.stdout,
                 "%s: refused (%s)" % (" ".join(flags), want), p.stdout)


def main():
    a = runtime_args(__doc__)
    t = Tally()
    with tempfile.TemporaryDirectory() as work:
        check_window_bounds(t, a, work)
        check_compile_errors(t, a, work)
        plain, pf = build(t, a, work, prefill=False), build(t, a, work)
        if not plain or not pf:
            return t.finish()
        reqs = [dict(prompt=p, max_tokens=n) for p, n in
                [("a", 6), ("abc", 5), ("abcd", 7), ("Hello", 9), ("The quick", 4),
                 ("jumps over th", 8)]]
        want, steps, _ = served(plain, reqs, False)
        got, pf_steps, pf_prefill = served(pf, reqs, False)
        t.result(got == want and None not in want,
                 "prompts of 1 to 13 tokens (W = %d), one at a time: the texts without "
                 "--prefill" % W, "got %r\nwant %r" % (got, want))
        t.result(pf_steps < steps and pf_prefill > 0,
                 "with --prefill they take fewer steps (%s against %s), %s of the prefill "
                 "program" % (pf_steps, steps, pf_prefill))
        sampled = dict(prompt="Once upon a time", max_tokens=10, temperature=1.3, top_p=0.9,
                       seed=5)
        mixed = reqs + [sampled, dict(prompt="abcdefgh", max_tokens=12)]
        want_mixed = served(plain, mixed, True)[0]
        got_mixed = served(pf, mixed, True)[0]
        t.result(got_mixed == want_mixed and want_mixed[:len(reqs)] == want,
                 "%d concurrent requests on 3 slots (one sampled): the texts without --prefill"
                 % len(mixed), "got %r\nwant %r" % (got_mixed, want_mixed))
        check_budget(t, pf, reqs, want, steps, pf_steps, mixed, want_mixed)
        want_end, _ = prompt_beside_end(plain)
        got_end, alive = prompt_beside_end(pf)
        t.result(alive and got_end == want_end and None not in want_end,
                 "a prompt read in row 0 while row 1 runs within W - 1 of the cache's end: "
                 "the texts without --prefill (the decode step runs there)",
                 "got %r\nwant %r\nserver alive %s" % (got_end, want_end, alive))
        check_budget_refused(t, plain)
        edge = [dict(prompt="e" * (S - 3), max_tokens=4), dict(prompt="f" * S, max_tokens=1),
                dict(prompt="g" * (S - W - 2), max_tokens=6)]
        want_edge, got_edge = served(plain, edge, True)[0], served(pf, edge, True)[0]
        t.result(got_edge == want_edge and None not in want_edge,
                 "prompts ending within W - 1 of the cache's end, or filling it: their texts",
                 "got %r\nwant %r" % (got_edge, want_edge))
        check_fortunes(t, a, work)
        mpi = build(t, a, work, "mpi") if a.mpi else None
        if mpi:
            got = served(mpi, mixed, True, launch=mpi_launch(a.mpirun, 4))[0]
            t.result(got == want_mixed, "4 MPI ranks: the concurrent requests' texts",
                     "got %r\nwant %r" % (got, want_mixed))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
