#!/usr/bin/env python3
"""Benchmark 2: threads-runtime collectives vs Open MPI and single-core memcpy.

For each group size (--ranks, default 2 4) runs coll_threads.c (einc's
threads runtime through rt_collective) and coll_mpi.c (Open MPI on the same
number of ranks, plus a ring ReduceScatter from MPI_Sendrecv), f32, per-rank
buffers --min .. --max bytes in steps of 4x.  algbw and busbw as nccl-tests
define them (see coll_threads.c).  Ratios:
    vs MPI     = einc busbw / Open MPI busbw (target >= 1.5); for
                 ReduceScatter also against the ring (vs ring)
    vs memcpy  = einc algbw / single-core memcpy bandwidth of the same size
Each program runs --rounds times (alternating) and the best time of each
measurement is kept, which filters out other load on a shared machine.

    python3 bench/collectives.py --build BUILD [--ranks 2 4] [--min 1024] [--max 268435456] [--rounds 2]
        [--json FILE]
"""
import benchlib as bl

KINDS = ["AllGather", "ReduceScatter", "AllReduce", "AllToAll"]


def main():
    p = bl.parser(__doc__)
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--min", type=int, default=1024)
    p.add_argument("--max", type=int, default=256 << 20)
    p.add_argument("--no-mpi", action="store_true", help="skip the Open MPI baseline")
    p.add_argument("--rounds", type=int, default=2,
                   help="runs of each program; the best time of each size is kept")
    a = p.parse_args()
    thr = bl.compile_c(a.build, "coll_threads", ["coll_threads.c"], runtime=True)
    mpi = None if a.no_mpi else bl.compile_c(a.build, "coll_mpi", ["coll_mpi.c"], mpi=True)
    print(bl.machine())
    record = bl.Results("collectives", "Collectives of the threads runtime vs Open MPI")
    for n in a.ranks:
        # Rounds alternate the einc and MPI programs; the best round of each
        # measurement is kept (the machine may be shared, and load only slows).
        memcpy, coll = {}, {}
        for _ in range(a.rounds):
            res = bl.results(bl.run([thr, n, a.min, a.max]))
            if mpi:
                res += bl.results(bl.run(bl.mpirun(n) + [mpi, a.min, a.max]))
            for r in res:
                if r["bench"] == "memcpy":
                    memcpy[r["bytes"]] = max(memcpy.get(r["bytes"], 0), r["bw"])
                else:
                    key = (r["backend"], r["coll"], r["bytes"])
                    if key not in coll or r["us"] < coll[key]["us"]:
                        coll[key] = r
        for kind in KINDS:
            print(f"\n## {kind}, {n} devices (f32; GB/s; bytes = full per-rank buffer)\n")
            rows = []
            for size in sorted(memcpy):
                t = coll[("threads", kind, size)]
                row = [bl.human_bytes(size), t["us"], t["algbw"], t["busbw"]]
                if mpi:
                    m = coll[("mpi", kind, size)]
                    row += [m["busbw"], f"{t['busbw'] / m['busbw']:.2f}",
                            bl.verdict(t["busbw"] / m["busbw"], 1.5)]
                    if size == max(memcpy):  # the headline: the largest buffer
                        record.add(f"{kind} {n} devices {bl.human_bytes(size)} busbw", t["busbw"],
                                   "GB/s", ">= 1.5x Open MPI", t["busbw"] / m["busbw"],
                                   bl.verdict(t["busbw"] / m["busbw"], 1.5))
                    if kind == "ReduceScatter":
                        ring = coll[("mpi", "ReduceScatterRing", size)]
                        row += [ring["busbw"], f"{t['busbw'] / ring['busbw']:.2f}",
                                bl.verdict(t["busbw"] / ring["busbw"], 1.5)]
                row += [memcpy[size], f"{t['algbw'] / memcpy[size]:.2f}"]
                rows.append(row)
            head = ["bytes", "einc us", "einc algbw", "einc busbw"]
            if mpi:
                head += ["MPI busbw", "vs MPI", ">=1.5x"]
                if kind == "ReduceScatter":
                    head += ["ring busbw", "vs ring", ">=1.5x"]
            head += ["memcpy GB/s", "algbw/memcpy"]
            bl.table(head, rows)
    record.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
