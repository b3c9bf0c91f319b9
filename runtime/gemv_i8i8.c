/*
 * gemv_i8i8.c - an i8 matrix times an i8 vector (W8A8: int8 weights
 * times int8 activations), summed exactly in i32 and converted to f32
 * once per output element.
 *
 * A program asks for it by quantizing its activations itself and folding
 * both casts into one einsum (docs/generation.md, "int8 x int8"):
 *     Xq[B, D] = i8(X[B, D] / Sx[B])
 *     Y[B, F] = f32(Xq[B, D]) * f32(Wq[D, F]) * Sx[B] * Sw[F]
 * The einsum's GEMM then has two i8 operands and f32 arithmetic, and
 * where it is a matrix times a vector (a decode step's), gemv_narrow.c
 * hands it here.  The products of two i8 values are integers of at most
 * 2^14 in magnitude, so a sum over fewer than 2^17 of them is exact in
 * i32: the result is that exact sum rounded once to f32, times alpha, plus
 * beta times y.  An f32 sum of the same products is exact too while its
 * partial sums stay below 2^24 (contractions up to 1024 long), so there
 * the result is bit for bit the f32 path's; longer ones it is closer.
 *
 * Why: the f32 loops (gemv_narrow_avx2.c) convert each weight to f32 and
 * multiply-add it, three instructions per eight weights; here sixteen
 * weights are widened to i16 in one instruction and multiplied in pairs
 * with vpmaddwd (AVX2), so a weight costs about half the instructions.
 * Where the CPU has AVX-512 with VNNI, gemv_i8i8_vnni.c's loops run
 * instead: vpdpbusd sums four byte products per i32 lane, 64 weights per
 * instruction, the weights' sign bit flipped to make the unsigned
 * operand it takes (the sign handling is documented there).
 *   rows form  y[r] = sum_c A[r, c] x[c]: x widened once to i16 (scratch),
 *              four rows per pass sharing each vector of x
 *   cols form  acc[c] += sum_r x[r] A[r, c]: rows taken in pairs, their
 *              i16 elements interleaved (vpunpck[lh]wd) so that one
 *              vpmaddwd gives x[r] A[r, c] + x[r+1] A[r+1, c] per column;
 *              eight rows per pass, the i32 sums in scratch, the next
 *              pass's rows asked for into L2 (RT_GEMV_I8X_PREFETCH_MAX)
 * The portable loops give the same integers, so every instruction set
 * gives the same bits.  A large product is shared with the device's
 * helper thread as gemv_narrow.c's are (rt_gemv.h): runs of rows, or the
 * two halves of the rows summed into their own i32 vectors and added at
 * the end; integer sums, so the bits are those of one thread.
 */
#include "rt_internal.h"

#if RT_GEMV_HAVE_AVX2
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))
#endif

/* rows form, portable: sum_c row[c] x[c]. */
static int32_t row_c(const int8_t *row, int64_t cols, const int16_t *x)
{
    int32_t t = 0;
    for (int64_t c = 0; c < cols; c++)
        t += row[c] * x[c];
    return t;
}

/* cols form, portable: acc[c] += sum_r x[r * incx] a[r, c]. */
static void cols_c(const int8_t *a, int64_t ld, int64_t rows, int64_t cols, const int8_t *x,
                   int64_t incx, int32_t *acc)
{
    for (int64_t r = 0; r < rows; r++) {
        const int8_t *row = a + r * ld;
        int32_t xr = x[r * incx];
        for (int64_t c = 0; c < cols; c++)
            acc[c] += xr * row[c];
    }
}

#if RT_GEMV_HAVE_AVX2

/* Sixteen i8 from p widened to i16. */
AVX2 static inline __m256i load16(const int8_t *p)
{
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* The sum of the eight i32 lanes of v. */
AVX2 static inline int32_t hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* rows form: out[i] = sum_c a[i, c] x[c] for NR rows (1 or 4). */
AVX2 static inline __attribute__((always_inline)) void
rows_avx2(const int8_t *a, int64_t ld, int64_t cols, const int16_t *x, int32_t *out, const int nr)
{
    __m256i s[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(x + c));
        _Pragma("GCC unroll 4")
        for (int i = 0; i < nr; i++)
            s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(load16(a + i * ld + c), xv));
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < nr; i++) {
        int32_t t = hsum_i32(s[i]);
        for (int64_t k = c; k < cols; k++)
            t += a[i * ld + k] * x[k];
        out[i] = t;
    }
}

