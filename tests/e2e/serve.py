#!/usr/bin/python3
"""serve.py - the HTTP server of a decode program (--serve), driven by
Python's http.client on 127.0.0.1.

A two-layer decoder over a KV cache (as generate.py's, with a vocabulary of
128 ASCII characters) is compiled for a 2x2 mesh and served on the threads
runtime with random params; the server is started with --port 0 and its
`listening on` line read from stdout.  Checks:
 - a greedy completion's text is the tokens `--generate` makes for the
   same prompt (as characters), and its usage counts the tokens;
 - streaming (server-sent events) gives the same text, chunk by chunk;
 - max_tokens' default (16, or what the cache leaves) and the ASCII
   tokenizer's '?' for bytes >= 128;
 - HTTP/1.1 keep-alive: a streamed, a whole and another streamed
   completion and /health on one connection (as a pooled client sends
   them: bench/serve_load.c --connections reuse) each get their answer,
   and the connection stays open between them;
 - several concurrent requests (threads), with other prompts and lengths
   in one static batch, each get exactly the text they get alone;
 - sampling: the same seed gives the same text, and it is row 0 of
   `--generate --temperature T --seed S` (the engine draws from the
   request's seed and the position only); a stop string ends the text
   before it;
 - every bad request gets its status (400 naming the field, 404, 405,
   413), a client that disconnects mid-stream does not hurt the server,
   and /health still answers afterwards;
 - more concurrent requests than the queue holds (--max-queue 1) get 503,
   and the others their text;
 - /metrics parses as Prometheus text and counts the answers and tokens,
   and has the engine's phase seconds (einc_engine_seconds_total);
 - SIGTERM ends the server with status 0;
 - a byte-level model (V = 256), which may make any byte: every answer,
   whole and streamed, is UTF-8 (JSON text must be), bytes that are no
   character come as U+FFFD, and the streamed events, each UTF-8 alone,
   join to the whole answer's text (the random params make bytes that
   are no characters, not whole multi-byte ones: holding an unfinished
   character back is checked by test_request_json.c's rt_utf8_partial);
 - a program whose logits stay vocab-sharded serves greedy and sampled
   requests with the texts of the replicated program;
 - there each step gathers (value, index) pairs or whole rows by their
   bytes: greedy, top-k and temperature-only requests, alone and two in
   one batch, get the replicated program's texts, and /metrics counts,
   for a request alone, one gather per token of exactly the closed form's
   bytes (pairs B * G * K * 16, whole rows B * V * 4); on threads (also
   with the batch sharded, `Logits[B_Y, V_X]`) and, with --mpi, on 4 MPI
   ranks;
 - with --mpi, the same program on 4 MPI ranks (rank 0 serves, the others
   follow its broadcasts): greedy completions alone, streamed and
   concurrent (with a seeded sampled one) get the threads --generate's
   texts, a bad request its 400, and SIGTERM to rank 0 ends every rank
   (mpirun's status 0); a port in use ends every rank with rank 0's message.
Every request has a timeout, and the servers are killed in `finally`.
The last line is `N passed, N failed`.

Usage: serve.py --einc PATH [--mpi --mpirun PATH]
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, mpi_launch, runtime_args  # noqa: E402

DIMS = dict(B=2, S=40, D=32, K=4, H=8, V=128, L=2, F=64)
SEED = 11  # --random-inputs: the params
TIMEOUT = 60


def source(sharded=False, per_row=False, vocab=DIMS["V"]):
    """The decoder; `sharded`: its logits stay vocab-sharded, with an argmax
    output as well; `per_row`: one
    position per row, At[B], for continuous batching (serve_continuous.py);
    `vocab`: V (256 or more: the byte-level tokenizer)."""
    pos = "At[B]" if per_row else "Pos[]"
    return "\n".join([
        "mesh X = 2, Y = 2",
        "dim " + ", ".join("%s = %d" % kv for kv in dict(DIMS, V=vocab).items()),
        "input Tok[B] : i32", "input %s : i32" % pos,
        "param Emb[V, D] : f32", "param Wq[L, D, K_Y, H] : f32", "param Wk[L, D, K_Y, H] : f32",
        "param Wv[L, D, K_Y, H] : f32", "param Wo[L, K_Y, H, D] : f32",
        "param W1[L, D, F_X] : f32", "param W2[L, F_X, D] : f32", "param Wlm[D, V_X] : f32",
        "state KC[L, B, S, K_Y, H] : f32", "state VC[L, B, S, K_Y, H] : f32",
        "X[B, D] = Emb[Tok[B], D]",
        "repeat L {",
        "  Q[B, K, H] = X[B, D] * Wq[D, K, H]",
        "  KC[B, %s, K, H] = X[B, D] * Wk[D, K, H]" % pos,
        "  VC[B, %s, K, H] = X[B, D] * Wv[D, K, H]" % pos,
        "  Sc[B, K, S] = Q[B, K, H] * KC[B, S, K, H] / 2.8284271247461903",
        "  P[B, K, S] = softmax(where(S <= %s, Sc[B, K, S], -inf), S)" % pos,
        "  Y1[B, D] = X[B, D] + P[B, K, S] * VC[B, S, K, H] * Wo[K, H, D]",
        "  U[B, F] = Y1[B, D] * W1[D, F]",
        "  X[B, D] = Y1[B, D] + relu(U[B, F]) * W2[F, D]",
        "}",
        "Logits[B, V] = 4 * X[B, D] * Wlm[D, V]"] +
        (["output Logits[B, V_X]", "Next[B] = argmax(Logits[B, V], V)", "output Next[B]"]
         if sharded else ["output Logits[B, V]"])) + "\n"


def rank0_pid(mpirun_pid):
    """The process of rank 0 among mpirun's children (Open MPI starts the
    ranks of its node itself and tells each its rank in its environment),
    or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open("/proc/%s/environ" % pid, "rb") as f:
                if b"OMPI_COMM_WORLD_RANK=0" in f.read().split(b"\0"):
                    return int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return None


