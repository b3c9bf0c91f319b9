/*
 * rt_gemv.h - the narrow matrix-vector products (gemv_narrow.c and its
 * AVX2, AVX-512 and VNNI loops) and a device's helper thread for them
 * (gemv_split.c).
 *
 * A decode step's products are memory-bound, and one core draws only part
 * of the memory bandwidth (5.6-12.5 GB/s on the 2-core EPYC:
 * docs/performance-history.md, section 10), so a device whose process has
 * a core no device runs on splits a large product with one helper thread
 * it owns.  The work is cut into chunks on boundaries the kernels' own
 * steps already fall on (16 rows, 16 columns, or whole batch entries), and
 * each output element is computed by one thread in the single-thread
 * path's order: the results are bit for bit those of one thread.
 */
#ifndef EINC_RT_GEMV_H
#define EINC_RT_GEMV_H

#include <stdint.h>

/* Matrix bytes (over all batch entries) from which a product is split:
 * at 256 KiB the helper's wake-up cost what it saved, at 512 KiB the
 * split read 1.6x (rows form) and 1.1x (cols form) the weights/s of one
 * thread (bench/gemv_narrow.c, i8 [512 x 1024], 2-core AMD EPYC). */
#define RT_GEMV_SPLIT_BYTES ((int64_t)512 << 10)

typedef struct rt_gemv_worker rt_gemv_worker; /* gemv_split.c */

/* Size classes the adaptive choice keeps apart: a product of b matrix
 * bytes is in class floor(log2(b / min_bytes)), the last one taking all
 * larger.  A decode step's products differ in size and shape (1 MiB
 * projections, 2-3 MiB attention and MLP products, an 8 MiB LM head) and
 * the split gains differently on each, so each class compares the two
 * modes on its own products. */
#define RT_GEMV_SPLIT_CLASSES 8

/* One size class's measurements (rt_gemv_split_choose). */
typedef struct rt_gemv_split_class {
    int64_t products;     /* products of this class seen */
    int64_t next_try;     /* the product at which the slower mode is tried again */
    int64_t try_every;    /* products between those tries (64 .. 1024); 0: none yet */
    int trying;           /* products of the current try still to run; 0: none */
    int try_mode;         /* the mode being tried (1: split) */
    double try_s, try_bytes; /* the current try's seconds and matrix bytes so far */
    double s_per_byte[2]; /* seconds per matrix byte: [0] one thread, [1] split;
                             0: not measured yet */
    int64_t split_products; /* products of this class split (EINC_GEMV_TRACE) */
    int64_t tries, cut;     /* tries started, and those ended early (ABORT_RATIO) */
} rt_gemv_split_class;

/*
 * A device's split policy and helper.  All zero: never split (what a
 * device without a plan, the --check reference or a unit test's bare
 * rt_gemm, gets).  Used by the device's own thread only.
 */
typedef struct rt_gemv_split {
    int threads;            /* 2: products of >= min_bytes split with the helper; else 1 */
    int cpu;                /* CPU the helper is pinned to, or -1: where the kernel puts it */
    int64_t min_bytes;      /* matrix bytes from which a product is split */
    int ncpus;              /* CPUs the process may use (the plan's; 0: unknown) */
    int adaptive;           /* 1: split only while it is the faster (rt_gemv_split_choose) */
    int cur;                /* the size class of the product being run (choose to note) */
    rt_gemv_split_class cls[RT_GEMV_SPLIT_CLASSES]; /* adaptive: per size class */
    rt_gemv_worker *worker; /* the helper, started at the first split; owned */
    int trace;              /* EINC_GEMV_TRACE=1: the plan, and at release each class's
                               choice and the helper's wake-ups, on stderr */
    int64_t device;         /* the device's index (for the trace) */
} rt_gemv_split;

