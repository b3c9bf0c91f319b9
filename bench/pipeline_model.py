"""pipeline_model.py - bench/pipeline.py's models of a pipelined step on this machine.

What bench/pipeline.py (and pipeline_items.py, through it) reads from a
run's --trace and replays: the items of each stage and run (stage_items,
trace_runs), their work de-contended for stages sharing a CPU
(decontend), the stages' orders replayed on the machine's CPUs with the
items' dependencies (shared_replay: the kernel's fair sharing, or the
stages of a CPU taking turns at items as the runtime's
EINC_CORE_SHARING=items makes them, runtime/core_turns.c), the
receives' wake-ups (handoff_lags) and the machine's prediction of a
step (machine_prediction).  docs/pipeline.md, "Z > cores" and "Where the
machine prediction's miss comes from", explains the model.
"""
import functools
import json
import statistics
import sys

sys.dont_write_bytecode = True
import benchlib  # noqa: E402


@functools.lru_cache(maxsize=64)
def stage_items(trace):
    """A --trace file read once: (the runs its header counts, {stage:
    [(name, begin_us, end_us, waits, ops), ...]}), each stage's pipeline
    items in the order it ran them over all runs, waits the item's receive
    waits [(begin, end)] clipped to it, ops the `compute` spans (trace
    events) inside it.  Cached and shared (trace_runs, handoff_lags,
    ops_replay and pipeline_items.py read the same files): callers only
    read it."""
    with open(trace) as f:
        doc = json.load(f)
    by = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("pipeline", "compute"):
            by.setdefault(e["tid"], []).append(e)
    out = {}
    for s, es in by.items():
        es.sort(key=lambda e: e["ts"])
        waits = [e for e in es if e["cat"] == "pipeline" and e["name"] == "recv wait"]
        ops = [e for e in es if e["cat"] == "compute"]
        row, j = [], 0
        for it in (e for e in es if e["cat"] == "pipeline" and e["name"] != "recv wait"):
            end = it["ts"] + it["dur"]
            while j < len(ops) and ops[j]["ts"] < it["ts"]:
                j += 1
            k = j
            while k < len(ops) and ops[k]["ts"] < end:
                k += 1
            row.append((it["name"], it["ts"], end, tuple((x["ts"], min(x["ts"] + x["dur"], end))
                                                          for x in waits if it["ts"] <= x["ts"] < end),
                        tuple(ops[j:k])))
            j = k
        if row:
            out[s] = row
    return doc.get("otherData", {}).get("runs", 0), out


