#!/usr/bin/python3
"""pipeline_orders.py - every order of ZB-H1's items within its memory bound, replayed: can a better W placement halve 1F1B's bubble?

bench/pipeline.py's program (an MLP stack of L = 4 layers, batch 256) on
`mesh Z = n` threads with --schedule=zb-h1 (ZB-H1) and M
microbatches, run --repeat times with --profile --trace.  From the traces
(bench/pipeline_items.py's items_of), per stage and item kind, the
median measured item (busy time) and its costed time (the sum of its
ops' `predicted_us`).  Then every per-stage order of the F, B and W items
that ZB-H1 allows -- each kind in microbatch order, B m after F m, W m
after B m, and at most Z microbatches held (F done, W not done) when an F
starts, the memory bound of Qi et al., ICLR'24, section 3.1, which
passes/costmodel/pipeline_sched.c keeps -- combined over the stages and
replayed (bench/pipeline_model.py's replay: a CPU per stage, instant
handoffs) with each set of item times.  Printed: the bubble of the order
the executable ran (the cost pass's ZB-H1 table), the least bubble of any
allowed order and one order reaching it, 1F1B's bubble with the same
items (B and W as one backward item), and the ratios to 1F1B's; also the
lower bound of any order, from the first stage's work and its forced wait
(docs/pipeline.md, "ZB-H1 at Z = 2, M = 4: why not half of 1F1B's").
Z = 2 only (the orders of more stages are too many to list).

Usage: bench/pipeline_orders.py [--build DIR] [--microbatches 4] [--repeat 3] [--steps 5]
"""
import os
import statistics
import sys
import tempfile

sys.dont_write_bytecode = True
import benchlib  # noqa: E402
import pipeline as pb  # noqa: E402  (bench/pipeline.py)
import pipeline_items as pi  # noqa: E402


def zb_orders(M, limit):
    """Every order of one stage's 3M items (tuples of names "F0", "B0",
    "W0", ...) with each kind in microbatch order, B m after F m, W m after
    B m and at most `limit` microbatches with F done and W not done once an
    F has started."""
    out = []

    def rec(seq, f, b, w):
        if len(seq) == 3 * M:
            out.append(tuple(seq))
            return
        if f < M and f - w < limit:
            rec(seq + [f"F{f}"], f + 1, b, w)
        if b < f:
            rec(seq + [f"B{b}"], f, b + 1, w)
        if w < b:
            rec(seq + [f"W{w}"], f, b, w + 1)

    rec([], 0, 0, 0)
    return out


def one_f_one_b(Z, M, s):
    """1F1B's order of stage s (pipeline_sched.c's order_1f1b)."""
    warm = min(Z - s - 1, M)
    return ([f"F{m}" for m in range(warm)] +
            [x for i in range(M - warm) for x in (f"F{warm + i}", f"B{i}")] +
            [f"B{m}" for m in range(M - warm, M)])


def best_order(Z, M, times):
    """The least replayed bubble over every combination of the stages'
    ZB-H1 orders (zb_orders, limit Z) with `times` {(stage, kind): us},
    and the orders reaching it; orders that deadlock are skipped."""
    per = zb_orders(M, Z)
    best, arg = float("inf"), None
    for o0 in per:
        for o1 in per:
            stages = {s: [(n, times[(s, n[0])]) for n in o] for s, o in enumerate((o0, o1))}
            try:
                b = pb.replay(stages)
            except benchlib.BenchError:
                continue
            if b < best - 1e-12:
                best, arg = b, (o0, o1)
    return best, arg, len(per)


