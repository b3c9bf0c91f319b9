/*
 * sample_shard.c - the next token of every row from logits that the
 * devices hold in blocks: vocab-parallel sampling (seed 002, "Sampling"
 * and its vocab-parallel LM head, whose output [B, V_X] each device holds
 * a 1/X slice of).
 *
 * Replicating the logits before sampling costs an AllGather of B * V
 * values per step, though greedy decoding needs one entry per row and
 * top-k sampling k of them.  So each device summarises its block of each
 * row it holds (rt_sample_top: its first maximum, or its top-k entries
 * with global indices, in sample.c's order), the summaries -- (value,
 * index) pairs, two f64 each -- are gathered among the devices that share
 * the row block (an AllGather over the logits' vocab axes), and every
 * device merges them (rt_sample_pick), which gives exactly the token that
 * sample.c's rule gives for the whole row: the row's top-k lie among the
 * shards' top-k, the first maximum is the first of the shards' first
 * maxima, and the weights, the top-p cut and the draw u are the same code
 * on the same entries in the same order.  When the batch dim is sharded
 * too, each device decides its own rows and the tokens (one f64 each) are
 * gathered over the batch's axes, so every device ends with every row's
 * token, as --generate needs.
 *
 * Pairs are not always fewer bytes: sampling with a temperature and no
 * --top-k may draw any token, so the summary would be the whole block
 * (K = V), and a large K on a small vocabulary costs more than the row.
 * rt_sample_choose compares the bytes each way leaves on a device --
 * pairs B_l * G * K * 16 (+ the tokens), whole rows B * V * dtype bytes
 * -- and takes the fewer; whole rows are one AllGather over every axis
 * that shards the logits (the cost of a replicated output), after which
 * each device samples every row itself.
 *
 * --serve (engine.c) plans each step on device 0, where the requests'
 * settings are: K is the largest rt_sample_slots of the rows that sample
 * in the step, which the other devices learn with the step's record.  A
 * summary depends only on K (rt_sample_summarise), so every device
 * summarises its block with that K whatever each row asks; the pairs go
 * to every device over all the logits' axes (rt_sample_gather_step) and
 * device 0 picks each row with its own settings (rt_sample_pick_pairs):
 * a row's first k entries lie among its shards' first K >= k.
 *
 * The collectives are the generated code's (rt_collective), so both
 * backends run them; every device calls the same ones in the same order
 * (each step, after the program's run).
 */
#include <stdlib.h>
#include <string.h>

#include "rt_generate.h"
#include "rt_internal.h"

/* The op id the runtime's own collectives report (they are no op of the
 * program's). */
#define SAMPLE_OP_ID (-1)

/* An AllGather of f64 blocks [rows, cols] -> [rows, cols * G] (dim 1) or
 * of [rows] -> [rows * G] (cols 0, dim 0) over the mesh axes `axes`. */
static void gather_f64(rt_device *dev, int32_t naxes, const int32_t *axes, int64_t G,
                       int64_t rows, int64_t cols, const double *in, double *out)
{
    rt_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = RT_ALLGATHER;
    d.dtype = RT_F64;
    d.naxes = naxes;
    memcpy(d.axes, axes, sizeof d.axes[0] * (size_t)naxes);
    d.rank = cols ? 2 : 1;
    d.in_shape[0] = d.out_shape[0] = rows;
    d.in_shape[1] = cols;
    d.out_shape[1] = cols * G;
    if (!cols)
        d.out_shape[0] = rows * G;
    d.dim = cols ? 1 : 0;
    d.dim2 = -1;
    d.op_id = SAMPLE_OP_ID;
    rt_collective(dev, &d, in, out);
}

/* The product of the sizes of the mesh axes that shard dim `dim` of t. */
static int64_t shards(const rt_program *p, const rt_tensor_desc *t, int32_t dim)
{
    int64_t G = 1;
    for (int32_t k = 0; k < t->dim_naxes[dim]; k++)
        G *= p->axis_sizes[t->dim_axes[dim][k]];
    return G;
}

