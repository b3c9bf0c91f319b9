/*
 * gemv_narrow_avx512.c - gemv_narrow.c's loops written for AVX-512 (F, BW,
 * VL): the i8 or bf16 matrix converted to f32 in registers sixteen
 * elements at a time, as it is read.
 *
 * The AVX2 loops (gemv_narrow_avx2.c) convert about 1.8e10 i8 weights/s
 * from cache on one Zen 4 core, about the rate memory delivers them, so
 * from memory the conversion still fills the core's window and leaves
 * few loads in flight (docs/performance.md, section 10).  Here each
 * instruction takes twice the elements: sixteen i8 widened to i32 in one
 * vpmovsxbd (zmm from 16 bytes; a bf16 is its upper f32 half:
 * vpmovzxwd and a shift), converted (vcvtdq2ps, exact), multiply-added
 * into independent accumulators, with the same passes as the AVX2 loops:
 *   rows form   y[r] = sum_c A[r, c] x[c]: four rows per pass, two
 *               accumulators per row (32 columns a step), the four rows'
 *               lanes summed together at the end
 *   cols form   acc[c] += sum_r x[r] A[r, c]: four rows per pass (eight
 *               for i8 rows of 1 KiB or more), each vector of acc loaded
 *               and stored once per pass; each column's sum is the chain
 *               of multiply-adds over the rows in order, as in the AVX2
 *               loop's vector part
 * Column tails (under 16) are read with masked loads (no element past the
 * row is touched, and a masked-off lane adds 0 * 0), so every column of
 * the cols form is computed alike wherever it lies: a product split by
 * columns gives the bits of one thread.  The drivers (passes, heads,
 * prefetch distances) are gemv_narrow_drive.h's, shared with AVX2.
 *
 * Only built for x86-64 with GCC or Clang (the `target` attribute keeps
 * the rest of the runtime baseline x86-64); gemv_narrow.c calls these only
 * when the CPU reports AVX512F, BW and VL (rt_gemv_narrow_isa_best), so
 * the executable still runs on AVX2-only and older CPUs.
 */
#include "rt_internal.h"


#if RT_GEMV_HAVE_AVX2

#include <immintrin.h>

#define AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl")))

/* Sixteen consecutive elements of a narrow matrix from p as f32; the
 * masked forms read only the lanes in m (the others are 0). */
AVX512 static inline __m512 load16_i8(const char *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}

AVX512 static inline __m512 loadm_i8(const char *p, __mmask16 m)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

AVX512 static inline __m512 load16_bf16(const char *p)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

AVX512 static inline __m512 loadm_bf16(const char *p, __mmask16 m)
{
    __m256i v = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* An f32 matrix (attention over an f32 KV cache): nothing to convert. */
AVX512 static inline __m512 load16_f32(const char *p)
{
    return _mm512_loadu_ps((const float *)(const void *)p);
}

AVX512 static inline __m512 loadm_f32(const char *p, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, (const float *)(const void *)p);
}

/* The lanes [0, n) of a vector, n < 16. */
static inline __mmask16 tail_mask(int64_t n)
{
    return (__mmask16)((1u << n) - 1);
}

/* The two halves of v added: eight lanes. */
AVX512 static inline __m256 fold(__m512 v)
{
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return _mm256_add_ps(_mm512_castps512_ps256(v), hi);
}

/* t[0] = the sum of the lanes of s0[0] + s1[0]. */
AVX512 static inline void finish1(const __m512 *s0, const __m512 *s1, float *t)
{
    __m256 v = fold(_mm512_add_ps(s0[0], s1[0]));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    t[0] = _mm_cvtss_f32(s);
}

/* t[i] = the sum of the lanes of s0[i] + s1[i], i < 4: each folded to
 * eight lanes, then three horizontal adds for the four rows (a row of a
 * head of the KV cache is only 128 elements). */
