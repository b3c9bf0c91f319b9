/*
 * gemv_narrow_drive.h - the drivers of gemv_narrow.c's vector kernels:
 * whole products (rows, cols) and attention's heads (heads_rows,
 * heads_cols) cut into passes of 8, 4 and 1 rows, written once for every
 * instruction set.  Included at the end of gemv_narrow_avx2.c and
 * gemv_narrow_avx512.c, after each has defined its static kernels under
 * the same names (rows4_i8, rows1_i8, rows4_bf16, rows1_bf16, rows4_f32,
 * rows1_f32; cols8_i8, cols4_i8, cols1_i8, cols4_bf16, cols1_bf16,
 * cols4_f32, cols1_f32: the f32 ones for attention over an f32 KV cache,
 * whose heads interleave as an i8 cache's do) and NARROW_ISA(name) to
 * give the public names their suffix (name ## _avx2, name ## _avx512):
 * the two sets then cut every product the same way, and each output
 * element is summed over the same passes (rt_gemv.h documents the
 * functions).  The kernels take `pf`, the bytes ahead of what they read
 * to ask the cache for (0: none).
 */

/* Columns from which i8 rows are summed eight per pass: half the loads
 * and stores of the sums, and eight streams of at least 1 KiB each.  With
 * rows of 2 KiB or more, 1.12x (1024 x 2816) and 1.07x (1024 x 8192) the
 * weights/s of four from memory.  Rows of 1 KiB lost 1-7% while the
 * kernels prefetched into L1; with the next pass's rows (8 KiB ahead)
 * asked for into L2, 2816 x 1024 (the decode step's Hg * Wd) read 1.3x
 * (AVX-512) and 1.5x (AVX2) the weights/s of four from memory on one
 * thread, 0.96x-0.99x from cache; rows of 512 bytes lost (0.45x for
 * 4096 x 512, AVX-512), so they keep four (bench/gemv_narrow.c,
 * alternating rounds at load 2-6 on the 2-core EPYC, Zen 4). */
#define COLS8_MIN 1024

/* Bytes ahead along each row that the cols form's four-row passes ask
 * the cache for (as the heads kernels, HEADS_PREFETCH_BYTES): for rows of
 * 1 KiB, the same columns of the next pass's rows.  1.1-1.15x the
 * weights/s from memory for 1024 x 1024 and 2816 x 1024 i8 (four
 * alternating rounds at load 8 on the 2-core EPYC; 2 KiB ahead gained
 * less); the rows form gained nothing clear and asks for nothing, and
 * bf16 was not measured (nothing either).  Rows of 1 KiB now take the
 * eight-row passes (COLS8_MIN); shorter ones keep this, which into L2
 * read 2.1x the weights/s of L1 for 4096 x 512 (AVX2, Zen 4). */
#define COLS_PREFETCH_BYTES 4096

/* The eight-row passes ask for the same columns of the next pass's rows
 * (8 rows ahead) while those are at most this many bytes ahead.  Once the
 * matrices were on 2 MiB pages (rt_alloc), 1024 x 2816 i8 (the decode
 * step's X * Wg and X * Wu) read 1.38-1.58x the weights/s from memory on
 * one thread and 1.22-1.30x split (bench/gemv_narrow.c, 6 and 8
 * alternating rounds at load 2.5-3.2, 2816 x 1024 in the same rounds
 * 0.95-0.99x: unchanged code); on 4 KiB pages the same distance had shown
 * nothing clear.  Into L1 the LM head's rows of 8 KiB (64 KiB ahead)
 * gained nothing clear (0.90x one thread, 1.16x split), and the cap was
 * 32 KiB; both instruction sets now ask for L2 (gemv_narrow_avx2.c,
 * gemv_narrow_avx512.c), where 1024 x 8192 read 1.18x the i8 weights/s
 * from memory on one thread (AVX-512 and AVX2 alike) and 1.0x-1.05x
 * split (alternating rounds at load 2-6, Zen 4). */
#define COLS8_PREFETCH_MAX (256 << 10)

