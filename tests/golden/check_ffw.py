#!/usr/bin/env python3
"""Golden test: the collectives propagation inserts for the FFW block under
seed 000's four strategies are exactly those of the seed's listings.

Forward pass Tmp = In*Win; Act = gelu(Tmp); Out = Act*Wout on mesh X=2,Y=2,
B=4096, D=256, F=1024 (f32).  Each entry: the exact (op, axes, operand
tensor, result type) of every inserted op, the result types of the compute
ops, and the output types.

usage: check_ffw.py EINC EXAMPLES_DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402

CASES = {
    # Seed 000 "Data parallelism": no communication in the forward pass.
    "ffw_dp.ein": (
        [],
        ["Tmp[B_X, F]", "Act[B_X, F]", "Out[B_X, D]"],
        ["Out[B_X, D]"],
    ),
    # Seed 000 "FSDP": gather each weight over X just before its matmul.
    "ffw_fsdp.ein": (
        [("AllGather", "X", "Win", "Win[D, F]"),
         ("AllGather", "X", "Wout", "Wout[F, D]")],
        ["Tmp[B_X, F]", "Act[B_X, F]", "Out[B_X, D]"],
        ["Out[B_X, D]"],
    ),
    # Seed 000 "Tensor parallelism": AllGather_Y(In), ReduceScatter_Y(Out).
    "ffw_tp.ein": (
        [("AllGather", "Y", "In", "In[B, D]"),
         ("ReduceScatter", "Y", "Out", "Out[B, D_Y]")],
        ["Tmp[B, F_Y]", "Act[B, F_Y]", "Out[B, D]{U_Y}"],
        ["Out[B, D_Y]"],
    ),
    # Seed 000 "FSDP + TP": AllGather_Y(In), AllGather_X(Win),
    # AllGather_X(Wout), ReduceScatter_Y(Out).
    "ffw_fsdp_tp.ein": (
        [("AllGather", "Y", "In", "In[B_X, D]"),
         ("AllGather", "X", "Win", "Win[D, F_Y]"),
         ("AllGather", "X", "Wout", "Wout[F_Y, D]"),
         ("ReduceScatter", "Y", "Out", "Out[B_X, D_Y]")],
        ["Tmp[B_X, F_Y]", "Act[B_X, F_Y]", "Out[B_X, D]{U_Y}"],
        ["Out[B_X, D_Y]"],
    ),
}

if __name__ == "__main__":
    sys.exit(golden.main(CASES, sys.argv))
