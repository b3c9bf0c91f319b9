#!/usr/bin/python3
"""pipeline_wfill.py - zero-bubble's W items placed at run time
(`--w-fill=greedy`, docs/pipeline.md "W items placed at run time").

1. The GELU-MLP stack of pipeline.py, trained 3 steps, compiled with
   `--w-fill=static` and `--w-fill=greedy` for zero-bubble and zb-h2 on
   the meshes Z=2 x X=2 (TP on X) and Z=4: the greedy run's losses and
   params must be bitwise those of the static table's (the W items keep
   their table order among themselves, so every sum adds in the same
   order), and both equal NumPy's whole-batch steps to 1e-9 relative (the
   unpipelined step, as pipeline.py checks).  With --mpi the same on 4 MPI
   ranks (the probe is MPI_Iprobe there).
2. The greedy run's --trace on each device: F, B and W of every
   microbatch once, F m before B m before W m, W m starting after B m
   ends, at most Z (zb-h2: 2Z - 1) microbatches held at any point; the
   line counts the W items that ran before the table's place for them
   (timing decides how many: not asserted).
3. `--stats`, Z=4, M=8: every device's peak bytes under greedy at most
   the static table's plus the fill's own 8 + 3M bytes (the row's cursor
   and done flags): a W run early frees its microbatch's frame early.
4. The LLaMA-style decoder of pipeline.py (zero-bubble, M = 4, threads)
   with --w-fill=greedy under `--check` against the unpipelined
   reference.
5. The flag: 1f1b (no W items) accepts and ignores `--w-fill=greedy`
   (`--dump-ir=json` records it, the run gives 1f1b's static params
   bitwise); `--w-fill=sometimes` is refused with a message naming the
   values; a program that is not pipelined refuses `--w-fill`.

`--quick` (the sanitizer build) runs part 1 on one mesh and parts 2 and 5.
The last line is `N passed, N failed`; exit 1 on any failure.

Usage: pipeline_wfill.py --einc PATH --example llama2_13b_train.ein [--quick]
                         [--mpi [--mpi-only] --mpirun PATH]
"""
import json
import os
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, mpi_launch, run_merged  # noqa: E402
import pipeline as pp  # noqa: E402  (the MLP, its NumPy reference and runners)
from pipeline_trace import zero_bubble_problems  # noqa: E402


def write_mlp(work, mesh, opt="sgd"):
    mesh_line, ins, fx = pp.MESHES[mesh]
    src = os.path.join(work, "mlp.ein")
    with open(src, "w") as f:
        f.write(pp.MLP.format(MESH=mesh_line, IN=ins, FX=fx, OPT=pp.OPTIMIZERS[opt]))
    return src


def bitwise_problems(static, greedy):
    """What differs at all between two runs' (losses, params)."""
    problems = []
    if static[0] != greedy[0]:
        problems.append("losses %r, static %r" % (greedy[0], static[0]))
    for n, want in static[1].items():
        if not np.array_equal(greedy[1][n], want):
            problems.append("%s: %d elements differ from the static table's" %
                            (n, int(np.sum(greedy[1][n] != want))))
    return problems


def table_rows(a, src, flags):
    """Each stage's items in table order (from --dump-ir=json), or None."""
    rc, out = run_merged([a.einc, src, "--dump-ir=json"] + flags)
    if rc != 0:
        return None, out
    doc = json.loads(out[out.index("{"):])
    rows = [[t for t in row.split("|", 1)[1].split() if t != "."] for row in doc["pipeline"]["table"]]
    return rows, doc["pipeline"]


def run_bitwise(a, work, tally, vals, refs):
    threads = [("Z=2 x X=2, TP on X", "zb-h1", 4), ("Z=4", "zb-h1", 8),
               ("Z=2 x X=2, TP on X", "zb-h2", 8), ("Z=4", "zb-h2", 4)]
    if a.quick:
        threads = threads[1:2]
    mpi = [("Z=4", "zb-h1", 8), ("Z=4", "zb-h2", 4)]
    for rt, (mesh, sched, m) in pp.selected(a, threads, mpi):
        src = write_mlp(work, mesh)
        title = "mlp %s, %s, M=%d (%s): --w-fill=greedy" % (mesh, sched, m, rt)
        runs, failed = {}, None
        for fill in ("static", "greedy"):
            flags = ["--microbatches=%d" % m, "--schedule=" + sched, "--w-fill=" + fill]
            failed, out, losses, w = pp.train(a, rt, src, flags, work, vals, "")
            if failed:
                tally.result(False, "%s: %s (--w-fill=%s)" % (title, failed, fill), out)
                break
            runs[fill] = (losses, w)
        if failed:
            continue
        problems = bitwise_problems(runs["static"], runs["greedy"])
        for fill in ("static", "greedy"):
            problems += ["%s: %s" % (fill, p) for p in pp.against_numpy(refs["sgd"], *runs[fill])]
        tally.result(not problems, "%s: bitwise the static table's, both NumPy's to 1e-9" % title,
                     "\n".join(problems))