void rt_sample_gather_whole(rt_device *dev, const rt_tensor_desc *t, const void *local,
                            void *whole)
{
    rt_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = RT_ALLGATHER;
    d.dtype = t->dtype;
    d.rank = t->rank;
    d.dim = RT_DIM_PER_AXIS;
    d.dim2 = -1;
    d.op_id = SAMPLE_OP_ID;
    memcpy(d.in_shape, t->local_shape, sizeof d.in_shape);
    memcpy(d.out_shape, t->global_shape, sizeof d.out_shape);
    /* Every axis works along the dim it shards, in the tensor's order
     * (major first), so the blocks land where rt_block_start puts them. */
    for (int32_t k = 0; k < t->rank; k++)
        for (int32_t j = 0; j < t->dim_naxes[k] && d.naxes < RT_MAX_AXES; j++) {
            d.axes[d.naxes] = t->dim_axes[k][j];
            d.axis_dim[d.naxes] = k;
            d.axis_dim2[d.naxes++] = -1;
        }
    rt_collective(dev, &d, local, whole);
}

rt_sample_plan rt_sample_choose(int64_t slots, int64_t pair_rows, int64_t shards,
                                int64_t token_bytes, int64_t batch, int64_t vocab,
                                int64_t dtype_bytes)
{
    rt_sample_plan c = {0};
    c.whole_bytes = batch * vocab * dtype_bytes;
    if (slots <= 0) /* no row samples: nothing to gather */
        return c;
    c.pair_bytes = pair_rows * shards * slots * 2 * (int64_t)sizeof(double) + token_bytes;
    if (c.pair_bytes < c.whole_bytes) {
        c.slots = slots;
        c.bytes = c.pair_bytes;
    } else {
        c.whole = 1;
        c.bytes = c.whole_bytes;
    }
    return c;
}

rt_sample_plan rt_sample_plan_generate(const rt_program *p, const rt_generate *g)
{
    const rt_tensor_desc *l = &p->outputs[g->logits];
    rt_sample_plan none = {0};
    if (rt_replicated(l))
        return none;
    int64_t rows = l->local_shape[0];
    return rt_sample_choose(rt_sample_slots(&g->sampling, g->vocab), rows,
                            shards(p, l, l->rank - 1), g->batch * (int64_t)sizeof(double),
                            g->batch, g->vocab, (int64_t)rt_dtype_size(l->dtype));
}

void rt_sample_summarise(int32_t dtype, const void *row, int64_t n, int64_t offset,
                         int64_t slots, rt_sample_entry *work, double *pairs)
{
    /* Any temperature > 0: rt_sample_top then reads only `slots` (one
     * slot: the first maximum; more: the first entries in order), which is
     * what it gives for a row's own settings with that many slots. */
    const rt_sampling any = {.temperature = 1, .top_p = 1};
    rt_sample_top(&any, dtype, row, n, offset, slots, work, work);
    /* Indices of a vocabulary below 2^31 are exact in an f64. */
    for (int64_t j = 0; j < slots; j++) {
        pairs[2 * j] = work[j].value;
        pairs[2 * j + 1] = (double)work[j].index;
    }
}

int32_t rt_sample_pick_pairs(const rt_sampling *s, const double *pairs, int64_t n, int sorted,
                             double u, rt_sample_entry *work)
{
    for (int64_t j = 0; j < n; j++)
        work[j] = (rt_sample_entry){.value = pairs[2 * j], .index = (int64_t)pairs[2 * j + 1]};
    return rt_sample_pick(s, work, n, sorted, u);
}

void rt_sample_gather_step(rt_device *dev, const rt_program *p, const rt_tensor_desc *l,
                           const rt_sample_plan *plan, const void *local, void *into)
{
    int64_t slots = plan->slots;
    if (plan->whole) {
        rt_sample_gather_whole(dev, l, local, into);
        return;
    }
    if (slots <= 0)
        return;
    int32_t vd = l->rank - 1;
    int64_t rows = l->local_shape[0], n = l->local_shape[vd], start[RT_MAX_RANK];
    rt_block_start(l, p->axis_sizes, dev->coord, start);
    size_t row_bytes = (size_t)n * rt_dtype_size(l->dtype);
    rt_sample_entry *work = rt_xmalloc(dev, (size_t)(n > slots ? n : slots) * sizeof *work);
    double *mine = rt_xmalloc(dev, (size_t)(rows * 2 * slots) * sizeof *mine);
    for (int64_t i = 0; i < rows; i++)
        rt_sample_summarise(l->dtype, (const char *)local + (size_t)i * row_bytes, n, start[vd],
                            slots, work, mine + i * 2 * slots);
    /* The pairs as a tensor [B, G * 2K] split like the logits' B and V
     * dims: one AllGather over all their axes puts every row's G
     * summaries on every device, blocks where rt_block_start puts them. */
    rt_tensor_desc d = *l;
    d.dtype = RT_F64;
    d.rank = 2;
    d.local_shape[0] = rows;
    d.global_shape[0] = l->global_shape[0];
    d.local_shape[1] = 2 * slots;
    d.global_shape[1] = 2 * slots * shards(p, l, vd);
    d.dim_naxes[1] = l->dim_naxes[vd];
    memcpy(d.dim_axes[1], l->dim_axes[vd], sizeof d.dim_axes[1]);
    rt_sample_gather_whole(dev, &d, mine, into);
    free(mine);
    free(work);
}

