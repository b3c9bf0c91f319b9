/*
 * coll_threads.c - shared-memory collectives of the threads backend.
 *
 * All devices of a group live in one address space, so a collective is not
 * a simulation of message passing: each device publishes its input (and
 * output) pointer in the group's slots, the group meets at a barrier, and
 * then each device reads its peers' buffers directly and writes only its own
 * output.  Every byte lands in its destination with one copy (or one pass of
 * additions for reductions); no intermediate buffers, no rings.
 *
 *   AllGather      out[o, j*d:(j+1)*d, :] = in_j[o, :, :] for each peer j
 *   ReduceScatter  out[o, :, :] = sum_j in_j[o, r*d:(r+1)*d, :]
 *   AllReduce      phase 1: device r sums slice r (1/G of the flat array)
 *                  over all peers into its own out; barrier; phase 2: it
 *                  copies the other G-1 slices from the peers' outs.  The
 *                  additions are split G ways, as in a reduce-scatter +
 *                  all-gather, and the result is bitwise the same everywhere.
 *   AllToAll       out block j along dim = in_j block r along dim2
 *
 * A value of shape [s0..sn] seen around dim k is [outer, s_k, inner] with
 * outer = s0*..*s_{k-1} and inner = s_{k+1}*..*sn, so any dim works, not only
 * the leading one: runs of s_k*inner elements are contiguous.  Sums go
 * peer 0, 1, ..., G-1 in group-rank order, in f32 for f32 and bf16, in f64
 * for f64, over chunks that stay in L1.
 */
#include <string.h>

#include "rt_internal.h"

/* Elements summed per chunk (16 KiB of f32 accumulators). */
#define CHUNK 4096

static void outer_inner(const int64_t *shape, int32_t rank, int32_t dim, int64_t *outer,
                        int64_t *inner)
{
    *outer = rt_numel(dim, shape);
    *inner = rt_numel(rank - dim - 1, shape + dim + 1);
}

void rt_slice_range(int64_t n, int64_t G, int64_t r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / G, rem = n % G;
    *lo = r * q + (r < rem ? r : rem);
    *hi = *lo + q + (r < rem ? 1 : 0);
}

/* dst = srcs[0] + ... + srcs[G-1] over n elements of type T, chunk by chunk
 * so the partial sums stay in L1 while each peer's run streams past. */
#define SUM_CHUNKED(T, dst, srcs, G, n)                                                        \
    do {                                                                                       \
        T *out_ = (dst);                                                                       \
        for (int64_t c = 0; c < (n); c += CHUNK) {                                             \
            int64_t m = (n) - c < CHUNK ? (n) - c : CHUNK;                                     \
            const T *s0 = (const T *)(srcs)[0] + c;                                            \
            for (int64_t i = 0; i < m; i++)                                                    \
                out_[c + i] = s0[i];                                                           \
            for (int64_t j = 1; j < (G); j++) {                                                \
                const T *s = (const T *)(srcs)[j] + c;                                         \
                for (int64_t i = 0; i < m; i++)                                                \
                    out_[c + i] += s[i];                                                       \
            }                                                                                  \
        }                                                                                      \
    } while (0)

void rt_sum_arrays(int32_t dtype, void *dst, const void *const *srcs, int64_t G, int64_t n)
{
    if (dtype == RT_F64)
        SUM_CHUNKED(double, dst, srcs, G, n);
    else if (dtype == RT_F32)
        SUM_CHUNKED(float, dst, srcs, G, n);
    else {
        uint16_t *out = dst;
        float acc[CHUNK];
        for (int64_t c = 0; c < n; c += CHUNK) {
            int64_t m = n - c < CHUNK ? n - c : CHUNK;
            rt_bf16_to_f32_n((const uint16_t *)srcs[0] + c, acc, m);
            for (int64_t j = 1; j < G; j++) {
                const uint16_t *s = (const uint16_t *)srcs[j] + c;
                for (int64_t i = 0; i < m; i++)
                    acc[i] += rt_bf16_to_f32(s[i]);
            }
            rt_f32_to_bf16_n(acc, out + c, m);
        }
    }
}

void rt_threads_allgather(const rt_coll_desc *d, const rt_group_view *g, const rt_shared_bufs *b,
                          void *out)
{
    size_t es = rt_dtype_size(d->dtype);
    int64_t outer, inner, G = g->size;
    outer_inner(d->in_shape, d->rank, d->dim, &outer, &inner);
    size_t run = (size_t)(d->in_shape[d->dim] * inner) * es;
    char *o = out;
    for (int64_t i = 0; i < outer; i++)
        for (int64_t j = 0; j < G; j++)
            memcpy(o + ((size_t)(i * G + j)) * run, (const char *)b->peer_in[j] + (size_t)i * run,
                   run);
}

void rt_threads_reducescatter(const rt_coll_desc *d, const rt_group_view *g,
                              const rt_shared_bufs *b, void *out)
{
    size_t es = rt_dtype_size(d->dtype);
    int64_t outer, inner, G = g->size;
    outer_inner(d->out_shape, d->rank, d->dim, &outer, &inner);
    int64_t run = d->out_shape[d->dim] * inner; /* elements of one block row */
    const void *srcs[RT_MAX_DEVICES];
    for (int64_t i = 0; i < outer; i++) {
        for (int64_t j = 0; j < G; j++)
            srcs[j] = (const char *)b->peer_in[j] + (size_t)((i * G + g->rank) * run) * es;
        rt_sum_arrays(d->dtype, (char *)out + (size_t)(i * run) * es, srcs, G, run);
    }
}

void rt_threads_allreduce_reduce(const rt_coll_desc *d, const rt_group_view *g,
                                 const rt_shared_bufs *b, void *out)
{
    size_t es = rt_dtype_size(d->dtype);
    int64_t lo, hi, n = rt_numel(d->rank, d->in_shape);
    rt_slice_range(n, g->size, g->rank, &lo, &hi);
    const void *srcs[RT_MAX_DEVICES];
    for (int64_t j = 0; j < g->size; j++)
        srcs[j] = (const char *)b->peer_in[j] + (size_t)lo * es;
    rt_sum_arrays(d->dtype, (char *)out + (size_t)lo * es, srcs, g->size, hi - lo);
}

void rt_threads_allreduce_copy(const rt_coll_desc *d, const rt_group_view *g,
                               const rt_shared_bufs *b, void *out)
{
    size_t es = rt_dtype_size(d->dtype);
    int64_t n = rt_numel(d->rank, d->in_shape);
    for (int64_t j = 0; j < g->size; j++) {
        if (j == g->rank)
            continue;
        int64_t lo, hi;
        rt_slice_range(n, g->size, j, &lo, &hi);
        memcpy((char *)out + (size_t)lo * es, (const char *)b->peer_out[j] + (size_t)lo * es,
               (size_t)(hi - lo) * es);
    }
}

void rt_threads_alltoall(const rt_coll_desc *d, const rt_group_view *g, const rt_shared_bufs *b,
                         void *out)
{
    size_t es = rt_dtype_size(d->dtype);
    int64_t ext[RT_MAX_RANK], soff[RT_MAX_RANK] = {0}, doff[RT_MAX_RANK] = {0};
    memcpy(ext, d->in_shape, sizeof ext);
    ext[d->dim2] = d->out_shape[d->dim2];
    soff[d->dim2] = g->rank * ext[d->dim2];
    for (int64_t j = 0; j < g->size; j++) {
        doff[d->dim] = j * d->in_shape[d->dim];
        rt_copy_box(out, d->out_shape, doff, b->peer_in[j], d->in_shape, soff, ext, d->rank, es);
    }
}
