#!/usr/bin/python3
"""pipeline_place.py - the first stage's pre-loop work (the input projection) placed on the last stage, replayed: would ZB-H1 then reach half of 1F1B's bubble?

bench/pipeline.py's program (an MLP stack of L = 4 layers, batch 256,
the input projection `H = In * Wf` before the layer loop) on `mesh Z = n`
threads with --schedule=zb-h1 (ZB-H1) and M microbatches, run
--repeat times with --profile --trace (bench/pipeline_orders.py's
traced_items).  Today the projection runs on the first stage: its forward
in F m, its weight gradient dWf in W m.  From the traces, per stage and
item kind, three sets of item times (microseconds): `costed` (the sum of
the item's ops' `predicted_us`), `ops` (each stage's item at its ops'
median calls, bench/pipeline_model.py's ops_replay, without the stalls a
loaded machine adds) and `meas` (the median item's busy time); and the
projection's two parts: E, the first stage's F ops before the layer
loop's LoopBegin, and EW, its W ops after the loop W's LoopEnd (dWf).
Then three placements of that work:

  first    today: E inside stage 0's F m, EW inside its W m;
  last     the last stage runs item E m (no input: In is an input of
           every stage; stage 0's F m waits for it, a transfer) and item
           EW m (after stage 0's B m, whose dL/dH it receives), and
           stage 0's F and W lose them;
  fwd-last E m on the last stage, dWf left in stage 0's W m.

For each placement the least replayed step (bench/pipeline_model.py's
replay: a CPU per stage, each cross-stage input `hop` us after its end,
the cost pass's hop unless --hop) over:

  ZB-H1 best   every order of every stage's F, B, W items under ZB-H1's
               memory bound (each kind in microbatch order, B m after
               F m, W m after B m, at most Z microbatches with F done and
               W not when an F starts; Qi et al., ICLR'24, section 3.1),
               with E m and EW m anywhere on the last stage that does not
               deadlock (E m before its F m, EW m after its B m; E and EW
               hold only a [B/M, D] activation, so no bound is put on
               them: the search is optimistic for the new placements) --
               Z = 2 only (too many orders beyond);
  ZB-H1 table  the order the executable ran (the cost pass's table, from
               the first trace) with E and EW anywhere on the last stage;
  1F1B         1F1B's order (pipeline_orders.py's one_f_one_b, B and W
               as one backward item) with E and EW anywhere on the last
               stage: the ratio's denominator moves too;

and, under the last placement, its simplest form: every E m first and
every EW m last on the last stage, the table's and 1F1B's orders.

The search is a branch and bound over the stages' orders (search): the
stage that is free first picks its next item among the legal ones, an
item whose input is not done yet waits for it, and a partial order whose
stages' free times plus their remaining work reach the best span found
is cut.  Every best order is replayed again with replay (checked equal).
Printed per point, source and placement: the bubbles (1 - the work / (Z x
span), the work fixed by the placement) and spans, and the ratios ZB-H1 /
1F1B.  docs/pipeline.md, "The projection on the last stage: replayed",
reads the output.

Usage: bench/pipeline_place.py [--build DIR] [--points 2:4,4:8] [--repeat 3] [--steps 5] [--hop US]
"""
import math
import os
import statistics
import sys
import tempfile

sys.dont_write_bytecode = True
import benchlib  # noqa: E402
import pipeline as pb  # noqa: E402  (bench/pipeline.py)
import pipeline_orders as po  # noqa: E402

PLACEMENTS = ("first", "last", "fwd-last")
# The search's branches per replayed family: Z = 4, M = 8 with the
# table's orders and E, EW placed freely takes under a million.
MAX_NODES = 5_000_000


def place_dep(key, Z, v):
    """The item an item (kind, mb, chunk, stage) waits for with the
    projection's items on the last stage: E m nothing, EW m (kind "X")
    stage 0's B m, stage 0's F m the last stage's E m; the rest as
    bench/pipeline_model.py's _dep (v = 1 here).  Without E items
    (placement first) stage 0's F m must not wait: use _dep."""
    kind, mb, _, s = key
    if kind == "E":
        return None
    if kind == "X":
        return ("B", mb, 0, 0)
    if kind == "F" and s == 0:
        return ("E", mb, 0, Z - 1)
    return pb._dep(key, Z, v)


