#!/usr/bin/python3
"""pipeline_items.py - each pipeline item's measured time against its costed one, and which item kind moves the bubble.

bench/pipeline.py's program (an MLP stack of L = 4 layers, batch 256) on
`mesh Z = n` threads, for the given schedules and microbatch counts, each
point compiled once and run --repeat times with --profile --trace.  From
the traces, per stage and item kind (F.c, B.c, W: _kind of
bench/pipeline.py), the median over microbatches and runs of:

  meas   the item's busy time (its wall time minus its receive waits,
         runtime/pipe_bubble.c's busy), microseconds;
  ops    the sum of its ops' measured times, each op at the median of
         all its calls in that stage's items of that kind (bench/
         pipeline.py's ops_replay): a call another thread stalled is one
         of many, so this leaves the stalls out where meas keeps them;
  cost   the sum of its ops' costed times (each span's `predicted_us`,
         the cost pass's per-op time), i.e. the item as the costed ops
         place it: the embedding in F m.0 of the first stage, the loss in
         the last chunk of the last stage;
  sim    the item's time in the cost pass's simulation (pipeline_sim.c,
         pp_sim_duration): the stage's costed forward or backward per
         microbatch (totals.pipeline's stage times plus the first / last
         stage's extra) divided evenly over its v chunks (none for
         zero-bubble, zb-h1 and zb-h2, whose B and W the JSON does not split);
  ratio  meas / cost;
  out    the item's busy time outside its ops (frames, the send's copy,
         the item's own bookkeeping), the median of busy minus the sum of
         the item's own op spans: a per-item fixed cost, which the cost
         pass does not price, would show here.

Then the bubble of the stages' orders (the first run's, as traced)
replayed with a CPU per stage and instant handoffs (bench/pipeline.py's
replay) with each kind's item times taken from one source: `sim` (the
cost pass's assumption), `cost` (the costed ops where they run), `cost x
r` (the costed ops scaled by r, the sum of the median items over the sum
of their costed times: the machine's speed with the cost model's
proportions, so the same bubble as `cost`), `ops` and `meas`; `meas`
with one kind at a time put back to its costed time x r (which kind
moves it); the costed items with the first stage's scaled to a given
first / last work ratio, and the measured items with the first stage's
scaled back to the costed ratio (how much the stages' balance moves
it); and the costed items x r with every receive that waited waking L
microseconds after its input was sent (bench/pipeline.py's
shared_replay `wake`: how much the hand-offs' wake-ups move it).
Beside them the measured bubble (--profile, median over the runs, and
each run's beside its first / last stage work), the predicted one, the
costed hop and the receives' measured mean wake-up (handoff_lags).
docs/pipeline.md, "The Z = 2, M = 8 miss: the item times, term by
term", reads its output.

Usage: bench/pipeline_items.py [--build DIR] [--stages 2] [--schedules 1f1b,interleaved]
                               [--microbatches 4,8,16] [--repeat 3] [--steps 5]
"""
import os
import statistics
import sys
import tempfile

sys.dont_write_bytecode = True
import benchlib  # noqa: E402
import pipeline as pb  # noqa: E402  (bench/pipeline.py)


def items_of(trace):
    """{(stage, kind): [(busy_us, ops_us, costed_us), ...]} over every item
    of every run in the --trace file `trace` (busy: the item's span minus
    its receive waits; ops: the sum of the `compute` spans inside it;
    costed: the sum of their `predicted_us`), and the first run's orders
    as bench/pipeline.py's trace_runs gives them."""
    out = {}
    for s, row in pb.stage_items(trace)[1].items():
        for name, begin, end, waits, ops in row:
            busy = end - begin - sum(b - a for a, b in waits)
            out.setdefault((s, pb._kind(name)), []).append(
                (busy, sum(o["dur"] for o in ops), sum(o.get("args", {}).get("predicted_us", 0.0) for o in ops)))
    return out, pb.trace_runs(trace)[0][0]