/*
 * Fills s for device `index` (0-based) of the `ndev` devices that run in
 * this process (threads backend: the mesh; MPI: the ranks on this node),
 * from the calling thread's CPU set (call it before device threads are
 * pinned): the device gets a helper when ndev + index < the CPUs the
 * process may use less the threads of other processes runnable at that
 * moment (/proc/loadavg's running count less this process's own runnable
 * threads: rt_gemv_split_others; the fewest of up to 5 looks 200 us
 * apart, stopping at one that leaves a CPU), pinned to the
 * (ndev + index)-th of them when `pin` (device i is pinned to the i-th:
 * --bind-to core).  EINC_GEMV_THREADS=1
 * in the environment turns splitting off, =2 forces it (a helper even
 * without a spare core, pinned to the (ndev + index)-th CPU mod their
 * number when that is not the device's), =adaptive gives the helper
 * whatever the load, adaptive; any other value is an error (einrt:
 * error, exit 1).  The plan is adaptive (rt_gemv_split_choose) unless
 * forced.  EINC_GEMV_TRACE set (not "0") prints the plan on stderr and
 * s->trace is set (rt_gemv_split_report at release).
 */
void rt_gemv_split_plan(rt_gemv_split *s, int64_t ndev, int64_t index, int pin);

/* How long the helper polls for its next job after one before it sleeps
 * (rt_gemv_split_linger): always RT_GEMV_SPLIT_PAUSE_S, then up to
 * RT_GEMV_SPLIT_SPIN_S while no thread waits for a CPU.  A decode step's
 * split products are at most about a millisecond apart (products run on
 * one thread, norms and the rotary tables between them); with 100 us of
 * polling, 43 of 97 split products of the int8 decode step found the
 * helper asleep (EINC_GEMV_TRACE) and paid a futex wake-up that the device
 * thread does not wait for, so they ran on one thread and the adaptive
 * choice measured the split no faster.  Polling 2 ms regardless (yielding
 * the CPU after 100 us) made the step 1.3x slower than one thread at a load
 * average of 8.5 on 2 cores, with EINC_GEMV_THREADS=adaptive. */
#define RT_GEMV_SPLIT_PAUSE_S 100e-6
#define RT_GEMV_SPLIT_SPIN_S 2e-3

/* Whether the helper keeps polling `elapsed` seconds after its last job,
 * with `running` threads runnable on the machine (rt_gemv_split_running;
 * its own included; 0: unknown) and `ncpus` CPUs for the process (0:
 * unknown): for RT_GEMV_SPLIT_PAUSE_S always, and up to
 * RT_GEMV_SPLIT_SPIN_S while running <= ncpus (its polling takes no CPU
 * that another thread waits for, as OpenMP runtimes shorten their spin
 * when oversubscribed). */
int rt_gemv_split_linger(double elapsed, int running, int ncpus);

/* The machine's runnable threads now, /proc/loadavg's running count (0
 * where unreadable; about 10 us). */
int rt_gemv_split_running(void);

/* gemv_split_plan.c: the threads of other processes among `running`
 * runnable threads (/proc/loadavg) of which `own` (at least the caller)
 * are this process's: its device threads, and any BLAS threads spinning
 * after a call, which are no other process's load. */
int rt_gemv_split_others(int running, int own);

/* Prints s's EINC_GEMV_TRACE report on stderr: the helper's `jobs`, how
 * many found it asleep (`wakes`: a futex wake-up each) and how many it
 * never took (`withdrawn`), and per size class the products, the split
 * ones, the tries and the two modes' GB/s (rt_gemv_split_release calls
 * it when s->trace). */
void rt_gemv_split_report(const rt_gemv_split *s, int64_t jobs, int64_t wakes,
                          int64_t withdrawn);

/*
 * Runs fn(arg, k) for every k < nchunks, on the calling thread and on s's
 * helper (started here the first time; if it cannot be started, s->threads
 * drops to 1 and the caller runs every chunk), each chunk once, and
 * returns when all are done.  Chunks are taken in order from a shared
 * counter, so a helper that is slow to wake takes fewer (none: the caller
 * withdraws the job); fn must write only what chunk k owns.
 */
void rt_gemv_split_run(rt_gemv_split *s, void (*fn)(void *arg, int64_t k), void *arg,
                       int64_t nchunks);