/* Every device, when whole rows cost fewer bytes than the pairs: the
 * whole logits on every device, then sample.c on every row. */
static void sample_whole(rt_device *dev, const rt_program *p, const rt_generate *g,
                         const void *local, int64_t step, int32_t *tokens)
{
    const rt_tensor_desc *l = &p->outputs[g->logits];
    size_t row_bytes = (size_t)g->vocab * rt_dtype_size(l->dtype);
    char *whole = rt_xmalloc(dev, (size_t)g->batch * row_bytes);
    rt_sample_entry *work = rt_xmalloc(dev, (size_t)g->vocab * sizeof *work);
    rt_sample_gather_whole(dev, l, local, whole);
    for (int64_t b = 0; b < g->batch; b++)
        tokens[b] = rt_sample_row(&g->sampling, l->dtype, whole + (size_t)b * row_bytes, g->vocab,
                                  rt_sample_uniform(g->sampling.seed, step, b), work);
    free(work);
    free(whole);
}

void rt_sample_sharded(rt_device *dev, const rt_program *p, const rt_generate *g,
                       const void *local, int64_t step, int32_t *tokens)
{
    const rt_tensor_desc *l = &p->outputs[g->logits];
    int32_t vd = l->rank - 1;
    rt_sample_plan plan = rt_sample_plan_generate(p, g);
    if (plan.whole) {
        sample_whole(dev, p, g, local, step, tokens);
        return;
    }
    /* Replicated logits gather nothing (plan.slots 0): each device
     * summarises its whole rows, one shard each. */
    int64_t slots = rt_replicated(l) ? rt_sample_slots(&g->sampling, g->vocab) : plan.slots;
    int64_t G = shards(p, l, vd);
    int64_t rows = l->local_shape[0], n = l->local_shape[vd], start[RT_MAX_RANK];
    rt_block_start(l, p->axis_sizes, dev->coord, start);
    size_t row_bytes = (size_t)n * rt_dtype_size(l->dtype);
    rt_sample_entry *work = rt_xmalloc(dev, (size_t)(n > G * slots ? n : G * slots) * sizeof *work);
    double *mine = rt_xmalloc(dev, (size_t)(rows * 2 * slots) * sizeof *mine);
    double *all = rt_xmalloc(dev, (size_t)(rows * 2 * slots * G) * sizeof *all);
    double *picked = rt_xmalloc(dev, (size_t)rows * sizeof *picked);
    double *every = rt_xmalloc(dev, (size_t)g->batch * sizeof *every);
    for (int64_t i = 0; i < rows; i++)
        rt_sample_summarise(l->dtype, (const char *)local + (size_t)i * row_bytes, n, start[vd],
                            slots, work, mine + i * 2 * slots);
    gather_f64(dev, l->dim_naxes[vd], l->dim_axes[vd], G, rows, 2 * slots, mine, all);
    for (int64_t i = 0; i < rows; i++)
        picked[i] = rt_sample_pick_pairs(&g->sampling, all + i * 2 * slots * G, G * slots, G == 1,
                                         rt_sample_uniform(g->sampling.seed, step, start[0] + i),
                                         work);
    /* Rows held by other devices: their tokens, gathered over the batch's axes. */
    gather_f64(dev, l->dim_naxes[0], l->dim_axes[0], shards(p, l, 0), rows, 0, picked, every);
    for (int64_t b = 0; b < g->batch; b++)
        tokens[b] = (int32_t)every[b];
    free(every);
    free(picked);
    free(all);
    free(mine);
    free(work);
}
