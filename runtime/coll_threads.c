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
 *   ReduceScatter  out[o, :, :] = sum_j in_j[o, r*d:(r+1)*d, :]  (or max_j, min_j:
 *                  d->reduce_op, for every reduction below)
 *   AllReduce      phase 1: device r reduces slice r (1/G of the flat array)
 *                  over all peers into its own out; barrier; phase 2: it
 *                  copies the other G-1 slices from the peers' outs.  The
 *                  additions are split G ways, as in a reduce-scatter +
 *                  all-gather, and the result is bitwise the same everywhere.
 *   AllToAll       out block j along dim = in_j block r along dim2
 *
 * Every "block" is a box: along each dim its axes name, the block of a
 * group rank numbered by those axes (rt_coll_block), so the same code runs
 * a collective along one dim and one whose axes work along different dims
 * (seed 001's AllGather_XY of [B_X, D_Y]).  A box's rows are runs of
 * contiguous elements (rt_box_runs): along the leading dim a block is one
 * run, along an inner dim one run per row above it.  Reductions
 * (rt_reduce_arrays) go peer 0, 1, ..., G-1 in group-rank order, in f32 for
 * f32 and bf16, in f64 for f64, over chunks that stay in L1.
 */
#include <string.h>

#include "rt_internal.h"

/* Elements combined per chunk (16 KiB of f32 accumulators). */
#define CHUNK 4096

void rt_slice_range(int64_t n, int64_t G, int64_t r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / G, rem = n % G;
    *lo = r * q + (r < rem ? r : rem);
    *hi = *lo + q + (r < rem ? 1 : 0);
}

/*
 * The element combines of enum rt_reduce_op, on two values already loaded
 * (the macros read their arguments more than once).  `a` is the earlier
 * member in group-rank order.  MAX / MIN are numpy.maximum / numpy.minimum
 * made exact and associative: a NaN in `a` wins, then a NaN in `b`, else
 * the larger (smaller) value with ties (-0.0 == 0.0) keeping `a`.  A fold
 * then yields the first NaN, else the first extreme element, however MPI
 * groups it, so every device and both backends get the same bits.
 */
#define COMBINE_SUM(a, b) ((a) + (b))
#define COMBINE_MAX(a, b) ((a) != (a) ? (a) : ((b) > (a) || (b) != (b)) ? (b) : (a))
#define COMBINE_MIN(a, b) ((a) != (a) ? (a) : ((b) < (a) || (b) != (b)) ? (b) : (a))

/*
 * dst = srcs[0] OP srcs[1] OP ... OP srcs[G-1] over n elements of type T,
 * chunk by chunk so the partial results stay in L1 while each peer's run
 * streams past.  The first pass combines srcs[0] and srcs[1] element by
 * element, so dst may alias either of them.
 */
#define DEFINE_COMBINE(name, T, OP)                                                            \
    static void name(void *dst, const void *const *srcs, int64_t G, int64_t n)                 \
    {                                                                                          \
        T *out = dst;                                                                          \
        for (int64_t c = 0; c < n; c += CHUNK) {                                               \
            int64_t m = n - c < CHUNK ? n - c : CHUNK;                                         \
            const T *s0 = (const T *)srcs[0] + c;                                              \
            if (G == 1) {                                                                      \
                for (int64_t i = 0; i < m; i++)                                                \
                    out[c + i] = s0[i];                                                        \
            } else {                                                                           \
                const T *s1 = (const T *)srcs[1] + c;                                          \
                for (int64_t i = 0; i < m; i++) {                                              \
                    T a = s0[i], b = s1[i];                                                    \
                    out[c + i] = OP(a, b);                                                     \
                }                                                                              \
            }                                                                                  \
            for (int64_t j = 2; j < G; j++) {                                                  \
                const T *s = (const T *)srcs[j] + c;                                           \
                for (int64_t i = 0; i < m; i++) {                                              \
                    T a = out[c + i], b = s[i];                                                \
                    out[c + i] = OP(a, b);                                                     \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

/* The same for bf16: combined in f32 in an L1 accumulator, rounded to bf16
 * once per element at the end (exact for MAX / MIN: the result is one of the
 * inputs, and a NaN stays a NaN). */
#define DEFINE_COMBINE_BF16(name, OP)                                                          \
    static void name(void *dst, const void *const *srcs, int64_t G, int64_t n)                 \
    {                                                                                          \
        uint16_t *out = dst;                                                                   \
        float acc[CHUNK];                                                                      \
        for (int64_t c = 0; c < n; c += CHUNK) {                                               \
            int64_t m = n - c < CHUNK ? n - c : CHUNK;                                         \
            rt_bf16_to_f32_n((const uint16_t *)srcs[0] + c, acc, m);                           \
            for (int64_t j = 1; j < G; j++) {                                                  \
                const uint16_t *s = (const uint16_t *)srcs[j] + c;                             \
                for (int64_t i = 0; i < m; i++) {                                              \
                    float a = acc[i], b = rt_bf16_to_f32(s[i]);                                \
                    acc[i] = OP(a, b);                                                         \
                }                                                                              \
            }                                                                                  \
            rt_f32_to_bf16_n(acc, out + c, m);                                                 \
        }                                                                                      \
    }

DEFINE_COMBINE(sum_f32, float, COMBINE_SUM)
DEFINE_COMBINE(max_f32, float, COMBINE_MAX)
DEFINE_COMBINE(min_f32, float, COMBINE_MIN)
DEFINE_COMBINE(sum_f64, double, COMBINE_SUM)
DEFINE_COMBINE(max_f64, double, COMBINE_MAX)
DEFINE_COMBINE(min_f64, double, COMBINE_MIN)
DEFINE_COMBINE_BF16(sum_bf16, COMBINE_SUM)
DEFINE_COMBINE_BF16(max_bf16, COMBINE_MAX)
DEFINE_COMBINE_BF16(min_bf16, COMBINE_MIN)

void rt_reduce_arrays(int32_t op, int32_t dtype, void *dst, const void *const *srcs, int64_t G,
                      int64_t n)
{
    /* [dtype][op]; descriptors were checked, so both are in range. */
    static void (*const combine[3][3])(void *, const void *const *, int64_t, int64_t) = {
        [RT_F32] = {sum_f32, max_f32, min_f32},
        [RT_F64] = {sum_f64, max_f64, min_f64},
        [RT_BF16] = {sum_bf16, max_bf16, min_bf16},
    };
    if (G < 1 || n <= 0 || dtype < RT_F32 || dtype > RT_BF16 || op < RT_REDUCE_SUM ||
        op > RT_REDUCE_MIN)
        return;
    combine[dtype][op](dst, srcs, G, n);
}

void rt_sum_arrays(int32_t dtype, void *dst, const void *const *srcs, int64_t G, int64_t n)
{
    rt_reduce_arrays(RT_REDUCE_SUM, dtype, dst, srcs, G, n);
}

void rt_threads_allgather(const rt_coll_desc *d, const rt_group_view *g, const rt_shared_bufs *b,
                          void *out)
{
    size_t es = rt_dtype_size(d->dtype);
    int64_t zero[RT_MAX_RANK] = {0}, off[RT_MAX_RANK];
    for (int64_t j = 0; j < g->size; j++) {
        rt_coll_block(d, g, j, 0, d->in_shape, off);
        rt_copy_box(out, d->out_shape, off, b->peer_in[j], d->in_shape, zero, d->in_shape, d->rank,
                    es);
    }
}

/* What one run of a ReduceScatter combines: the same run of every peer's
 * input into one run of out. */
typedef struct rs_run {
    const rt_coll_desc *d;
    const rt_group_view *g;
    const rt_shared_bufs *b;
    char *out;
    size_t es;
} rs_run;

static void reduce_run(void *arg, int64_t dst, int64_t src, int64_t n)
{
    const rs_run *r = arg;
    const void *srcs[RT_MAX_DEVICES];
    for (int64_t j = 0; j < r->g->size; j++)
        srcs[j] = (const char *)r->b->peer_in[j] + (size_t)src * r->es;
    rt_reduce_arrays(r->d->reduce_op, r->d->dtype, r->out + (size_t)dst * r->es, srcs, r->g->size, n);
}

void rt_threads_reducescatter(const rt_coll_desc *d, const rt_group_view *g,
                              const rt_shared_bufs *b, void *out)
{
    int64_t zero[RT_MAX_RANK] = {0}, off[RT_MAX_RANK];
    rt_coll_block(d, g, g->rank, 0, d->out_shape, off);
    rs_run r = {d, g, b, out, rt_dtype_size(d->dtype)};
    rt_box_runs(d->out_shape, zero, d->in_shape, off, d->out_shape, d->rank, reduce_run, &r);
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
    rt_reduce_arrays(d->reduce_op, d->dtype, (char *)out + (size_t)lo * es, srcs, g->size,
                     hi - lo);
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
    int64_t ext[RT_MAX_RANK], soff[RT_MAX_RANK], doff[RT_MAX_RANK];
    rt_alltoall_box(d, ext);
    rt_coll_block(d, g, g->rank, 1, d->out_shape, soff);
    for (int64_t j = 0; j < g->size; j++) {
        rt_coll_block(d, g, j, 0, d->in_shape, doff);
        rt_copy_box(out, d->out_shape, doff, b->peer_in[j], d->in_shape, soff, ext, d->rank, es);
    }
}
