/*
 * einsum_kernels.c - the one non-GEMM kernel of rt_einsum: sum out some
 * labels, put the rest in a given order and scale, in a single pass.
 *
 * It serves unary einsums (reductions, transposes), operands whose layout
 * GEMM cannot read with a transpose flag, labels found in one operand only,
 * and outputs whose order differs from [batch, M, N].  The loop walks the
 * destination in row-major order; for each destination element it sums the
 * reduced labels' box of the source.  Accumulation is in f64 (exact enough
 * for f32 data, and the order is fixed, so results are deterministic).
 */
#include "rt_internal.h"

#define DEFINE_REDUCE_PERMUTE(NAME, T)                                                         \
    static void NAME(const T *src, int32_t srank, const int64_t *sshape,                      \
                     const int32_t *slabels, T *dst, int32_t drank, const int32_t *dlabels,   \
                     double alpha)                                                            \
    {                                                                                         \
        int64_t sstride[RT_MAX_RANK], s = 1;                                                  \
        for (int32_t k = srank - 1; k >= 0; k--) {                                            \
            sstride[k] = s;                                                                   \
            s *= sshape[k];                                                                   \
        }                                                                                     \
        int64_t dshape[RT_MAX_RANK], dstr[RT_MAX_RANK]; /* dst dims: size, stride in src */  \
        for (int32_t d = 0; d < drank; d++)                                                   \
            for (int32_t k = 0; k < srank; k++)                                               \
                if (slabels[k] == dlabels[d]) {                                               \
                    dshape[d] = sshape[k];                                                    \
                    dstr[d] = sstride[k];                                                     \
                }                                                                             \
        int64_t rshape[RT_MAX_RANK], rstr[RT_MAX_RANK]; /* reduced dims */                    \
        int32_t nr = 0;                                                                       \
        for (int32_t k = 0; k < srank; k++) {                                                 \
            int kept = 0;                                                                     \
            for (int32_t d = 0; d < drank; d++)                                               \
                kept |= slabels[k] == dlabels[d];                                             \
            if (!kept) {                                                                      \
                rshape[nr] = sshape[k];                                                       \
                rstr[nr++] = sstride[k];                                                      \
            }                                                                                 \
        }                                                                                     \
        int64_t nd = rt_numel(drank, dshape), nred = rt_numel(nr, rshape);                    \
        if (nd == 0)                                                                          \
            return;                                                                           \
        int64_t last = drank ? dshape[drank - 1] : 1;                                         \
        int64_t lstr = drank ? dstr[drank - 1] : 0;                                           \
        int64_t idx[RT_MAX_RANK] = {0};                                                       \
        for (int64_t row = 0; row < nd; row += last) {                                        \
            int64_t base = 0;                                                                 \
            for (int32_t d = 0; d + 1 < drank; d++)                                           \
                base += idx[d] * dstr[d];                                                     \
            T *out = dst + row;                                                               \
            if (nr == 0) {                                                                    \
                for (int64_t i = 0; i < last; i++)                                            \
                    out[i] = (T)(alpha * (double)src[base + i * lstr]);                       \
            } else {                                                                          \
                for (int64_t i = 0; i < last; i++) {                                          \
                    double acc = 0;                                                           \
                    int64_t ridx[RT_MAX_RANK] = {0};                                          \
                    for (int64_t e = 0; e < nred; e++) {                                      \
                        int64_t off = base + i * lstr;                                        \
                        for (int32_t r = 0; r < nr; r++)                                      \
                            off += ridx[r] * rstr[r];                                         \
                        acc += (double)src[off];                                              \
                        for (int32_t r = nr - 1; r >= 0 && ++ridx[r] == rshape[r]; r--)       \
                            ridx[r] = 0;                                                      \
                    }                                                                         \
                    out[i] = (T)(alpha * acc);                                                \
                }                                                                             \
            }                                                                                 \
            for (int32_t d = drank - 2; d >= 0 && ++idx[d] == dshape[d]; d--)                 \
                idx[d] = 0;                                                                   \
        }                                                                                     \
    }

DEFINE_REDUCE_PERMUTE(reduce_permute_f32, float)
DEFINE_REDUCE_PERMUTE(reduce_permute_f64, double)

void rt_reduce_permute(int32_t dtype, const void *src, int32_t srank, const int64_t *sshape,
                       const int32_t *slabels, void *dst, int32_t drank, const int32_t *dlabels,
                       double alpha)
{
    if (dtype == RT_F64)
        reduce_permute_f64(src, srank, sshape, slabels, dst, drank, dlabels, alpha);
    else
        reduce_permute_f32(src, srank, sshape, slabels, dst, drank, dlabels, alpha);
}
