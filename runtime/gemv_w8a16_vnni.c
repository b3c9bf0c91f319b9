/*
 * gemv_w8a16_vnni.c - the sum of rows of an i8 matrix times an f32 vector
 * (acc[c] += sum_r x[r] A[r, c]: every weight of a weight-only int8 decode
 * step, X * W with W stored [D, F]) with AVX512-VNNI's vpdpwssd, as W8A16:
 * each pass's eight x values are rounded to i16 with one scale, the
 * weights widened i8 -> i16 (vpmovsxbw, 32 per instruction) and pairs of
 * rows multiply-added into i32 lanes (vpdpwssd), exactly, then the pass's
 * i32 sums converted to f32 and added into acc times the scale.
 *
 * Why: the f32 loop (gemv_narrow_avx512.c) takes three instructions per
 * sixteen weights (vpmovsxbd, vcvtdq2ps, an FMA) and converts 2.8e10 i8
 * weights/s from cache on one Zen 4 core, about what one core draws from
 * memory, so one thread of the weight-only step is bound by its
 * instructions (docs/performance-history.md, section 10, issue 26).  Here
 * eight rows of 32 columns (256 weights) take 8 vpmovsxbw (the loads
 * folded in), 8 vpunpck[lh]wd and 8 vpdpwssd, plus 2 vpermt2d, 2
 * vcvtdq2ps, 2 FMAs and acc's 2 loads and 2 stores: 34 instructions,
 * about 2.1 per sixteen weights, not 3.
 *
 * Numerics (the x rounding is the only change from f32; seed 002's int8
 * serving computes weight-only products in bf16, which rounds each x to
 * 2^-9 of itself): per pass of rows r0..r0+7, m = max |x[r]|,
 *   s = m / 32767,  q[r] = round(x[r] / s) in [-32767, 32767],
 * so |x[r] - s q[r]| <= 1.03 m 2^-16 (half a step, s / 2 = m 2^-16 (1 +
 * 2^-15), and the f32 roundings of 32767 / m, of x times it and of s, under
 * 0.01 of a step), and each term's error is at most 1.03 |A[r, c]| m
 * 2^-16: 2^-16 of the pass's largest
 * x, against bf16's 2^-9 of each x.  The i32 lanes cannot overflow: a
 * pass adds 8 products of |A| <= 128 and |q| <= 32767 (4 vpdpwssd pairs),
 * at most 8 * 128 * 32767 < 2^25 in magnitude, so each pass's sum is
 * exact and flushed into f32 every pass (N = 8 rows; up to 2^31 / 2^22 =
 * 512 rows would still be exact, but the scale is per pass, the closer
 * fit).  The flush rounds the exact sum to f32 (2^-24 of it) and then
 * fma(s, sum, acc) once: acc's chain has one rounding per pass, not per
 * row.  A pass whose x holds a NaN or an infinity, or whose m is under
 * 2^-100 (s would lose bits to underflow) but not 0, runs the f32 loop
 * instead (the same results as without this file); a pass of all zeros
 * adds nothing.  Each column is computed alike wherever it lies (the tail
 * under 32 columns is masked, masked-off lanes add 0), and the passes
 * start at the caller's row 0, so a product split by columns or runs of
 * rows (gemv_split.c) gives the bits of one thread.
 *
 * The loop is only built for x86-64 with GCC or Clang (the `target`
 * attribute; the quantizer is portable C); gemv_narrow.c calls it only at RT_ISA_AVX512_VNNI (rt_gemv.h), which
 * needs the CPU's AVX-512 F, BW, VL and VNNI.
 */
#include <float.h>
#include <math.h>

#include "rt_internal.h"

int rt_gemv_w8a16_quantize(const float *x, int64_t incx, int n, int16_t *q, float *scale)
{
    float m = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i * incx]);
        if (!(a <= FLT_MAX))
            return 0; /* NaN or infinity: the f32 loop */
        m = a > m ? a : m;
    }
    if (m == 0) {
        *scale = 0;
        return 1;
    }
    if (m < 0x1p-100f)
        return 0;
    float inv = 32767.0f / m;
    for (int i = 0; i < n; i++) {
        float v = nearbyintf(x[i * incx] * inv);
        v = v > 32767.0f ? 32767.0f : v < -32767.0f ? -32767.0f : v;
        q[i] = (int16_t)v;
    }
    *scale = m / 32767.0f;
    return 1;
}

#if RT_GEMV_HAVE_AVX2

#include <immintrin.h>

#define VNNI __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))

/* The rows of a pass: eight, two to each vpdpwssd pair. */
#define W8A16_ROWS 8

