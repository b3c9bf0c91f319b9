/*
 * reshard_key.c - the resharding planner's two small formulas: the bytes
 * one collective moves (seed 001's table) and the compact key of a
 * sharding state, which the search (reshard.c) and the propagate pass's
 * memo (propagate_cost.c) index by.
 */
#include "reshard.h"

/* Key encoding: per mesh axis 6 bits, (place | order << 4); place 0 = unused,
 * 1..rank = dim position + 1, PLACE_U = unreduced. */
#define PLACE_U 15u

double pass_reshard_bytes(ir_op_kind kind, double in_bytes, double out_bytes, int64_t group)
{
    if (group <= 1)
        return 0.0;
    double f = (double)(group - 1) / (double)group;
    switch (kind) {
    case IR_OP_ALLGATHER: return out_bytes * f;
    case IR_OP_REDUCESCATTER: return in_bytes * f;
    case IR_OP_ALLREDUCE: return 2.0 * in_bytes * f;
    case IR_OP_ALLTOALL: return in_bytes * f / 4.0;
    default: return 0.0;
    }
}

uint32_t pass_reshard_key(const ir_sharding *s, int rank, int naxes)
{
    uint32_t key = 0;
    for (int d = 0; d < rank; d++)
        for (int k = 0; k < s->naxes[d]; k++) {
            int a = s->axes[d][k];
            if (a >= 0 && a < naxes)
                key |= ((uint32_t)(d + 1) | (uint32_t)k << 4) << (6 * a);
        }
    for (int a = 0; a < naxes; a++)
        if (s->unreduced & (1u << a))
            key |= PLACE_U << (6 * a);
    return key;
}