class Server:
    """An executable started with --serve --port 0, under `launch` (a prefix
    such as mpirun's) if given; kill() always ends it."""

    def __init__(self, exe, extra=(), launch=()):
        self.launch = list(launch)
        self.p = subprocess.Popen(self.launch + [exe, "--serve", "--port", "0", "--random-inputs",
                                                 str(SEED)] + list(extra), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line.strip())
        if not m:
            self.kill()
            raise RuntimeError("no `listening on` line: %r %s" % (line, self.p.stderr.read()))
        self.port = int(m.group(1))

    def request(self, method, path, body=None, headers=None):
        """(status, body bytes); body: a dict (sent as JSON), bytes, or None."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            data = json.dumps(body).encode() if isinstance(body, dict) else body
            c.request(method, path, body=data, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def complete(self, **fields):
        """A non-streaming completion: (status, the answer as JSON or None)."""
        status, data = self.request("POST", "/v1/completions", fields)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, None

    def stream(self, **fields):
        """A streaming completion: (status, [chunk JSONs], saw [DONE])."""
        status, data = self.request("POST", "/v1/completions", dict(fields, stream=True))
        events = [e[len("data: "):] for e in data.decode().split("\n\n") if e]
        done = bool(events) and events[-1] == "[DONE]"
        return status, [json.loads(e) for e in events if e != "[DONE]"], done

    def stop(self):
        """SIGTERM to the process that serves (under mpirun, rank 0's: a
        signal to mpirun aborts every rank); the exit status of the job."""
        pid = rank0_pid(self.p.pid) if self.launch else self.p.pid
        if pid is None:
            return "no rank 0 process among mpirun's children"
        os.kill(pid, signal.SIGTERM)
        return self.p.wait(timeout=TIMEOUT)

    def kill(self):
        if self.p.poll() is None and self.launch:
            self.p.terminate()  # mpirun ends its ranks before it exits
            try:
                self.p.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=TIMEOUT)
        for f in (self.p.stdout, self.p.stderr):
            f.close()


def compile_exe(t, a, src, exe, runtime="threads"):
    """Compiles `src` into `exe` for `runtime`; False (and a failed check
    with einc's output) if einc fails."""
    p = subprocess.run([a.einc, src, "-o", exe, "--runtime=" + runtime], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        t.result(False, "einc %s --runtime=%s" % (os.path.basename(src), runtime), p.stdout)
    return p.returncode == 0


def generate(exe, work, prompt, n, args=(), launch=()):
    """Row 0's tokens of `--generate n` for `prompt` (a str) in every row;
    `launch`: a prefix such as mpirun's."""
    ids = np.array([[ord(c) for c in prompt]] * DIMS["B"], dtype=np.int32)
    path = os.path.join(work, "prompt.npy")
    np.save(path, ids)
    p = subprocess.run([*launch, exe, "--random-inputs", str(SEED), "--prompt-ids", path, "--generate",
                        str(n)] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=TIMEOUT)
    m = re.search(r"^tokens 0:(.*)$", p.stdout, re.M)
    if p.returncode != 0 or not m:
        raise RuntimeError("--generate failed: " + p.stdout)
    return "".join(chr(int(t)) for t in m.group(1).split())


def text_of(answer):
    return answer["choices"][0]["text"] if answer else None


def check_greedy(t, s, exe, work):
    """Greedy completions against --generate, streaming against not."""
    for prompt, n in [("Hello", 12), ("a", 1), ("The quick brown fox", 21)]:
        want = generate(exe, work, prompt, n)
        status, a = s.complete(prompt=prompt, max_tokens=n)
        usage = a and a.get("usage")
        t.result(status == 200 and text_of(a) == want and a["object"] == "text_completion" and
                 a["choices"][0]["finish_reason"] == "length" and
                 usage == dict(prompt_tokens=len(prompt), completion_tokens=n,
                               total_tokens=len(prompt) + n),
                 "greedy %r, %d tokens = --generate's" % (prompt, n),
                 "status %d, got %r, want %r" % (status, a, want))
        status, chunks, done = s.stream(prompt=prompt, max_tokens=n)
        got = "".join(c["choices"][0]["text"] for c in chunks)
        t.result(status == 200 and done and got == want and
                 chunks[-1]["choices"][0]["finish_reason"] == "length" and
                 all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1]),
                 "streamed %r = the same text, then [DONE]" % prompt,
                 "status %d, chunks %r, want %r" % (status, chunks, want))