/*
 * Whether the next product, of `bytes` (>= s->min_bytes) matrix bytes, is
 * split (1) or run on the device thread alone (0).  Not adaptive: always
 * 1.  Adaptive: per size class (RT_GEMV_SPLIT_CLASSES), the mode whose
 * time per byte (rt_gemv_split_note) is lower.  Each mode is first
 * measured over RT_GEMV_SPLIT_TRY products of the class in a row (fewer
 * if they reach RT_GEMV_SPLIT_TRY_BYTES; one thread first), and the
 * slower one is tried again so, over as many products, now and then, so
 * that a change of load is seen: after 16 products of the class (the
 * first measurements fall in the program's first run, which runs cold),
 * then after 64, then twice as many after each try that confirms the
 * choice (up to 1024), back to 64 when a try changes it.  A try's figure
 * is its mean, not one product's: on a loaded machine one split product may be
 * quick and the next wait a time slice for a helper that another process
 * preempted mid-chunk, and single samples made the choice flip back and
 * forth (half the products split where splitting was 2x slower, at a load
 * average of 6 on the 2-core EPYC).  Both modes give the same bits, so
 * the choice changes only the time.
 */
#define RT_GEMV_SPLIT_TRY 4
/* ... or fewer products when they hold this many matrix bytes sooner (a
 * try of one 8 MiB LM head): a class a step runs once (the LM head) is
 * then measured within the step's first two runs, not its first eight. */
#define RT_GEMV_SPLIT_TRY_BYTES ((double)(8 << 20))
int rt_gemv_split_choose(rt_gemv_split *s, double bytes);
/* Records that the product rt_gemv_split_choose was last asked about took
 * `seconds` for `bytes` matrix bytes in mode `split` (as it returned): a
 * try's products are summed into the try's figure, which replaces that
 * mode's; others update their mode's running mean (weight 1/4). */
void rt_gemv_split_note(rt_gemv_split *s, int split, double bytes, double seconds);

/*
 * One product of `bytes` matrix bytes, cut into chunks fn(arg, k) for k <
 * nchunks: shared with s's helper (rt_gemv_split_run) or run on the
 * calling thread alone, as rt_gemv_split_choose says, and timed for
 * rt_gemv_split_note.  Alone it runs alone(arg), the whole product in its
 * own order, or with alone NULL every chunk in turn.
 */
void rt_gemv_split_product(rt_gemv_split *s, void (*fn)(void *arg, int64_t k), void *arg,
                           int64_t nchunks, double bytes, void (*alone)(void *arg));

/*
 * Whether a narrow product of `bytes` matrix bytes (over all its batch
 * entries) is offered to s's helper (then rt_gemv_split_choose decides,
 * when s is adaptive): s has a helper (threads 2) and the matrix holds at
 * least s->min_bytes.  Every shape of the int8 decode step gains split
 * with its cut (bench/gemv_narrow.c at load 1.1 on the 2-core AMD EPYC:
 * X * Wg 1.36x, Hg * Wd 1.61x, Q . Kc 1.56x, P . Vc 1.26x; docs/runtime.md,
 * "narrow products"), so the size is the rule.  Reads s only (NULL: 0).
 */
int rt_gemv_split_wants(const rt_gemv_split *s, double bytes);

/* Stops and joins s's helper, if started (no job may be running). */
void rt_gemv_split_release(rt_gemv_split *s);

typedef struct rt_gemm rt_gemm; /* rt_internal.h */

/* gemv_narrow.c: when g is an i8 or bf16 matrix times an f32 vector in
 * f32, or an i8 matrix times an i8 vector in f32 (gemv_i8i8.c, contracted
 * over fewer than RT_GEMV_I8I8_MAX_K terms), the f32 scratch it needs in
 * floats (the matrix's columns; for a sum of rows of 32 or more rows, that
 * times the runs of rows it sums apart, 2 to 8: each run's sums;
 * rt_gemv_i8i8_scratch for i8 x i8), else
 * -1; and g
 * run in one pass on the calling thread, converting in registers (returns
 * 1), or 0 with nothing done when g is no such product. */
