#!/usr/bin/python3
"""pipeline_bench_model.py - bench/pipeline.py's models of a step, checked
on schedules whose answers are known (docs/pipeline.md, "Stages sharing
cores"):

- shared_replay with a CPU per stage is the model of a step: zero-bubble's
  (ZB-H1) Z = 2, M = 4 table with unit F, B, W takes 13 slots (bubble
  1/13) and 1f1b's with B = 2 takes 15 (bubble 1/5), (Z-1)/(M+Z-1);
- on one CPU any order takes the sum of its work (the CPU never idles),
  and with the stages taking turns each stage idles while the others run;
- ops_replay: items timed by their ops' medians, replayed;
- the --repeat verdicts (consistency: systematic, noise, within) and the
  item ratios against the costed ones (item_ratios);
- round trip: a timeline simulated on 2 CPUs for 4 stages, written as a
  --trace file with receive waits, gives back its items' work through
  decontend and its span and bubble through machine_prediction;
- bench/pipeline_items.py: an item's busy time, its ops' measured and
  costed sums and its time outside the ops read from a trace
  (items_of), and the cost pass's simulated item times (sim_items: a
  stage's forward or backward split evenly over its v chunks, the first
  and last stage's extras split by their forward part);
- the receives' wake-ups: handoff_lags reads them from a trace (onto an
  idle core, onto one another stage runs on), and shared_replay's `wake`
  delays exactly the items whose stage waited for its input (1F1B, Z = 2,
  M = 4: 15 slots become 17 with a wake-up of half an F);
- bench/pipeline_place.py: shared_replay's `hop` and `dep` (the input
  projection's items E and EW on the last stage), its branch-and-bound
  search against every order listed and replayed (Z = 2, M = 2, three
  placements, random item times), ZB-H1's 13 unit slots found, and the
  projection's ops read from a trace (proj_parts).

Usage: pipeline_bench_model.py (no arguments; runs in a few seconds).
"""
import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import pipeline as P  # noqa: E402
import pipeline_items as PI  # noqa: E402
import pipeline_place as PP  # noqa: E402

FAILS = []


def check(what, got, want, tol=1e-9):
    if abs(got - want) > tol:
        FAILS.append(f"{what}: got {got}, want {want}")


def rows(table, times):
    """{stage: [(name, work)]} from table rows of item names."""
    return {s: [(n, times[n[0]]) for n in row.split()] for s, row in enumerate(table)}


ZB_H1 = ["F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3",   # docs/pipeline.md's table
         "F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3"]
ONE_F_ONE_B = ["F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"]
# 1f1b on Z = 4, M = 8 (warm-up Z - s - 1 forwards on stage s).
Z4 = []
for s in range(4):
    warm = 4 - s - 1
    order = [f"F{m}" for m in range(warm)]
    for m in range(8):
        if warm + m < 8:
            order.append(f"F{warm + m}")
        order.append(f"B{m}")
    Z4.append(" ".join(order))