/* Row bytes from which the rows form takes one row per pass, not four:
 * the matrix is then read as one sequential stream, as the portable loop
 * reads it, where four rows of 512 bytes to 2.8 KiB were four streams.
 * From memory, one row per pass read 1.4x-3.2x the i8 weights/s of four
 * (2816 x 1024, 1024 x 2816, 8192 x 512; AVX2 and AVX-512 alike;
 * bench/gemv_narrow.c at load 2.5-3 on the 2-core EPYC, Zen 4); shorter
 * rows (a head of the KV cache: 128 elements) keep four, whose rows lie
 * together and share each vector of x. */
#define ROWS1_MIN_BYTES 512

/* The kernels' types (each instruction set defines them under one name). */
typedef void rows_fn(const char *row0, int64_t ld, int64_t cols, const float *x, float alpha,
                     float beta, float *y, int64_t incy, int64_t pf);
typedef void cols_fn(const char *row0, int64_t ld, int64_t cols, const float *x, int64_t incx,
                     float *acc, int64_t pf);

/* Bytes per element of a matrix stored as mdt: RT_I8, RT_BF16 or RT_F32. */
static size_t narrow_es(int32_t mdt)
{
    return mdt == RT_I8 ? 1 : mdt == RT_BF16 ? 2 : 4;
}

/* Rows the rows form takes in its pass at row r of `rows`: 4 or 1. */
static int64_t rows_pass(int64_t r, int64_t rows, int64_t cols, size_t es)
{
    return r + 4 <= rows && (size_t)cols * es < ROWS1_MIN_BYTES ? 4 : 1;
}

void NARROW_ISA(rt_gemv_narrow_rows)(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                     int64_t cols, const float *x, float alpha, float beta,
                                     float *y, int64_t incy)
{
    size_t es = narrow_es(mdt);
    int64_t r = 0;
    for (; rows_pass(r, rows, cols, es) == 4; r += 4) {
        const char *p = a + (size_t)(r * ld) * es;
        rows_fn *f = mdt == RT_I8 ? rows4_i8 : mdt == RT_BF16 ? rows4_bf16 : rows4_f32;
        f(p, ld, cols, x, alpha, beta, y + r * incy, incy, 0);
    }
    for (; r < rows; r++) {
        const char *p = a + (size_t)(r * ld) * es;
        rows_fn *f = mdt == RT_I8 ? rows1_i8 : mdt == RT_BF16 ? rows1_bf16 : rows1_f32;
        f(p, ld, cols, x, alpha, beta, y + r * incy, incy, 0);
    }
}

void NARROW_ISA(rt_gemv_narrow_cols)(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                     int64_t cols, const float *x, int64_t incx, float *acc)
{
    size_t es = narrow_es(mdt);
    int64_t r = 0;
    /* i8 rows of 1 KiB or more: eight per pass (each sum is still taken
     * row by row in order: the same bits as four) */
    int64_t pf8 = 8 * ld <= COLS8_PREFETCH_MAX ? 8 * ld : 0;
    for (; mdt == RT_I8 && cols >= COLS8_MIN && r + 8 <= rows; r += 8)
        cols8_i8(a + (size_t)(r * ld), ld, cols, x + r * incx, incx, acc, pf8);
    for (; r + 4 <= rows; r += 4) {
        const char *p = a + (size_t)(r * ld) * es;
        if (mdt == RT_I8)
            cols4_i8(p, ld, cols, x + r * incx, incx, acc, COLS_PREFETCH_BYTES);
        else
            (mdt == RT_BF16 ? cols4_bf16 : cols4_f32)(p, ld, cols, x + r * incx, incx, acc, 0);
    }
    for (; r < rows; r++) {
        const char *p = a + (size_t)(r * ld) * es;
        cols_fn *f = mdt == RT_I8 ? cols1_i8 : mdt == RT_BF16 ? cols1_bf16 : cols1_f32;
        f(p, ld, cols, x + r * incx, incx, acc, 0);
    }
}