int64_t rt_gemv_narrow_scratch(const rt_gemm *g);
int rt_gemv_narrow(const rt_gemm *g, void *scratch);
/* rt_gemv_narrow_scratch for a batch of products (rt_gemv_narrow_batched
 * with nbatch > 1), which also takes an f32 matrix times an f32 vector:
 * attention's heads over an f32 KV cache [S, K, H], read once across all
 * heads by the same loops (no conversion), where one sgemv per head swept
 * the whole cache K times (the scores over 8 heads of a 2048 x 128 f32
 * cache: 0.37 ms against 0.77 ms, one thread; docs/performance-history.md,
 * section 10, issue 26).  -1 when g is no such product.  rt_einsum asks
 * this only for a batch it does not bound by a position. */
int64_t rt_gemv_narrow_batch_scratch(const rt_gemm *g);

/* The instruction sets gemv_narrow.c's loops come in, each a superset of
 * the one before: portable C (any CPU), AVX2 + FMA (gemv_narrow_avx2.c),
 * or AVX-512 F, BW and VL (gemv_narrow_avx512.c; for i8 x i8 products,
 * gemv_i8i8.c's VNNI loops where the CPU also has AVX512-VNNI, else its
 * AVX2 ones); the vector sets on x86-64 under GCC or Clang only
 * (RT_GEMV_HAVE_AVX2).  rt_gemv_narrow_isa_best is the best the running
 * CPU supports (asked each call: no state kept), capped by
 * EINC_GEMV_ISA=portable|avx2|avx512|avx512vnni in the environment (a benchmark's
 * before and after in one run; another value ends the job with a message);
 * RT_ISA_AVX512_VNNI (EINC_GEMV_ISA=avx512vnni, the default where the CPU
 * has AVX512-VNNI) is RT_ISA_AVX512 with the i8 x f32 sums of rows
 * (every weight of a weight-only int8 decode step) as W8A16
 * (rt_gemv_w8a16_cols_vnni: x rounded to i16 per pass of eight rows);
 * EINC_GEMV_ISA=avx512 keeps them in f32 (i8 x i8 products use VNNI at
 * either level).
 * rt_gemv_narrow_isa is rt_gemv_narrow with the set chosen by the caller
 * (tests compare them all; a set the CPU lacks falls back to the best it
 * has). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RT_GEMV_HAVE_AVX2 1
#else
#define RT_GEMV_HAVE_AVX2 0
#endif
enum { RT_ISA_PORTABLE = 0, RT_ISA_AVX2 = 1, RT_ISA_AVX512 = 2, RT_ISA_AVX512_VNNI = 3 };
/* Whether the CPU has AVX512-VNNI (vpdpbusd) besides RT_ISA_AVX512. */
int rt_gemv_cpu_vnni(void);
int rt_gemv_narrow_isa_best(void);
int rt_gemv_narrow_isa(const rt_gemm *g, void *scratch, int isa);

/* rt_gemv_narrow_isa for nbatch products that differ from g only in
 * where a, b and c start: batch i's are g->a + oa[i], g->b + ob[i],
 * g->c + oc[i] (in elements of each one's dtype), as rt_einsum's batch
 * loop (the heads of attention over an i8 or, nbatch > 1, f32 cache).
 * scratch holds nbatch times rt_gemv_narrow_batch_scratch(g) floats.  Returns 0 with nothing done
 * when g is no narrow product; results equal nbatch single calls.
 * With g->split (threads 2) and at least g->split->min_bytes of matrix
 * (rt_gemv_split_wants), the rows (dot-per-row form) or the up
 * to 8 runs of rows (the sum-of-rows form, which sums them apart on one
 * thread too; under 32 rows, the batch entries or the columns) are shared
 * with the device's helper thread (rt_gemv.h); the results are bit for bit
 * those without. */
int rt_gemv_narrow_batched(const rt_gemm *g, int64_t nbatch, const int64_t *oa,
                           const int64_t *ob, const int64_t *oc, void *scratch, int isa);

