/*
 * gemv_i8i8_vnni.c - gemv_i8i8.c's two loops (an i8 matrix times an i8
 * vector, summed exactly in i32) with AVX512-VNNI's vpdpbusd: each i32
 * lane adds four products of a u8 and an s8 in one instruction, 64
 * weights per instruction where AVX2's vpmaddwd takes 16.
 *
 * The sign: vpdpbusd multiplies an UNSIGNED byte by a signed one, and
 * both operands here are signed.  The weights are made unsigned by
 * flipping their sign bit (one vpxor per 64 weights), which adds 128:
 * u = a + 128 in [0, 255], and the activations stay the signed operand,
 * so
 *     sum_k a[k] x[k] = sum_k u[k] x[k] - 128 sum_k x[k],
 * where sum_k x[k] is taken once per product (rows form: over x; cols
 * form: over the rows' x, the same for every column), not per weight.
 * (Biasing the activations instead would need the weights' sums, a pass
 * per weight; the `vpsignb` trick, |a| times x with a's sign, is wrong
 * for x = -128.)  The biased sums can pass 2^31 (255 * 128 * 2^17), but
 * vpdpbusd wraps (it is not the saturating vpdpbusds) and the true sum
 * is below 2^31 in magnitude (RT_GEMV_I8I8_MAX_K), so the sum taken
 * modulo 2^32, corrected modulo 2^32 (unsigned arithmetic in C), is the
 * exact sum: the bits of every other instruction set.
 *   rows form   y[r] = sum_c A[r, c] x[c]: one row at a time (one
 *               sequential stream), 128 bytes a step, a masked tail
 *               (lanes past the row read nothing and add 0)
 *   cols form   acc[c] += sum_r x[r] A[r, c]: vpdpbusd sums four
 *               consecutive bytes of a lane, so four rows' bytes of each
 *               column are interleaved into one lane (vpunpck[lh]bw, then
 *               [lh]wd: per 128-bit block, columns 4k..4k+3 of its 16 in
 *               vector k), eight rows per pass (two such groups into the
 *               same sums), the four vectors' blocks transposed back
 *               into column order (vshufi32x4) before acc is added to
 * Only built for x86-64 with GCC or Clang (the `target` attribute);
 * gemv_i8i8.c calls these only where the CPU reports AVX-512 F, BW, VL
 * and VNNI (rt_gemv_cpu_vnni).
 */
#include "rt_internal.h"

#if RT_GEMV_HAVE_AVX2

#include <immintrin.h>

#define VNNI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))

/* 64 weights as unsigned bytes: the sign bit flipped, a + 128. */
VNNI static inline __m512i flip(__m512i v)
{
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

/* The lanes [0, n) of 64 bytes, 0 < n <= 64. */
static inline __mmask64 byte_mask(int64_t n)
{
    return n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
}

/* The sum of the sixteen i32 lanes of v, modulo 2^32. */
VNNI static inline uint32_t hsum_u32(__m512i v)
{
    __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(t);
}

/* sum_c (row[c] + 128) x[c] modulo 2^32: one row at a time, so that the
 * matrix is read as one sequential stream.  Four rows per pass (each
 * vector of x shared) read 1024 x 2816 from memory at 0.5x-0.8x the
 * weights/s of one row at a time (bench/gemv_narrow.c, load 2.3 on the
 * 2-core EPYC, Zen 4): the one-stream order the portable loop has. */
VNNI static uint32_t row_vnni(const int8_t *row, int64_t cols, const int8_t *x)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    int64_t c = 0;
    for (; c + 128 <= cols; c += 128) {
        s0 = _mm512_dpbusd_epi32(s0, flip(_mm512_loadu_si512(row + c)), _mm512_loadu_si512(x + c));
        s1 = _mm512_dpbusd_epi32(s1, flip(_mm512_loadu_si512(row + c + 64)),
                                 _mm512_loadu_si512(x + c + 64));
    }
    for (; c < cols; c += 64) { /* masked-off bytes: 0 in x, so (0 + 128) * 0 */
        __mmask64 m = byte_mask(cols - c);
        s0 = _mm512_dpbusd_epi32(s0, flip(_mm512_maskz_loadu_epi8(m, row + c)),
                                 _mm512_maskz_loadu_epi8(m, x + c));
    }
    return hsum_u32(_mm512_add_epi32(s0, s1));
}

VNNI void rt_gemv_i8i8_rows_vnni(const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                                 const int8_t *x, int32_t xsum, float alpha, float beta,
                                 float *y, int64_t incy)
{
    uint32_t bias = 128u * (uint32_t)xsum;
    for (int64_t r = 0; r < rows; r++) {
        int32_t s = (int32_t)(row_vnni(a + r * ld, cols, x) - bias); /* exact: |sum| < 2^31 */
        y[r * incy] = alpha * (float)s + (beta != 0 ? beta * y[r * incy] : 0.0f);
    }
}

