"""The load generator of bench/serve.py and bench/serve_phases.py: streamed
POST /v1/completions requests sent at given times, all from one thread
with non-blocking sockets and a selector (Python's `selectors`, epoll on
Linux), the way vLLM's benchmark_serving drives a server from one asyncio
loop.

bench/serve.py used to start a Python thread per request (http.client
reading its stream line by line).  On the 2 cores that the server's
device threads share with the client, those threads cost about as much
CPU per token as the server's whole HTTP side (docs/generation.md,
"Measured"), and they took the GIL from each other at every event.  One
loop does the same protocol work (HTTP/1.1, chunked transfer coding,
server-sent events, json.loads of each event) once per byte, with no
thread switches.

Each request's record (`run`) gets: `sent` (time.monotonic() at its
send), `status`, `times` (one per streamed token: a chunk of k characters
counts as k tokens spread evenly over the gap since the previous chunk,
the tokenizer being one character per token), `done` (its [DONE] or the
end of its stream), or `error` (a refused connection, a timeout, a
malformed answer).  Bounded: every request has a deadline (`timeout`
seconds after its send, at most the cap), and the loop ends at the cap.

`nice` (run, run_c): the client's niceness, raised by that much for the
client alone (its thread, or the C client's process), never for the
server: bench/serve.py --client-nice, measured in docs/generation.md
("Where the ITL tail came from").
"""
import json
import os
import selectors
import socket
import subprocess
import threading
import time


def lower_priority(nice):
    """Raises the calling thread's niceness by `nice` (Linux: a thread id
    is a process id to setpriority, and the other threads keep theirs);
    nothing when nice is 0 or the system has no thread ids."""
    if nice and hasattr(os, "setpriority") and hasattr(threading, "get_native_id"):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)


class _Conn:
    """One request's socket and the state of reading its answer."""

    def __init__(self, rec, payload, deadline):
        self.rec = rec
        self.out = payload
        self.deadline = deadline
        self.buf = b""        # bytes received, not yet parsed
        self.head = True      # reading the status line and headers
        self.chunked = False
        self.left = -1        # bytes of the current chunk still to read (-1: a size line
        #                       next; 0: its closing CRLF next)
        self.body = b""       # decoded body bytes not yet split into events
        self.last = rec["sent"]
        self.sock = None


def _request_bytes(port, fields):
    body = json.dumps(dict(fields, stream=True)).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (port, len(body))
            + body)


def _events(c, now):
    """Splits c.body into server-sent events; records their tokens.  True at [DONE]."""
    while True:
        end = c.body.find(b"\n\n")
        if end < 0:
            return False
        event, c.body = c.body[:end], c.body[end + 2:]
        for line in event.split(b"\n"):
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                return True
            k = len(json.loads(data)["choices"][0]["text"])
            c.rec["times"] += [c.last + (now - c.last) * (i + 1) / k for i in range(k)]
            c.last = now


def _parse(c, now):
    """Consumes c.buf; True when the answer is complete."""
    if c.head:
        end = c.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = c.buf[:end].split(b"\r\n")
        c.buf = c.buf[end + 4:]
        c.head = False
        c.rec["status"] = int(lines[0].split()[1])
        c.chunked = any(ln.lower().startswith(b"transfer-encoding:") and b"chunked" in ln.lower()
                        for ln in lines[1:])
    if not c.chunked:  # an error body, or an unframed stream read to EOF
        c.body += c.buf
        c.buf = b""
        return _events(c, now)
    while True:
        if c.left < 0:  # a chunk's size line
            end = c.buf.find(b"\r\n")
            if end < 0:
                break
            c.left = int(c.buf[:end].split(b";")[0], 16)
            c.buf = c.buf[end + 2:]
            if c.left == 0:  # the last chunk
                _events(c, now)
                return True
        if c.left > 0:  # the chunk's data
            take = min(len(c.buf), c.left)
            c.body += c.buf[:take]
            c.buf = c.buf[take:]
            c.left -= take
            if c.left > 0:
                break
        if len(c.buf) < 2:  # the CRLF after the data
            break
        c.buf = c.buf[2:]
        c.left = -1
    return _events(c, now)