/* gemv_narrow_avx2.c (only with RT_GEMV_HAVE_AVX2, only on a CPU with
 * AVX2 and FMA): the matrix a (rows x cols stored as mdt, RT_I8, RT_BF16
 * or RT_F32, leading dimension ld elements) times f32 x, in f32.
 *   rows: y[r * incy] = alpha * sum_c a[r, c] x[c] + beta * y[r * incy]
 *         (beta 0: y not read), x contiguous
 *   cols: acc[c] += sum_r x[r * incx] a[r, c] for c < cols (acc added to) */
void rt_gemv_narrow_rows_avx2(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                              int64_t cols, const float *x, float alpha, float beta, float *y,
                              int64_t incy);
void rt_gemv_narrow_cols_avx2(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                              int64_t cols, const float *x, int64_t incx, float *acc);
/* The same for nheads matrices side by side in each row (attention's heads
 * over a cache [S, K, H]): head k's matrix starts hstep elements after
 * head k-1's, its x xstep floats after, its y (rows) or acc (cols) ystep
 * or accstep floats after.  Four rows at a time across all heads (one
 * pass over the rows); bit for bit nheads calls of the two above. */
void rt_gemv_narrow_heads_rows_avx2(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                    int64_t cols, int64_t nheads, int64_t hstep, const float *x,
                                    int64_t xstep, float alpha, float beta, float *y,
                                    int64_t ystep, int64_t incy);
void rt_gemv_narrow_heads_cols_avx2(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                    int64_t cols, int64_t nheads, int64_t hstep, const float *x,
                                    int64_t xstep, int64_t incx, float *acc, int64_t accstep);

/* gemv_narrow_avx512.c: the four above with AVX-512 F, BW and VL (16
 * lanes; only on a CPU with them): the same arguments, passes and
 * results up to f32 rounding (the cols form's vector lanes give the same
 * bits as AVX2's; column tails are masked lanes, not scalar steps). */
void rt_gemv_narrow_rows_avx512(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                int64_t cols, const float *x, float alpha, float beta, float *y,
                                int64_t incy);
void rt_gemv_narrow_cols_avx512(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                int64_t cols, const float *x, int64_t incx, float *acc);
void rt_gemv_narrow_heads_rows_avx512(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                      int64_t cols, int64_t nheads, int64_t hstep,
                                      const float *x, int64_t xstep, float alpha, float beta,
                                      float *y, int64_t ystep, int64_t incy);
void rt_gemv_narrow_heads_cols_avx512(int32_t mdt, const char *a, int64_t ld, int64_t rows,
                                      int64_t cols, int64_t nheads, int64_t hstep,
                                      const float *x, int64_t xstep, int64_t incx, float *acc,
                                      int64_t accstep);

/* gemv_w8a16_vnni.c: x[i * incx], i < n, rounded to i16 with one scale
 * (seed 002's weight-only int8, computed W8A16): m = max |x[i]|,
 * *scale = m / 32767, q[i] = round(x[i] / *scale) in [-32767, 32767], so
 * |x[i] - *scale q[i]| <= 1.03 m 2^-16.  q (n entries) and *scale are
 * the caller's.  Returns 1 with both written (x all zero: *scale 0, q not
 * written), or 0 when some x is a NaN or an infinity or m is under
 * 2^-100 (the caller then computes in f32).  Portable C. */
int rt_gemv_w8a16_quantize(const float *x, int64_t incx, int n, int16_t *q, float *scale);
/* Columns from which gemv_narrow.c sums i8 rows as W8A16 at
 * RT_ISA_AVX512_VNNI (the f32 loops' eight-row passes start there too,
 * COLS8_MIN; attention's heads of 128 columns keep the f32 heads
 * kernels).  From memory on one Zen 4 core, against the f32 loop in the
 * same run (bench/gemv_narrow.c, load 6-7): 1024 x 1024 1.15x, 2816 x 1024
 * 1.14x, 1024 x 8192 1.12x, 1024 x 2816 0.95x; from cache 1.3x-1.4x. */
