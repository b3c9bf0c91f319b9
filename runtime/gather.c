/*
 * gather.c - rt_gather: the embedding lookup of a gather einsum (ir.h) on
 * this device's blocks; rt_scatter_add: its adjoint, the embedding table's
 * gradient.
 *
 * Each index selects a row of the table; the row is copied if this device
 * holds it (its block of the table's first dim), else the output row is
 * zero.  With the rows unsharded every row is local; with them sharded
 * the zeros make the partial sums that the AllReduce or ReduceScatter
 * after it completes (Megatron's vocab-parallel embedding).  Every index is
 * checked against the whole table, on every device, so a bad one is
 * reported wherever it sits; or, for a gather that the select-gather pass
 * made of a masked sum (zero_outside), it gives a zero row on every
 * device, the masked sum's value.
 */
#include <inttypes.h>
#include <string.h>

#include "rt_internal.h"

/* This device's block offset along a dim of `size` elements per device split
 * over `axes` (major first; einrt.h's block numbering). */
static int64_t block_offset(rt_device *dev, const int64_t *axes, int64_t naxes, int64_t size)
{
    return rt_block_index(dev, axes, naxes) * size;
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

/* The indices of one call: how many, and where this device's rows start. */
typedef struct id_walk {
    int64_t n;     /* elements of this device's block of ids */
    int64_t first; /* global index of this device's first table row */
    size_t row;    /* bytes of one row */
} id_walk;

static id_walk walk_start(rt_device *dev, const rt_gather_desc *d)
{
    check_desc(dev, d);
    id_walk w = {.n = 1, .row = (size_t)d->row_elems * rt_dtype_size((int32_t)d->dtype)};
    for (int64_t j = 0; j < d->ids_rank; j++)
        w.n *= d->ids_shape[j];
    w.first = block_offset(dev, d->rows_axes, d->rows_naxes, d->rows);
    return w;
}

/* The local table row of index element e (checked), or -1 if another
 * device holds it or (zero_outside) it is outside the table. */
static int64_t local_row(rt_device *dev, const rt_gather_desc *d, const id_walk *w,
                         const int32_t *ids, int64_t e)
{
    int32_t v = ids[e];
    if (v < 0 || v >= d->rows_global) {
        if (d->zero_outside)
            return -1;
        bad_index(dev, d, e, v);
    }
    int64_t local = (int64_t)v - w->first;
    return local >= 0 && local < d->rows ? local : -1;
}

void rt_gather(rt_device *dev, const rt_gather_desc *d, const int32_t *ids, const void *table,
               void *c)
{
    id_walk w = walk_start(dev, d);
    const char *src = table;
    char *dst = c;
    for (int64_t e = 0; e < w.n; e++) {
        int64_t local = local_row(dev, d, &w, ids, e);
        if (local >= 0)
            memcpy(dst + (size_t)e * w.row, src + (size_t)local * w.row, w.row);
        else
            memset(dst + (size_t)e * w.row, 0, w.row);
    }
}

/* Adds n elements of `src` to `dst`, both of `dtype`. */
static void add_row(int32_t dtype, void *dst, const void *src, int64_t n)
{
    if (dtype == RT_F64) {
        double *a = dst;
        const double *b = src;
        for (int64_t k = 0; k < n; k++)
            a[k] += b[k];
    } else if (dtype == RT_BF16) {
        uint16_t *a = dst;
        const uint16_t *b = src;
        for (int64_t k = 0; k < n; k++)
            a[k] = rt_f32_to_bf16(rt_bf16_to_f32(a[k]) + rt_bf16_to_f32(b[k]));
    } else {
        float *a = dst;
        const float *b = src;
        for (int64_t k = 0; k < n; k++)
            a[k] += b[k];
    }
}

void rt_scatter_add(rt_device *dev, const rt_gather_desc *d, const int32_t *ids, const void *rows,
                    void *table)
{
    id_walk w = walk_start(dev, d);
    memset(table, 0, (size_t)d->rows * w.row);
    const char *src = rows;
    char *dst = table;
    for (int64_t e = 0; e < w.n; e++) {
        int64_t local = local_row(dev, d, &w, ids, e);
        if (local >= 0)
            add_row((int32_t)d->dtype, dst + (size_t)local * w.row, src + (size_t)e * w.row,
                    d->row_elems);
    }
}
