/*
 * fit.c - fitting MeshSlice's measured collective model (seed
 * 004) to the timings of `einc calibrate`: weighted linear least squares in
 * (T_launch, L_sync, 1/BW, 1/BW_local), non-negative by refitting over
 * subsets, two regimes split at SPLIT_BYTES or above it where the rate
 * falls on (cal_fit_kind).  See the essay at the top of calibrate.c.
 *
 * The fourth term is the device's own shard.  MeshSlice's model, made for
 * TPUs, has a collective move (P - 1) shards, its own already in place; a
 * runtime whose output buffer is distinct from its input copies the own
 * shard too (the threads backend's AllGather writes all P blocks of the
 * output, its ReduceScatter reads P blocks to sum), which makes the time
 * grow with the buffer, not with (P - 1) / P of it.  That copy costs
 * shard / BW_local; where it is free the fit leaves the term at 0.
 *
 * The fifth is the layout.  A collective over a tensor's inner dim moves
 * each peer block as many short runs (one per row above the cut dim), not
 * one: (runs - P) t_run, with runs = P for a flat buffer, prices the
 * extra runs.  The strided samples of programs.c (512-byte runs) are
 * what determines it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate_internal.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cal_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- fitting ---- */

/* Regressors per sample. */
#define NREG 5

/* Solves the n x n system a x = b (n <= NREG) by Gaussian elimination with
 * partial pivoting; false if singular (a pivot below 1e-12 of its column's
 * largest entry: regressors that are collinear for the samples at hand,
 * like P - 1 and 1 when every group has the same size). */