def run_trace(a, work, tally):
    for mesh, sched, m, z_size in (("Z=4", "zb-h1", 8, 4), ("Z=4", "zb-h2", 8, 4)):
        src = write_mlp(work, mesh)
        flags = ["--microbatches=%d" % m, "--schedule=" + sched, "--w-fill=greedy"]
        rows, info = table_rows(a, src, flags)
        title = "trace %s, %s, M=%d, greedy" % (mesh, sched, m)
        if rows is None:
            tally.result(False, title + ": --dump-ir=json", info)
            continue
        exe, tr = os.path.join(work, "trace_exe"), os.path.join(work, "trace.json")
        rc, out = pp.compile_prog(a, src, exe, flags)
        if rc == 0:
            rc, out = run_merged([exe, "--random-inputs", "1", "--steps", "2", "--trace", tr])
        if rc != 0:
            tally.result(False, title + ": runs with --trace", out)
            continue
        events = json.load(open(tr))["traceEvents"]
        spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "pipeline"
                 and e["name"] != "recv wait"]
        limit = z_size if sched == "zb-h1" else 2 * z_size - 1
        problems, early = [], 0
        for d in range(z_size):
            items = sorted((e for e in spans if e["tid"] == d), key=lambda e: e["ts"])
            table = rows[d]
            # The trace holds every step's items: check each step's run.
            for s in range(len(items) // len(table)):
                step = items[s * len(table):(s + 1) * len(table)]
                problems += ["device %d: %s" % (d, p) for p in zero_bubble_problems(step, z_size, m, limit)]
                names = [e["name"] for e in step]
                early += sum(1 for i, n in enumerate(names) if n[0] == "W" and i < table.index(n))
        tally.result(not problems, "%s: every device runs F, B and W of each microbatch in their order, "
                     "at most %d held; %d W items ran before their place in the table" % (title, limit, early),
                     "\n".join(problems))


def run_stats(a, work, tally):
    src = write_mlp(work, "Z=4")
    peaks = {}
    for fill in ("static", "greedy"):
        exe = os.path.join(work, "stats_" + fill)
        rc, out = pp.compile_prog(a, src, exe, ["--microbatches=8", "--schedule=zb-h1", "--w-fill=" + fill])
        if rc == 0:
            rc, out = run_merged([exe, "--random-inputs", "1", "--stats"])
        peaks[fill] = [pp.peak_bytes(out, d) for d in range(4)] if rc == 0 else None
        if not peaks[fill] or None in peaks[fill]:
            tally.result(False, "--stats zero-bubble, M=8, --w-fill=%s: no peaks" % fill, out)
            return
    # The fill's own block: the row's cursor (8 bytes with its padding)
    # and a done flag per item (3 M).
    block = 8 + 3 * 8
    ok = all(g <= s + block for g, s in zip(peaks["greedy"], peaks["static"]))
    tally.result(ok, "--stats Z=4 zero-bubble M=8: every device's peak under greedy %s at most static's %s "
                 "plus the fill's %d bytes" % (peaks["greedy"], peaks["static"], block))


def run_llama(a, work, tally):
    src, dims, check_run = pp.llama_source(a, work)
    pp.checked(a, tally, "llama zero-bubble, M=4, --w-fill=greedy (threads)", src, os.path.join(work, "llama"),
               dims + ["--microbatches=4", "--schedule=zb-h1", "--w-fill=greedy"], "threads", check_run,
               r"check: largest max_rel_err=.*")


def run_flag(a, work, tally, vals):
    src = write_mlp(work, "Z=4")
    base = ["--microbatches=4", "--schedule=1f1b"]
    _, info = table_rows(a, src, base + ["--w-fill=greedy"])
    tally.result(isinstance(info, dict) and info.get("w_fill") == "greedy",
                 "1f1b --w-fill=greedy: --dump-ir=json's pipeline.w_fill", str(info)[-2000:])
    runs = {}
    for fill in ("static", "greedy"):
        failed, out, losses, w = pp.train(a, "threads", src, base + ["--w-fill=" + fill], work, vals, "")
        runs[fill] = (losses, w) if not failed else None
    ok = runs["static"] and runs["greedy"] and not bitwise_problems(runs["static"], runs["greedy"])
    tally.result(bool(ok), "1f1b (no W items) accepts --w-fill=greedy and runs as static")
    rc, out = run_merged([a.einc, src, "-o", os.path.join(work, "bad"), "--schedule=zb-h1",
                          "--w-fill=sometimes"])
    tally.result(rc != 0 and "--w-fill wants static or greedy, not 'sometimes'" in out,
                 "--w-fill=sometimes is refused naming the values", out)
    flat = os.path.join(work, "flat.ein")
    with open(flat, "w") as f:
        f.write(pp.MLP.format(MESH="X = 2", IN="B_X, D", FX="", OPT=pp.OPTIMIZERS["sgd"]).replace("L_Z", "L"))
    rc, out = run_merged([a.einc, flat, "-o", os.path.join(work, "flat"), "--w-fill=greedy"])
    tally.result(rc != 0 and "--w-fill applies to a pipelined program" in out,
                 "a program that is not pipelined refuses --w-fill", out)


def main():
    a = pp.arguments(__doc__)
    tally = Tally()
    rng = np.random.default_rng(25)
    B, D, F, L = pp.B, pp.D, pp.F, pp.L
    vals = {"In": rng.standard_normal((B, D)), "Tgt": rng.standard_normal((B, D)),
            "Win": rng.standard_normal((L, D, F)) / np.sqrt(D),
            "Wout": rng.standard_normal((L, F, D)) / np.sqrt(F),
            "Wf": rng.standard_normal((D, D)) / np.sqrt(D)}
    with tempfile.TemporaryDirectory(prefix="einc-wfill-") as work:
        for k, v in vals.items():
            np.save(os.path.join(work, k + ".npy"), v)
        refs = {"sgd": pp.mlp_reference(vals, "sgd")}
        run_bitwise(a, work, tally, vals, refs)
        if not a.mpi_only:
            run_trace(a, work, tally)
            run_flag(a, work, tally, vals)
            if not a.quick:
                run_stats(a, work, tally)
                run_llama(a, work, tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
