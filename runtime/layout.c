/*
 * layout.c - row-major shapes, boxes and the block a device holds.
 *
 * Every data movement of the runtime (collectives on threads, MPI pack and
 * unpack, reading a shard of a .npy file, assembling outputs) is a copy of
 * an axis-aligned box between two row-major arrays; rt_copy_box does it with
 * one memcpy per contiguous run.
 */
#include <string.h>

#include "rt_internal.h"

int64_t rt_numel(int32_t rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++)
        n *= shape[d];
    return n;
}

int rt_replicated(const rt_tensor_desc *t)
{
    return !memcmp(t->local_shape, t->global_shape, sizeof t->local_shape[0] * (size_t)t->rank);
}

void rt_box_runs(const int64_t *dshape, const int64_t *doff, const int64_t *sshape,
                 const int64_t *soff, const int64_t *ext, int32_t rank,
                 void (*fn)(void *arg, int64_t dst, int64_t src, int64_t n), void *arg)
{
    if (rt_numel(rank, ext) == 0)
        return;
    /* Merge the innermost dims that the box covers entirely in both arrays:
     * they form one contiguous run. */
    int32_t inner = rank; /* dims [inner, rank) are merged into the run */
    int64_t run = 1;
    while (inner > 0) {
        int32_t d = inner - 1;
        run *= ext[d];
        inner = d;
        if (ext[d] != dshape[d] || ext[d] != sshape[d])
            break;
    }
    /* Now dim `inner` is partially covered (or inner == 0 and all merged);
     * the run spans ext[inner..rank). */
    int64_t sstride[RT_MAX_RANK], dstride[RT_MAX_RANK];
    int64_t ss = 1, ds = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        sstride[d] = ss;
        dstride[d] = ds;
        ss *= sshape[d];
        ds *= dshape[d];
    }
    int64_t base_s = 0, base_d = 0;
    for (int32_t d = 0; d < rank; d++) {
        base_s += soff[d] * sstride[d];
        base_d += doff[d] * dstride[d];
    }
    int64_t idx[RT_MAX_RANK] = {0};
    for (;;) {
        int64_t os = base_s, od = base_d;
        for (int32_t d = 0; d < inner; d++) {
            os += idx[d] * sstride[d];
            od += idx[d] * dstride[d];
        }
        fn(arg, od, os, run);
        int32_t d = inner - 1;
        while (d >= 0 && ++idx[d] == ext[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
}

/* rt_copy_box's arrays for rt_box_runs. */
typedef struct copy_arg {
    char *dst;
    const char *src;
    size_t esize;
} copy_arg;

static void copy_run(void *arg, int64_t dst, int64_t src, int64_t n)
{
    const copy_arg *c = arg;
    memcpy(c->dst + (size_t)dst * c->esize, c->src + (size_t)src * c->esize, (size_t)n * c->esize);
}

void rt_copy_box(void *dst, const int64_t *dshape, const int64_t *doff,
                 const void *src, const int64_t *sshape, const int64_t *soff,
                 const int64_t *ext, int32_t rank, size_t esize)
{
    copy_arg c = {dst, src, esize};
    rt_box_runs(dshape, doff, sshape, soff, ext, rank, copy_run, &c);
}

void rt_block_start(const rt_tensor_desc *t, const int64_t *axis_sizes,
                    const int64_t *coord, int64_t *start)
{
    for (int32_t d = 0; d < t->rank; d++) {
        int64_t b = 0;
        for (int32_t k = 0; k < t->dim_naxes[d]; k++) {
            int32_t a = t->dim_axes[d][k];
            b = b * axis_sizes[a] + coord[a];
        }
        start[d] = b * t->local_shape[d];
    }
}

int rt_is_primary_holder(const rt_tensor_desc *t, int32_t naxes, const int64_t *coord)
{
    uint32_t used = 0;
    for (int32_t d = 0; d < t->rank; d++)
        for (int32_t k = 0; k < t->dim_naxes[d]; k++)
            used |= 1u << t->dim_axes[d][k];
    for (int32_t a = 0; a < naxes; a++)
        if (!(used & (1u << a)) && coord[a] != 0)
            return 0;
    return 1;
}

int32_t rt_block_nparts(const rt_tensor_desc *t)
{
    return t->rank > 0 && t->cyclic_blocks > 1 ? t->cyclic_blocks : 1;
}

void rt_block_part(const rt_tensor_desc *t, const int64_t *axis_sizes, const int64_t *coord, int32_t j,
                   int64_t *start, int64_t *ext, int64_t *local_off)
{
    rt_block_start(t, axis_sizes, coord, start);
    memcpy(ext, t->local_shape, sizeof ext[0] * (size_t)t->rank);
    *local_off = 0;
    int32_t v = rt_block_nparts(t);
    if (v == 1)
        return;
    /* Dim 0's G blocks of local_shape[0] rows become G v blocks of r rows:
     * this device's block index g = start[0] / local_shape[0] holds global
     * blocks j G + g, its part j at local rows j r. */
    int64_t G = 1;
    for (int32_t k = 0; k < t->dim_naxes[0]; k++)
        G *= axis_sizes[t->dim_axes[0][k]];
    int64_t r = t->local_shape[0] / v, g = t->local_shape[0] ? start[0] / t->local_shape[0] : 0;
    ext[0] = r;
    start[0] = ((int64_t)j * G + g) * r;
    *local_off = (int64_t)j * r * rt_numel(t->rank - 1, t->local_shape + 1);
}

void rt_place_block(const rt_program *p, const rt_tensor_desc *t, const int64_t *coord,
                    const void *local, void *global)
{
    int64_t start[RT_MAX_RANK], ext[RT_MAX_RANK], loff[RT_MAX_RANK] = {0}, off;
    for (int32_t j = 0; j < rt_block_nparts(t); j++) {
        rt_block_part(t, p->axis_sizes, coord, j, start, ext, &off);
        (void)off;
        loff[0] = t->rank > 0 ? (int64_t)j * ext[0] : 0; /* part j's local rows */
        rt_copy_box(global, t->global_shape, start, local, t->local_shape, loff, ext, t->rank,
                    rt_dtype_size(t->dtype));
    }
}