AVX2 static void rows_all_avx2(const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                               const int16_t *x, float alpha, float beta, float *y, int64_t incy)
{
    int32_t t[4];
    for (int64_t r = 0; r < rows;) {
        int nr = rows - r >= 4 ? 4 : 1;
        if (nr == 4)
            rows_avx2(a + r * ld, ld, cols, x, t, 4);
        else
            rows_avx2(a + r * ld, ld, cols, x, t, 1);
        for (int i = 0; i < nr; i++, r++)
            y[r * incy] = alpha * (float)t[i] + (beta != 0 ? beta * y[r * incy] : 0.0f);
    }
}

/* cols form: acc[c] += sum over NP row pairs p of x[2p] a[2p, c] +
 * x[2p+1] a[2p+1, c] (NP 1 or 4), for rows row[0..2 NP) (a row given
 * twice with x 0 pads an odd count); pf: bytes ahead to ask the cache for
 * (0: none). */
AVX2 static inline __attribute__((always_inline)) void
cols_avx2(const int8_t *const *row, const int32_t *xs, int64_t cols, int32_t *acc, int64_t pf,
          const int np)
{
    __m256i xp[4];
    _Pragma("GCC unroll 4")
    for (int p = 0; p < np; p++) /* (x[2p], x[2p+1]) as an i16 pair in each i32 lane */
        xp[p] = _mm256_set1_epi32((int32_t)(((uint32_t)(uint16_t)xs[2 * p + 1] << 16) |
                                            (uint16_t)xs[2 * p]));
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
        if (pf && c % 64 == 0) {
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 2 * np; i++)
                _mm_prefetch((const char *)((uintptr_t)(row[i] + c) + (size_t)pf), _MM_HINT_T1);
        }
        _Pragma("GCC unroll 4")
        for (int p = 0; p < np; p++) {
            __m256i w0 = load16(row[2 * p] + c), w1 = load16(row[2 * p + 1] + c);
            /* per 128-bit lane: columns 0-3 (lo) and 4-7 (hi) of its eight */
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(w0, w1), xp[p]));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(w0, w1), xp[p]));
        }
        __m256i *a0 = (__m256i *)(void *)(acc + c), *a1 = (__m256i *)(void *)(acc + c + 8);
        _mm256_storeu_si256(a0, _mm256_add_epi32(_mm256_loadu_si256(a0),
                                                 _mm256_permute2x128_si256(lo, hi, 0x20)));
        _mm256_storeu_si256(a1, _mm256_add_epi32(_mm256_loadu_si256(a1),
                                                 _mm256_permute2x128_si256(lo, hi, 0x31)));
    }
    for (; c < cols; c++) {
        int32_t t = acc[c];
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 2 * np; i++)
            t += xs[i] * row[i][c];
        acc[c] = t;
    }
}

AVX2 static void cols_all_avx2(const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                               const int8_t *x, int64_t incx, int32_t *acc)
{
    const int8_t *row[8];
    int32_t xs[8];
    int64_t pf = 8 * ld <= RT_GEMV_I8X_PREFETCH_MAX ? 8 * ld : 0;
    for (int64_t r = 0; r < rows;) {
        int n = rows - r >= 8 ? 8 : rows - r >= 2 ? 2 : 1;
        for (int i = 0; i < n; i++)
            row[i] = a + (r + i) * ld, xs[i] = x[(r + i) * incx];
        if (n == 1) /* pad the pair: the same row again, times 0 */
            row[1] = row[0], xs[1] = 0;
        if (n == 8)
            cols_avx2(row, xs, cols, acc, pf, 4);
        else
            cols_avx2(row, xs, cols, acc, 0, 1);
        r += n;
    }
}

#endif

int64_t rt_gemv_i8i8_scratch(int rows_form, int64_t cols)
{
    return rows_form ? (cols + 1) / 2 : 2 * cols; /* x as i16; each half's i32 sums */
}

/* One product, cut into chunks for a split (i8x_chunk). */
typedef struct i8x_job {
    int avx2, vnni, rows_form;
    const int8_t *a, *x;
    int64_t ld, rows, cols, incx, incy;
    float alpha, beta;
    float *y;
    int16_t *x16;   /* rows form: x widened (VNNI: x8 instead) */
    int8_t *x8;     /* rows form, VNNI: x contiguous */
    int32_t xsum;   /* rows form, VNNI: the sum of x */
    int32_t *acc;   /* cols form: [2][cols] sums of rows [0, half) and [half, rows) */
    int64_t half;   /* cols form: where the rows are cut in two */
    int64_t nchunk; /* chunks: of rows (rows form), the halves (cols form) */
} i8x_job;