/* Adds into acc[c + 0..31] (lanes in m only) scale times the exact sums
 * of the eight rows' bytes at column c times q: q0 holds columns
 * {0-3, 8-11, 16-19, 24-27} of the 32 as i32 lanes, q1 the others
 * (vpunpck[lh]wd work within 128-bit blocks). */
VNNI static inline void flush32(__m512i q0, __m512i q1, __m512 vs, float *acc, __mmask32 m)
{
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i i1 =
        _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    __m512 o0 = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(q0, i0, q1));
    __m512 o1 = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(q0, i1, q1));
    __mmask16 m0 = (__mmask16)m, m1 = (__mmask16)(m >> 16);
    _mm512_mask_storeu_ps(acc, m0, _mm512_fmadd_ps(o0, vs, _mm512_maskz_loadu_ps(m0, acc)));
    if (m1)
        _mm512_mask_storeu_ps(acc + 16, m1,
                              _mm512_fmadd_ps(o1, vs, _mm512_maskz_loadu_ps(m1, acc + 16)));
}

/* One pass: rows row0 .. row0 + 7 (ld bytes apart) with the i16 x values
 * q and their scale; pf: bytes ahead to ask the cache for (0: none). */
VNNI static void pass8(const int8_t *row0, int64_t ld, int64_t cols, const int16_t *q,
                       float scale, float *acc, int64_t pf)
{
    const int8_t *row[W8A16_ROWS];
    __m512i xp[W8A16_ROWS / 2];
    for (int i = 0; i < W8A16_ROWS; i++)
        row[i] = row0 + i * ld;
    for (int g = 0; g < W8A16_ROWS / 2; g++) /* (q[2g], q[2g + 1]) in every i32 lane */
        xp[g] = _mm512_set1_epi32((int32_t)((uint32_t)(uint16_t)q[2 * g] |
                                            (uint32_t)(uint16_t)q[2 * g + 1] << 16));
    __m512 vs = _mm512_set1_ps(scale);
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
        __m512i q0 = _mm512_setzero_si512(), q1 = _mm512_setzero_si512();
        _Pragma("GCC unroll 4")
        for (int g = 0; g < W8A16_ROWS / 2; g++) {
            const int8_t *a = row[2 * g] + c, *b = row[2 * g + 1] + c;
            if (pf && c % 64 == 0) {
                _mm_prefetch((const char *)((uintptr_t)a + (size_t)pf), _MM_HINT_T1);
                _mm_prefetch((const char *)((uintptr_t)b + (size_t)pf), _MM_HINT_T1);
            }
            __m512i w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a));
            __m512i w1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)b));
            q0 = _mm512_dpwssd_epi32(q0, _mm512_unpacklo_epi16(w0, w1), xp[g]);
            q1 = _mm512_dpwssd_epi32(q1, _mm512_unpackhi_epi16(w0, w1), xp[g]);
        }
        flush32(q0, q1, vs, acc + c, ~(__mmask32)0);
    }
    if (c < cols) { /* the tail: masked-off bytes read nothing and add 0 */
        __mmask32 m = (__mmask32)((1u << (cols - c)) - 1);
        __m512i q0 = _mm512_setzero_si512(), q1 = _mm512_setzero_si512();
        for (int g = 0; g < W8A16_ROWS / 2; g++) {
            __m512i w0 = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, row[2 * g] + c));
            __m512i w1 = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, row[2 * g + 1] + c));
            q0 = _mm512_dpwssd_epi32(q0, _mm512_unpacklo_epi16(w0, w1), xp[g]);
            q1 = _mm512_dpwssd_epi32(q1, _mm512_unpackhi_epi16(w0, w1), xp[g]);
        }
        flush32(q0, q1, vs, acc + c, m);
    }
}

void rt_gemv_w8a16_cols_vnni(const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                             const float *x, int64_t incx, float *acc)
{
    int64_t pf = W8A16_ROWS * ld <= RT_GEMV_I8X_PREFETCH_MAX ? W8A16_ROWS * ld : 0;
    int64_t r = 0;
    for (; r + W8A16_ROWS <= rows; r += W8A16_ROWS) {
        int16_t q[W8A16_ROWS];
        float s;
        const int8_t *p = a + r * ld;
        if (!rt_gemv_w8a16_quantize(x + r * incx, incx, W8A16_ROWS, q, &s))
            rt_gemv_narrow_cols_avx512(RT_I8, (const char *)p, ld, W8A16_ROWS, cols,
                                       x + r * incx, incx, acc);
        else if (s != 0)
            pass8(p, ld, cols, q, s, acc, pf);
    }
    if (r < rows) /* under eight rows left: the f32 loop */
        rt_gemv_narrow_cols_avx512(RT_I8, (const char *)(a + r * ld), ld, rows - r, cols,
                                   x + r * incx, incx, acc);
}

#endif