def check_defaults(t, s, exe, work):
    """max_tokens by default 16, or what the cache leaves; the ASCII
    tokenizer: a byte >= 128 is '?' (examples/fortunes/prepare.py)."""
    status, a = s.complete(prompt="Hello")
    t.result(status == 200 and a["usage"]["completion_tokens"] == 16 and
             text_of(a) == generate(exe, work, "Hello", 16),
             "max_tokens defaults to 16", repr(a))
    full = "z" * DIMS["S"]
    status, a = s.complete(prompt=full)
    t.result(status == 200 and a["usage"]["completion_tokens"] == 1 and
             a["usage"]["prompt_tokens"] == DIMS["S"], "a prompt filling the cache: one token",
             repr(a))
    status, a = s.complete(prompt="H\u00e9!", max_tokens=6)
    t.result(status == 200 and a["usage"]["prompt_tokens"] == 4 and
             text_of(a) == generate(exe, work, "H??!", 6),
             "'H\u00e9!' is the 4 tokens of 'H??!' (UTF-8 bytes >= 128 as '?')", repr(a))


def check_keepalive(t, s):
    """Three completions and /health on one connection: a streamed
    answer ends with chunked encoding's last chunk and a whole one with
    its Content-Length, so the connection is kept and takes the next."""
    want = text_of(s.complete(prompt="Hi", max_tokens=10)[1])
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=TIMEOUT)
    got, ports = [], []
    try:
        for stream in (True, False, True, None):
            if stream is None:
                c.request("GET", "/health")
            else:
                c.request("POST", "/v1/completions", body=json.dumps(
                    dict(prompt="Hi", max_tokens=10, stream=stream)).encode(),
                    headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read().decode()
            if stream:
                events = [e[len("data: "):] for e in data.split("\n\n") if e]
                got.append((r.status, "".join(json.loads(e)["choices"][0]["text"]
                                              for e in events[:-1]), events[-1:]))
            else:
                got.append((r.status, text_of(json.loads(data)) if stream is False else data,
                            r.getheader("Connection")))
            # http.client closes its socket after an answer that ends the connection
            ports.append(c.sock.getsockname()[1] if c.sock else None)
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError) as e:
        got.append(repr(e))
    finally:
        c.close()
    t.result(got == [(200, want, ["[DONE]"]), (200, want, None), (200, want, ["[DONE]"]),
                     (200, '{"status": "ok"}', None)] and
             len(set(ports)) == 1 and ports[0] is not None,
             "keep-alive: streamed, whole, streamed and /health on one connection",
             "got %r, want %r, local ports %r" % (got, want, ports))