def sim_items(cost, Z, v):
    """The cost pass's simulated item time (us) per (stage, kind): the
    stage's forward or backward per microbatch over its v chunks."""
    out = {}
    for s in range(Z):
        def extra(key):
            return (cost.get(f"first_stage_{key}", 0) if s == 0 else 0) + \
                (cost.get(f"last_stage_{key}", 0) if s == Z - 1 else 0)
        # The extras' forward part (first_stage_extra_forward, ...) goes
        # to F, the rest to B, as the simulation has them (no W items
        # here: the split schedules have no simulated items).
        f = (cost["stage_forward_time"] + extra("extra_forward")) * 1e6
        b = (cost["stage_backward_time"] + extra("extra") - extra("extra_forward")) * 1e6
        for c in range(v):
            sfx = f".{c}" if v > 1 else ""
            out[(s, "F" + sfx)] = f / v
            out[(s, "B" + sfx)] = b / v
    return out


def point(einc, work, Z, sched, M, steps, repeat):
    """Compiles bench/pipeline.py's program for (Z, schedule sched, M
    microbatches) in the directory `work`, runs it `repeat` times with
    --profile --trace (`steps` steps each) and prints the point's tables
    (module docstring).  Errors: benchlib.BenchError from a failed
    compile or run."""
    v = pb.CHUNKS if sched == "interleaved" else 1
    name = f"z{Z}_{sched}_m{M}"
    flags = [f"--microbatches={M}", f"--schedule={sched}"]
    exe = pb.build(einc, work, name, pb.program(Z, True), flags)
    cost = pb.costed(einc, work, name, flags)
    per, bubbles, pred, traces, order, balance = {}, [], None, [], None, []
    for i in range(repeat):
        trace = os.path.join(work, f"{name}_r{i}.json")
        bub, pred, _ = pb.measured_bubble(exe, steps, trace)
        bubbles.append(bub)
        traces.append(trace)
        got, o = items_of(trace)
        order = order or o
        tot = [sum(statistics.median(x[0] for x in xs) for k, xs in got.items() if k[0] == st)
               for st in (0, Z - 1)]
        balance.append(tot[0] / tot[1])
        for k, xs in got.items():
            per.setdefault(k, []).extend(xs)
    med = {k: tuple(statistics.median(x[i] for x in xs) for i in range(3)) for k, xs in per.items()}
    out = {k: statistics.median(x[0] - x[1] for x in xs) for k, xs in per.items()}
    # The ops column: each op at its median over all calls (ops_replay),
    # so a stalled call does not count; the meas column keeps the stalls.
    ops_items = pb.ops_replay(traces)[1]
    med = {k: (m, 1e6 * ops_items.get(k, 0.0), c) for k, (m, _, c) in med.items()}
    # The JSON's stage backward is B + W together: no simulated items for
    # the split schedules.
    sim = {} if sched in pb.SPLIT else sim_items(cost, Z, v)
    # The machine's speed against the costed one: the median items' sum
    # over the costed sum (medians, so that stalled items do not set it).
    r = sum(x[0] for x in med.values()) / sum(x[2] for x in med.values())
    if Z > (os.cpu_count() or 1):
        print(f"\n# Z = {Z} stages share {os.cpu_count()} cores: the measured items include the "
              "wait for the core, the replays give each stage a CPU of its own")
    print(f"\n## Z = {Z} {sched} M = {M}: measured bubble {100 * statistics.median(bubbles):.1f}% "
          f"(runs {' '.join(f'{100 * b:.1f}' for b in bubbles)}), predicted "
          f"{100 * pred:.1f}%; hop costed {1e6 * cost['hop_time']:.0f} us; "
          f"median items measured / costed r = {r:.2f}")
    print("# each run's measured bubble and first / last stage work (its median items): " +
          ", ".join(f"{100 * b:.1f}% at {x:.3f}" for b, x in zip(bubbles, balance)))
    print(f"{'stage':>5} {'kind':>5} {'meas':>8} {'ops':>8} {'cost':>8} {'sim':>8} {'ratio':>6} {'out':>6}")
    for k in sorted(med):
        m, o, c = med[k]
        print(f"{k[0]:>5} {k[1]:>5} {m:8.0f} {o:8.0f} {c:8.0f} {sim.get(k, float('nan')):8.0f} {m / c:6.2f} {out[k]:6.0f}")
    for s in sorted({k[0] for k in med}):
        mm = sum(x[0] for k, x in med.items() if k[0] == s)
        cc = sum(x[2] for k, x in med.items() if k[0] == s)
        print(f"# stage {s}: work per microbatch measured {mm:.0f} us, costed {cc:.0f} us ({mm / cc:.2f}x)")
    s0 = [sum(x[i] for k, x in med.items() if k[0] == 0) for i in range(3)]
    s1 = [sum(x[i] for k, x in med.items() if k[0] == Z - 1) for i in range(3)]
    print(f"# first / last stage work per microbatch: measured items {s0[0] / s1[0]:.3f}, ops' medians "
          f"{s0[1] / s1[1]:.3f}, costed {s0[2] / s1[2]:.3f}")

    def rep(times):
        return 100 * pb.replay({s: [(n, times[(s, pb._kind(n))]) for n, _ in row] for s, row in order.items()})

    src = {"sim": {k: sim.get(k, 0.0) for k in med} if sim else None, "cost": {k: x[2] for k, x in med.items()},
           "cost x r": {k: x[2] * r for k, x in med.items()}, "ops": {k: x[1] for k, x in med.items()},
           "meas": {k: x[0] for k, x in med.items()}}
    print("# replayed bubble (a CPU per stage, instant handoffs): " +
          ", ".join(f"{n} {rep(t):.1f}%" for n, t in src.items() if t))
    print("# meas with one kind put back to cost x r: " +
          ", ".join(f"{k[0]}:{k[1]} {rep({**src['meas'], k: src['cost x r'][k]}):.1f}%" for k in sorted(med)))
    # How much a stage imbalance alone moves this order's bubble: the
    # costed items with the first stage's scaled so that first / last is x.
    base = s0[2] / s1[2]
    print("# costed items, first stage scaled to first / last = x: " + ", ".join(
        f"x {x:.2f} {rep({k: t * (x / base if k[0] == 0 else 1.0) for k, t in src['cost'].items()}):.1f}%"
        for x in sorted({1.0, round(base, 3), 1.10, 1.15, 1.20, 1.25})))
    print("# measured items, first stage scaled back to the costed first / last: "
          f"{rep({k: t * (base * s1[0] / s0[0] if k[0] == 0 else 1.0) for k, t in src['meas'].items()}):.1f}%")
    # How much the receives' wake-ups alone move it: the costed items x r,
    # each item whose stage waited for its input starting L us later.
    order_r = {s: [(n, src["cost x r"][(s, pb._kind(n))]) for n, _ in row] for s, row in order.items()}
    print("# costed items x r, a waiting receive waking L later: " + ", ".join(
        f"L {L} us {100 * pb.shared_replay(order_r, Z, wake=(L, L))[1]:.1f}%" for L in (0, 50, 250, 1000)))
    lag = pb.handoff_lags(traces, os.cpu_count() or 1)
    print(f"# receives' mean wake-up {lag[0]:.0f} us ({lag[2]} samples)")


