/*
 * gemv_narrow_avx2.c - gemv_narrow.c's two loops written for AVX2 and
 * FMA: the i8 or bf16 matrix converted to f32 in registers, eight
 * elements at a time, as it is read.
 *
 * A decode step's weights are read once per token, so the loop must
 * convert faster than memory delivers them: an i8 weight is one byte, so
 * at 20 GB/s that is 2e10 weights/s on the one core that runs a device.
 * The compiler's own vectorisation of the portable loops (gemv_narrow.c,
 * their AVX2 clone) converts 6e9 to 8e9 i8 weights/s from cache on the
 * 2-core EPYC; these loops 2e10 (docs/performance.md, section 10).  They
 * widen eight i8 to eight i32 in one instruction (vpmovsxbd; a bf16 is
 * its upper f32 half: vpmovzxwd and a shift), convert to f32 (vcvtdq2ps,
 * exact: |i8| < 2^24), and multiply-add into independent accumulators:
 *   rows form   y[r] = sum_c A[r, c] x[c]: four rows per pass, so each
 *               vector of x loaded is used four times; two accumulators
 *               per row (16 columns a step), the four rows' lanes summed
 *               together at the end (three horizontal adds)
 *   cols form   acc[c] += sum_r x[r] A[r, c]: four rows per pass (eight
 *               for i8 rows of 1 KiB or more), each vector of acc (cols
 *               floats, in L1 or L2) loaded and stored once per pass;
 *               the next pass's rows asked for into L2 as they go
 * Column tails (under 8) and row tails (under 4) take scalar or one-row
 * steps.  The sums are taken in another order than the portable loops':
 * results differ by f32 rounding.
 *
 * Only built for x86-64 with GCC or Clang (the `target` attribute lets
 * one file hold AVX2 code while the rest of the runtime stays baseline
 * x86-64); gemv_narrow.c calls these only when the CPU reports AVX2 and
 * FMA (rt_gemv_narrow_isa_best), so the executable runs on any x86-64.
 */
#include "rt_internal.h"

#if RT_GEMV_HAVE_AVX2

#include <immintrin.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma")))

/* Eight consecutive elements of a narrow matrix from p as f32. */
AVX2 static inline __m256 load8_i8(const char *p)
{
    __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)p);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