#define RT_GEMV_W8A16_MIN_COLS 1024
/* gemv_w8a16_vnni.c (only with RT_GEMV_HAVE_AVX2, only on a CPU with
 * AVX-512 F, BW, VL and VNNI): acc[c] += sum_r x[r * incx] a[r, c] for c <
 * cols, a i8 (rows x cols, leading dimension ld bytes): per pass of eight
 * rows from row 0, x rounded by rt_gemv_w8a16_quantize, the exact i32 sum
 * of the pass (|sum| < 2^25: vpdpwssd lanes cannot overflow) converted to
 * f32 and added times the scale (one rounding per pass); rows past the
 * last whole pass, and passes the quantizer declines, in f32
 * (rt_gemv_narrow_cols_avx512).  Each column's result is independent of
 * where it lies among the columns.  acc (cols floats) is the caller's,
 * added to, not zeroed; a and x are read only. */
void rt_gemv_w8a16_cols_vnni(const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                             const float *x, int64_t incx, float *acc);

/* gemv_i8i8.c: an i8 matrix a (rows x cols, leading dimension ld) times
 * an i8 vector x (elements incx apart), summed exactly in i32 (so the
 * contraction must be under 2^17 long: RT_GEMV_I8I8_MAX_K) and converted
 * once to f32:
 *   rows_form: y[r * incy] = alpha * sum_c a[r, c] x[c] + beta * y[r * incy]
 *   else:      y[c * incy] = alpha * sum_r x[r] a[r, c] + beta * y[c * incy]
 * (beta 0: y not read).  scratch holds rt_gemv_i8i8_scratch(rows_form,
 * cols) floats.  With split (may be NULL; threads 2) and at least
 * split->min_bytes of matrix, ranges of rows (rows form) or the two
 * halves of the rows (cols form) go to the device's helper thread, as
 * rt_gemv_split_choose says.  Every isa and split gives the same bits
 * (integer sums). */
#define RT_GEMV_I8I8_MAX_K ((int64_t)1 << 17)
/* Bytes ahead the i8 x i8 sums of rows (cols form; AVX2 and VNNI alike)
 * ask the cache for: the same columns of the next pass's eight rows,
 * while those are at most this far ahead, into L2 (prefetcht1: into L1
 * they evicted the pass's own lines).  VNNI: 1024 x 2816 from memory
 * 1.5x-1.6x the weights/s of asking for L1, 2816 x 1024 1.1x-1.4x, the
 * LM head's 1024 x 8192 (64 KiB ahead) 1.15x one thread against asking
 * for nothing, split 0.8x-1.06x (load 5-8).  AVX2, which asked for
 * nothing: 1.85x, 2.4x and 1.18x one thread, 1.1x-1.7x split, 1.03x from
 * cache (bench/gemv_narrow.c, five alternating rounds at load 2-2.8).
 * Both on the 2-core EPYC, Zen 4. */
#define RT_GEMV_I8X_PREFETCH_MAX (256 << 10)
/* gemv_i8i8_vnni.c (only with RT_GEMV_HAVE_AVX2, only on a CPU with
 * AVX-512 F, BW, VL and VNNI: rt_gemv_cpu_vnni), exact integer sums:
 *   rows: y[r * incy] = alpha * sum_c a[r, c] x[c] + beta * y[r * incy]
 *         (beta 0: y not read), x contiguous, xsum = sum_c x[c]
 *   cols: acc[c] += sum_r x[r * incx] a[r, c] for c < cols, modulo 2^32
 *         (the true sum is exact once it is below 2^31 in magnitude) */
void rt_gemv_i8i8_rows_vnni(const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                            const int8_t *x, int32_t xsum, float alpha, float beta, float *y,
                            int64_t incy);
void rt_gemv_i8i8_cols_vnni(const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                            const int8_t *x, int64_t incx, int32_t *acc);
int64_t rt_gemv_i8i8_scratch(int rows_form, int64_t cols);
void rt_gemv_i8i8(int isa, const int8_t *a, int64_t ld, int64_t rows, int64_t cols,
                  int rows_form, const int8_t *x, int64_t incx, float alpha, float beta,
                  float *y, int64_t incy, void *scratch, rt_gemv_split *split);

#endif