def wake_ups():
    """handoff_lags on a hand-made trace, and shared_replay's wake term."""
    # Stages 0 and 1 on one CPU (cores = 1).  Stage 1's F0 waits from 0 to
    # 1300 for stage 0's F0 (ends at 1000, stage 0's F1 running then): a
    # wake-up of 300 onto a busy core.  Its F1 waits from 2300 to 2650 for
    # stage 0's F1 (ends at 2600, nothing after it): 50 onto an idle core.
    events = [{"ph": "X", "cat": "pipeline", "tid": s, "name": n, "ts": float(b), "dur": float(e - b)}
              for s, n, b, e in ((0, "F0", 0, 1000), (0, "F1", 1000, 2600), (1, "F0", 0, 2300),
                                 (1, "recv wait", 0, 1300), (1, "F1", 2300, 3000),
                                 (1, "recv wait", 2300, 2650))]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "otherData": {"runs": 1}}, f)
        idle, busy, n_idle, n_busy = P.handoff_lags(path, 1)
        check("wake-up onto an idle core (us)", idle, 50.0, 1e-9)
        check("wake-up onto a busy core (us)", busy, 300.0, 1e-9)
        check("wake-ups counted", n_idle + 10 * n_busy, 11)
        # Taking turns (EINC_CORE_SHARING=items) stage 1 could not run
        # before stage 0's F1 gave the CPU up at 2600: no wake-up at 1300.
        check("turns: wake-up onto a busy core (us)", P.handoff_lags(path, 1, turns=True)[1], 0.0, 1e-9)
    # Taking turns, stage 1's F0 (input ready at 1000, stage 0's F1 running
    # to 2600) returns from its receive at 2650: a wake-up of 50 after the
    # CPU was given up, where the time-sliced reading sees 1650.
    events = [{"ph": "X", "cat": "pipeline", "tid": s, "name": n, "ts": float(b), "dur": float(e - b)}
              for s, n, b, e in ((0, "F0", 0, 1000), (0, "F1", 1000, 2600), (1, "F0", 0, 3000),
                                 (1, "recv wait", 0, 2650))]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "otherData": {"runs": 1}}, f)
        check("turns: wake-up after the CPU's turn (us)", P.handoff_lags(path, 1, turns=True)[1], 50.0, 1e-9)
        check("time slices: the same wait read as a wake-up (us)", P.handoff_lags(path, 1)[1], 1650.0, 1e-9)
    # 1F1B, Z = 2, M = 4, F = 1, B = 2, a CPU per stage: a wake-up of 0.5
    # delays stage 1's F0, F2 and stage 0's B0, B2, B3 (their stage waited
    # for the input), not the items whose input came while their stage was
    # busy: 17 slots, each stage busy 12 of them.
    span, bub = P.shared_replay(rows(ONE_F_ONE_B, {"F": 1, "B": 2}), 2, wake=(0.5, 0.5))
    check("1F1B Z=2 M=4 span with wake-ups", span, 17)
    check("1F1B Z=2 M=4 bubble with wake-ups", bub, 5 / 17)
    check("no wake-up is the instant handoff", P.shared_replay(rows(ONE_F_ONE_B, {"F": 1, "B": 2}), 2,
                                                              wake=(0.0, 0.0))[0], 15)


def item_times():
    """pipeline_items.items_of on a 1F1B trace whose items hold two ops
    (costed 300 and 200 us) and, on stage 1, a receive wait of 100 us
    before them; sim_items for Z = 2, v = 2."""
    tl = {}
    P.shared_replay(rows(ONE_F_ONE_B, {"F": 1000.0, "B": 2000.0}), 2, tl)
    events = []
    for s, items in tl.items():
        for i, (name, b, e) in enumerate(items):
            b += 100 * s * i  # each earlier item of stage 1 ran 100 us longer (its wait)
            e += 100 * s * i
            events.append({"ph": "X", "cat": "pipeline", "tid": s, "name": name, "ts": b, "dur": e - b + 100 * s})
            if s:
                events.append({"ph": "X", "cat": "pipeline", "tid": s, "name": "recv wait", "ts": b, "dur": 100})
            t = b + 100 * s
            for k, (d, c) in enumerate(((0.6, 300.0), (0.3, 200.0))):
                events.append({"ph": "X", "cat": "compute", "tid": s, "name": f"op{k}", "ts": t,
                               "dur": d * (e - b), "args": {"predicted_us": c}})
                t += d * (e - b)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "otherData": {"runs": 1}}, f)
        per, order = PI.items_of(path)
    for s in (0, 1):
        for kind, work in (("F", 1000.0), ("B", 2000.0)):
            xs = per.get((s, kind), [])
            check(f"items_of: stage {s} {kind} items", len(xs), 4)
            for busy, ops, cost in xs:
                check(f"items_of: stage {s} {kind} busy (the receive wait left out)", busy, work, 1e-6)
                check(f"items_of: stage {s} {kind} ops", ops, 0.9 * work, 1e-6)
                check(f"items_of: stage {s} {kind} costed", cost, 500.0, 1e-9)
    check("items_of: the first run's order", len(order[0]), 8)
    sim = PI.sim_items({"stage_forward_time": 2e-3, "stage_backward_time": 4e-3, "first_stage_extra": 1e-3,
                        "last_stage_extra": 0.5e-3}, 2, 2)
    for k, want in (((0, "F.0"), 1000.0), ((0, "F.1"), 1000.0), ((0, "B.1"), 2500.0), ((1, "B.0"), 2250.0)):
        check(f"sim_items {k}", sim.get(k, -1.0), want, 1e-6)
    # With the extras' forward part given, it goes to F.
    sim = PI.sim_items({"stage_forward_time": 2e-3, "stage_backward_time": 4e-3, "first_stage_extra": 1e-3,
                        "last_stage_extra": 0.5e-3, "first_stage_extra_forward": 0.4e-3,
                        "last_stage_extra_forward": 0.1e-3}, 2, 2)
    for k, want in (((0, "F.0"), 1200.0), ((0, "B.1"), 2300.0), ((1, "F.1"), 1050.0), ((1, "B.0"), 2200.0)):
        check(f"sim_items with the forward extras {k}", sim.get(k, -1.0), want, 1e-6)


