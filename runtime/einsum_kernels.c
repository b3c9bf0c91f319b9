/*
 * einsum_kernels.c - the one non-GEMM kernel of rt_einsum: sum out some
 * labels, put the rest in a given order and scale, in a single pass.
 *
 * It serves unary einsums (reductions, transposes), operands whose layout
 * GEMM cannot read with a transpose flag, labels found in one operand only,
 * and outputs whose order differs from [batch, M, N].  Accumulation is in
 * f64 (exact enough for f32 data), in a fixed order, so results are
 * deterministic.
 */
#include <stdlib.h>

#include "rt_internal.h"

/*
 * A permutation that moves src's contiguous dim away from dst's last dim is
 * a transpose: reading src with a large stride for every element of a dst
 * row misses the cache on every read.  It is done in TILE x TILE tiles over
 * (the dst dim p that is contiguous in src, dst's last dim), so both the
 * reads and the writes of a tile stay in cache.  Returns 0 (nothing done)
 * when the permutation is not of that form.
 */
#define TILE 32
#define DEFINE_TRANSPOSE_TILED(T)                                                              \
    static int transpose_tiled_##T(const T *src, T *dst, int32_t rank, const int64_t *dshape, \
                                   const int64_t *dstr, double alpha)                         \
    {                                                                                         \
        int32_t p = -1, l = rank - 1;                                                         \
        for (int32_t d = 0; d < l; d++)                                                       \
            if (dstr[d] == 1 && dshape[d] > 1)                                                \
                p = d;                                                                        \
        if (p < 0 || dshape[l] < 2)                                                           \
            return 0;                                                                         \
        int64_t dstride[RT_MAX_RANK], s = 1; /* row-major strides of dst */                   \
        for (int32_t d = rank - 1; d >= 0; d--) {                                             \
            dstride[d] = s;                                                                   \
            s *= dshape[d];                                                                   \
        }                                                                                     \
        int64_t idx[RT_MAX_RANK] = {0}, np = dshape[p], nl = dshape[l], ls = dstr[l];         \
        for (;;) {                                                                            \
            int64_t bs = 0, bd = 0;                                                           \
            for (int32_t d = 0; d < rank; d++) {                                              \
                bs += idx[d] * dstr[d];                                                       \
                bd += idx[d] * dstride[d];                                                    \
            }                                                                                 \
            for (int64_t i0 = 0; i0 < np; i0 += TILE)                                         \
                for (int64_t j0 = 0; j0 < nl; j0 += TILE) {                                   \
                    int64_t i1 = i0 + TILE < np ? i0 + TILE : np;                             \
                    int64_t j1 = j0 + TILE < nl ? j0 + TILE : nl;                             \
                    for (int64_t i = i0; i < i1; i++)                                         \
                        for (int64_t j = j0; j < j1; j++)                                     \
                            dst[bd + i * dstride[p] + j] = (T)(alpha * (double)src[bs + i + j * ls]); \
                }                                                                             \
            /* next index of the dims other than p and l */                                   \
            int32_t d = l - 1;                                                                \
            while (d >= 0 && (d == p || ++idx[d] == dshape[d])) {                             \
                if (d != p)                                                                   \
                    idx[d] = 0;                                                               \
                d--;                                                                          \
            }                                                                                 \
            if (d < 0)                                                                        \
                return 1;                                                                     \
        }                                                                                     \
    }

DEFINE_TRANSPOSE_TILED(float)
DEFINE_TRANSPOSE_TILED(double)

/*
 * Two loop orders, one per case:
 *   permute only   walk dst in row-major order (sequential writes), read src
 *                  with dst's strides in src (the innermost dst dim's stride);
 *   with sums      walk src in row-major order (sequential reads of the big
 *                  array) and add each element into an f64 accumulator at its
 *                  dst offset (reduced dims have dst stride 0), then scale.
 */
