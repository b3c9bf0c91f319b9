/*
 * gemv_narrow.c - a matrix-vector product whose matrix is stored as i8 or
 * bf16 (a cast folded into the einsum: a decode step's weights), converted
 * in registers as it is read.
 *
 * A decode step multiplies one row of activations by every weight matrix:
 * the time is the matrix's bytes over the memory bandwidth (seed 002), so
 * the matrix must be read once, at its own width, and nothing else
 * touched.  Converting blocks into scratch for BLAS (einsum_mixed.c)
 * writes and reads each element again as f32, and makes one BLAS call per
 * block: with a single device OpenBLAS runs each call on all cores, and the
 * wake-up of its threads per small call cost more than the product itself
 * (a 1024 x 8192 i8 LM head took 60 ms instead of 2 on a loaded 2-core
 * machine).  These loops do it in one pass on the calling thread, in f32:
 *   rows form   y[r] = sum_c A[r, c] x[c]   (the matrix's rows contracted:
 *               a dot product per row, one partial sum per vector lane:
 *               `omp simd reduction`, built with -fopenmp-simd, which
 *               vectorises the loop and needs no OpenMP runtime)
 *   cols form   y[c] = sum_r x[r] A[r, c]   (four rows at a time added into
 *               y, which stays in L1 or L2: cols floats)
 * The loops below are plain C that the compiler vectorises; an AVX2 clone
 * of them is chosen at load time where the CPU has it (target_clones).
 * They convert 6e9 to 8e9 i8 weights/s from cache on the 2-core EPYC,
 * so where the CPU reports AVX2 and FMA (asked at run time,
 * __builtin_cpu_supports) gemv_narrow_avx2.c's loops run instead: eight
 * elements converted per instruction, independent accumulators (2.5x
 * the weights/s from cache, 1.4x from memory: docs/performance.md,
 * section 10); and where it also reports AVX-512 F, BW and VL,
 * gemv_narrow_avx512.c's: sixteen per instruction, masked tails, the
 * same passes (gemv_narrow_drive.h); and where it also reports
 * AVX512-VNNI, the i8 sums of rows of 1024 or more columns run as W8A16
 * (gemv_w8a16_vnni.c: x rounded to i16, exact i32 sums by vpdpwssd).
 * EINC_GEMV_ISA caps the choice
 * (rt_gemv_narrow_isa_best).
 * The portable loops stay for other CPUs and compilers, and for tests.
 *
 * rt_einsum's batched products (attention's heads over an i8 KV cache, or
 * an f32 one, whose loads then convert nothing: a cache [S, K, H] is K
 * matrices [S x H] whose rows interleave, K * H elements apart) come here
 * all at once (rt_gemv_narrow_batched): one
 * head at a time would sweep the whole cache K times, reading 1/K of each
 * line fetched, while a block of rows at a time across all heads reads
 * it once in order, with the next blocks prefetched (the prefetchers do
 * not follow K interleaved streams well; the prefetch alone took the 8
 * heads of a 2048 x 128 cache from 3.1e9 to 5.2e9 weights/s here).  Where
 * the heads lie side by side in each row (heads_of) and the AVX2 or
 * AVX-512 loops run, gemv_narrow_avx2.c's heads kernels take four rows across every
 * head per step instead (run_heads): contiguous rows, no call per head.
 * The sums are taken in another order than BLAS's: results differ by f32
 * rounding.
 *
 * A large product may be shared with the device's helper thread
 * (rt_gemv.h, gemv_split.c): run_part computes any range of batches, rows
 * and columns, and run_chunk cuts the whole into ranges that start on a
 * multiple of 16 rows or columns (or a batch entry), where the loops'
 * 4-row, 8- and 16-column steps already fall, so each output element is
 * computed by one thread exactly as without the split.  The sum-of-rows
 * form always sums up to eight runs of its rows apart (cols_parts), so
 * that it is cut there: each chunk is one contiguous run of the matrix,
 * taken in turn by either thread.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* Rows of each batch's matrix per step when batches interleave: 16 rows
 * of an attention cache's [S, K, H] are 16 * K * H elements in one
 * sweep, a few KiB, so all heads' reads of them stay in L1. */