/*
 * Attention's heads over a cache [S, K, H]: nheads matrices side by side
 * in each row (head k's columns start hstep elements after head k-1's),
 * each with its own x and y.  Four rows at a time across every head, so
 * memory is read once, in order, a few contiguous rows at a time (the
 * hardware prefetchers' best case), with no call per head and block:
 * one head at a time would sweep the rows K times, reading 1/K of each
 * row, and blocks of rows per head made a stream per head; the rows
 * HEADS_PREFETCH_BYTES ahead are asked for as they go.  Each head's
 * rows are summed in the same groups (four rows; eight for the cols form
 * from COLS8_MIN columns, the same bits as four) as
 * NARROW_ISA(rt_gemv_narrow_rows) and
 * NARROW_ISA(rt_gemv_narrow_cols) on that head alone, so the results are bit for
 * bit theirs.
 */
/* Bytes of rows ahead the heads kernels ask the cache for: whole rows,
 * at least this many.  The hardware prefetchers alone left the loops,
 * whose conversions fill the core's window, waiting on memory: with the
 * rows 8 KiB ahead asked for, 8 heads of a 2048 x 128 i8 cache read
 * 1.3-1.5x the weights/s from memory (bench/gemv_narrow.c, BATCH=8
 * LD=1024, alternating with and without, load average 7 on the 2-core
 * EPYC; 16 KiB ahead was no better). */
#define HEADS_PREFETCH_BYTES 8192

/* HEADS_PREFETCH_BYTES rounded up to whole rows of ld elements of es bytes. */
static int64_t heads_ahead(int64_t ld, size_t es)
{
    int64_t row = ld * (int64_t)es;
    return row > 0 ? (HEADS_PREFETCH_BYTES + row - 1) / row * row : 0;
}


void NARROW_ISA(rt_gemv_narrow_heads_rows)(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                           int64_t cols, int64_t nheads, int64_t hstep,
                                           const float *x, int64_t xstep, float alpha,
                                           float beta, float *y, int64_t ystep, int64_t incy)
{
    size_t es = narrow_es(mdt);
    int64_t pf = heads_ahead(ld, es);
    for (int64_t r = 0, n; r < rows; r += n) {
        n = rows_pass(r, rows, cols, es); /* as NARROW_ISA(rt_gemv_narrow_rows) */
        rows_fn *f = mdt == RT_I8     ? (n == 4 ? rows4_i8 : rows1_i8)
                     : mdt == RT_BF16 ? (n == 4 ? rows4_bf16 : rows1_bf16)
                                      : (n == 4 ? rows4_f32 : rows1_f32);
        for (int64_t k = 0; k < nheads; k++)
            f(a + (size_t)(r * ld + k * hstep) * es, ld, cols, x + k * xstep, alpha, beta,
              y + k * ystep + r * incy, incy, pf);
    }
}

void NARROW_ISA(rt_gemv_narrow_heads_cols)(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                           int64_t cols, int64_t nheads, int64_t hstep,
                                           const float *x, int64_t xstep, int64_t incx,
                                           float *acc, int64_t accstep)
{
    size_t es = narrow_es(mdt);
    int64_t pf = heads_ahead(ld, es);
    int eights = mdt == RT_I8 && cols >= COLS8_MIN; /* as NARROW_ISA(rt_gemv_narrow_cols) */
    for (int64_t r = 0, n; r < rows; r += n) {
        n = eights && r + 8 <= rows ? 8 : r + 4 <= rows ? 4 : 1;
        cols_fn *f = n == 8           ? cols8_i8
                     : mdt == RT_I8   ? (n == 4 ? cols4_i8 : cols1_i8)
                     : mdt == RT_BF16 ? (n == 4 ? cols4_bf16 : cols1_bf16)
                                      : (n == 4 ? cols4_f32 : cols1_f32);
        for (int64_t k = 0; k < nheads; k++)
            f(a + (size_t)(r * ld + k * hstep) * es, ld, cols, x + k * xstep + r * incx, incx,
              acc + k * accstep, pf);
    }
}