AVX2 static inline __m256 load8_bf16(const char *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

/* An f32 matrix (attention over an f32 KV cache): nothing to convert. */
AVX2 static inline __m256 load8_f32(const char *p)
{
    return _mm256_loadu_ps((const float *)(const void *)p);
}

static inline float one_i8(const char *p)
{
    return (float)*(const int8_t *)p;
}

static inline float one_bf16(const char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float one_f32(const char *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

/* The sum of the eight lanes of v. */
AVX2 static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* t[0] = the sum of the lanes of s0[0] + s1[0]. */
AVX2 static inline void finish1(const __m256 *s0, const __m256 *s1, float *t)
{
    t[0] = hsum(_mm256_add_ps(s0[0], s1[0]));
}

/* t[i] = the sum of the lanes of s0[i] + s1[i], i < 4: three horizontal
 * adds for the four rows, not four reductions (a row of a head of the
 * KV cache is only 128 elements, so this is a good part of its cost). */
AVX2 static inline void finish4(const __m256 *s0, const __m256 *s1, float *t)
{
    __m256 a = _mm256_hadd_ps(_mm256_add_ps(s0[0], s1[0]), _mm256_add_ps(s0[1], s1[1]));
    __m256 b = _mm256_hadd_ps(_mm256_add_ps(s0[2], s1[2]), _mm256_add_ps(s0[3], s1[3]));
    __m256 h = _mm256_hadd_ps(a, b); /* per 128-bit half: row 0, 1, 2, 3 */
    _mm_storeu_ps(t, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* Asks the cache for the line `off` bytes from each of the NR rows (a
 * hint: no fault, whatever the address; computed as an integer, since it
 * may lie past the matrix's end), into L2 (prefetcht1) as the AVX-512
 * loops ask (gemv_narrow_avx512.c): into L1, the eight-row passes' lines
 * of the next pass (22 KiB ahead for rows of 2816 bytes) and the column
 * sums overflowed the 32 KiB L1 and evicted what the pass was reading.
 * Into L2, with the eight-row passes' distances of gemv_narrow_drive.h,
 * one thread read 1.45x the i8 weights/s from memory of asking for L1
 * for 1024 x 2816, 2.6x for 2816 x 1024 (eight rows of 1 KiB a pass, not
 * four: 1.7x of that with four), 2.1x for 4096 x 512 (the four-row
 * passes, 4 KiB ahead) and 2.0-2.3x for the eight heads of a 2048 x 128
 * cache; split over two threads 1.1x-1.7x; from cache 0.96x-1.0x
 * (bench/gemv_narrow.c with EINC_GEMV_ISA=avx2, five alternating rounds
 * at load 2-2.8 on the 2-core EPYC, Zen 4; Zen 3, AVX2 only, has the same
 * 32 KiB L1).  Asking for L1 at the new distances was 0.89x-1.07x the old.
 * The kernels below take `pf`, the bytes ahead of what they read to ask
 * for (0: none): the heads kernels ask for the same columns some rows
 * further on. */
#define PREFETCH_ROWS(row, NR, off)                                                              \
    do {                                                                                         \
        _Pragma("GCC unroll 8")                                                                  \
        for (int i_ = 0; i_ < NR; i_++)                                                          \
            _mm_prefetch((const char *)((uintptr_t)row[i_] + (off)), _MM_HINT_T1);               \
    } while (0)

/* y[r * incy] = alpha * dot(row r, x) + beta * y[r * incy] (beta 0: y
 * not read), for NR rows from `row0`; ES bytes per element; FINISH sums
 * the accumulators' lanes (finish1 or finish4, as NR). */
#define DEFINE_ROWS_AVX2(NAME, LOAD8, ONE, ES, NR, FINISH)                                       \
    AVX2 static void NAME(const char *row0, int64_t ld, int64_t cols, const float *x,            \
                          float alpha, float beta, float *y, int64_t incy, int64_t pf)           \
    {                                                                                            \
        const char *row[NR];                                                                     \
        __m256 s0[NR], s1[NR];                                                                   \
        _Pragma("GCC unroll 4")                                                                  \
        for (int i = 0; i < NR; i++) {                                                           \
            row[i] = row0 + (size_t)(i * ld) * ES;                                               \
            s0[i] = _mm256_setzero_ps();                                                         \
            s1[i] = _mm256_setzero_ps();                                                         \
        }                                                                                        \
        int64_t c = 0;                                                                           \
        for (; c + 16 <= cols; c += 16) {                                                        \
            if (pf && ((size_t)c * ES) % 64 == 0)                                                \
                PREFETCH_ROWS(row, NR, (size_t)c * ES + (size_t)pf);                             \
            __m256 x0 = _mm256_loadu_ps(x + c), x1 = _mm256_loadu_ps(x + c + 8);                 \
            _Pragma("GCC unroll 4")                                                              \
            for (int i = 0; i < NR; i++) {                                                       \
                s0[i] = _mm256_fmadd_ps(LOAD8(row[i] + (size_t)c * ES), x0, s0[i]);              \
                s1[i] = _mm256_fmadd_ps(LOAD8(row[i] + (size_t)(c + 8) * ES), x1, s1[i]);        \
            }                                                                                    \
        }                                                                                        \
        if (c + 8 <= cols) {                                                                     \
            __m256 x0 = _mm256_loadu_ps(x + c);                                                  \
            _Pragma("GCC unroll 4")                                                              \
            for (int i = 0; i < NR; i++)                                                         \
                s0[i] = _mm256_fmadd_ps(LOAD8(row[i] + (size_t)c * ES), x0, s0[i]);              \
            c += 8;                                                                              \
        }                                                                                        \
        float t[NR];                                                                             \
        FINISH(s0, s1, t);                                                                       \
        _Pragma("GCC unroll 4")                                                                  \
        for (int i = 0; i < NR; i++) {                                                           \
            for (int64_t k = c; k < cols; k++)                                                   \
                t[i] += ONE(row[i] + (size_t)k * ES) * x[k];                                     \
            y[i * incy] = alpha * t[i] + (beta != 0 ? beta * y[i * incy] : 0.0f);                \
        }                                                                                        \
    }

DEFINE_ROWS_AVX2(rows4_i8, load8_i8, one_i8, 1, 4, finish4)
DEFINE_ROWS_AVX2(rows1_i8, load8_i8, one_i8, 1, 1, finish1)
DEFINE_ROWS_AVX2(rows4_bf16, load8_bf16, one_bf16, 2, 4, finish4)
DEFINE_ROWS_AVX2(rows1_bf16, load8_bf16, one_bf16, 2, 1, finish1)
DEFINE_ROWS_AVX2(rows4_f32, load8_f32, one_f32, 4, 4, finish4)
DEFINE_ROWS_AVX2(rows1_f32, load8_f32, one_f32, 4, 1, finish1)

/* acc[c] += sum of x[i * incx] * row i's element c over NR rows from
 * `row0`, for c < cols. */
#define DEFINE_COLS_AVX2(NAME, LOAD8, ONE, ES, NR)                                               \
    AVX2 static void NAME(const char *row0, int64_t ld, int64_t cols, const float *x,            \
                          int64_t incx, float *acc, int64_t pf)                                  \
    {                                                                                            \
        const char *row[NR];                                                                     \
        __m256 xb[NR];                                                                           \
        _Pragma("GCC unroll 8")                                                                  \
        for (int i = 0; i < NR; i++) {                                                           \
            row[i] = row0 + (size_t)(i * ld) * ES;                                               \
            xb[i] = _mm256_set1_ps(x[i * incx]);                                                 \
        }                                                                                        \
        int64_t c = 0;                                                                           \
        for (; c + 16 <= cols; c += 16) {                                                        \
            if (pf && ((size_t)c * ES) % 64 == 0)                                                \
                PREFETCH_ROWS(row, NR, (size_t)c * ES + (size_t)pf);                             \
            __m256 a0 = _mm256_loadu_ps(acc + c), a1 = _mm256_loadu_ps(acc + c + 8);             \
            _Pragma("GCC unroll 8")                                                              \
            for (int i = 0; i < NR; i++) {                                                       \
                a0 = _mm256_fmadd_ps(LOAD8(row[i] + (size_t)c * ES), xb[i], a0);                 \
                a1 = _mm256_fmadd_ps(LOAD8(row[i] + (size_t)(c + 8) * ES), xb[i], a1);           \
            }                                                                                    \
            _mm256_storeu_ps(acc + c, a0);                                                       \
            _mm256_storeu_ps(acc + c + 8, a1);                                                   \
        }                                                                                        \
        if (c + 8 <= cols) {                                                                     \
            __m256 a0 = _mm256_loadu_ps(acc + c);                                                \
            _Pragma("GCC unroll 8")                                                              \
            for (int i = 0; i < NR; i++)                                                         \
                a0 = _mm256_fmadd_ps(LOAD8(row[i] + (size_t)c * ES), xb[i], a0);                 \
            _mm256_storeu_ps(acc + c, a0);                                                       \
            c += 8;                                                                              \
        }                                                                                        \
        for (; c < cols; c++) {                                                                  \
            float t = acc[c];                                                                    \
            _Pragma("GCC unroll 8")                                                              \
            for (int i = 0; i < NR; i++)                                                         \
                t += x[i * incx] * ONE(row[i] + (size_t)c * ES);                                 \
            acc[c] = t;                                                                          \
        }                                                                                        \
    }

DEFINE_COLS_AVX2(cols8_i8, load8_i8, one_i8, 1, 8)
DEFINE_COLS_AVX2(cols4_i8, load8_i8, one_i8, 1, 4)
DEFINE_COLS_AVX2(cols1_i8, load8_i8, one_i8, 1, 1)
DEFINE_COLS_AVX2(cols4_bf16, load8_bf16, one_bf16, 2, 4)
DEFINE_COLS_AVX2(cols1_bf16, load8_bf16, one_bf16, 2, 1)
DEFINE_COLS_AVX2(cols4_f32, load8_f32, one_f32, 4, 4)
DEFINE_COLS_AVX2(cols1_f32, load8_f32, one_f32, 4, 1)

#define NARROW_ISA(name) name##_avx2
#include "gemv_narrow_drive.h"

#else

typedef int rt_gemv_narrow_avx2_empty; /* ISO C: a translation unit is not empty */

#endif