#define DEFINE_REDUCE_PERMUTE(NAME, T)                                                         \
    static void NAME(rt_device *dev, const T *src, int32_t srank, const int64_t *sshape,      \
                     const int32_t *slabels, T *dst, int32_t drank, const int32_t *dlabels,   \
                     double alpha)                                                            \
    {                                                                                         \
        int64_t sstride[RT_MAX_RANK], s = 1;                                                  \
        for (int32_t k = srank - 1; k >= 0; k--) {                                            \
            sstride[k] = s;                                                                   \
            s *= sshape[k];                                                                   \
        }                                                                                     \
        /* dst dims: size and stride in src; src dims: stride in dst (0 if summed) */         \
        int64_t dshape[RT_MAX_RANK], dstr[RT_MAX_RANK], sdstr[RT_MAX_RANK] = {0}, ds = 1;     \
        for (int32_t d = drank - 1; d >= 0; d--)                                              \
            for (int32_t k = 0; k < srank; k++)                                               \
                if (slabels[k] == dlabels[d]) {                                               \
                    dshape[d] = sshape[k];                                                    \
                    dstr[d] = sstride[k];                                                     \
                    sdstr[k] = ds;                                                            \
                    ds *= sshape[k];                                                          \
                }                                                                             \
        int64_t nd = rt_numel(drank, dshape), ns = rt_numel(srank, sshape);                   \
        if (nd == 0)                                                                          \
            return;                                                                           \
        if (srank == drank && transpose_tiled_##T(src, dst, drank, dshape, dstr, alpha))       \
            return;                                                                           \
        if (srank == drank) { /* permute only */                                              \
            int64_t last = drank ? dshape[drank - 1] : 1;                                     \
            int64_t lstr = drank ? dstr[drank - 1] : 0;                                       \
            int64_t idx[RT_MAX_RANK] = {0};                                                   \
            for (int64_t row = 0; row < nd; row += last) {                                    \
                int64_t base = 0;                                                             \
                for (int32_t d = 0; d + 1 < drank; d++)                                       \
                    base += idx[d] * dstr[d];                                                 \
                for (int64_t i = 0; i < last; i++)                                            \
                    dst[row + i] = (T)(alpha * (double)src[base + i * lstr]);                 \
                for (int32_t d = drank - 2; d >= 0 && ++idx[d] == dshape[d]; d--)             \
                    idx[d] = 0;                                                               \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        double *acc = rt_xmalloc(dev, (size_t)nd * sizeof *acc);                              \
        for (int64_t i = 0; i < nd; i++)                                                      \
            acc[i] = 0;                                                                       \
        int64_t last = srank ? sshape[srank - 1] : 1;                                         \
        int64_t lstr = srank ? sdstr[srank - 1] : 0;                                          \
        int64_t idx[RT_MAX_RANK] = {0};                                                       \
        for (int64_t row = 0; row < ns; row += last) {                                        \
            int64_t base = 0;                                                                 \
            for (int32_t k = 0; k + 1 < srank; k++)                                           \
                base += idx[k] * sdstr[k];                                                    \
            const T *in = src + row;                                                          \
            if (lstr == 0) { /* the contiguous dim is summed: a dot of the row with 1 */      \
                double sum = 0;                                                               \
                for (int64_t i = 0; i < last; i++)                                            \
                    sum += (double)in[i];                                                     \
                acc[base] += sum;                                                             \
            } else {                                                                          \
                for (int64_t i = 0; i < last; i++)                                            \
                    acc[base + i * lstr] += (double)in[i];                                    \
            }                                                                                 \
            for (int32_t k = srank - 2; k >= 0 && ++idx[k] == sshape[k]; k--)                 \
                idx[k] = 0;                                                                   \
        }                                                                                     \
        for (int64_t i = 0; i < nd; i++)                                                      \
            dst[i] = (T)(alpha * acc[i]);                                                     \
        free(acc);                                                                            \
    }

DEFINE_REDUCE_PERMUTE(reduce_permute_f32, float)
DEFINE_REDUCE_PERMUTE(reduce_permute_f64, double)

void rt_reduce_permute(rt_device *dev, int32_t dtype, const void *src, int32_t srank,
                       const int64_t *sshape, const int32_t *slabels, void *dst, int32_t drank,
                       const int32_t *dlabels, double alpha)
{
    if (dtype == RT_F64)
        reduce_permute_f64(dev, src, srank, sshape, slabels, dst, drank, dlabels, alpha);
    else
        reduce_permute_f32(dev, src, srank, sshape, slabels, dst, drank, dlabels, alpha);
}