#define GEMV_BATCH_ROWS 16
/* How many blocks ahead prefetch_rows asks for, and how (a hint only:
 * nothing where the compiler has no way to give it). */
#define GEMV_PREFETCH_BLOCKS 2
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

/* Element i of a bf16 or i8 array as f32 (exact). */
static inline float load_i8(const void *p, int64_t i)
{
    return (float)((const int8_t *)p)[i];
}

static inline float load_bf16(const void *p, int64_t i)
{
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float load_f32(const void *p, int64_t i)
{
    return ((const float *)p)[i];
}

/* rows form: y[r * incy] = alpha * sum_c A[r, c] x[c] + beta * y[r * incy]
 * (beta 0: y not read), x contiguous. */
#define DEFINE_ROWS(NAME, LOAD, ES)                                                              \
    VECTOR_CLONES static void NAME(const char *a, int64_t ld, int64_t rows, int64_t cols,       \
                                   const float *x, float alpha, float beta, float *y,            \
                                   int64_t incy)                                                 \
    {                                                                                            \
        for (int64_t r = 0; r < rows; r++) {                                                     \
            const char *row = a + (size_t)(r * ld) * ES;                                         \
            float t = 0;                                                                         \
            _Pragma("omp simd reduction(+ : t)")                                                 \
            for (int64_t c = 0; c < cols; c++)                                                   \
                t += LOAD(row, c) * x[c];                                                        \
            y[r * incy] = alpha * t + (beta != 0 ? beta * y[r * incy] : 0.0f);                   \
        }                                                                                        \
    }

/* cols form: acc[c] += sum_r x[r * incx] A[r, c], for c < cols. */
#define DEFINE_COLS(NAME, LOAD, ES)                                                              \
    VECTOR_CLONES static void NAME(const char *a, int64_t ld, int64_t rows, int64_t cols,       \
                                   const float *x, int64_t incx, float *acc)                     \
    {                                                                                            \
        int64_t r = 0;                                                                           \
        for (; r + 4 <= rows; r += 4) {                                                          \
            const char *r0 = a + (size_t)(r * ld) * ES, *r1 = r0 + (size_t)ld * ES;              \
            const char *r2 = r1 + (size_t)ld * ES, *r3 = r2 + (size_t)ld * ES;                   \
            float x0 = x[r * incx], x1 = x[(r + 1) * incx];                                      \
            float x2 = x[(r + 2) * incx], x3 = x[(r + 3) * incx];                                \
            for (int64_t c = 0; c < cols; c++)                                                   \
                acc[c] += x0 * LOAD(r0, c) + x1 * LOAD(r1, c) + x2 * LOAD(r2, c) +              \
                          x3 * LOAD(r3, c);                                                      \
        }                                                                                        \
        for (; r < rows; r++) {                                                                  \
            const char *row = a + (size_t)(r * ld) * ES;                                         \
            float xr = x[r * incx];                                                              \
            for (int64_t c = 0; c < cols; c++)                                                   \
                acc[c] += xr * LOAD(row, c);                                                     \
        }                                                                                        \
    }

DEFINE_ROWS(rows_i8, load_i8, 1)
DEFINE_ROWS(rows_bf16, load_bf16, 2)
DEFINE_COLS(cols_i8, load_i8, 1)
DEFINE_COLS(cols_bf16, load_bf16, 2)
DEFINE_ROWS(rows_f32, load_f32, 4)
DEFINE_COLS(cols_f32, load_f32, 4)

/* The product g as a narrow matrix times an f32 vector, or 0 when g is
 * not one: f32 arithmetic, one row or one column, the matrix operand i8
 * or bf16 (or, when `batched`, f32: a batch of products such as
 * attention's heads over an f32 cache, which one BLAS call per head would
 * sweep the whole cache for) and the vector f32.  Fills the layout the
 * loops take. */
typedef struct narrow_mv {
    const char *mat;
    int32_t mdt;
    int64_t ld, rows, cols; /* the matrix as stored */
    int rows_form;          /* y over the rows (a dot per row), else over the columns */
    int mat_is_b;           /* the matrix is g's b (the vector its a), else g's a */
    const float *x;         /* NULL when the vector is i8 (x8) */
    const int8_t *x8;       /* the i8 vector of an i8 x i8 product (gemv_i8i8.c) */
    int64_t incx, incy;
    int64_t parts; /* cols form: its rows summed apart in this many runs
                      (part_start); rows form: 1 */
    int64_t per;  /* scratch floats per batch entry */
    int w8a16;    /* the cols form of an i8 matrix of RT_GEMV_W8A16_MIN_COLS or more
                     columns at RT_ISA_AVX512_VNNI: rt_gemv_w8a16_cols_vnni (decided on
                     the whole product, so every chunk of a split takes the same loop) */
} narrow_mv;

/* Rows or columns a split chunk starts on: a multiple of every kernel's
 * step (4 rows; 8 and 16 columns). */
#define SPLIT_UNIT 16

/* Runs of rows the cols form sums apart, at most; a run of rows is the
 * split's chunk of that form (SPLIT_ROW_CHUNKS, the rows form's). */
#define COLS_PARTS 8

/*
 * How many runs of rows the cols form sums apart (cols_parts) and where
 * run k starts (part_start; run `parts` starts at `rows`).  Each run is
 * summed into its own f32 vector and the vectors are added in order at the
 * end, whether one thread runs the product or two do: a product shared
 * with the helper thread is cut into these runs, each a contiguous stretch
 * of the matrix (the prefetchers' best case, where halves of every row
 * were two short streams per row: 1.08x one thread from memory), taken in
 * turn by either thread, and the sums are taken in the same order as on
 * one thread, so the bits are the same.  Up to COLS_PARTS runs of at
 * least SPLIT_UNIT rows, starting on multiples of SPLIT_UNIT; one run
 * below two units.  (Two halves, one per thread, were the cut before: a
 * helper preempted or slow to wake then held up half the product, and
 * attention's P . Vc over an i8 cache split ran 0.14x to 0.85x one thread
 * at load averages of 4.6 to 8, against 0.85x to 0.96x in runs; at
 * load 1.1, 1.26x.)
 */
static int64_t cols_parts(int64_t rows)
{
    int64_t units = rows / SPLIT_UNIT;
    return units < 2 ? 1 : units < COLS_PARTS ? units : COLS_PARTS;
}

static int64_t part_start(const narrow_mv *v, int64_t k)
{
    if (k >= v->parts)
        return v->rows;
    return k * v->rows / v->parts / SPLIT_UNIT * SPLIT_UNIT;
}

static int narrow_mv_of(const rt_gemm *g, narrow_mv *v, int batched)
{
    if (g->dtype != RT_F32 || (g->M != 1 && g->N != 1))
        return 0;
    /* as gemv (einsum_mixed.c): the matrix is b when M = 1, a when N = 1;
     * when both are 1, the narrow one */
    int m1 = g->N != 1 || (g->M == 1 && g->bdt != RT_F32);
    int32_t mdt = m1 ? g->bdt : g->adt, xdt = m1 ? g->adt : g->bdt;
    int i8x = mdt == RT_I8 && xdt == RT_I8; /* both i8: summed in i32 */
    if ((mdt != RT_I8 && mdt != RT_BF16 && !(batched && mdt == RT_F32)) ||
        (xdt != RT_F32 && !i8x))
        return 0;
    v->mat = m1 ? g->b : g->a;
    v->mdt = mdt;
    v->ld = m1 ? g->ldb : g->lda;
    v->rows = m1 ? (g->tb ? g->N : g->K) : (g->ta ? g->K : g->M);
    v->cols = m1 ? (g->tb ? g->K : g->N) : (g->ta ? g->M : g->K);
    v->rows_form = m1 ? g->tb : !g->ta;
    v->mat_is_b = m1;
    v->x = i8x ? NULL : m1 ? g->a : g->b;
    v->x8 = i8x ? m1 ? g->a : g->b : NULL;
    v->incx = m1 ? (g->ta ? g->lda : 1) : (g->tb ? 1 : g->ldb);
    v->incy = m1 ? (g->tc ? g->ldc : 1) : (g->tc ? 1 : g->ldc);
    v->parts = v->rows_form ? 1 : cols_parts(v->rows);
    v->per = v->parts * v->cols;
    v->w8a16 = 0; /* rt_gemv_narrow_batched decides, once it knows the isa */
    if (i8x) /* exact in i32 only below RT_GEMV_I8I8_MAX_K terms */
        v->per = rt_gemv_i8i8_scratch(v->rows_form, v->cols);
    return !i8x || (v->rows_form ? v->cols : v->rows) < RT_GEMV_I8I8_MAX_K;
}

int64_t rt_gemv_narrow_scratch(const rt_gemm *g)
{
    narrow_mv v;
    if (!narrow_mv_of(g, &v, 0))
        return -1;
    return v.per; /* rows form: x made contiguous; cols form: each run's sums */
}

int64_t rt_gemv_narrow_batch_scratch(const rt_gemm *g)
{
    narrow_mv v;
    if (!narrow_mv_of(g, &v, 1))
        return -1;
    return v.per;
}

/* The set EINC_GEMV_ISA caps the choice at (RT_ISA_AVX512_VNNI unset or
 * empty); any other value ends the job, as a bad EINC_GEMV_THREADS does,
 * rather than silently measuring another set than the one asked for. */
static int isa_cap(void)
{
    const char *e = getenv("EINC_GEMV_ISA");
    if (!e || !e[0] || strcmp(e, "avx512vnni") == 0)
        return RT_ISA_AVX512_VNNI;
    if (strcmp(e, "avx512") == 0)
        return RT_ISA_AVX512;
    if (strcmp(e, "avx2") == 0)
        return RT_ISA_AVX2;
    if (strcmp(e, "portable") == 0)
        return RT_ISA_PORTABLE;
    rt_fatal(NULL, "EINC_GEMV_ISA must be portable, avx2, avx512 or avx512vnni (the widest vector set "
             "the narrow products may use), not '%s'", e);
}

/* The widest set the running CPU has, uncapped. */
static int cpu_isa_best(void)
{
    int best = RT_ISA_PORTABLE;
#if RT_GEMV_HAVE_AVX2
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best = RT_ISA_AVX2;
    if (best == RT_ISA_AVX2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        best = RT_ISA_AVX512;
    if (best == RT_ISA_AVX512 && __builtin_cpu_supports("avx512vnni"))
        best = RT_ISA_AVX512_VNNI;
#endif
    return best;
}

int rt_gemv_narrow_isa_best(void)
{
    int best = cpu_isa_best(), cap = isa_cap();
    return best < cap ? best : cap;
}

int rt_gemv_cpu_vnni(void)
{
#if RT_GEMV_HAVE_AVX2
    return __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

int rt_gemv_narrow(const rt_gemm *g, void *scratch)
{
    return rt_gemv_narrow_isa(g, scratch, rt_gemv_narrow_isa_best());
}

int rt_gemv_narrow_isa(const rt_gemm *g, void *scratch, int isa)
{
    static const int64_t zero = 0;
    return rt_gemv_narrow_batched(g, 1, &zero, &zero, &zero, scratch, isa);
}

/* Rows [r0, r1) of v's matrix `mat` times x: into y (rows form) or added
 * into acc (cols form). */
static void run_rows(const narrow_mv *v, int isa, const char *mat, int64_t r0, int64_t r1,
                     const float *x, float alpha, float beta, float *y, float *acc)
{
    const char *a = mat + (size_t)(r0 * v->ld) * rt_dtype_size(v->mdt);
    int64_t n = r1 - r0;
    if (RT_GEMV_HAVE_AVX2 && isa >= RT_ISA_AVX2) {
        int wide = isa >= RT_ISA_AVX512;
        if (v->w8a16)
            rt_gemv_w8a16_cols_vnni((const int8_t *)a, v->ld, n, v->cols, x + r0 * v->incx,
                                    v->incx, acc);
        else if (v->rows_form)
            (wide ? rt_gemv_narrow_rows_avx512 : rt_gemv_narrow_rows_avx2)(
                v->mdt, a, v->ld, n, v->cols, x, alpha, beta, y + r0 * v->incy, v->incy);
        else
            (wide ? rt_gemv_narrow_cols_avx512 : rt_gemv_narrow_cols_avx2)(
                v->mdt, a, v->ld, n, v->cols, x + r0 * v->incx, v->incx, acc);
    } else if (v->rows_form) {
        (v->mdt == RT_I8 ? rows_i8 : v->mdt == RT_BF16 ? rows_bf16 : rows_f32)(
            a, v->ld, n, v->cols, x, alpha, beta, y + r0 * v->incy, v->incy);
    } else {
        (v->mdt == RT_I8 ? cols_i8 : v->mdt == RT_BF16 ? cols_bf16 : cols_f32)(
            a, v->ld, n, v->cols, x + r0 * v->incx, v->incx, acc);
    }
}

/* Asks the cache for rows [r0, r1) (clipped) of every batch's matrix:
 * the hardware prefetchers follow one stream per batch poorly when the
 * batches interleave, so a later block is fetched in order ahead of use. */
static void prefetch_rows(const narrow_mv *v, int64_t nbatch, const int64_t *om, int64_t r0,
                          int64_t r1)
{
    size_t es = rt_dtype_size(v->mdt);
    for (int64_t r = r0; r < r1 && r < v->rows; r++)
        for (int64_t i = 0; i < nbatch; i++) {
            const char *p = v->mat + (size_t)(om[i] + r * v->ld) * es;
            for (size_t b = 0; b < (size_t)v->cols * es; b += 64)
                PREFETCH(p + b);
        }
}

/* One share of a batched product: batches [i0, i1), rows [r0, r1) and
 * columns [c0, c1) of each matrix, the block of rows swept across
 * batches at a time `block` (the whole product's).  The cols form's sums
 * stay in tmp (finish_cols writes y when every share is done). */
typedef struct gemv_part {
    const narrow_mv *v;
    const rt_gemm *g;
    const int64_t *om, *ox, *oc;
    float *tmp; /* per batch i: v->per floats at tmp + i * v->per */
    int isa;
    int64_t block;
    int heads; /* 1: the batches are heads of one row (heads_of): run_heads */
    int64_t i0, i1, r0, r1, c0, c1;
} gemv_part;

/* Whether o[0 .. n) steps by one amount (into *step). */
static int evenly_spaced(const int64_t *o, int64_t n, int64_t *step)
{
    *step = n > 1 ? o[1] - o[0] : 0;
    for (int64_t i = 2; i < n; i++)
        if (o[i] - o[i - 1] != *step)
            return 0;
    return 1;
}

/*
 * Whether the nbatch matrices at om are heads of one row (attention over
 * a cache [S, K, H]: head k's columns follow head k-1's in every row),
 * with x and y evenly spaced too, so that the vector heads kernels
 * (gemv_narrow_avx2.c) read every row once, in order, for all heads.
 * Not for W8A16 sums of rows (v->w8a16): those go a block of rows per
 * batch entry through the loop a single product takes (blocks of
 * GEMV_BATCH_ROWS, a multiple of its eight-row passes: the same bits).
 */
static int heads_of(const narrow_mv *v, int64_t nbatch, const int64_t *om, const int64_t *ox,
                    const int64_t *oc, int isa)
{
    int64_t hm, hx, hc;
    if (!RT_GEMV_HAVE_AVX2 || isa < RT_ISA_AVX2 || nbatch < 2 || v->x8 || v->w8a16 ||
        !evenly_spaced(om, nbatch, &hm) || !evenly_spaced(ox, nbatch, &hx) ||
        !evenly_spaced(oc, nbatch, &hc))
        return 0;
    return hm >= v->cols && (nbatch - 1) * hm + v->cols <= v->ld;
}

/* Rows [lo, hi) of batches [p->i0, p->i1), heads of one row (p->heads),
 * all in one call of the heads kernels; the cols form's sums of run
 * `part` of its rows (part_start) into tmp.  Every column: plan_split cuts
 * by columns only a product of one batch entry. */
static void run_heads(const gemv_part *p, int64_t part, int64_t lo, int64_t hi)
{
    const narrow_mv *v = p->v;
    int64_t i0 = p->i0, nb = p->i1 - p->i0;
    const char *a = v->mat + (size_t)(p->om[i0] + lo * v->ld) * rt_dtype_size(v->mdt);
    int64_t hstep = p->om[1] - p->om[0], xstep = p->ox[1] - p->ox[0];
    float *t = p->tmp + i0 * v->per;
    if (!RT_GEMV_HAVE_AVX2)
        return; /* heads_of never set p->heads */
    int wide = p->isa >= RT_ISA_AVX512;
    if (v->rows_form) {
        int copied = v->incx != 1; /* x made contiguous in tmp */
        (wide ? rt_gemv_narrow_heads_rows_avx512 : rt_gemv_narrow_heads_rows_avx2)(
            v->mdt, a, v->ld, hi - lo, v->cols, nb, hstep, copied ? t : v->x + p->ox[i0],
            copied ? v->per : xstep, (float)p->g->alpha, (float)p->g->beta,
            (float *)p->g->c + p->oc[i0] + lo * v->incy, p->oc[1] - p->oc[0], v->incy);
    } else {
        (wide ? rt_gemv_narrow_heads_cols_avx512 : rt_gemv_narrow_heads_cols_avx2)(
            v->mdt, a, v->ld, hi - lo, v->cols, nb, hstep, v->x + p->ox[i0] + lo * v->incx,
            xstep, v->incx, t + part * v->cols, v->per);
    }
}

static void run_part(const gemv_part *p)
{
    const narrow_mv *v = p->v;
    size_t mes = rt_dtype_size(v->mdt);
    float alpha = (float)p->g->alpha, beta = (float)p->g->beta;
    narrow_mv w = *v; /* the column range: a narrower matrix */
    w.mat = v->mat + (size_t)p->c0 * mes;
    w.cols = p->c1 - p->c0;
    int64_t nb = p->i1 - p->i0;
    for (int64_t part = 0; part < v->parts; part++) { /* the cols form's runs apart */
        int64_t lo = part_start(v, part), hi = part_start(v, part + 1);
        lo = lo > p->r0 ? lo : p->r0;
        hi = hi < p->r1 ? hi : p->r1;
        if (p->heads) {
            if (lo < hi)
                run_heads(p, part, lo, hi);
            continue;
        }
        for (int64_t r0 = lo; r0 < hi; r0 += p->block) {
            int64_t r1 = hi - r0 < p->block ? hi : r0 + p->block;
            if (nb > 1)
                prefetch_rows(&w, nb, p->om + p->i0, r0 + GEMV_PREFETCH_BLOCKS * p->block,
                              r1 + GEMV_PREFETCH_BLOCKS * p->block);
            for (int64_t i = p->i0; i < p->i1; i++) {
                float *t = p->tmp + i * v->per;
                const float *x = v->rows_form && v->incx != 1 ? t : v->x + p->ox[i];
                run_rows(&w, p->isa, w.mat + (size_t)p->om[i] * mes, r0, r1, x, alpha, beta,
                         (float *)p->g->c + p->oc[i], t + part * v->cols + p->c0);
            }
        }
    }
}

/* The cols form's results: y = alpha (the runs' sums added in order) + beta y. */
static void finish_cols(const narrow_mv *v, const rt_gemm *g, int64_t nbatch,
                        const int64_t *oc, const float *tmp)
{
    float alpha = (float)g->alpha, beta = (float)g->beta;
    for (int64_t i = 0; i < nbatch; i++) {
        float *y = (float *)g->c + oc[i];
        const float *t = tmp + i * v->per;
        for (int64_t c = 0; c < v->cols; c++) {
            float s = t[c];
            for (int64_t k = 1; k < v->parts; k++)
                s += t[k * v->cols + c];
            y[c * v->incy] = alpha * s + (beta != 0 ? beta * y[c * v->incy] : 0.0f);
        }
    }
}

/* How a split product is cut: chunk k of n covers units [k u / n,
 * (k + 1) u / n) of UNIT rows, batch entries or columns; or (parts) the
 * cols form's run k of rows (cols_parts). */
enum { SPLIT_ROWS, SPLIT_PARTS, SPLIT_BATCHES, SPLIT_COLS };
/* Chunks of rows: each a contiguous run of the matrix, so eight (a helper
 * preempted mid-chunk holds up an eighth).  Columns and batch entries
 * (heads): halves, each a contiguous half of every row; a quarter of a
 * row of 1024 i8 columns is 256 bytes, read too short for the
 * prefetchers (0.6x the single thread's weights/s, bench/gemv_narrow.c). */
#define SPLIT_ROW_CHUNKS 8
#define SPLIT_OTHER_CHUNKS 2

typedef struct gemv_split_job {
    gemv_part whole;
    int how;
    int64_t units, n;
    double bytes; /* the matrix bytes read */
} gemv_split_job;

static void run_chunk(void *arg, int64_t k)
{
    const gemv_split_job *j = arg;
    gemv_part p = j->whole;
    int64_t u0 = k * j->units / j->n, u1 = (k + 1) * j->units / j->n;
    if (j->how == SPLIT_BATCHES) {
        p.i0 = u0, p.i1 = u1;
    } else if (j->how == SPLIT_PARTS) {
        p.r0 = part_start(p.v, k), p.r1 = part_start(p.v, k + 1);
    } else {
        int64_t end = j->how == SPLIT_ROWS ? p.r1 : p.c1; /* the last chunk takes the tail */
        int64_t lo = u0 * SPLIT_UNIT, hi = k + 1 == j->n ? end : u1 * SPLIT_UNIT;
        if (j->how == SPLIT_ROWS)
            p.r0 = lo, p.r1 = hi;
        else
            p.c0 = lo, p.c1 = hi;
    }
    run_part(&p);
}

/* The whole product on one thread, in its own order (rt_gemv_split_product). */
static void run_whole(void *arg)
{
    run_part(&((const gemv_split_job *)arg)->whole);
}

/* Whether to split `whole` with the helper (rt_gemv_split_wants), and how
 * (into j). */
static int plan_split(const rt_gemv_split *s, const gemv_part *whole, int64_t nbatch,
                      gemv_split_job *j)
{
    const narrow_mv *v = whole->v;
    double bytes = (double)nbatch * (double)v->rows * (double)v->cols *
                   (double)rt_dtype_size(v->mdt);
    if (!rt_gemv_split_wants(s, bytes))
        return 0;
    j->whole = *whole;
    j->bytes = bytes;
    if (v->rows_form) { /* rows: each thread's dots are whole rows */
        j->how = SPLIT_ROWS, j->units = v->rows / SPLIT_UNIT;
    } else if (v->parts > 1) { /* sums over rows: a run of the rows each */
        j->how = SPLIT_PARTS, j->units = v->parts;
    } else if (nbatch > 1) { /* ... or whole batch entries */
        j->how = SPLIT_BATCHES, j->units = nbatch;
    } else { /* ... or ranges of columns, every row of each */
        j->how = SPLIT_COLS, j->units = v->cols / SPLIT_UNIT;
    }
    int64_t most = j->how == SPLIT_PARTS  ? j->units /* chunk k: run k */
                   : j->how == SPLIT_ROWS ? SPLIT_ROW_CHUNKS
                                          : SPLIT_OTHER_CHUNKS;
    j->n = j->units < most ? j->units : most;
    return j->n >= 2;
}

int rt_gemv_narrow_batched(const rt_gemm *g, int64_t nbatch, const int64_t *oa,
                           const int64_t *ob, const int64_t *oc, void *scratch, int isa)
{
    narrow_mv v;
    if (!narrow_mv_of(g, &v, nbatch > 1))
        return 0;
    int cpu = cpu_isa_best(); /* the caller chose isa, capped or not */
    if (isa > cpu)
        isa = cpu; /* never an instruction the CPU lacks */
    v.w8a16 = !v.rows_form && !v.x8 && v.mdt == RT_I8 && isa == RT_ISA_AVX512_VNNI &&
              v.cols >= RT_GEMV_W8A16_MIN_COLS;
    float *tmp = scratch;
    if (v.x8) { /* i8 x i8: one batch entry at a time, each split alone */
        for (int64_t i = 0; i < nbatch; i++)
            rt_gemv_i8i8(isa, (const int8_t *)v.mat + (v.mat_is_b ? ob : oa)[i], v.ld, v.rows,
                         v.cols, v.rows_form, v.x8 + (v.mat_is_b ? oa : ob)[i], v.incx,
                         (float)g->alpha, (float)g->beta, (float *)g->c + oc[i], v.incy,
                         tmp + i * v.per, g->split);
        return 1;
    }
    gemv_part whole = {.v = &v, .g = g, .om = v.mat_is_b ? ob : oa, .ox = v.mat_is_b ? oa : ob,
                       .oc = oc, .tmp = tmp, .isa = isa, .i0 = 0, .i1 = nbatch, .r0 = 0,
                       .r1 = v.rows, .c0 = 0, .c1 = v.cols};
    /* Batch i's vector: contiguous in x (rows form), its sums zeroed (cols) */
    for (int64_t i = 0; i < nbatch; i++) {
        float *t = tmp + i * v.per;
        if (!v.rows_form)
            memset(t, 0, (size_t)v.per * sizeof *t);
        else if (v.incx != 1)
            for (int64_t c = 0; c < v.cols; c++)
                t[c] = v.x[whole.ox[i] + c * v.incx];
    }
    /* Batches that interleave in memory (attention's heads: a cache
     * [S, K, H] read per head K as [S x H] with rows K*H apart) are read a
     * block of rows at a time across all of them, so memory is swept once
     * in order, not once per batch through every line. */
    whole.block = nbatch > 1 ? GEMV_BATCH_ROWS : v.rows;
    whole.heads = heads_of(&v, nbatch, whole.om, whole.ox, oc, isa);
    gemv_split_job j;
    if (!plan_split(g->split, &whole, nbatch, &j))
        run_part(&whole);
    else
        rt_gemv_split_product(g->split, run_chunk, &j, j.n, j.bytes, run_whole);
    if (!v.rows_form)
        finish_cols(&v, g, nbatch, oc, tmp);
    return 1;
}
