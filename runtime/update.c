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
 */
#include <inttypes.h>
#include <string.h>

#include "rt_internal.h"

void rt_update_slice(rt_device *dev, const rt_update_desc *d, const int32_t *pos, const void *rows,
                     void *state)
{
    size_t esize = d ? rt_dtype_size((int32_t)d->dtype) : 0;
    if (!d || !esize || d->outer < 0 || d->n < 0 || d->inner < 0 || d->n_global < d->n ||
        d->window < 1 || d->window > d->n_global || d->naxes < 0 || d->naxes > RT_MAX_AXES)
        rt_fatal(dev, "UpdateSlice (op %" PRId64 "): bad descriptor", d ? d->op_id : -1);
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
    int64_t blk = 0;
    for (int64_t k = 0; k < d->naxes; k++) {
        int32_t a = (int32_t)d->axes[k];
        blk = blk * dev->prog->axis_sizes[a] + rt_coord(dev, a);
    }
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