def concurrently(s, requests):
    """Sends every request (a dict of fields) at once from threads; their
    (status, answer) in order."""
    out = [None] * len(requests)
    go = threading.Barrier(len(requests))

    def one(i):
        go.wait(timeout=TIMEOUT)
        out[i] = s.complete(**requests[i])
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=2 * TIMEOUT)
    return out


def check_concurrent(t, s):
    """Each of several concurrent requests gets what it gets alone."""
    reqs = [dict(prompt="x" * (1 + 3 * i), max_tokens=5 + 4 * i) for i in range(5)]
    reqs.append(dict(prompt="sampled", max_tokens=9, temperature=1.2, top_k=20, seed=3))
    alone = [s.complete(**r) for r in reqs]
    together = concurrently(s, reqs)
    t.result(all(a[0] == 200 for a in alone) and
             [text_of(a[1]) for a in together] == [text_of(a[1]) for a in alone],
             "%d concurrent requests each get their text alone" % len(reqs),
             "alone %r\ntogether %r" % (alone, together))


def check_sampling(t, s, exe, work):
    """Same seed, same text; = row 0 of --generate with that seed; stop."""
    req = dict(prompt="Once upon", max_tokens=20, temperature=1.5, top_p=0.9, seed=7)
    a, b = s.complete(**req), s.complete(**req)
    want = generate(exe, work, "Once upon", 20, ["--temperature", "1.5", "--top-p", "0.9",
                                                  "--seed", "7"])
    t.result(a[0] == b[0] == 200 and text_of(a[1]) == text_of(b[1]) == want,
             "sampling with seed 7: the same text twice, = --generate --seed 7's row 0",
             "%r %r want %r" % (a, b, want))
    # A stop string: the text ends before its first occurrence.
    full = text_of(s.complete(prompt="Hello", max_tokens=30)[1]) or ""
    stop = full[5:7]
    status, a = s.complete(prompt="Hello", max_tokens=30, stop=[stop, "\x7f\x7f\x7f"])
    t.result(len(stop) == 2 and status == 200 and text_of(a) == full[:full.find(stop)] and
             a["choices"][0]["finish_reason"] == "stop",
             "a stop string %r ends the text before it" % stop, "%r (full %r)" % (a, full))
    status, chunks, done = s.stream(prompt="Hello", max_tokens=30, stop=stop)
    t.result(status == 200 and done and
             "".join(c["choices"][0]["text"] for c in chunks) == full[:full.find(stop)],
             "streamed, the stop string is held back and dropped", repr(chunks))