def proj_parts(traces):
    """The projection's part of stage 0's items in the --trace files
    `traces`: {(source, "E"/"X"): us}, the median over the items of the sum
    of stage 0's F ops before its first LoopBegin (E) and of its W ops
    after its last LoopEnd (X: dWf), sources "costed" (`predicted_us`) and
    "ops" / "meas" (the ops' measured durations; point() scales meas's to
    the median item).  Errors: benchlib.BenchError if stage 0 has no such
    ops (another program)."""
    got = {}
    for t in traces:
        for name, _, _, _, ops in pb.stage_items(t)[1][0]:
            names = [o["name"] for o in ops]
            loops = [i for i, n in enumerate(names) if "= Loop" in n]
            if not loops:
                continue
            if name[0] == "F":
                kind, part = "E", ops[:loops[0]]
            elif name[0] == "W":
                kind, part = "X", ops[loops[-1] + 1:]
            else:
                continue
            got.setdefault(kind, []).append((sum(o["dur"] for o in part),
                                            sum(o.get("args", {}).get("predicted_us", 0.0) for o in part)))
    if not got.get("E") or not got.get("X"):
        raise benchlib.BenchError("stage 0's F and W items hold no ops outside the layer loops")
    out = {}
    for kind, xs in got.items():
        out[("costed", kind)] = statistics.median(x[1] for x in xs)
        out[("ops", kind)] = out[("meas", kind)] = statistics.median(x[0] for x in xs)
    return out


def placed(t, Z, place, parts):
    """The item times {(stage, kind): us} and each stage's kinds (a string)
    of placement `place` (PLACEMENTS), from today's items `t` (the
    projection inside stage 0's F and W) and its parts `parts` {"E": us,
    "X": us} (proj_parts of one source)."""
    t = dict(t)
    kinds = {s: "FBW" for s in range(Z)}
    if place in ("last", "fwd-last"):
        t[(0, "F")] -= parts["E"]
        t[(Z - 1, "E")] = parts["E"]
        kinds[Z - 1] += "E"
    if place == "last":
        t[(0, "W")] -= parts["X"]
        t[(Z - 1, "X")] = parts["X"]
        kinds[Z - 1] += "X"
    return t, kinds


def merged(t, kinds):
    """1F1B's items from the split ones: B m is B + W, no W item."""
    m = {k: v for k, v in t.items() if k[1] != "W"}
    for (s, k), v in t.items():
        if k == "W":
            m[(s, "B")] += v
    return m, {s: k.replace("W", "") for s, k in kinds.items()}


def search(Z, M, t, kinds, base, limit, hop, max_nodes=math.inf):
    """The least span of a step and one set of orders reaching it:
    (span_us, {stage: [name, ...]}, proven), or (inf, None, proven) if
    every order deadlocks.  Stage s runs M items of each kind in kinds[s] ("F", "B",
    "W", "E", "X"; each kind in microbatch order), each of its (s, kind)
    time in `t`, with E and X inserted anywhere on a stage holding them
    (E m before F m, X m after B m: the other placements deadlock); base[s]
    is that stage's order of its other items, or None: every order with
    B m after F m, W m after B m and at most `limit` microbatches with F
    done and W not done when an F starts (with no W item, B done).  Inputs
    as place_dep (or pipeline_model's _dep without E items), each
    cross-stage one `hop` us after its end; a CPU per stage.  Depth-first
    over the stages' next items, the stage free first deciding; an item
    whose input is not done waits (pending); a branch whose lower bound
    (each stage's free time plus its remaining work) reaches the best span
    is cut.  Past `max_nodes` branches the search stops: the third value
    says whether the span is the least (True) or only the best found."""
    dep = place_dep if any("E" in k for k in kinds.values()) else pb._dep
    left = [len(kinds[s]) * M for s in range(Z)]
    rem = [M * sum(t[(s, k)] for k in kinds[s]) for s in range(Z)]
    free, pend, pos = [0.0] * Z, [None] * Z, [0] * Z
    cnt = [dict.fromkeys("FBWEX", 0) for _ in range(Z)]
    orders, end, log = [[] for _ in range(Z)], {}, []
    best, nodes = [math.inf, None], [0]

    def run(s, name, key, d):
        start = free[s] if d is None else max(free[s], end[d] + (hop if d[3] != s else 0.0))
        dur = t[(s, name[0])]
        log.append(("run", s, key, free[s], pend[s], dur))
        end[key], free[s], pend[s] = start + dur, start + dur, None
        rem[s] -= dur

    def settle():
        again = True
        while again:
            again = False
            for p in range(Z):
                if pend[p] is not None and pend[p][2] in end:
                    run(p, *pend[p])
                    again = True

    def assign(s, name):
        key = (name[0], int(name[1:]), 0, s)
        d = dep(key, Z, 1)
        orders[s].append(name)
        cnt[s][name[0]] += 1
        left[s] -= 1
        stepped = base[s] is not None and name[0] not in "EX"
        pos[s] += stepped
        log.append(("assign", s, name, stepped))
        if d is None or d in end:
            run(s, name, key, d)
            settle()
        else:
            pend[s] = (name, key, d)
            log.append(("pend", s))

    def undo(mark):
        while len(log) > mark:
            e = log.pop()
            if e[0] == "run":
                _, s, key, f, p, dur = e
                del end[key]
                free[s], pend[s] = f, p
                rem[s] += dur
            elif e[0] == "pend":
                pend[e[1]] = None
            else:
                _, s, name, stepped = e
                orders[s].pop()
                cnt[s][name[0]] -= 1
                left[s] += 1
                pos[s] -= stepped

    def choices(s):
        c, ks, out = cnt[s], kinds[s], []
        if base[s] is not None:
            if pos[s] < len(base[s]):
                out.append(base[s][pos[s]])
        else:
            done = c["W" if "W" in ks else "B"]
            if c["F"] < M and c["F"] - done < limit:
                out.append(f"F{c['F']}")
            if c["B"] < c["F"]:
                out.append(f"B{c['B']}")
            if "W" in ks and c["W"] < c["B"]:
                out.append(f"W{c['W']}")
        if "E" in ks:
            out = [n for n in out if n[0] != "F" or c["E"] > int(n[1:])]
            # E first: the first orders tried run the projection early,
            # where the last stage waits for F0 anyway (a good first bound).
            if c["E"] < M:
                out.insert(0, f"E{c['E']}")
        if "X" in ks and c["X"] < min(M, c["B"]):
            out.append(f"X{c['X']}")
        return out

    def rec():
        nodes[0] += 1
        if nodes[0] > max_nodes or max(free[s] + rem[s] for s in range(Z)) >= best[0] - 1e-9:
            return
        cand = [s for s in range(Z) if left[s] and pend[s] is None]
        if not cand:
            if not any(left) and all(p is None for p in pend):
                best[0], best[1] = max(free), {s: list(o) for s, o in enumerate(orders)}
            return
        s = min(cand, key=lambda x: (free[x], x))
        for name in choices(s):
            mark = len(log)
            assign(s, name)
            rec()
            undo(mark)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * Z * M + 100))
    rec()
    return best[0], best[1], nodes[0] <= max_nodes


