/*
 * async_meshslice.c - rt_meshslice: the software-pipelined MeshSlice loop
 * of seed 004 (Fig. 5) on one device.
 *
 * The descriptor (einrt.h) names the partial einsum of one iteration and the
 * two partial collectives of one iteration.  With double buffers indexed by
 * the parity of k:
 *
 *   prologue   slice sub-shard 0 of every gathered operand, start its
 *              AllGather
 *   k = 0..K-1 wait for the AllGathers of k; slice sub-shard k+1 and start
 *              its AllGathers (they run during this iteration's GEMM);
 *              partial einsum of k;
 *              OS: C += the partial product (C stays, the contracting dim
 *                  is split, seed 004 3.1.1);
 *              LS/RS: wait for the ReduceScatter of k-1, put its sub-shard
 *                  into C, start the ReduceScatter of k
 *   epilogue   wait for the last ReduceScatter, put it into C
 *
 * Blocked slicing (Algorithm 2): sub-shard k of a block of size L along the
 * split dim is the `block`-element pieces j*K + k (j = 0..L/(K*block)-1).
 * Because every device's block starts at a multiple of K*block, the pieces
 * gathered from all devices are exactly the global pieces with index = k
 * (mod K), in global order - the same set for A and B in OS, and the set a
 * ReduceScatter then cuts into each device's sub-shard k of C.
 *
 * K = 1 is the Collective 2D GEMM: the only sub-shard is the whole shard,
 * so the collectives read and write the operands and C in place (no
 * slicing copies) and run synchronously, since there is nothing to overlap
 * them with.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

_Static_assert(sizeof(rt_meshslice_desc) == 8 * (3 + 1 + 2 + 2 + 3 + 3 + 3 * RT_MAX_RANK + 1),
               "rt_meshslice_desc must have no padding (codegen/meshslice.c mirrors it)");

/* Outer (dims before pos) and inner (dims after pos) element counts. */
static void split_counts(int64_t rank, const int64_t *shape, int64_t pos, int64_t *outer,
                         int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int64_t d = 0; d < rank; d++) {
        if (d < pos)
            *outer *= shape[d];
        else if (d > pos)
            *inner *= shape[d];
    }
}

/* Copies sub-shard k of `full` (shape, split dim at pos) to `sub`
 * (to_sub = 1) or back (to_sub = 0). */
static void move_sub(int64_t rank, const int64_t *shape, int64_t pos, int64_t K, int64_t block,
                     int64_t k, size_t es, char *full, char *sub, int to_sub)
{
    int64_t outer, inner, L = shape[pos];
    split_counts(rank, shape, pos, &outer, &inner);
    int64_t nb = L / (K * block);
    size_t run = (size_t)(block * inner) * es;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < nb; j++) {
            char *f = full + (size_t)((o * L + (j * K + k) * block) * inner) * es;
            char *s = sub + (size_t)((o * (L / K) + j * block) * inner) * es;
            if (to_sub)
                memcpy(s, f, run);
            else
                memcpy(f, s, run);
        }
}

/* Fatal unless the descriptor is consistent enough to index safely. */
static void check_desc(rt_device *dev, const rt_meshslice_desc *d)
{
    if (!d || !d->einsum || !d->coll[0] || !d->coll[1])
        rt_fatal(dev, "rt_meshslice: incomplete descriptor");
    if (d->k < 1 || d->block < 1 || d->dataflow < 0 || d->dataflow > 2)
        rt_fatal(dev, "MeshSlice (op %lld): bad K %lld, block %lld or dataflow %lld",
                 (long long)d->op_id, (long long)d->k, (long long)d->block, (long long)d->dataflow);
    for (int i = 0; i < 3; i++) {
        if (d->rank[i] < 0 || d->rank[i] > RT_MAX_RANK || d->split_pos[i] >= d->rank[i])
            rt_fatal(dev, "MeshSlice (op %lld): bad rank or split position of tensor %d",
                     (long long)d->op_id, i);
        if (d->split_pos[i] >= 0 && d->shape[i][d->split_pos[i]] % (d->k * d->block))
            rt_fatal(dev, "MeshSlice (op %lld): K * block = %lld does not divide the split dim "
                     "(%lld) of tensor %d", (long long)d->op_id, (long long)(d->k * d->block),
                     (long long)d->shape[i][d->split_pos[i]], i);
    }
    for (int i = 0; i < 2; i++) {
        int64_t t = d->coll_operand[i] < 0 ? 2 : d->coll_operand[i];
        if (t > 2 || d->split_pos[t] < 0)
            rt_fatal(dev, "MeshSlice (op %lld): collective %d moves a tensor without the split dim",
                     (long long)d->op_id, i);
    }
}