def traced_items(einc, work, Z, M, repeat, steps):
    """bench/pipeline.py's program on `mesh Z = Z` with --schedule=zb-h1
    and M microbatches, compiled in the directory `work` and run `repeat`
    times (`steps` steps each) with --profile --trace.  Returns ({(stage,
    kind): [(busy_us, ops_us, costed_us), ...]} pooled over the runs
    (pipeline_items.py's items_of), the measured bubbles, the first run's
    orders {stage: [(name, busy_us)]}, the trace paths).  Errors:
    benchlib.BenchError from a failed compile or run."""
    name = f"z{Z}_zb-h1_m{M}"
    exe = pb.build(einc, work, name, pb.program(Z, True), [f"--microbatches={M}", "--schedule=zb-h1"])
    per, bubbles, order, traces = {}, [], None, []
    for i in range(repeat):
        trace = os.path.join(work, f"{name}_r{i}.json")
        bubbles.append(pb.measured_bubble(exe, steps, trace)[0])
        traces.append(trace)
        got, o = pi.items_of(trace)
        order = order or o
        for k, xs in got.items():
            per.setdefault(k, []).extend(xs)
    return per, bubbles, order, traces


def main():
    """Parses the options, runs the points and prints the comparison."""
    p = benchlib.parser(__doc__.split("\n")[0], json_results=False)
    p.add_argument("--steps", type=int, default=5, help="training steps per run (>= 2)")
    p.add_argument("--microbatches", type=int, default=4, help="M")
    p.add_argument("--repeat", type=int, default=3, help="runs (>= 1)")
    a = p.parse_args()
    Z, M = 2, a.microbatches
    einc = benchlib.einc(a.build)
    print(benchlib.machine())
    with tempfile.TemporaryDirectory(prefix="einc-pipeorders") as work:
        per, bubbles, order, _ = traced_items(einc, work, Z, M, a.repeat, a.steps)
        meas = {k: statistics.median(x[0] for x in xs) for k, xs in per.items()}
        cost = {k: statistics.median(x[2] for x in xs) for k, xs in per.items()}
        print(f"# Z = {Z}, M = {M}, zb-h1 (ZB-H1): measured bubble {100 * statistics.median(bubbles):.1f}% "
              f"(runs {' '.join(f'{100 * b:.1f}' for b in bubbles)})")
        for s in range(Z):
            f, b, w = (meas[(s, k)] for k in "FBW")
            cf, cb, cw = (cost[(s, k)] for k in "FBW")
            print(f"# stage {s} items (ms), measured F {f / 1e3:.2f} B {b / 1e3:.2f} W {w / 1e3:.2f} "
                  f"(W / (B + W) {w / (b + w):.2f}); costed F {cf / 1e3:.2f} B {cb / 1e3:.2f} W {cw / 1e3:.2f} "
                  f"(W / (B + W) {cw / (cb + cw):.2f})")
        for label, t in (("measured", meas), ("costed", cost)):
            ran = pb.replay({s: [(n, t[(s, n[0])]) for n, _ in row] for s, row in order.items()})
            best, arg, n = best_order(Z, M, t)
            ofb = pb.replay({s: [(x, t[(s, x[0])] + (t[(s, "W")] if x[0] == "B" else 0))
                                 for x in one_f_one_b(Z, M, s)] for s in range(Z)})
            # Stage 0 cannot start F2 before W0 (at most Z held), W0 needs B0,
            # and B0 needs stage 1's F0 and B0: it waits at least that long
            # after its F1; then it has the rest of its work.
            f0, f1, b1 = t[(0, "F")], t[(1, "F")], t[(1, "B")]
            work = {s: M * sum(t[(s, k)] for k in "FBW") for s in range(Z)}
            bound_step = max(work[0] + max(0.0, f1 + b1 - f0), work[1] + f0)
            bound = 1 - sum(work.values()) / Z / bound_step
            print(f"# {label} items: the table run {100 * ran:.2f}%, the best of {n} x {n} ZB-H1 orders "
                  f"{100 * best:.2f}%, 1F1B {100 * ofb:.2f}%; ratios to 1F1B: table {ran / ofb:.3f}, best "
                  f"{best / ofb:.3f}; no order under the memory bound below {100 * bound:.2f}% "
                  f"({bound / ofb:.3f}x)")
            print(f"#   a best order: stage 0 {' '.join(arg[0])} | stage 1 {' '.join(arg[1])}")
            print(f"#   the table:    stage 0 {' '.join(n for n, _ in order[0])} | "
                  f"stage 1 {' '.join(n for n, _ in order[1])}")


if __name__ == "__main__":
    benchlib.main_guard(main)