BAD = [  # (what, method, path, body, status, field named)
    ("malformed JSON", "POST", "/v1/completions", b'{"prompt": "a",', 400, None),
    ("not an object", "POST", "/v1/completions", b'["a"]', 400, None),
    ("an unknown field", "POST", "/v1/completions", dict(prompt="a", n=2), 400, "n"),
    # The message quotes 80 bytes of the name and `param` 63, bytes 80 and 63
    # each the first of an e-acute's two: both stop before the character,
    # and the answer stays UTF-8
    ("a long unknown field", "POST", "/v1/completions",
     {"prompt": "a", "b" * 62 + "\u00e9" * 8 + "b" + "\u00e9" * 4: 1}, 400, "b" * 62),
    ("no prompt", "POST", "/v1/completions", dict(max_tokens=3), 400, "prompt"),
    ("an empty prompt", "POST", "/v1/completions", dict(prompt=""), 400, "prompt"),
    ("a prompt of ids", "POST", "/v1/completions", dict(prompt=[1, 2]), 400, "prompt"),
    ("a prompt longer than the cache", "POST", "/v1/completions",
     dict(prompt="y" * (DIMS["S"] + 1)), 400, "prompt"),
    ("max_tokens 0", "POST", "/v1/completions", dict(prompt="a", max_tokens=0), 400, "max_tokens"),
    ("max_tokens -3", "POST", "/v1/completions", dict(prompt="a", max_tokens=-3), 400,
     "max_tokens"),
    ("max_tokens beyond the cache", "POST", "/v1/completions",
     dict(prompt="abc", max_tokens=DIMS["S"] - 1), 400, "max_tokens"),
    ("max_tokens 2.5", "POST", "/v1/completions", dict(prompt="a", max_tokens=2.5), 400,
     "max_tokens"),
    ("max_tokens as a string", "POST", "/v1/completions", dict(prompt="a", max_tokens="4"), 400,
     "max_tokens"),
    ("temperature -1", "POST", "/v1/completions", dict(prompt="a", temperature=-1), 400,
     "temperature"),
    ("top_p 0", "POST", "/v1/completions", dict(prompt="a", top_p=0), 400, "top_p"),
    ("top_k beyond the vocabulary", "POST", "/v1/completions", dict(prompt="a", top_k=129), 400,
     "top_k"),
    ("stream as a string", "POST", "/v1/completions", dict(prompt="a", stream="yes"), 400,
     "stream"),
    ("five stop strings", "POST", "/v1/completions", dict(prompt="a", stop=list("abcde")), 400,
     "stop"),
    ("a seed of -1", "POST", "/v1/completions", dict(prompt="a", seed=-1), 400, "seed"),
    ("a body over 1 MiB", "POST", "/v1/completions", b"{" + b" " * (1 << 21) + b"}", 413, None),
    ("an unknown path", "GET", "/v1/chat", None, 404, None),
    ("GET /v1/completions", "GET", "/v1/completions", None, 405, None),
    ("POST /health", "POST", "/health", b"{}", 405, None),
]


def check_bad(t, s):
    """Each bad request's status (and named field); the server lives on."""
    for what, method, path, body, status, field in BAD:
        got, data = s.request(method, path, body)
        try:
            err = json.loads(data)["error"]
        except (ValueError, KeyError, TypeError):
            err = None
        t.result(got == status and err is not None and err.get("param") == field,
                 "%s: %d%s" % (what, status, " naming '%s'" % field if field else ""),
                 "got %d %r" % (got, data[:300]))
    # A client that goes away mid-stream, and one that never reads.
    for read in (True, False):
        body = json.dumps(dict(prompt="bye", max_tokens=30, stream=True)).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=TIMEOUT)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        if read:
            sock.recv(64)
        sock.close()
    status, data = s.request("GET", "/health")
    ok = s.complete(prompt="Hello", max_tokens=12)
    t.result(status == 200 and json.loads(data) == {"status": "ok"} and ok[0] == 200,
             "after them, /health answers ok and completions still work",
             "%d %r %r" % (status, data, ok))


def metrics(s):
    """/metrics as {name{labels}: value}, checking every line's syntax."""
    status, data = s.request("GET", "/metrics")
    out = {}
    for line in data.decode().splitlines():
        if line.startswith("#"):
            if not re.match(r"# (HELP|TYPE) \w+ .+$", line):
                raise ValueError("bad comment line %r" % line)
            continue
        m = re.match(r'([a-zA-Z_:][\w:]*(\{\w+="[^"]*"\})?) (\S+)$', line)
        if not m:
            raise ValueError("bad sample line %r" % line)
        out[m.group(1)] = float(m.group(3))
    return status, out


def check_metrics(t, s, before):
    """The counters moved by what this script sent."""
    try:
        status, m = metrics(s)
    except ValueError as e:
        t.result(False, "/metrics parses as Prometheus text", str(e))
        return
    bad400 = sum(1 for b in BAD if b[4] == 400)
    c = lambda code, d: d.get('einc_requests_total{code="%d"}' % code, 0)  # noqa: E731
    hist = m.get("einc_time_to_first_token_seconds_count", 0)
    t.result(status == 200 and c(400, m) - c(400, before) == bad400 and
             c(404, m) - c(404, before) == 1 and c(413, m) - c(413, before) == 1 and
             c(200, m) > c(200, before) and m.get("einc_queue_length") == 0 and
             m.get("einc_generation_tokens_total", 0) > before.get(
                 "einc_generation_tokens_total", 0) and hist > 0 and
             m.get('einc_inter_token_latency_seconds_bucket{le="+Inf"}') ==
             m.get("einc_inter_token_latency_seconds_count") and
             all(m.get('einc_engine_seconds_total{phase="%s"}' % ph, -1) >= 0
                 for ph in ("step", "sample", "bookkeep", "wake", "idle")) and
             m.get('einc_engine_seconds_total{phase="step"}', 0) >
             m.get('einc_engine_seconds_total{phase="sample"}', 0) and
             m.get("einc_http_event_seconds_total", 0) > 0,
             "/metrics parses and counts the answers, tokens, latencies and phases", repr(m))