@functools.lru_cache(maxsize=64)
def trace_runs(trace, cores=None):
    """The pipeline items of each run in a --trace file: a list over runs of
    ({stage: [(name, busy_us), ...] in the order the stage ran them},
    measured bubble, {stage: [work_us, ...]}, span_us), busy being the
    item's time minus its receive waits (pipe_bubble.c's busy), the bubble
    1 - mean busy / span as --profile's, and work each item's busy time
    de-contended for `cores` CPUs (decontend; busy itself when cores is
    None).  Cached: a row's replays, machine predictions (pooled and leave
    one out) and ops replay read each trace file many times; the result
    is shared, so callers only read it."""
    runs, items = stage_items(trace)
    # Each item name occurs once per run; a trace buffer that filled up
    # holds fewer runs than were made: keep the complete ones.
    for row in items.values():
        runs = min(runs, len(row) // max(len({x[0] for x in row}), 1))
    if runs < 1:
        raise benchlib.BenchError(f"{trace}: no run's pipeline items were all recorded")
    out = [{} for _ in range(runs)]
    for stage, row in sorted(items.items()):
        per_run = len({x[0] for x in row})
        for r in range(runs):
            out[r][stage] = [x[:4] for x in row[r * per_run:(r + 1) * per_run]]
    result = []
    for stages in out:
        first = min(x[1] for row in stages.values() for x in row)
        last = max(x[2] for row in stages.values() for x in row)
        named = {s: [(x[0], x[2] - x[1] - sum(b - a for a, b in x[3])) for x in row]
                 for s, row in stages.items()}
        busy = sum(b for row in named.values() for _, b in row)
        work = decontend(stages, cores) if cores else {s: [b for _, b in row]
                                                         for s, row in named.items()}
        result.append((named, 1 - busy / len(stages) / (last - first), work, last - first))
    return result


def decontend(stages, cores):
    """Each item's work in CPU-microseconds: its busy intervals (the item
    minus its receive waits; stages as trace_runs builds them, {stage:
    [(name, begin, end, waits)]}) weighted by the share of its CPU a stage
    gets while k stages pinned to that CPU are busy at once, 1 / k.  The
    threads backend pins device d to the (d mod cores)-th CPU (its default
    --bind-to core, runtime/backend_threads.c), and the kernel shares a CPU
    fairly among its runnable threads: the processor-sharing model
    (Kleinrock, "Time-shared systems: a theoretical treatment", JACM 1967;
    Linux's CFS aims at it).  With cores >= the stages the work is the busy
    time.  Other jobs' threads are not seen: what they take counts as work."""
    events = []  # (time, +1 open / -1 close, stage, item)
    for s, row in stages.items():
        for i, (_, begin, end, waits) in enumerate(row):
            cuts = [begin] + [t for a, b in sorted(waits) for t in (a, b)] + [end]
            for a, b in zip(cuts[::2], cuts[1::2]):
                if b > a:
                    events += [(a, 1, s, i), (b, -1, s, i)]
    events.sort(key=lambda e: (e[0], e[1]))
    work = {s: [0.0] * len(row) for s, row in stages.items()}
    active, prev = set(), None  # the open (stage, item) pairs
    for t, kind, s, i in events:
        if prev is not None and t > prev:
            # (An item's end may sort a rounding after the next one's begin.)
            busy = {st for st, _ in active}
            for st, it in active:
                work[st][it] += (t - prev) / sum(x % cores == st % cores for x in busy)
        prev = t
        if kind > 0:
            active.add((s, i))
        else:
            active.discard((s, i))
    return work


def _dep(key, Z, v):
    """The item an item (kind, mb, chunk, stage) waits for, None if none:
    F m.c after F m.c of the previous stage (stage 0: after F m.c-1 of the
    last stage), B m.c after B m.c of the next stage (the last stage: after
    B m.c+1 of stage 0, or for its last chunk after its own F m.c), W m
    after B m (docs/pipeline.md, "The model of a step")."""
    kind, mb, c, s = key
    if kind == "F":
        return ("F", mb, c, s - 1) if s > 0 else ("F", mb, c - 1, Z - 1) if c > 0 else None
    if kind == "B":
        if s < Z - 1:
            return ("B", mb, c, s + 1)
        return ("B", mb, c + 1, 0) if c < v - 1 else ("F", mb, c, s)
    return ("B", mb, c, s)


def _key(name, s):
    mb, _, c = name[1:].partition(".")
    return (name[0], int(mb), int(c or 0), s)


def _chunks(stages):
    return 1 + max(int(n.split(".")[1]) if "." in n else 0 for row in stages.values() for n, _ in row)


def shared_replay(stages, cores, timeline=None, turns=False, wake=(0.0, 0.0), dep=_dep, hop=0.0):
    """The stages' orders ({stage: [(name, work_us)]}) run on `cores` CPUs,
    stage s pinned to CPU s mod cores and sharing it fairly with the other
    busy stages pinned there (decontend's model: k of them each progress
    at 1 / k), instant handoffs, dependencies as _dep.  Returns (span_us,
    bubble) with busy counted as --profile counts it: an item's wall time,
    the time its stage waits for the CPU included.  With turns=True the
    stages of a CPU take turns instead, an item running to its end before
    the next begins, the stage whose item was ready first going next (list
    scheduling, Graham, "Bounds on multiprocessing timing anomalies", SIAM
    J. Appl. Math. 17(2), 1969): the wait for the CPU is then before the
    item's begin, idle.  With cores >= Z each stage has a CPU of its own
    (replay) and both are the same.  A dict `timeline` gets each stage's
    [(name, begin, end)].  wake = (idle_us, busy_us): a stage that waits
    for another stage's item starts its own that long after the input is
    done (the receive's wake-up, handoff_lags), busy_us when another stage
    pinned to its CPU is running then, idle_us when none is; (0, 0):
    instant handoffs.  `dep` is the item an item waits for ((kind, mb,
    chunk, stage) -> the same or None; _dep's pipeline by default, other
    items placed elsewhere in bench/pipeline_place.py); `hop` (us) is
    the transfer: an item whose input is another stage's starts at least
    hop after that input's end."""
    Z, v = len(stages), _chunks(stages)
    pos, end, now = [0] * Z, {}, 0.0
    free = [0.0] * Z  # when each stage's last item ended
    running, ready, woken = {}, {}, {}  # stage -> [remaining work, start]; -> ready since; -> starts at
    busy = 0.0
    while True:
        for s in range(Z):
            if s not in running and s not in ready and s not in woken and pos[s] < len(stages[s]):
                d = dep(_key(stages[s][pos[s]][0], s), Z, v)
                if d is None or d in end:
                    # Input from another stage while this one waited: a wake-up.
                    cross = d is not None and d[3] != s
                    waited = cross and end[d] >= free[s]
                    lag = wake[any(x % cores == s % cores for x in running)] if waited else 0.0
                    at = max(now, end[d] + hop if cross else now) + lag
                    (woken if at > now else ready)[s] = at
        for s in [x for x in woken if woken[x] <= now + 1e-9]:
            ready[s] = woken.pop(s)
        for s in sorted(ready, key=lambda x: (ready[x], x)):
            if not turns or not any(x % cores == s % cores for x in running):
                running[s] = [max(stages[s][pos[s]][1], 0.0), now]
                del ready[s]
        if not running and not woken:
            break
        rate = {s: 1.0 / sum(x % cores == s % cores for x in running) for s in running}
        dt = min([running[s][0] / rate[s] for s in running] + [t - now for t in woken.values()])
        now += dt
        for s in list(running):
            running[s][0] -= rate[s] * dt
            if running[s][0] <= 1e-9:
                busy += now - running[s][1]
                end[_key(stages[s][pos[s]][0], s)] = now
                free[s] = now
                if timeline is not None:
                    timeline.setdefault(s, []).append((stages[s][pos[s]][0], running[s][1], now))
                pos[s] += 1
                del running[s]
    if any(pos[s] < len(stages[s]) for s in range(Z)):
        raise benchlib.BenchError("shared_replay: a stage's order waits for an item no stage runs")
    return now, 1 - busy / Z / now if now > 0 else 0.0


def replay(stages, dep=_dep, hop=0.0):
    """The bubble of the stages' orders run with the given busy times and
    free, instant transfers (or `hop` us each), each stage on its own
    CPU: each item starts when its stage is free and its input is done
    (`dep`, shared_replay's)."""
    return shared_replay(stages, len(stages), dep=dep, hop=hop)[1]


def replayed_bubbles(trace):
    """Medians over the runs of a --trace file of two replays (replay):
    the stages' orders with each run's own measured item times -- the
    bubble if every handoff were instant, so measured minus this is the
    time receives took beyond their inputs' readiness (the handoffs'
    wake-ups) -- and with every item at the fastest time of its stage and
    kind in that run (the F, B or W items of one stage do the same work),
    which leaves out the items that other jobs' threads slowed down
    (replayed minus this is that jitter).  What is left above the
    prediction is the items' measured times against the costed ones."""
    own, fastest = [], []
    for stages, _, _, _ in trace_runs(trace):
        own.append(replay(stages))
        best = {}
        for s, row in stages.items():
            for n, b in row:
                best[(s, n[0])] = min(b, best.get((s, n[0]), b))
        fastest.append(replay({s: [(n, best[(s, n[0])]) for n, _ in row] for s, row in stages.items()}))
    return statistics.median(own), statistics.median(fastest)


def _kind(name):
    """An item's kind and chunk ("F", "B" or "W", then ".c" if any): the
    items of one stage with the same kind and chunk do the same work."""
    return name[0] + (name[name.index("."):] if "." in name else "")


def handoff_lags(traces, cores, turns=False):
    """The receives' wake-ups in the --trace files `traces` (a path or a
    list of paths): for each forward item of a stage s > 0 (and the first
    stage's chunks c > 0, interleaved) whose receive began before the
    item it waits for (_dep) ended, the time from that item's end to the
    receive's return (0 when the receive returned first), averaged over
    the items and runs, split by whether another stage pinned to the
    receiver's CPU (stage d on CPU d mod cores) was busy at that end.
    With turns=True (the runtime's EINC_CORE_SHARING=items: a receiver
    whose CPU is busy waits for the running item's end, which
    shared_replay's turns replay already charges) a busy CPU's wake-up is
    counted from the end of that other stage's busy stretch instead.
    Only forward items: an F item's send is its last step, where a B
    item sends dL/dx before its weight gradients.  Returns (idle_us,
    busy_us, n_idle, n_busy), a mean 0 when it has no samples; what
    shared_replay's `wake` takes (docs/pipeline.md, "Where the machine
    prediction's miss comes from")."""
    per = [_trace_lags(t, cores, turns) for t in ([traces] if isinstance(traces, str) else traces)]
    lags = [x for idle, _ in per for x in idle], [x for _, busy in per for x in busy]
    return (statistics.mean(lags[0]) if lags[0] else 0.0, statistics.mean(lags[1]) if lags[1] else 0.0,
            len(lags[0]), len(lags[1]))


@functools.lru_cache(maxsize=128)
def _trace_lags(t, cores, turns=False):
    """handoff_lags' samples of one --trace file: (onto an idle core, onto
    a busy one), tuples of microseconds.  Cached as trace_runs is: every
    machine prediction of a row reads the same files."""
    lags = ([], [])
    by = stage_items(t)[1]
    Z, items, busy = len(by), {}, {}
    v = 1 + max((int(x[0].split(".")[1]) for row in by.values() for x in row if "." in x[0]), default=0)
    for s, row in by.items():
        seen = {}
        for name, begin, end, ws, _ in row:
            r = seen[name] = seen.get(name, -1) + 1  # the run
            items[(_key(name, s), r)] = (end, ws)
            cuts = [begin] + [c for a, b in ws for c in (a, b)] + [end]
            busy.setdefault(s, []).extend(zip(cuts[::2], cuts[1::2]))
    for (k, r), (_, ws) in items.items():
        d = _dep(k, Z, v)
        if k[0] != "F" or d is None or d[3] == k[3] or not ws or (d, r) not in items:
            continue
        ready = items[(d, r)][0]
        if ws[0][0] >= ready:  # the message was there: no wake-up
            continue
        s = k[3]
        running = [b for x, iv in busy.items() if x != s and x % cores == s % cores
                   for a, b in iv if a <= ready < b]
        # Taking turns, the receiver runs once the running stage's item
        # gives the CPU up: its wake-up starts there.
        start = max(running) if turns and running else ready
        lags[bool(running)].append(max(0.0, ws[0][1] - start))
    return tuple(lags[0]), tuple(lags[1])


def item_works(traces, cores):
    """The de-contended work (decontend) of every pipeline item in the
    --trace files `traces` (a path or a list of paths, e.g. one per
    repeat), pooled over their runs: ({(stage, kind and chunk): [work_us,
    ...]}, the runs as trace_runs returns them, concatenated)."""
    runs = [r for t in ([traces] if isinstance(traces, str) else traces) for r in trace_runs(t, cores)]
    per = {}
    for stages, _, work, _ in runs:
        for s, row in stages.items():
            for (n, _), w in zip(row, work[s]):
                per.setdefault((s, _kind(n)), []).append(w)
    return per, runs


def core_idle(work, span, Z, cores):
    """The core-idle bubble: 1 - work / (min(Z, cores) x span), the share of
    the CPUs' time with nothing to run (Qi et al., ICLR'24, section 2:
    the bubble rate as idle device time, the CPUs being the devices), for
    `work` CPU-time (de-contended, decontend: its sum over a CPU's items is
    the time the CPU had one of them to run) in a step of `span`, Z stages
    on `cores` CPUs.  With cores >= Z it is the per-stage bubble
    (docs/pipeline.md, "Stages sharing cores: the core-idle bubble")."""
    return 1 - work / min(Z, cores) / span if span > 0 else 0.0


def machine_prediction(traces, cores):
    """The step this machine can run (section "Z > cores" of
    docs/pipeline.md): every item's work de-contended for `cores` CPUs
    (decontend), the median work of each stage's items of one kind and
    chunk over the microbatches and runs of the traces (a path or a list
    of paths; leaving out the jitter), and the stages' orders run with
    those works on `cores` CPUs (shared_replay), each receive that waited
    waking the traces' mean wake-up after its input was done
    (handoff_lags).  Returns a dict of medians over the runs, times in
    seconds: span (the measured items' span), work (the sum of the items'
    work, CPU-seconds), the prediction's span and bubble, items:
    {(stage, kind): median work in seconds}, and wake: the mean wake-ups
    (onto an idle core, onto a busy one) in seconds; turns_span,
    turns_bubble and turns_wake: the same with the stages of a CPU taking
    turns (shared_replay's turns=True, handoff_lags' turns=True), the
    model of the runtime's EINC_CORE_SHARING=items.  pred_core and
    turns_core: the two predictions' core-idle bubbles (core_idle of their
    work and span); core: the measured runs' core-idle bubble, median."""
    per, runs = item_works(traces, cores)
    med = {k: statistics.median(v) for k, v in per.items()}
    order = {s: [(n, med[(s, _kind(n))]) for n, _ in row] for s, row in runs[0][0].items()}
    lags = handoff_lags(traces, cores)
    tlags = handoff_lags(traces, cores, turns=True)
    span, bubble = shared_replay(order, cores, wake=lags[:2])
    tspan, tbubble = shared_replay(order, cores, turns=True, wake=tlags[:2])
    work = sum(w for row in order.values() for _, w in row)
    Z = len(order)
    return {"span": statistics.median(r[3] for r in runs) / 1e6,
            "work": statistics.median(sum(sum(w) for w in r[2].values()) for r in runs) / 1e6,
            "pred_span": span / 1e6, "pred_bubble": bubble,
            "turns_span": tspan / 1e6, "turns_bubble": tbubble,
            "pred_core": core_idle(work, span, Z, cores), "turns_core": core_idle(work, tspan, Z, cores),
            "core": statistics.median(core_idle(sum(sum(w) for w in r[2].values()), r[3], Z, cores)
                                      for r in runs),
            "items": {k: v / 1e6 for k, v in med.items()},
            "wake": (lags[0] / 1e6, lags[1] / 1e6), "turns_wake": (tlags[0] / 1e6, tlags[1] / 1e6)}


def ops_replay(traces):
    """The bubble of the stages' orders replayed (replay, a CPU per stage)
    with each item's time built from its ops' median times: for each
    stage and item kind (_kind), every op (a `compute` span of the
    --trace files `traces` inside an item) at the median of its calls
    over the items, microbatches and runs, times its median count per
    item.  An op that another job's thread stalled is one call among
    many, so this leaves out the jitter more surely than the median
    item of machine_prediction does; it leaves out the time an item spends
    outside its ops (the frames, the send's copy) and its receive waits.
    What it keeps is the ops' measured times: the microbatches' GEMM
    sizes, the first stage's embedding and the last one's loss, the W
    items.  Returns (bubble, {(stage, kind): item seconds})."""
    durs, per_item, order = {}, {}, None  # (kind, op) -> [us]; kind -> [{op: calls}]
    for t in [traces] if isinstance(traces, str) else traces:
        for s, row in stage_items(t)[1].items():
            for name, _, _, _, ops in row:
                k, n = (s, _kind(name)), {}
                for op in ops:
                    durs.setdefault((k, op["name"]), []).append(op["dur"])
                    n[op["name"]] = n.get(op["name"], 0) + 1
                per_item.setdefault(k, []).append(n)
        if order is None:
            order = trace_runs(t)[0][0]
    item = {}
    for (k, name), ds in durs.items():
        calls = statistics.median(n.get(name, 0) for n in per_item[k])
        item[k] = item.get(k, 0.0) + statistics.median(ds) * calls
    bub = replay({s: [(n, item.get((s, _kind(n)), 0.0)) for n, _ in row] for s, row in order.items()})
    return bub, {k: v / 1e6 for k, v in item.items()}