def solve(Z, M, t, kinds, base, limit, hop, max_nodes=math.inf):
    """search's best orders replayed again (bench/pipeline_model.py's
    shared_replay with place_dep): (span_us, bubble, orders, proven).  Errors:
    benchlib.BenchError if every order deadlocks or the replay disagrees
    with the search."""
    span, orders, proven = search(Z, M, t, kinds, base, limit, hop, max_nodes)
    if orders is None:
        raise benchlib.BenchError(f"Z = {Z}, M = {M}: every order deadlocks")
    dep = place_dep if any("E" in k for k in kinds.values()) else pb._dep
    again, bub = pb.shared_replay({s: [(n, t[(s, n[0])]) for n in o] for s, o in orders.items()}, Z,
                                  dep=dep, hop=hop)
    if abs(again - span) > 1e-6 * span:
        raise benchlib.BenchError(f"search's span {span} us, its orders replay to {again} us")
    return span, bub, orders, proven


def show(order):
    """An order's names as the docs write them (X m is EW m)."""
    return " ".join(n.replace("X", "EW") for n in order)


def point(einc, work, Z, M, repeat, steps, hop):
    """Runs the point (Z stages, M microbatches) and prints its table."""
    per, bubbles, table, traces = po.traced_items(einc, work, Z, M, repeat, steps)
    cost = pb.costed(einc, work, f"z{Z}_zb-h1_m{M}", [f"--microbatches={M}", "--schedule=zb-h1"])
    hop = cost["hop_time"] * 1e6 if hop is None else hop
    parts = proj_parts(traces)
    ops = {k: v * 1e6 for k, v in pb.ops_replay(traces)[1].items()}
    src = {"costed": {k: statistics.median(x[2] for x in xs) for k, xs in per.items()},
           "ops": ops,
           "meas": {k: statistics.median(x[0] for x in xs) for k, xs in per.items()}}
    # A median item holds its share of the stalls; the projection's ops'
    # median durations do not: its measured part is its share of the ops.
    for kind, item in (("E", "F"), ("X", "W")):
        parts[("meas", kind)] = parts[("ops", kind)] * src["meas"][(0, item)] / ops[(0, item)]
    print(f"\n## Z = {Z}, M = {M}: ZB-H1 measured bubble {100 * statistics.median(bubbles):.1f}% "
          f"(runs {' '.join(f'{100 * b:.1f}' for b in bubbles)}); hop {hop:.0f} us"
          + (f"; {Z} stages share {os.cpu_count()} cores: measured items include the wait for "
             "a core, the replays give each stage a CPU" if Z > (os.cpu_count() or 1) else ""))
    base_table = {s: [n for n, _ in row] for s, row in table.items()}
    base_ofb = {s: po.one_f_one_b(Z, M, s) for s in range(Z)}
    for name, t in src.items():
        pr = {k: parts[(name, k)] for k in "EX"}
        print(f"# {name} items (ms): " + "; ".join(
            f"stage {s} F {t[(s, 'F')] / 1e3:.2f} B {t[(s, 'B')] / 1e3:.2f} W {t[(s, 'W')] / 1e3:.2f}"
            for s in range(Z)) + f"; of stage 0's: E {pr['E'] / 1e3:.2f}, EW {pr['X'] / 1e3:.2f}")
        print(f"{'placement':>9} {'zb best':>8} {'zb table':>8} {'1f1b':>7} {'best/1f1b':>9} "
              f"{'table/1f1b':>10} {'span best':>9} {'span tbl':>9} {'span 1f1b':>9} {'work 0/last':>11}")
        for place in PLACEMENTS:
            tp, kinds = placed(t, Z, place, pr)
            work = [M * sum(tp[(s, k)] for k in kinds[s]) for s in range(Z)]
            tab = solve(Z, M, tp, kinds, base_table, Z, hop, MAX_NODES)
            best = solve(Z, M, tp, kinds, {s: None for s in range(Z)}, Z, hop, MAX_NODES) if Z == 2 else None
            ofb = solve(Z, M, *merged(tp, kinds), base_ofb, Z, hop, MAX_NODES)
            bb = best[1] if best else float("nan")
            sb = best[0] / 1e3 if best else float("nan")
            unproven = [x for x, r in (("zb best", best), ("zb table", tab), ("1f1b", ofb)) if r and not r[3]]
            print(f"{place:>9} {100 * bb:7.2f}% {100 * tab[1]:7.2f}% {100 * ofb[1]:6.2f}% "
                  f"{bb / ofb[1]:9.3f} {tab[1] / ofb[1]:10.3f} {sb:9.2f} {tab[0] / 1e3:9.2f} "
                  f"{ofb[0] / 1e3:9.2f} {work[0] / work[-1]:11.3f}"
                  + (f"  (search stopped at {MAX_NODES} branches: {', '.join(unproven)} the best found)"
                     if unproven else ""))
            for label, r in (("zb best", best), ("zb table", tab), ("1f1b", ofb)):
                if r:
                    print(f"#   {label:8} " + " | ".join(f"stage {s} {show(o)}" for s, o in r[2].items()))
            if place == "last":
                wrapped(Z, M, tp, kinds, base_table, base_ofb, hop)