/* acc[c] += sum over the NG groups of four rows (row[4g .. 4g + 3], x
 * bytes xs[4g ..]) of (a[r, c] + 128) x[r], modulo 2^32, for c < cols;
 * pf: bytes ahead to ask the cache for (0: none). */
VNNI static inline __attribute__((always_inline)) void
cols_vnni(const int8_t *const *row, const int8_t *xs, int64_t cols, int32_t *acc, int64_t pf,
          const int ng)
{
    __m512i xq[2];
    _Pragma("GCC unroll 2")
    for (int g = 0; g < ng; g++) { /* the group's four x bytes in every i32 lane */
        uint32_t w = 0;
        for (int i = 0; i < 4; i++)
            w |= (uint32_t)(uint8_t)xs[4 * g + i] << (8 * i);
        xq[g] = _mm512_set1_epi32((int32_t)w);
    }
    for (int64_t c = 0; c < cols; c += 64) {
        __mmask64 m = byte_mask(cols - c);
        __m512i q[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                        _mm512_setzero_si512()};
        _Pragma("GCC unroll 2")
        for (int g = 0; g < ng; g++) {
            __m512i r[4];
            _Pragma("GCC unroll 4")
            for (int i = 0; i < 4; i++) {
                if (pf)
                    _mm_prefetch((const char *)((uintptr_t)(row[4 * g + i] + c) + (size_t)pf),
                                 _MM_HINT_T1);
                r[i] = flip(_mm512_maskz_loadu_epi8(m, row[4 * g + i] + c));
            }
            __m512i t0 = _mm512_unpacklo_epi8(r[0], r[1]), t1 = _mm512_unpackhi_epi8(r[0], r[1]);
            __m512i t2 = _mm512_unpacklo_epi8(r[2], r[3]), t3 = _mm512_unpackhi_epi8(r[2], r[3]);
            q[0] = _mm512_dpbusd_epi32(q[0], _mm512_unpacklo_epi16(t0, t2), xq[g]);
            q[1] = _mm512_dpbusd_epi32(q[1], _mm512_unpackhi_epi16(t0, t2), xq[g]);
            q[2] = _mm512_dpbusd_epi32(q[2], _mm512_unpacklo_epi16(t1, t3), xq[g]);
            q[3] = _mm512_dpbusd_epi32(q[3], _mm512_unpackhi_epi16(t1, t3), xq[g]);
        }
        /* block j of q[k] holds columns 16 j + 4 k .. + 3: transpose the
         * 4 x 4 blocks so that o[j] holds columns 16 j .. 16 j + 15 */
        __m512i b0 = _mm512_shuffle_i32x4(q[0], q[1], 0x44);
        __m512i b1 = _mm512_shuffle_i32x4(q[2], q[3], 0x44);
        __m512i b2 = _mm512_shuffle_i32x4(q[0], q[1], 0xee);
        __m512i b3 = _mm512_shuffle_i32x4(q[2], q[3], 0xee);
        __m512i o[4] = {_mm512_shuffle_i32x4(b0, b1, 0x88), _mm512_shuffle_i32x4(b0, b1, 0xdd),
                        _mm512_shuffle_i32x4(b2, b3, 0x88), _mm512_shuffle_i32x4(b2, b3, 0xdd)};
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            __mmask16 mj = (__mmask16)(m >> (16 * j));
            int32_t *p = acc + c + 16 * j;
            if (mj)
                _mm512_mask_storeu_epi32(p, mj,
                                         _mm512_add_epi32(_mm512_maskz_loadu_epi32(mj, p), o[j]));
        }
    }
}

VNNI void rt_gemv_i8i8_cols_vnni(const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                                 const int8_t *x, int64_t incx, int32_t *acc)
{
    const int8_t *row[8];
    int8_t xs[8];
    uint32_t xsum = 0;
    int64_t pf = 8 * ld <= RT_GEMV_I8X_PREFETCH_MAX ? 8 * ld : 0;
    for (int64_t r = 0; r < rows;) {
        int n = rows - r >= 8 ? 8 : rows - r >= 4 ? 4 : (int)(rows - r);
        for (int i = 0; i < 4 * ((n + 3) / 4); i++) { /* a short group padded: row 0, x 0 */
            row[i] = a + (i < n ? r + i : r) * ld;
            xs[i] = i < n ? x[(r + i) * incx] : 0;
            xsum += (uint32_t)(int32_t)xs[i];
        }
        if (n == 8)
            cols_vnni(row, xs, cols, acc, pf, 2);
        else
            cols_vnni(row, xs, cols, acc, 0, 1);
        r += n;
    }
    for (int64_t c = 0; c < cols; c++) /* the bias, modulo 2^32: exact sums */
        acc[c] = (int32_t)((uint32_t)acc[c] - 128u * xsum);
}

#else

typedef int rt_gemv_i8i8_vnni_empty; /* ISO C: a translation unit is not empty */

#endif