def check_queue(t, exe):
    """--max-queue 1: a burst of long requests gets some 503s; the others
    their text."""
    s = Server(exe, ["--max-queue", "1"])
    try:
        want = text_of(s.complete(prompt="q", max_tokens=DIMS["S"])[1])
        got = concurrently(s, [dict(prompt="q", max_tokens=DIMS["S"])] * 12)
        codes = [g[0] for g in got]
        t.result(503 in codes and 200 in codes and set(codes) <= {200, 503} and
                 all(text_of(g[1]) == want for g in got if g[0] == 200),
                 "beyond --max-queue 1: 503 (%d of 12), the others their text"
                 % codes.count(503), repr(got))
        status, _ = s.request("GET", "/health")
        t.result(status == 200, "and /health answers after it")
    finally:
        s.kill()


def check_sharded_logits(t, a, exe, work):
    """Vocab-sharded logits (and an argmax output): the engine gathers the
    logits each step, so greedy and sampled completions are the texts of the
    replicated program `exe` (--generate's row 0)."""
    src = os.path.join(work, "serve_next.ein")
    with open(src, "w") as f:
        f.write(source(sharded=True))
    sharded = os.path.join(work, "serve_next")
    if not compile_exe(t, a, src, sharded):
        return
    want = generate(exe, work, "Hello", 12)
    s = Server(sharded)
    try:
        status, ans = s.complete(prompt="Hello", max_tokens=12)
        t.result(status == 200 and text_of(ans) == want == generate(sharded, work, "Hello", 12),
                 "sharded logits: greedy = the replicated program's and --generate's",
                 "%d %r want %r" % (status, ans, want))
        flags = ["--temperature", "1.5", "--top-k", "20", "--top-p", "0.9", "--seed", "7"]
        want = generate(exe, work, "Once upon", 16, flags)
        status, ans = s.complete(prompt="Once upon", max_tokens=16, temperature=1.5, top_k=20,
                                 top_p=0.9, seed=7)
        t.result(status == 200 and text_of(ans) == want,
                 "sharded logits: sampling with seed 7 = the replicated program's text",
                 "%d %r want %r" % (status, ans, want))
        check_pairs(t, s, exe, work, "sharded logits")
    finally:
        s.kill()
    # The batch sharded too: the pairs' gather runs over B's and V's axes.
    src_by = os.path.join(work, "serve_next_by.ein")
    with open(src_by, "w") as f:
        f.write(source(sharded=True).replace("output Logits[B, V_X]", "output Logits[B_Y, V_X]"))
    by = os.path.join(work, "serve_next_by")
    if compile_exe(t, a, src_by, by):
        s = Server(by)
        try:
            check_pairs(t, s, exe, work, "logits [B_Y, V_X]")
        finally:
            s.kill()
    if not a.mpi:
        return
    mpi = os.path.join(work, "serve_next_mpi")
    if not compile_exe(t, a, src, mpi, "mpi"):
        return
    s = Server(mpi, launch=mpi_launch(a.mpirun, 4))
    try:  # static batching's plan travels with each step's broadcast
        check_pairs(t, s, exe, work, "4 MPI ranks, sharded logits")
    finally:
        s.kill()


def gathers(s):
    """/metrics' sampling gathers: (pairs steps, whole steps, pairs bytes,
    whole bytes)."""
    _, m = metrics(s)
    return tuple(m.get('einc_sample_gather_%s_total{path="%s"}' % (what, path), 0)
                 for what in ("steps", "bytes") for path in ("pairs", "whole"))


