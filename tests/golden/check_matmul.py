#!/usr/bin/env python3
"""Golden test: one sharded matmul per case of seed 001 (examples/matmul_*.ein)
gets exactly the collectives the seed prescribes.

usage: check_matmul.py EINC EXAMPLES_DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402

CASES = {
    # Case 1: nothing contracting is sharded -> local.
    "matmul_case1_local.ein": ([], ["C[I_X, K_Y]"], ["C[I_X, K_Y]"]),
    # Case 2: contracting J sharded in A only -> AllGather A.
    "matmul_case2_allgather.ein": (
        [("AllGather", "X", "A", "A[I, J]")], ["C[I, K]"], ["C[I, K]"]),
    # Question 9: slice B, partial sums, AllReduce the small result.
    "matmul_case2_q9.ein": (
        [("Slice", "X", "B", "B[J_X, K]"), ("AllReduce", "X", "C", "C[I, K]")],
        ["C[I, K]{U_X}"], ["C[I, K]"]),
    # Case 3: J sharded on X in both -> {U_X}; replicated output: AllReduce.
    "matmul_case3_allreduce.ein": (
        [("AllReduce", "X", "C", "C[I, K]")], ["C[I, K]{U_X}"], ["C[I, K]"]),
    # Case 3 with a sharded output: ReduceScatter, not AllReduce + Slice.
    "matmul_case3_reducescatter.ein": (
        [("ReduceScatter", "X", "C", "C[I, K_X]")], ["C[I, K]{U_X}"], ["C[I, K_X]"]),
    # Case 4: free dims on one axis -> gather the cheaper operand (B).
    "matmul_case4_free.ein": (
        [("AllGather", "X", "B", "B[J, K]")], ["C[I_X, K]"], ["C[I_X, K]"]),
    # Moving a subscript between dims: one AllToAll.
    "matmul_alltoall.ein": (
        [("AllToAll", "X", "C", "C[I, K_X]")], ["C[I_X, K]"], ["C[I, K_X]"]),
}

if __name__ == "__main__":
    sys.exit(golden.main(CASES, sys.argv))