AVX512 static inline void finish4(const __m512 *s0, const __m512 *s1, float *t)
{
    __m256 r[4];
    for (int i = 0; i < 4; i++)
        r[i] = fold(_mm512_add_ps(s0[i], s1[i]));
    __m256 a = _mm256_hadd_ps(r[0], r[1]), b = _mm256_hadd_ps(r[2], r[3]);
    __m256 h = _mm256_hadd_ps(a, b); /* per 128-bit half: row 0, 1, 2, 3 */
    _mm_storeu_ps(t, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* Asks the cache for the line `off` bytes from each of the nr rows (a
 * hint: no fault whatever the address, so computed as an integer: it may
 * lie past the matrix's end), into L2 (prefetcht1), as the AVX2 loops
 * now ask too: the eight-row passes ask for the next pass's rows, 22 KiB
 * ahead for rows of 2816 bytes, which with the column sums (11 KiB)
 * overflowed Zen 4's 32 KiB L1 and evicted what the pass was reading.
 * Into L2, one thread read 1.4x-1.6x the i8 weights/s from memory for
 * 1024 x 2816 (the decode step's X * Wg), 1.7x for 2816 x 1024 and about
 * 2x for the eight heads of a 2048 x 128 cache's sum of rows
 * (bench/gemv_narrow.c, alternating builds at load 6-7 on the 2-core
 * EPYC, Zen 4; prefetcht2 was no different). */
static inline void prefetch_rows(const char *const *row, int nr, size_t off)
{
    for (int i = 0; i < nr; i++)
        _mm_prefetch((const char *)((uintptr_t)row[i] + off), _MM_HINT_T1);
}

/* prefetch_rows for a step of `step` bytes from byte `at` of each row: a
 * line for each multiple of 64 bytes it holds (none when pf is 0), so an
 * f32 row's step of 128 bytes asks for both its lines and an i8 row's of
 * 32 bytes for one every other step. */
static inline void prefetch_step(const char *const *row, int nr, size_t at, size_t step,
                                 int64_t pf)
{
    for (size_t b = at; pf && b < at + step; b += 32)
        if (b % 64 == 0)
            prefetch_rows(row, nr, b + (size_t)pf);
}

/* y[r * incy] = alpha * dot(row r, x) + beta * y[r * incy] (beta 0: y
 * not read), for NR rows from `row0`; ES bytes per element; FINISH sums
 * the accumulators' lanes (finish1 or finish4, as NR). */
#define DEFINE_ROWS_AVX512(NAME, LOAD16, LOADM, ES, NR, FINISH)                                  \
    AVX512 static void NAME(const char *row0, int64_t ld, int64_t cols, const float *x,          \
                            float alpha, float beta, float *y, int64_t incy, int64_t pf)         \
    {                                                                                            \
        const char *row[NR];                                                                     \
        __m512 s0[NR], s1[NR];                                                                   \
        _Pragma("GCC unroll 4")                                                                  \
        for (int i = 0; i < NR; i++) {                                                           \
            row[i] = row0 + (size_t)(i * ld) * ES;                                               \
            s0[i] = _mm512_setzero_ps();                                                         \
            s1[i] = _mm512_setzero_ps();                                                         \
        }                                                                                        \
        int64_t c = 0;                                                                           \
        for (; c + 32 <= cols; c += 32) {                                                        \
            prefetch_step(row, NR, (size_t)c * ES, 32 * ES, pf);                                 \
            __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);                \
            _Pragma("GCC unroll 4")                                                              \
            for (int i = 0; i < NR; i++) {                                                       \
                s0[i] = _mm512_fmadd_ps(LOAD16(row[i] + (size_t)c * ES), x0, s0[i]);             \
                s1[i] = _mm512_fmadd_ps(LOAD16(row[i] + (size_t)(c + 16) * ES), x1, s1[i]);      \
            }                                                                                    \
        }                                                                                        \
        if (c + 16 <= cols) {                                                                    \
            __m512 x0 = _mm512_loadu_ps(x + c);                                                  \
            _Pragma("GCC unroll 4")                                                              \
            for (int i = 0; i < NR; i++)                                                         \
                s0[i] = _mm512_fmadd_ps(LOAD16(row[i] + (size_t)c * ES), x0, s0[i]);             \
            c += 16;                                                                             \
        }                                                                                        \
        if (c < cols) {                                                                          \
            __mmask16 m = tail_mask(cols - c);                                                   \
            __m512 x0 = _mm512_maskz_loadu_ps(m, x + c);                                         \
            _Pragma("GCC unroll 4")                                                              \
            for (int i = 0; i < NR; i++)                                                         \
                s1[i] = _mm512_fmadd_ps(LOADM(row[i] + (size_t)c * ES, m), x0, s1[i]);           \
        }                                                                                        \
        float t[NR];                                                                             \
        FINISH(s0, s1, t);                                                                       \
        _Pragma("GCC unroll 4")                                                                  \
        for (int i = 0; i < NR; i++)                                                             \
            y[i * incy] = alpha * t[i] + (beta != 0 ? beta * y[i * incy] : 0.0f);                \
    }

DEFINE_ROWS_AVX512(rows4_i8, load16_i8, loadm_i8, 1, 4, finish4)
DEFINE_ROWS_AVX512(rows1_i8, load16_i8, loadm_i8, 1, 1, finish1)
DEFINE_ROWS_AVX512(rows4_bf16, load16_bf16, loadm_bf16, 2, 4, finish4)
DEFINE_ROWS_AVX512(rows1_bf16, load16_bf16, loadm_bf16, 2, 1, finish1)
DEFINE_ROWS_AVX512(rows4_f32, load16_f32, loadm_f32, 4, 4, finish4)
DEFINE_ROWS_AVX512(rows1_f32, load16_f32, loadm_f32, 4, 1, finish1)

/* acc[c] += sum of x[i * incx] * row i's element c over NR rows from
 * `row0`, for c < cols: each column's chain of multiply-adds in row
 * order, in whichever step (32, 16 or a masked tail) it falls. */
#define DEFINE_COLS_AVX512(NAME, LOAD16, LOADM, ES, NR)                                          \
    AVX512 static void NAME(const char *row0, int64_t ld, int64_t cols, const float *x,          \
                            int64_t incx, float *acc, int64_t pf)                                \
    {                                                                                            \
        const char *row[NR];                                                                     \
        __m512 xb[NR];                                                                           \
        _Pragma("GCC unroll 8")                                                                  \
        for (int i = 0; i < NR; i++) {                                                           \
            row[i] = row0 + (size_t)(i * ld) * ES;                                               \
            xb[i] = _mm512_set1_ps(x[i * incx]);                                                 \
        }                                                                                        \
        int64_t c = 0;                                                                           \
        for (; c + 32 <= cols; c += 32) {                                                        \
            prefetch_step(row, NR, (size_t)c * ES, 32 * ES, pf);                                 \
            __m512 a0 = _mm512_loadu_ps(acc + c), a1 = _mm512_loadu_ps(acc + c + 16);            \
            _Pragma("GCC unroll 8")                                                              \
            for (int i = 0; i < NR; i++) {                                                       \
                a0 = _mm512_fmadd_ps(LOAD16(row[i] + (size_t)c * ES), xb[i], a0);                \
                a1 = _mm512_fmadd_ps(LOAD16(row[i] + (size_t)(c + 16) * ES), xb[i], a1);         \
            }                                                                                    \
            _mm512_storeu_ps(acc + c, a0);                                                       \
            _mm512_storeu_ps(acc + c + 16, a1);                                                  \
        }                                                                                        \
        for (; c < cols; c += 16) {                                                              \
            __mmask16 m = cols - c >= 16 ? (__mmask16)0xffff : tail_mask(cols - c);              \
            __m512 a0 = _mm512_maskz_loadu_ps(m, acc + c);                                       \
            _Pragma("GCC unroll 8")                                                              \
            for (int i = 0; i < NR; i++)                                                         \
                a0 = _mm512_fmadd_ps(LOADM(row[i] + (size_t)c * ES, m), xb[i], a0);              \
            _mm512_mask_storeu_ps(acc + c, m, a0);                                               \
        }                                                                                        \
    }

DEFINE_COLS_AVX512(cols8_i8, load16_i8, loadm_i8, 1, 8)
DEFINE_COLS_AVX512(cols4_i8, load16_i8, loadm_i8, 1, 4)
DEFINE_COLS_AVX512(cols1_i8, load16_i8, loadm_i8, 1, 1)
DEFINE_COLS_AVX512(cols4_bf16, load16_bf16, loadm_bf16, 2, 4)
DEFINE_COLS_AVX512(cols1_bf16, load16_bf16, loadm_bf16, 2, 1)
DEFINE_COLS_AVX512(cols4_f32, load16_f32, loadm_f32, 4, 4)
DEFINE_COLS_AVX512(cols1_f32, load16_f32, loadm_f32, 4, 1)

#define NARROW_ISA(name) name##_avx512
#include "gemv_narrow_drive.h"

#else

typedef int rt_gemv_narrow_avx512_empty; /* ISO C: a translation unit is not empty */

#endif