void rt_meshslice(rt_device *dev, const rt_meshslice_desc *d, const void *a, const void *b, void *c)
{
    check_desc(dev, d);
    const rt_einsum_desc *e = d->einsum;
    size_t es = rt_dtype_size(e->dtype);
    int64_t K = d->k;
    const void *full[3] = {a, b, c};
    /* Per moved tensor: sub-shard buffers and collective outputs, two each. */
    char *sub[2][2] = {{NULL, NULL}, {NULL, NULL}}, *moved[2][2] = {{NULL, NULL}, {NULL, NULL}};
    int rs = -1; /* index of the ReduceScatter among coll[], or -1 (OS) */
    for (int i = 0; i < 2; i++) {
        const rt_coll_desc *cd = d->coll[i];
        if (cd->kind == RT_REDUCESCATTER)
            rs = i;
        for (int p = 0; p < 2 && (p == 0 || K > 1); p++) {
            /* AllGather: sub = its input, moved = its output; ReduceScatter:
             * moved = the partial product (input), sub = its output.  With
             * K = 1 the sub-shard is the whole operand or C itself. */
            if (K == 1)
                sub[i][p] = cd->kind == RT_REDUCESCATTER ? (char *)c : (char *)full[d->coll_operand[i]];
            else
                sub[i][p] = rt_alloc(dev, rt_numel(cd->rank, cd->kind == RT_REDUCESCATTER ? cd->out_shape : cd->in_shape) * (int64_t)es);
            moved[i][p] = rt_alloc(dev, rt_numel(cd->rank, cd->kind == RT_REDUCESCATTER ? cd->in_shape : cd->out_shape) * (int64_t)es);
        }
    }
    int64_t nc = rt_numel(e->rank[2], e->shape[2]);
    char *acc = rs < 0 && K > 1 ? rt_alloc(dev, nc * (int64_t)es) : NULL;
    rt_async *q = K > 1 ? rt_async_open(dev) : NULL;
    int64_t h[2][2] = {{-1, -1}, {-1, -1}};

    /* Slices sub-shard k of moved operand i and starts its AllGather. */
    /* Starts collective i on buffers in/out (K = 1: runs it to completion). */
#define START(i, p, in, out)                                                                    \
    (h[i][p] = q ? rt_async_start(q, d->coll[i], (in), (out))                                   \
                 : (rt_collective(dev, d->coll[i], (in), (out)), -1))
#define WAIT(i, p)                                                                              \
    do {                                                                                        \
        if (h[i][p] >= 0)                                                                       \
            rt_async_wait(q, h[i][p]);                                                          \
    } while (0)
#define START_GATHER(i, k, p)                                                                   \
    do {                                                                                        \
        int64_t t_ = d->coll_operand[i];                                                        \
        if (K > 1)                                                                              \
            move_sub(d->rank[t_], d->shape[t_], d->split_pos[t_], K, d->block, (k), es,         \
                     (char *)full[t_], sub[i][p], 1);                                           \
        START(i, p, sub[i][p], moved[i][p]);                                                    \
    } while (0)

    for (int i = 0; i < 2; i++)
        if (i != rs)
            START_GATHER(i, 0, 0);
    for (int64_t k = 0; k < K; k++) {
        int p = (int)(k & 1);
        for (int i = 0; i < 2; i++)
            if (i != rs)
                WAIT(i, p);
        if (k + 1 < K)
            for (int i = 0; i < 2; i++)
                if (i != rs)
                    START_GATHER(i, k + 1, 1 - p);
        const void *ea = a, *eb = b;
        for (int i = 0; i < 2; i++) {
            if (d->coll_operand[i] == 0)
                ea = moved[i][p];
            else if (d->coll_operand[i] == 1)
                eb = moved[i][p];
        }
        if (rs < 0) {
            /* OS: C = sum over k of the partial products. */
            rt_einsum(dev, e, ea, eb, k == 0 ? c : acc);
            if (k > 0) {
                const void *srcs[2] = {c, acc};
                rt_sum_arrays(e->dtype, c, srcs, 2, nc);
            }
            continue;
        }
        rt_einsum(dev, e, ea, eb, moved[rs][p]);
        if (k > 0) {
            WAIT(rs, 1 - p);
            move_sub(d->rank[2], d->shape[2], d->split_pos[2], K, d->block, k - 1, es, c,
                     sub[rs][1 - p], 0);
        }
        START(rs, p, moved[rs][p], sub[rs][p]);
    }
    if (rs >= 0 && K > 1) {
        int p = (int)((K - 1) & 1);
        WAIT(rs, p);
        move_sub(d->rank[2], d->shape[2], d->split_pos[2], K, d->block, K - 1, es, c, sub[rs][p], 0);
    }
#undef START_GATHER
#undef WAIT
#undef START
    if (q)
        rt_async_close(q);
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < 2; p++) {
            if (sub[i][p] && K > 1)
                rt_free(dev, sub[i][p]);
            if (moved[i][p])
                rt_free(dev, moved[i][p]);
        }
    if (acc)
        rt_free(dev, acc);
}
