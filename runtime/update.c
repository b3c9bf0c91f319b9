/*
 * update.c - rt_update_slice: the in-place write of an UpdateSlice op (a
 * KV cache's new token at a position known only at run time).
 *
 * The state's block on this device is [outer, n, inner] around the written
 * dim; the position selects one index of that dim globally (a window of w
 * rows, w consecutive ones).  With the dim
 * unsharded every device writes its block's slice; sharded, only the
 * device whose block holds the position does (the others keep their
 * blocks), so the position may fall on any shard.  Every device checks the
 * position first, so a bad one is reported wherever it would have landed.
 * A per-row write (`At[B]`) gives each row of a dim before the written
 * one its own position: the outer index says the row, and each device
 * writes its own rows (reading its block of a replicated pos).  A
 * per-row window (`At[B]:T`, a chunked prefill beside decoding rows)
 * writes row b's w rows at At[b] .. At[b] + w - 1, every one of which
 * must be inside the dim, as for a scalar window.
 */
#include <inttypes.h>
#include <string.h>

#include "rt_internal.h"

/* Reports row `row` (global index) of a per-row write whose start `p` is
 * out of range: one position, or a window of d->window. */
static void bad_row(rt_device *dev, const rt_update_desc *d, int64_t row, int32_t p)
{
    if (d->window == 1)
        rt_fatal(dev, "write into '%s': position %s[%" PRId64 "] = %" PRId32 " is outside its dim "
                 "'%s' of %" PRId64 " (valid positions 0..%" PRId64 ")", d->state_name, d->pos_name,
                 row, p, d->dim_name, d->n_global, d->n_global - 1);
    rt_fatal(dev, "write into '%s': positions %s[%" PRId64 "] = %" PRId32 " to %" PRId64 " (a window "
             "of %" PRId64 ") are outside its dim '%s' of %" PRId64 " (valid starts 0..%" PRId64 ")",
             d->state_name, d->pos_name, row, p, (int64_t)p + d->window - 1, d->window, d->dim_name,
             d->n_global, d->n_global - d->window);
}

/* A per-row write: row b (its index in `outer` / row_stride, modulo
 * row_n) goes to its own position, or with a window its rows t to its
 * position + t.  All of this device's rows are checked before any is
 * written, so a bad position writes nothing. */
static void update_rows(rt_device *dev, const rt_update_desc *d, const int32_t *pos, const void *rows,
                        void *state, size_t esize)
{
    if (d->row_n < 1 || d->row_stride < 1 || d->row_naxes < 0 || d->row_naxes > RT_MAX_AXES ||
        d->outer % (d->row_n * d->row_stride) != 0)
        rt_fatal(dev, "UpdateSlice (op %" PRId64 "): bad per-row descriptor", d->op_id);
    int64_t first = rt_block_index(dev, d->row_axes, d->row_naxes) * d->row_n; /* global row of b = 0 */
    const int32_t *mine = d->row_local ? pos : pos + first;
    for (int64_t b = 0; b < d->row_n; b++)
        if (mine[b] < 0 || mine[b] > d->n_global - d->window)
            bad_row(dev, d, first + b, mine[b]);
    int64_t blk = rt_block_index(dev, d->axes, d->naxes);
    size_t row = (size_t)d->inner * esize;
    for (int64_t o = 0; o < d->outer; o++)
        for (int64_t t = 0; t < d->window; t++) {
            int64_t local = mine[(o / d->row_stride) % d->row_n] + t - blk * d->n;
            if (local < 0 || local >= d->n)
                continue; /* another device's block of the written dim holds this position */
            memcpy((char *)state + ((size_t)o * (size_t)d->n + (size_t)local) * row,
                   (const char *)rows + ((size_t)o * (size_t)d->window + (size_t)t) * row, row);
        }
}

void rt_update_slice(rt_device *dev, const rt_update_desc *d, const int32_t *pos, const void *rows,
                     void *state)
{
    size_t esize = d ? rt_dtype_size((int32_t)d->dtype) : 0;
    if (!d || !esize || d->outer < 0 || d->n < 0 || d->inner < 0 || d->n_global < d->n ||
        d->window < 1 || d->window > d->n_global || d->naxes < 0 || d->naxes > RT_MAX_AXES)
        rt_fatal(dev, "UpdateSlice (op %" PRId64 "): bad descriptor", d ? d->op_id : -1);
    if (d->row_n) {
        update_rows(dev, d, pos, rows, state, esize);
        return;
    }
    int64_t p = *pos;
    if (d->window == 1 && (p < 0 || p >= d->n_global))
        rt_fatal(dev, "write into '%s': position %s = %" PRId64 " is outside its dim '%s' of %" PRId64
                 " (valid positions 0..%" PRId64 ")", d->state_name, d->pos_name, p, d->dim_name,
                 d->n_global, d->n_global - 1);
    if (p < 0 || p > d->n_global - d->window)
        rt_fatal(dev, "write into '%s': positions %s = %" PRId64 " to %" PRId64 " (a window of %" PRId64
                 ") are outside its dim '%s' of %" PRId64 " (valid starts 0..%" PRId64 ")",
                 d->state_name, d->pos_name, p, p + d->window - 1, d->window, d->dim_name,
                 d->n_global, d->n_global - d->window);
    int64_t blk = rt_block_index(dev, d->axes, d->naxes);
    size_t row = (size_t)d->inner * esize;
    for (int64_t t = 0; t < d->window; t++) {
        int64_t local = p + t - blk * d->n;
        if (local < 0 || local >= d->n)
            continue; /* another device's block holds this position */
        for (int64_t o = 0; o < d->outer; o++)
            memcpy((char *)state + ((size_t)o * (size_t)d->n + (size_t)local) * row,
                   (const char *)rows + ((size_t)o * (size_t)d->window + (size_t)t) * row, row);
    }
}