def listed_orders(M, kinds, limit):
    """Every order of one stage's items (written here apart from
    pipeline_place.search): each kind in microbatch order, B m after F m,
    W m after B m, at most `limit` microbatches with F done and W not when
    an F starts; E and X (EW) anywhere."""
    out = []

    def rec(seq, c):
        if len(seq) == len(kinds) * M:
            out.append(tuple(seq))
            return
        for k in kinds:
            m = c[k]
            if m >= M or (k == "F" and m - c["W"] >= limit) or (k == "B" and m >= c["F"]) or \
                    (k == "W" and m >= c["B"]):
                continue
            rec(seq + [f"{k}{m}"], {**c, k: m + 1})

    rec([], dict.fromkeys("FBWEX", 0))
    return out


def placement():
    """bench/pipeline_place.py: hop, dep, the search and proj_parts."""
    # A hop on every cross-stage input: 1F1B's critical path crosses
    # the stages four times (F0 forward, then stage 1 waits for F2 and F3
    # behind stage 0's B0 and B1, and B3 back), 15 slots become 16.
    span, _ = P.shared_replay(rows(ONE_F_ONE_B, {"F": 1, "B": 2}), 2, hop=0.25)
    check("1F1B Z=2 M=4 with a hop of 0.25", span, 16)
    # The projection on the last stage: stage 0's F m waits for E m there.
    r = {0: [("F0", 1.0)], 1: [("E0", 0.5), ("F0", 1.0), ("B0", 1.0), ("X0", 0.5)]}
    r[0].append(("B0", 1.0))
    span, _ = P.shared_replay(r, 2, dep=PP.place_dep, hop=0.1)
    check("E0, F0 after it, EW0 after stage 0's B0", span, 0.5 + 0.1 + 1 + 0.1 + 2 + 0.1 + 1 + 0.1 + 0.5)
    got = PP.search(2, 4, {(s, k): 1.0 for s in range(2) for k in "FBW"}, {0: "FBW", 1: "FBW"},
                    {0: None, 1: None}, 2, 0.0)
    check("search: ZB-H1's 13 unit slots", got[0], 13)
    if got[1] and " ".join(got[1][0]) != ZB_H1[0]:
        FAILS.append(f"search: stage 0's order {got[1][0]}, want the table's")
    import random
    rnd = random.Random(7)
    for trial in range(3):
        t = {(s, k): rnd.uniform(1, 3) for s in range(2) for k in "FBWEX"}
        hop = (0.0, 0.3)[trial % 2]
        for kinds in ({0: "FBW", 1: "FBW"}, {0: "FBW", 1: "FBWEX"}, {0: "FBW", 1: "FBWE"}):
            dep = PP.place_dep if "E" in kinds[1] else P._dep
            per = {s: listed_orders(2, kinds[s], 2) for s in range(2)}
            best = float("inf")
            for o0 in per[0]:
                for o1 in per[1]:
                    try:
                        sp, _ = P.shared_replay({0: [(n, t[(0, n[0])]) for n in o0],
                                                 1: [(n, t[(1, n[0])]) for n in o1]}, 2, dep=dep, hop=hop)
                    except P.benchlib.BenchError:  # a deadlocked pair
                        continue
                    best = min(best, sp)
            got = PP.search(2, 2, t, kinds, {0: None, 1: None}, 2, hop)
            check(f"search against every listed order ({kinds[1]}, trial {trial})", got[0], best, 1e-9)
            if not got[2]:
                FAILS.append("search: a small search stopped early")
    # proj_parts: stage 0's ops before the loop (F) and after it (W).
    ev = []
    for ts, name, ops in ((0, "F0", (("H = Einsum In, Wf", 40, 30), ("H.1 = LoopBegin H", 5, 1),
                                     ("T = Einsum H.1, Win.1", 100, 90), ("H.5 = LoopEnd H.3", 5, 1))),
                          (200, "W0", (("dW_loop.1 = LoopBegin dW_loop", 1, 1), ("dWin = Einsum dT.4, H.7", 90, 80),
                                       ("dW_loop.2 = LoopEnd dW_loop.1", 1, 1), ("dWf = Einsum dH.10, In", 35, 25)))):
        ev.append({"ph": "X", "cat": "pipeline", "tid": 0, "name": name, "ts": ts, "dur": 190})
        at = ts
        for n, dur, pred in ops:
            ev.append({"ph": "X", "cat": "compute", "tid": 0, "name": n, "ts": at, "dur": dur,
                       "args": {"predicted_us": pred}})
            at += dur
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": ev, "otherData": {"runs": 1}}, f)
        parts = PP.proj_parts([path])
        for k, want in ((("costed", "E"), 30), (("ops", "E"), 40), (("costed", "X"), 25), (("ops", "X"), 35)):
            check(f"proj_parts {k}", parts[k], want)


