/*
 * gather.c - rt_gather: the embedding lookup of a gather einsum (ir.h) on
 * this device's blocks.
 *
 * Each index selects a row of the table; the row is copied if this device
 * holds it (its block of the table's first dim), else the output row is
 * zero.  With the rows unsharded every row is local; with them sharded the
 * zeros make the partial sums that the AllReduce or ReduceScatter after it
 * completes (Megatron's vocab-parallel embedding).  Every index is checked
 * against the whole table, on every device, so a bad one is reported
 * wherever it sits.
 */
#include <inttypes.h>
#include <string.h>

#include "rt_internal.h"

/* This device's block offset along a dim of `size` elements per device split
 * over `axes` (major first; einrt.h's block numbering). */
static int64_t block_offset(rt_device *dev, const int64_t *axes, int64_t naxes, int64_t size)
{
    int64_t blk = 0;
    for (int64_t k = 0; k < naxes; k++) {
        int32_t a = (int32_t)axes[k];
        blk = blk * dev->prog->axis_sizes[a] + rt_coord(dev, a);
    }
    return blk * size;
}

static void check_desc(rt_device *dev, const rt_gather_desc *d)
{
    if (!d || d->ids_rank < 0 || d->ids_rank > RT_MAX_RANK || d->rows < 0 || d->row_elems < 0 ||
        d->rows_global < d->rows || d->rows_naxes < 0 || d->rows_naxes > RT_MAX_AXES ||
        !rt_dtype_size((int32_t)d->dtype) || d->dtype == RT_I32)
        rt_fatal(dev, "gather (op %" PRId64 "): bad descriptor", d ? d->op_id : -1);
    for (int64_t j = 0; j < d->ids_rank; j++)
        if (d->ids_naxes[j] < 0 || d->ids_naxes[j] > RT_MAX_AXES || d->ids_shape[j] < 0)
            rt_fatal(dev, "gather (op %" PRId64 "): bad descriptor", d->op_id);
}

/* Reports index element `e` (a position in this device's block of ids),
 * which holds `value`, at its global position. */
RT_NORETURN static void bad_index(rt_device *dev, const rt_gather_desc *d, int64_t e, int32_t value)
{
    char pos[256];
    size_t n = 0;
    int64_t idx[RT_MAX_RANK];
    for (int64_t j = d->ids_rank - 1; j >= 0; j--) {
        idx[j] = e % d->ids_shape[j];
        e /= d->ids_shape[j];
    }
    for (int64_t j = 0; j < d->ids_rank && n < sizeof pos; j++) {
        int64_t g = idx[j] + block_offset(dev, d->ids_axes[j], d->ids_naxes[j], d->ids_shape[j]);
        n += (size_t)snprintf(pos + n, sizeof pos - n, "%s%" PRId64, j ? ", " : "", g);
    }
    if (d->ids_rank == 0)
        snprintf(pos, sizeof pos, "%s", "");
    rt_fatal(dev, "gather from '%s': %s[%s] = %" PRId32 " is out of range: '%s' has %" PRId64
             " rows (valid indices 0..%" PRId64 ")", d->table_name, d->ids_name, pos, value,
             d->table_name, d->rows_global, d->rows_global - 1);
}

void rt_gather(rt_device *dev, const rt_gather_desc *d, const int32_t *ids, const void *table,
               void *c)
{
    check_desc(dev, d);
    int64_t n = 1;
    for (int64_t j = 0; j < d->ids_rank; j++)
        n *= d->ids_shape[j];
    size_t row = (size_t)d->row_elems * rt_dtype_size((int32_t)d->dtype);
    int64_t first = block_offset(dev, d->rows_axes, d->rows_naxes, d->rows);
    const char *src = table;
    char *dst = c;
    for (int64_t e = 0; e < n; e++) {
        int32_t v = ids[e];
        if (v < 0 || v >= d->rows_global)
            bad_index(dev, d, e, v);
        int64_t local = (int64_t)v - first;
        if (local >= 0 && local < d->rows)
            memcpy(dst + (size_t)e * row, src + (size_t)local * row, row);
        else
            memset(dst + (size_t)e * row, 0, row);
    }
}