/* Rows [k rows / n, (k + 1) rows / n) (rows form, their y) or half k
 * (cols form, its sums). */
static void i8x_chunk(void *arg, int64_t k)
{
    const i8x_job *j = arg;
    int64_t r0 = j->rows_form ? k * j->rows / j->nchunk : k ? j->half : 0;
    int64_t r1 = j->rows_form ? (k + 1) * j->rows / j->nchunk : k ? j->rows : j->half;
    const int8_t *a = j->a + r0 * j->ld;
    if (j->rows_form) {
        float *y = j->y + r0 * j->incy;
#if RT_GEMV_HAVE_AVX2
        if (j->vnni) {
            rt_gemv_i8i8_rows_vnni(a, j->ld, r1 - r0, j->cols, j->x8, j->xsum, j->alpha, j->beta,
                                   y, j->incy);
            return;
        }
        if (j->avx2) {
            rows_all_avx2(a, j->ld, r1 - r0, j->cols, j->x16, j->alpha, j->beta, y, j->incy);
            return;
        }
#endif
        for (int64_t r = 0; r < r1 - r0; r++) {
            float t = (float)row_c(a + r * j->ld, j->cols, j->x16);
            y[r * j->incy] = j->alpha * t + (j->beta != 0 ? j->beta * y[r * j->incy] : 0.0f);
        }
        return;
    }
    int32_t *acc = j->acc + k * j->cols;
    const int8_t *x = j->x + r0 * j->incx;
#if RT_GEMV_HAVE_AVX2
    if (j->vnni)
        rt_gemv_i8i8_cols_vnni(a, j->ld, r1 - r0, j->cols, x, j->incx, acc);
    else if (j->avx2)
        cols_all_avx2(a, j->ld, r1 - r0, j->cols, x, j->incx, acc);
    else
#endif
        cols_c(a, j->ld, r1 - r0, j->cols, x, j->incx, acc);
}

/* Chunks of rows a split of the rows form takes (one thread's share is a
 * contiguous run of rows, so a helper preempted mid-chunk holds up an
 * eighth), as gemv_narrow.c's. */
#define I8X_ROW_CHUNKS 8

void rt_gemv_i8i8(int isa, const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                  int rows_form, const int8_t *x, int64_t incx, float alpha, float beta,
                  float *y, int64_t incy, void *scratch, rt_gemv_split *split)
{
    i8x_job j = {.avx2 = RT_GEMV_HAVE_AVX2 && isa >= RT_ISA_AVX2,
                 .vnni = RT_GEMV_HAVE_AVX2 && isa >= RT_ISA_AVX512 && rt_gemv_cpu_vnni(),
                 .rows_form = rows_form, .a = a, .x = x, .ld = ld, .rows = rows, .cols = cols,
                 .incx = incx, .incy = incy, .alpha = alpha, .beta = beta, .y = y,
                 .x16 = scratch, .x8 = scratch, .acc = scratch, .half = rows / 2,
                 .nchunk = rows_form ? I8X_ROW_CHUNKS : 2};
    if (rows_form && j.vnni) {
        for (int64_t c = 0; c < cols; c++)
            j.xsum += j.x8[c] = x[c * incx];
    } else if (rows_form) {
        for (int64_t c = 0; c < cols; c++)
            j.x16[c] = x[c * incx];
        if (j.nchunk > rows)
            j.nchunk = rows;
    } else {
        for (int64_t c = 0; c < 2 * cols; c++)
            j.acc[c] = 0;
    }
    double bytes = (double)rows * (double)cols;
    if (rt_gemv_split_wants(split, bytes) && j.nchunk >= 2)
        rt_gemv_split_product(split, i8x_chunk, &j, j.nchunk, bytes, NULL);
    else
        for (int64_t k = 0; k < j.nchunk; k++)
            i8x_chunk(&j, k);
    if (rows_form)
        return;
    for (int64_t c = 0; c < cols; c++) /* the halves' integer sums: exact in any order */
        y[c * incy] = alpha * (float)(j.acc[c] + j.acc[cols + c]) +
                      (beta != 0 ? beta * y[c * incy] : 0.0f);
}
