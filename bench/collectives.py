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

    python3 bench/collectives.py --build BUILD [--ranks 2 4] [--min 1024] [--max 268435456]
"""
import benchlib as bl

KINDS = ["AllGather", "ReduceScatter", "AllReduce", "AllToAll"]


def main():
    p = bl.parser(__doc__)
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--min", type=int, default=1024)
    p.add_argument("--max", type=int, default=256 << 20)
    p.add_argument("--no-mpi", action="store_true", help="skip the Open MPI baseline")
    a = p.parse_args()
    thr = bl.compile_c(a.build, "coll_threads", ["coll_threads.c"], runtime=True)
    mpi = None if a.no_mpi else bl.compile_c(a.build, "coll_mpi", ["coll_mpi.c"], mpi=True)
    print(bl.machine())
    for n in a.ranks:
        res = bl.results(bl.run([thr, n, a.min, a.max]))
        if mpi:
            res += bl.results(bl.run(bl.mpirun(n) + [mpi, a.min, a.max]))
        memcpy = {r["bytes"]: r["bw"] for r in res if r["bench"] == "memcpy"}
        coll = {(r["backend"], r["coll"], r["bytes"]): r for r in res if r["bench"] == "coll"}
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


if __name__ == "__main__":
    bl.main_guard(main)