def run(port, work, start, cap, timeout=None, nice=0):
    """Sends work [(offset s, fields)] at start + offset (time.monotonic()
    seconds) to 127.0.0.1:port and reads every answer, until all have ended
    or `cap` seconds after start.  Returns one record per request (module
    docstring; a request not sent before the cap has none of the keys).
    `timeout`: seconds a request may take after its send (default: the cap);
    `nice` > 0: the loop runs in a thread of its own at that much lower a
    priority (the caller's thread keeps its own, for the servers it starts)."""
    if nice:
        out = []
        th = threading.Thread(target=lambda: (lower_priority(nice),
                                              out.append(run(port, work, start, cap, timeout))))
        th.start()
        th.join()
        if not out:
            raise RuntimeError("the client's thread failed")
        return out[0]
    recs = [dict() for _ in work]
    sel = selectors.DefaultSelector()
    nxt, live = 0, 0
    end, checked = start + cap, start
    try:
        while nxt < len(work) or live:
            now = time.monotonic()
            if now > end:
                break
            while nxt < len(work) and start + work[nxt][0] <= now:
                at, fields = work[nxt]
                rec = recs[nxt]
                nxt += 1
                rec["sent"] = now
                rec["times"] = []
                c = _Conn(rec, _request_bytes(port, fields), min(end, now + (timeout or cap)))
                c.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.sock.setblocking(False)
                c.sock.connect_ex(("127.0.0.1", port))
                sel.register(c.sock, selectors.EVENT_WRITE, c)
                live += 1
            wait = 0.05 if nxt >= len(work) else max(0.0, start + work[nxt][0] - now)
            for key, mask in sel.select(timeout=min(wait, 0.05)):
                c = key.data
                finished = False
                try:
                    if mask & selectors.EVENT_WRITE:
                        n = c.sock.send(c.out)
                        c.out = c.out[n:]
                        if not c.out:
                            sel.modify(c.sock, selectors.EVENT_READ, c)
                        continue
                    data = c.sock.recv(65536)
                    now = time.monotonic()
                    if not data:  # the server closed: an unframed answer ends here
                        finished = True
                        if c.head or c.chunked:
                            c.rec["error"] = "connection closed before the answer's end"
                    else:
                        c.buf += data
                        finished = _parse(c, now)
                    if finished and "error" not in c.rec:
                        c.rec["done"] = now
                except (OSError, ValueError, KeyError, IndexError) as e:
                    c.rec["error"] = "%s: %s" % (type(e).__name__, e)
                    finished = True
                if finished:
                    sel.unregister(c.sock)
                    c.sock.close()
                    live -= 1
            now = time.monotonic()
            if now < checked + 0.1:
                continue
            checked = now
            for key in list(sel.get_map().values()):  # deadlines, every 0.1 s
                c = key.data
                if now > c.deadline:
                    c.rec["error"] = "timed out"
                    sel.unregister(c.sock)
                    c.sock.close()
                    live -= 1
    finally:
        for key in list(sel.get_map().values()):
            key.data.rec.setdefault("error", "the run's time cap")
            key.fileobj.close()
        sel.close()
    return recs


def run_c(exe, port, work, start, cap, nice=0, stream=True, connections="new", pool=0):
    """run() through bench/serve_load.c (built as `exe`: benchlib.compile_c):
    the same requests, records and bounds, at a few microseconds of CPU per
    token; `nice` > 0 runs it that much nicer; `stream` False asks for whole
    answers (records with `done` and no token times); `connections`: "new"
    (a TCP connection per request) or "reuse" (a pool of keep-alive ones,
    at most `pool` if > 0; serve_load.c's docstring).  Returns (records,
    the C client's CPU seconds)."""
    text = "".join("%.9f %s\n" % (at, json.dumps(dict(fields, stream=stream)))
                   for at, fields in work)
    r = subprocess.run([str(exe), str(port), "%.9f" % start, "%.3f" % cap, connections,
                        str(pool)], input=text,
                       capture_output=True, text=True, timeout=cap + 60,
                       preexec_fn=(lambda: os.nice(nice)) if nice else None)
    if r.returncode != 0:
        raise RuntimeError("serve_load failed: %s" % r.stderr.strip())
    recs, cpu = [dict() for _ in work], float("nan")
    for line in r.stdout.splitlines():
        f = line.split()
        if f[0] == "cpu":
            cpu = float(f[1])
            continue
        rec = recs[int(f[1])]
        if float(f[3]) == 0:  # never sent: the cap came first
            continue
        rec.update(status=int(f[2]), sent=float(f[3]), times=[float(x) for x in f[5:]])
        if float(f[4]) >= 0:
            rec["done"] = float(f[4])
        else:
            rec["error"] = "no complete answer"
    return recs, cpu