def wrapped(Z, M, t, kinds, table, ofb, hop):
    """Prints the simplest form of the last placement: every E m before
    the last stage's first item and every EW m after its last (the
    projection once before the schedule, dWf once after it), the table's
    and 1F1B's orders otherwise, replayed (bubbles, ratio, spans)."""
    out = []
    for orders, tt in ((table, t), (ofb, merged(t, kinds)[0])):
        last = [f"E{m}" for m in range(M)] + list(orders[Z - 1]) + [f"X{m}" for m in range(M)]
        rows = {s: [(n, tt[(s, n[0])]) for n in (last if s == Z - 1 else orders[s])] for s in range(Z)}
        out.append(pb.shared_replay(rows, Z, dep=place_dep, hop=hop))
    (zs, zb), (os_, ob) = out
    print(f"#   E before and EW after the schedule: zb table {100 * zb:.2f}%, 1f1b {100 * ob:.2f}%, "
          f"ratio {zb / ob:.3f}, spans {zs / 1e3:.2f} and {os_ / 1e3:.2f} ms")


def main():
    """Parses the options and runs the points."""
    p = benchlib.parser(__doc__.split("\n")[0], json_results=False)
    p.add_argument("--points", default="2:4,4:8", help="Z:M pairs, comma-separated")
    p.add_argument("--steps", type=int, default=5, help="training steps per run (>= 2)")
    p.add_argument("--repeat", type=int, default=3, help="runs (>= 1)")
    p.add_argument("--hop", type=float, default=None,
                   help="transfer time in us (default: the cost pass's hop_time)")
    a = p.parse_args()
    einc = benchlib.einc(a.build)
    print(benchlib.machine())
    for zm in a.points.split(","):
        Z, M = (int(x) for x in zm.split(":"))
        with tempfile.TemporaryDirectory(prefix="einc-pipeplace") as work:
            point(einc, work, Z, M, a.repeat, a.steps, a.hop)


if __name__ == "__main__":
    benchlib.main_guard(main)