def check_pairs(t, s, exe, work, what):
    """Vocab-sharded logits (G = 2 shards of V = 128 f32, B = 2 rows): each
    step gathers pairs, B * G * K * 16 = 64 K bytes, when below whole rows,
    B * V * 4 = 1024 bytes: greedy (K 1) and top-k 5 use pairs, a
    temperature alone (K = V) whole rows.  Each kind alone moves exactly
    that per token (the prompt's other steps sample nothing), and mixed in
    one batch of 2 each gets the replicated program `exe`'s text."""
    B, V, G = DIMS["B"], DIMS["V"], 2
    kinds = [  # (request, --generate flags, K, path)
        (dict(prompt="Hello", max_tokens=12), [], 1, "pairs"),
        (dict(prompt="Once upon", max_tokens=14, temperature=1.5, top_k=5, seed=3),
         ["--temperature", "1.5", "--top-k", "5", "--seed", "3"], 5, "pairs"),
        (dict(prompt="It was", max_tokens=10, temperature=0.8, seed=5),
         ["--temperature", "0.8", "--seed", "5"], V, "whole")]
    want = [generate(exe, work, r["prompt"], r["max_tokens"], f) for r, f, _, _ in kinds]
    for (req, _, k, path), w in zip(kinds, want):
        before = gathers(s)
        status, ans = s.complete(**req)
        after = gathers(s)
        n = req["max_tokens"]
        per = B * G * k * 16 if path == "pairs" else B * V * 4
        delta = tuple(x - y for x, y in zip(after, before))
        expect = (n, 0, n * per, 0) if path == "pairs" else (0, n, 0, n * per)
        t.result(status == 200 and text_of(ans) == w and delta == expect,
                 "%s: K = %d alone, %d steps of %s, %d bytes each: the replicated text"
                 % (what, k, n, path, per), "%d %r want %r; gathers %r want %r"
                 % (status, ans, w, delta, expect))
    for i, j in [(0, 1), (1, 2), (0, 2)]:
        got = concurrently(s, [kinds[i][0], kinds[j][0]])
        t.result([g[0] for g in got] == [200, 200] and
                 [text_of(g[1]) for g in got] == [want[i], want[j]],
                 "%s: %s and %s requests in one batch get the replicated texts"
                 % (what, kinds[i][3] + (" K=%d" % kinds[i][2]), kinds[j][3] +
                    (" K=%d" % kinds[j][2])), "got %r\nwant %r" % (got, [want[i], want[j]]))


def check_mpi(t, a, src, exe, work):
    """--serve on 4 MPI ranks: rank 0 owns the server, the other ranks run
    the steps with the batches and tokens it broadcasts.  The texts are
    the threads program `exe`'s --generate's, alone, streamed and among
    others; a bad request gets its 400; SIGTERM to rank 0 ends the job."""
    mpi = os.path.join(work, "serve_mpi")
    if not compile_exe(t, a, src, mpi, "mpi"):
        return
    greedy = [("Hello", 12), ("a", 1), ("The quick brown fox", 21)]
    reqs = [dict(prompt=q, max_tokens=n) for q, n in greedy]
    want = [generate(exe, work, q, n) for q, n in greedy]
    sampled = dict(prompt="Once upon", max_tokens=20, temperature=1.5, top_p=0.9, seed=7)
    want.append(generate(exe, work, "Once upon", 20, ["--temperature", "1.5", "--top-p", "0.9",
                                                      "--seed", "7"]))
    s = Server(mpi, launch=mpi_launch(a.mpirun, 4))
    try:
        alone = [s.complete(**r) for r in reqs + [sampled]]
        t.result([g[0] for g in alone] == [200] * 4 and [text_of(g[1]) for g in alone] == want,
                 "4 MPI ranks: greedy and seeded completions = --generate's on threads",
                 "got %r\nwant %r" % (alone, want))
        status, chunks, done = s.stream(**reqs[0])
        got = "".join(c["choices"][0]["text"] for c in chunks)
        t.result(status == 200 and done and got == want[0],
                 "4 MPI ranks: streamed, the same text, then [DONE]",
                 "status %d, chunks %r, want %r" % (status, chunks, want[0]))
        together = concurrently(s, reqs + [sampled])
        t.result([text_of(g[1]) for g in together] == want,
                 "4 MPI ranks: %d concurrent requests each get their text alone" % len(want),
                 "got %r\nwant %r" % (together, want))
        status, data = s.request("POST", "/v1/completions", dict(prompt="a", max_tokens=0))
        t.result(status == 400 and json.loads(data)["error"]["param"] == "max_tokens" and
                 s.complete(**reqs[1])[0] == 200,
                 "4 MPI ranks: max_tokens 0 gets 400, and the server serves on",
                 "%d %r" % (status, data))
        rc = s.stop()
        t.result(rc == 0, "4 MPI ranks: SIGTERM to rank 0 ends every rank, status 0",
                 "status %s: %s" % (rc, s.p.stderr.read()))
    finally:
        s.kill()
    # Rank 0 cannot listen: its message, and the other ranks (waiting for
    # its first broadcast) end with it.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        p = subprocess.run(mpi_launch(a.mpirun, 4) + [mpi, "--serve", "--port",
                                                      str(taken.getsockname()[1]),
                                                      "--random-inputs", str(SEED)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
    t.result(p.returncode != 0 and "cannot listen on" in p.stdout and "listening" not in p.stdout,
             "4 MPI ranks: a port in use ends every rank with rank 0's message", p.stdout)