def main():
    """Parses the options and prints each (Z, schedule, M) point."""
    p = benchlib.parser(__doc__.split("\n")[0], json_results=False)
    p.add_argument("--steps", type=int, default=5, help="training steps per run (>= 2)")
    p.add_argument("--stages", default="2", help="values of Z")
    p.add_argument("--schedules", default="1f1b,interleaved", help="schedules")
    p.add_argument("--microbatches", default="4,8,16", help="values of M")
    p.add_argument("--repeat", type=int, default=3, help="runs of each point (>= 1)")
    a = p.parse_args()
    if a.steps < 2 or a.repeat < 1:
        raise benchlib.BenchError("--steps must be at least 2 and --repeat at least 1")
    einc = benchlib.einc(a.build)
    print(benchlib.machine())
    with tempfile.TemporaryDirectory(prefix="einc-pipeitems") as work:
        for Z in (int(z) for z in a.stages.split(",")):
            for sched in a.schedules.split(","):
                for M in (int(m) for m in a.microbatches.split(",")):
                    if sched == "interleaved" and (M % Z or pb.LAYERS % (Z * pb.CHUNKS)):
                        continue
                    point(einc, work, Z, sched, M, a.steps, a.repeat)


if __name__ == "__main__":
    benchlib.main_guard(main)