static bool solve(int n, double a[NREG][NREG], double *b, double *x)
{
    double scale[NREG] = {0};
    for (int r = 0; r < n; r++)
        for (int k = 0; k < n; k++)
            scale[k] = fmax(scale[k], fabs(a[r][k]));
    for (int i = 0; i < n; i++) {
        int piv = i;
        for (int r = i + 1; r < n; r++)
            if (fabs(a[r][i]) > fabs(a[piv][i]))
                piv = r;
        if (!(fabs(a[piv][i]) > 1e-12 * scale[i]))
            return false;
        for (int k = 0; k < n; k++) {
            double t = a[i][k];
            a[i][k] = a[piv][k];
            a[piv][k] = t;
        }
        double t = b[i];
        b[i] = b[piv];
        b[piv] = t;
        for (int r = i + 1; r < n; r++) {
            double m = a[r][i] / a[i][i];
            for (int k = i; k < n; k++)
                a[r][k] -= m * a[i][k];
            b[r] -= m * b[i];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = b[i];
        for (int k = i + 1; k < n; k++)
            s -= a[i][k] * x[k];
        x[i] = s / a[i][i];
    }
    return true;
}

/* Regressors of sample s: 1, P-1, (P-1) * shard_bytes, shard_bytes,
 * runs - P. */
static void regressors(const sample *s, double *x)
{
    x[0] = 1;
    x[1] = s->p - 1;
    x[2] = (s->p - 1) * s->bytes / s->p;
    x[3] = s->bytes / s->p;
    x[4] = s->runs > s->p ? s->runs - s->p : 0;
}

static double predict(const double *coef, const double *r)
{
    double t = 0;
    for (int j = 0; j < NREG; j++)
        t += coef[j] * r[j];
    return t;
}

/* Weighted least squares over the columns in `mask`; coefficients of the
 * other columns are 0.  Returns the weighted sum of squared relative
 * residuals, or INFINITY if singular or a coefficient is negative. */
static double fit_subset(const coll_fit *f, unsigned mask, double *coef)
{
    int cols[NREG], n = 0;
    for (int j = 0; j < NREG; j++)
        if (mask & (1u << j))
            cols[n++] = j;
    double a[NREG][NREG] = {{0}}, b[NREG] = {0}, x[NREG] = {0};
    for (int i = 0; i < f->n; i++) {
        double r[NREG], w = 1 / (f->s[i].t * f->s[i].t);
        regressors(&f->s[i], r);
        for (int u = 0; u < n; u++) {
            b[u] += w * r[cols[u]] * f->s[i].t;
            for (int v = 0; v < n; v++)
                a[u][v] += w * r[cols[u]] * r[cols[v]];
        }
    }
    if (!solve(n, a, b, x))
        return INFINITY;
    for (int j = 0; j < NREG; j++)
        coef[j] = 0;
    for (int u = 0; u < n; u++) {
        if (!(x[u] >= 0))
            return INFINITY;
        coef[cols[u]] = x[u];
    }
    double sse = 0;
    for (int i = 0; i < f->n; i++) {
        double r[NREG];
        regressors(&f->s[i], r);
        double e = (predict(coef, r) - f->s[i].t) / f->s[i].t;
        sse += e * e;
    }
    return sse;
}

/* Best non-negative fit over the subsets of columns that keep the
 * bandwidth term; INFINITY if none. */
static double fit_best(const coll_fit *f, double *bc)
{
    double best = INFINITY, coef[NREG];
    for (unsigned mask = 0; mask < (1u << NREG); mask++) {
        if (!(mask & 4)) /* bit 2 (1/BW) always in */
            continue;
        double sse = fit_subset(f, mask, coef);
        if (sse < best) {
            best = sse;
            memcpy(bc, coef, NREG * sizeof *bc);
        }
    }
    return best;
}

/* Robust fit of the samples of one regime (buffers below `split` bytes
 * or not) into bc: a first fit; samples more than 3x the median residual
 * (and over 25%) away from it are marked outliers and left out of a
 * second.  -1 if the regime has too few samples or no non-negative fit. */
static int fit_regime(coll_fit *f, double split, bool small, double *bc)
{
    coll_fit sub = {.n = 0};
    int idx[MAX_SAMPLES];
    for (int i = 0; i < f->n; i++)
        if ((f->s[i].bytes < split) == small) {
            idx[sub.n] = i;
            sub.s[sub.n++] = f->s[i];
        }
    if (sub.n < 3 || !isfinite(fit_best(&sub, bc)) || bc[2] <= 0)
        return -1;
    if (sub.n < 6)
        return 0;
    double res[MAX_SAMPLES], sorted[MAX_SAMPLES];
    for (int i = 0; i < sub.n; i++) {
        double r[NREG];
        regressors(&sub.s[i], r);
        res[i] = fabs(predict(bc, r) - sub.s[i].t) / sub.s[i].t;
    }
    memcpy(sorted, res, (size_t)sub.n * sizeof *res);
    double cut = fmax(3 * cal_median(sorted, sub.n), 0.25), bk[NREG];
    coll_fit kept = {.n = 0};
    for (int i = 0; i < sub.n; i++)
        if (res[i] <= cut)
            kept.s[kept.n++] = sub.s[i];
    if (kept.n >= 4 && kept.n < sub.n && isfinite(fit_best(&kept, bk)) && bk[2] > 0) {
        memcpy(bc, bk, NREG * sizeof *bc);
        for (int i = 0; i < sub.n; i++)
            f->s[idx[i]].outlier = res[i] > cut;
    }
    return 0;
}

/* Fits f's samples in two regimes split at `split` bytes (big[] the main
 * fit, small[] the smaller buffers'), or in one (big[] only, *have_small
 * false) when a regime has too few samples; fills each sample's fit and
 * outlier mark.  Returns the score the split is chosen by: the sum over
 * all samples of the relative residual's magnitude, each capped at 1.
 * Not its square, which the least squares minimise: a fit that bends to
 * a descheduled run spreads its error over its neighbours and would beat
 * the fit that leaves it out as an outlier; INFINITY when no fit exists. */
static double fit_split(coll_fit *f, double split, double *big, double *small, bool *have_small)
{
    for (int i = 0; i < f->n; i++)
        f->s[i].outlier = false;
    *have_small = fit_regime(f, split, false, big) == 0 && fit_regime(f, split, true, small) == 0;
    if (!*have_small) {
        for (int i = 0; i < f->n; i++)
            f->s[i].outlier = false;
        if (!isfinite(fit_best(f, big)) || big[2] <= 0)
            return INFINITY;
    }
    double score = 0;
    for (int i = 0; i < f->n; i++) {
        double r[NREG];
        regressors(&f->s[i], r);
        f->s[i].fit = predict(*have_small && f->s[i].bytes < split ? small : big, r);
        double e = (f->s[i].fit - f->s[i].t) / f->s[i].t;
        score += fmin(fabs(e), 1);
    }
    return score;
}

/* A split above SPLIT_BYTES must leave less than this share of the score
 * SPLIT_BYTES leaves.  Three loaded quick calibrations on MPI moved the AllGather's,
 * ReduceScatter's and AllToAll's split either way by 8-20% of the score,
 * noise, which put buffers of 4-8 MiB a device (llama2_ffw's, whose
 * operands are hot in the cache) on the line of 8 and 32 MiB, up to twice
 * their time; the AllReduce's split gained 29-49% in each. */
#define SPLIT_GAIN 0.75

/* Sizes within this factor of each other are one size: a strided sample's
 * bytes are its flat twin's rounded to whole rows (programs.c). */
#define SAME_SIZE 1.5

/* Fills split[] with the candidate splits between the regimes: SPLIT_BYTES,
 * then the geometric mean of each two neighbouring sizes above it that
 * leaves two sizes or more to the main fit (one size cannot tell the
 * per-call terms from the bytes', which a larger buffer's price depends
 * on).  Returns how many. */
static int candidate_splits(const coll_fit *f, double *split)
{
    double sizes[MAX_SAMPLES];
    int ns = 0, n = 0;
    for (int i = 0; i < f->n; i++)
        sizes[ns++] = f->s[i].bytes;
    cal_median(sizes, ns); /* sorts */
    double distinct[MAX_SAMPLES];
    int nd = 0;
    for (int i = 0; i < ns; i++)
        if (sizes[i] >= SPLIT_BYTES && (nd == 0 || sizes[i] > SAME_SIZE * distinct[nd - 1]))
            distinct[nd++] = sizes[i];
    split[n++] = SPLIT_BYTES;
    for (int i = 0; i + 2 < nd; i++)
        split[n++] = sqrt(distinct[i] * distinct[i + 1]);
    return n;
}

/* The largest buffers' own rate (f->large_*): the fastest rate of the
 * flat samples at the largest size timed, and the next smaller size, from
 * which the cost pass raises the line towards that rate
 * (cost_measured_coll_time).  One line per regime cannot bend up: on MPI
 * over 4 ranks on the 2-core EPYC the AllReduce of 8 MiB a device took
 * 3.05 ms and that of 32 MiB 28.3 (the buffers leave the 32 MiB
 * last-level cache), the line through them priced 11.7 at 32 MiB, and
 * llama2_layer's 40 MiB AllReduces were priced 39-62% under their time
 * (docs/performance-history.md, section 5, "The largest buffers' rate").
 * The fastest sample, not a fit: a descheduled run only slows one, and a
 * floor above the machine's rate would price every large buffer too high.
 * No floor unless the two sizes are SPLIT_BYTES or more (the main fit's). */
static void fit_large(coll_fit *f)
{
    f->large_at = f->large_from = f->large_bw = 0;
    double at = 0;
    for (int i = 0; i < f->n; i++)
        if (f->s[i].runs <= f->s[i].p && f->s[i].bytes > at)
            at = f->s[i].bytes;
    double from = 0, bw = 0;
    for (int i = 0; i < f->n; i++) {
        const sample *s = &f->s[i];
        if (s->runs > s->p || !(s->t > 0))
            continue;
        if (s->bytes * SAME_SIZE > at)
            bw = fmax(bw, (s->p - 1) * s->bytes / s->p / s->t);
        else
            from = fmax(from, s->bytes);
    }
    if (from < SPLIT_BYTES || !(bw > 0))
        return;
    f->large_at = at;
    f->large_from = from;
    f->large_bw = bw;
}

/*
 * Fits one kind and fills the residuals.  Two regimes: a message that fits
 * in the caches moves several times faster than one that streams from
 * memory, which one line cannot follow, so buffers of SPLIT_BYTES and more
 * (the ones that take milliseconds, which the accuracy target is about) get
 * the main fit and smaller ones their own ("small_messages").  With too
 * few samples in a regime (--quick) one fit covers all.
 *
 * Where the rate falls on past SPLIT_BYTES, the main fit moves up: on MPI
 * over 4 ranks on the 2-core EPYC an AllReduce of 2 MiB a device ran at
 * 3.5 GB/s, of 8 MiB at 1.8 and of 32-40 MiB at 1.0 (past the 32 MiB
 * last-level cache), and one line over the three, which cannot bend (its
 * intercept is not negative), priced a 40 MiB AllReduce 52% under its
 * time (issue 28).  So the split is the candidate (candidate_splits) whose
 * two fits leave the least summed relative residual over all samples
 * (fit_split), SPLIT_BYTES unless another's is under SPLIT_GAIN times its; the
 * model at a size between two samples is then that of the nearer one in
 * log size, as it is at SPLIT_BYTES.
 */
int cal_fit_kind(coll_fit *f, const char *kind)
{
    double big[NREG], small[NREG], split[MAX_SAMPLES];
    bool have_small = false;
    int nsplit = candidate_splits(f, split), best = 0;
    double best_score = INFINITY;
    for (int k = 0; k < nsplit; k++) {
        double score = fit_split(f, split[k], big, small, &have_small);
        if (k == 0)
            score *= SPLIT_GAIN;
        if (score < best_score) {
            best_score = score;
            best = k;
        }
    }
    if (!isfinite(fit_split(f, split[best], big, small, &have_small))) {
        fprintf(stderr, "einc calibrate: error: cannot fit the %s timings (%d samples)\n", kind,
                f->n);
        return -1;
    }
    f->split = split[best];
    fit_large(f);
    f->t_launch = big[0];
    f->l_sync = big[1];
    f->bw = 1 / big[2];
    f->bw_local = big[3] > 0 ? 1 / big[3] : 0;
    f->t_run = big[4];
    f->has_small = have_small;
    if (have_small) {
        f->small_t_launch = small[0];
        f->small_l_sync = small[1];
        f->small_bw = 1 / small[2];
        f->small_bw_local = small[3] > 0 ? 1 / small[3] : 0;
        f->small_t_run = small[4];
    }
    double ss = 0;
    int used = 0;
    f->max = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->s[i].outlier)
            continue;
        double e = fabs(f->s[i].fit - f->s[i].t) / f->s[i].t;
        ss += e * e;
        used++;
        if (e > f->max)
            f->max = e;
    }
    f->rms = used ? sqrt(ss / used) : 0;
    f->used = used;
    return 0;
}