def main():
    span, bub = P.shared_replay(rows(ZB_H1, {"F": 1, "B": 1, "W": 1}), 2)
    check("ZB-H1 Z=2 M=4 span", span, 13)
    check("ZB-H1 Z=2 M=4 bubble", bub, 1 / 13)
    span, bub = P.shared_replay(rows(ONE_F_ONE_B, {"F": 1, "B": 2}), 2)
    check("1F1B Z=2 M=4 span", span, 15)
    check("1F1B Z=2 M=4 bubble", bub, 1 / 5)
    check("replay is shared_replay on Z CPUs", P.replay(rows(ONE_F_ONE_B, {"F": 1, "B": 2})), 1 / 5)
    work = rows(Z4, {"F": 1.0, "B": 2.5})
    span, _ = P.shared_replay(work, 1)
    check("one CPU: span = the sum of the work", span, sum(w for r in work.values() for _, w in r))
    span, bub = P.shared_replay(work, 1, turns=True)
    check("one CPU, turns: span = the sum of the work", span, sum(w for r in work.values() for _, w in r))
    check("one CPU, turns: each stage idle while the others run", bub, 3 / 4)
    check("one CPU: no idle CPU time", P.core_idle(sum(w for r in work.values() for _, w in r), span, 4, 1), 0)
    check("a CPU per stage: core-idle = the bubble", P.core_idle(2 * (4 * 1 + 4 * 2), 15, 2, 2), 1 / 5)
    check("turns with a CPU per stage is the model of a step",
          P.shared_replay(rows(ZB_H1, {"F": 1, "B": 1, "W": 1}), 2, turns=True)[0], 13)
    # Uneven stages (the same work for the items of one stage and kind, as
    # machine_prediction's medians assume), so that they overlap in odd
    # ways; 2 CPUs for 4 stages.
    work = {s: [(n, 1.0 + 0.37 * s + (0.6 if n[0] == "B" else 0)) for n, _ in r]
            for s, r in work.items()}
    tl = {}
    span, bub = P.shared_replay(work, 2, tl)
    if not (sum(w for r in work.values() for _, w in r) / 2 <= span + 1e-9):
        FAILS.append("2 CPUs: span below half the work")
    # A --trace of two runs of that timeline (microseconds), each item's
    # wait for its input as a "recv wait" span at its start.
    ends = {}
    events = []
    for run in range(2):
        t0 = 1000.0 + run * (span + 500)
        for s, items in tl.items():
            free = 0.0
            for name, b, e in items:
                begin = min(free, b)  # the item opens when its stage is free
                events.append({"ph": "X", "cat": "pipeline", "tid": s, "name": name,
                               "ts": t0 + begin, "dur": e - begin})
                if b > begin:
                    events.append({"ph": "X", "cat": "pipeline", "tid": s, "name": "recv wait",
                                   "ts": t0 + begin, "dur": b - begin})
                free = e
                ends[(s, name)] = e
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "otherData": {"runs": 2}}, f)
        runs = P.trace_runs(path, 2)
        check("runs read", len(runs), 2)
        for st, measured, w, sp in runs:
            check("trace span", sp, span, 1e-6)
            check("trace bubble (as --profile)", measured, bub, 1e-9)
            for s, r in work.items():
                for (n, want), got in zip(r, w[s]):
                    check(f"decontended work of stage {s} {n}", got, want, 1e-6)
        mp = P.machine_prediction(path, 2)
        check("machine prediction's span", mp["pred_span"] * 1e6, span, 1e-6)
        check("machine prediction's bubble", mp["pred_bubble"], bub, 1e-9)
        check("items' work", mp["work"] * 1e6, sum(w for r in work.values() for _, w in r), 1e-6)
        # The core-idle bubble: the CPUs' idle share, measured from the
        # trace and predicted by the replay (the same timeline here).
        total = sum(w for r in work.values() for _, w in r)
        check("measured core-idle bubble (4 stages, 2 CPUs)", mp["core"], 1 - total / (2 * span), 1e-9)
        check("predicted core-idle bubble (4 stages, 2 CPUs)", mp["pred_core"], 1 - total / (2 * span), 1e-9)
        # Two traces (two runs of --repeat) pool their items: the same
        # medians, so the same prediction; the items' medians by kind.
        mp2 = P.machine_prediction([path, path], 2)
        check("pooled traces' bubble", mp2["pred_bubble"], bub, 1e-9)
        check("stage 3's B item (median work, s)", mp2["items"][(3, "B")] * 1e6, 1.0 + 3 * 0.37 + 0.6, 1e-6)
    wake_ups()
    item_times()
    placement()
    # ops_replay: each item's time from its ops' medians (two ops per item,
    # one of them recorded short once: the median ignores it), replayed.
    tl = {}
    P.shared_replay(rows(ZB_H1, {"F": 1000.0, "B": 1000.0, "W": 1000.0}), 2, tl)
    events = []
    for s, items in tl.items():
        for name, b, e in items:
            events.append({"ph": "X", "cat": "pipeline", "tid": s, "name": name, "ts": b, "dur": e - b})
            for k, (ob, oe) in enumerate(((b, b + 500), (b + 500, e))):
                short = s == 0 and name == "F1" and k == 0
                events.append({"ph": "X", "cat": "compute", "tid": s, "name": f"op{k} of {name[0]}",
                               "ts": ob, "dur": 50 if short else oe - ob})
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "otherData": {"runs": 1}}, f)
        bub, items = P.ops_replay([path])
        check("ops_replay bubble (ZB-H1, unit items)", bub, 1 / 13)
        check("ops_replay stage 0 F item (s)", items[(0, "F")], 1000e-6, 1e-12)
    # The repeats' verdicts: one side beyond 5 points in every run is
    # systematic; runs on both sides of the limit or of zero are noise.
    for offs, want in (([6.2, 7.0, 5.5], "systematic"), ([-6.0, -9.0], "systematic"),
                       ([6.2, 3.0, 7.0], "noise"), ([6.0, -6.0, 7.0], "noise"),
                       ([4.9, -2.0, 0.1], "within")):
        got = P.consistency(offs)
        if not got.endswith(": " + want):
            FAILS.append(f"consistency({offs}) = {got!r}, want {want}")
    if P.consistency([9.0]) != "":
        FAILS.append("consistency of a single run must not judge")
    # The item ratios that set the bubble, against the costed ones.
    r = {"items": {(0, "F"): 1.0, (0, "B"): 1.5, (0, "W"): 1.5, (1, "F"): 1.0, (1, "B"): 1.0, (1, "W"): 1.0},
         "costed": {"stage_forward_time": 2.0, "stage_backward_time": 4.0,
                    "first_stage_extra": 0.6, "last_stage_extra": 0.0}}
    got = {w.split(",")[0]: (m, c) for w, m, c in P.item_ratios(r)}
    for what, want in (("stage 0 (B+W) / F", (3.0, 2.0)), ("stage 1 (B+W) / F", (2.0, 2.0)),
                       ("stage 0 / stage 1 work per microbatch", (4.0 / 3.0, 6.6 / 6.0))):
        for a, b in zip(got.get(what, (None, None)), want):
            check(f"item_ratios {what}", a if a is not None else -1, b, 1e-12)
    if FAILS:
        print("\n".join(FAILS))
        sys.exit(1)
    print("pipeline_bench_model: ok")


if __name__ == "__main__":
    main()