def check_bytes(t, a, work):
    """A byte-level model's answers are UTF-8, whole and streamed, and the
    streamed events join to the whole text (sampled: any byte may come)."""
    src = os.path.join(work, "bytes.ein")
    with open(src, "w") as f:
        f.write(source(vocab=256))
    exe = os.path.join(work, "bytes")
    if not compile_exe(t, a, src, exe):
        return
    s = Server(exe)
    try:
        seen = set()
        for seed in range(6):
            req = dict(prompt="caf\u00e9 \u20ac", max_tokens=30, temperature=1.5, seed=seed)
            status, data = s.request("POST", "/v1/completions", req)
            whole = None
            try:
                whole = text_of(json.loads(data.decode("utf-8")))
            except ValueError as e:  # UnicodeDecodeError too
                whole = e
            status2, events = s.request("POST", "/v1/completions", dict(req, stream=True))
            parts, bad = [], None
            for e in events.split(b"\n\n"):
                if not e or e == b"data: [DONE]":
                    continue
                try:
                    parts.append(text_of(json.loads(e[len(b"data: "):].decode("utf-8"))))
                except ValueError as err:
                    bad = "%r: %s" % (e, err)
            t.result(status == 200 and status2 == 200 and isinstance(whole, str) and
                     bad is None and "".join(parts) == whole,
                     "byte-level, seed %d: UTF-8 whole and streamed, the events join to it" % seed,
                     "whole %r, streamed %r, %s" % (whole, parts, bad))
            if isinstance(whole, str):
                seen.update(whole)
        t.result("\ufffd" in seen,
                 "byte-level: bytes that are no character come as U+FFFD", repr(sorted(seen)))
    finally:
        s.kill()


def main():
    a = runtime_args(__doc__)
    t = Tally()
    with tempfile.TemporaryDirectory() as work:
        src = os.path.join(work, "serve.ein")
        with open(src, "w") as f:
            f.write(source())
        exe = os.path.join(work, "serve")
        if not compile_exe(t, a, src, exe):
            return t.finish()
        s = Server(exe)
        try:
            _, before = metrics(s)
            check_greedy(t, s, exe, work)
            check_defaults(t, s, exe, work)
            check_keepalive(t, s)
            check_concurrent(t, s)
            check_sampling(t, s, exe, work)
            check_bad(t, s)
            check_metrics(t, s, before)
            rc = s.stop()
            t.result(rc == 0, "SIGTERM ends the server with status 0",
                     "status %s: %s" % (rc, s.p.stderr.read()))
        finally:
            s.kill()
        check_queue(t, exe)
        check_bytes(t, a, work)
        check_sharded_logits(t, a, exe, work)
        # Refusals before the server starts.
        for args, msg in [(["--port", "70000"], "--port expects a count"),
                          (["--host", "localhost"], "not an IPv4 address"),
                          (["--generate", "3"], "--serve: not with --generate")]:
            p = subprocess.run([exe, "--serve", "--random-inputs", "1"] + args,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=TIMEOUT)
            t.result(p.returncode == 1 and msg in p.stdout, "--serve %s is refused" % " ".join(args),
                     p.stdout)
        if a.mpi:
            check_mpi(t, a, src, exe, work)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
