#!/usr/bin/env python3
"""Golden test: propagation on the programs in tests/golden/programs/ (partial
sums carried through linear ops, a residual block with a scalar loss, a
reshard between layouts) inserts exactly the listed collectives.

usage: check_programs.py EINC PROGRAMS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402

CASES = {
    # {U_X} carried through two einsums and a linear combination: one
    # AllReduce, of the final S.
    "carry.ein": (
        [("AllReduce", "X", "S", "S[I, L]")],
        ["C[I, K]{U_X}", "D1[I, L]{U_X}", "D2[I, L]{U_X}", "S[I, L]{U_X}"],
        ["S[I, L]"]),
    # TP block: the residual add cannot carry O's {U_Y} (In holds none), so
    # O is ReduceScattered into its constraint; the loss sums over B and D,
    # sharded on X and Y: AllReduce_XY.
    "residual.ein": (
        [("AllGather", "Y", "In", "In[B_X, D]"),
         ("ReduceScatter", "Y", "O", "O[B_X, D_Y]"),
         ("AllReduce", "XY", "L", "L[]")],
        ["H[B_X, F_Y]", "G[B_X, F_Y]", "O[B_X, D]{U_Y}", "O[B_X, D_Y]", "L[]{U_XY}"],
        ["L[]", "O[B_X, D_Y]"]),
}

if __name__ == "__main__":
    sys.exit(golden.main(CASES, sys.argv))
