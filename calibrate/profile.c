/*
 * profile.c - the hardware profile `einc calibrate` writes: the measured
 * figures in the fields every consumer of cost_hw reads (peak_flops,
 * hbm_bandwidth, ici_*), and the "calibration" section with the collective
 * fits, their samples and residuals, the GEMM and elementwise curves and
 * the functions' costs (docs/cost-model.md, "Calibration").  The file is
 * checked to load before it replaces the old one, and written atomically,
 * so minutes of measuring never leave a broken or half-written profile.
 */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calibrate.h"
#include "costmodel.h"

#include "calibrate_internal.h"

/* Adds object `key` to `cal`: per function, seconds per element beyond neg
 * on the same arrays (0 when the loop hides it), from its median times on
 * `lo` and `hi` elements per device: the slope between the two sizes, or,
 * when a noisy run leaves a slope that is not positive, the difference at
 * the larger size alone. */
static void add_fn_costs(cJSON *cal, const char *key, const double *at_lo, const double *at_hi,
                         int64_t lo, int64_t hi)
{
    double slope[IR_FN_COUNT] = {0};
    for (int fn = 0; fn < IR_FN_COUNT; fn++)
        if (at_lo[fn] > 0 && at_hi[fn] > 0)
            slope[fn] = (at_hi[fn] - at_lo[fn]) / (double)(hi - lo);
    cJSON *fns = cJSON_AddObjectToObject(cal, key);
    for (int fn = 0; fn < IR_FN_COUNT; fn++) {
        if (!(at_hi[fn] > 0 && at_hi[IR_FN_NEG] > 0))
            continue;
        double extra = slope[fn] > 0 && slope[IR_FN_NEG] > 0
                           ? slope[fn] - slope[IR_FN_NEG]
                           : (at_hi[fn] - at_hi[IR_FN_NEG]) / (double)hi;
        cJSON_AddNumberToObject(fns, ir_func_name((ir_func)fn), fmax(0, extra));
    }
}

/* Adds `key`: the bandwidths at[e] > 0 by bytes moved per device (3 f32
 * arrays of EW_ELEMS[e]), in ascending bytes. */
static void add_curve(cJSON *cal, const char *key, const double *at)
{
    cJSON *curve = cJSON_AddArrayToObject(cal, key);
    int64_t last = 0;
    for (;;) {
        int best = -1;
        for (int e = 0; e < NEW; e++)
            if (at[e] > 0 && EW_ELEMS[e] > last && (best < 0 || EW_ELEMS[e] < EW_ELEMS[best]))
                best = e;
        if (best < 0)
            return;
        last = EW_ELEMS[best];
        cJSON *pt = cJSON_CreateObject();
        cJSON_AddNumberToObject(pt, "bytes", 12.0 * (double)EW_ELEMS[best]);
        cJSON_AddNumberToObject(pt, "bandwidth", at[best]);
        cJSON_AddItemToArray(curve, pt);
    }
}

/* One point of a GEMM curve being built: FLOPs per device, seconds of the
 * multiply-adds, and how many GEMMs were timed at those FLOPs. */
typedef struct gemm_point {
    double flop, t;
    int n;
} gemm_point;

/* Adds a GEMM of `flop` FLOPs per device taking `t` seconds to pts (n of
 * them, ascending FLOPs): a GEMM at the FLOPs of a point already there
 * makes its time the mean. */
static int add_gemm_point(gemm_point *pts, int n, double flop, double t)
{
    int i = 0;
    while (i < n && pts[i].flop < flop)
        i++;
    if (i < n && pts[i].flop == flop) {
        pts[i].t = (pts[i].t * pts[i].n + t) / (pts[i].n + 1);
        pts[i].n++;
        return n;
    }
    memmove(&pts[i + 1], &pts[i], (size_t)(n - i) * sizeof *pts);
    pts[i] = (gemm_point){flop, t, 1};
    return n + 1;
}

/* Adds dtype d's array to `gc`: FLOP/s by FLOPs per device, ascending, of
 * the square GEMMs and the skinny ones of GEMM_RESULT_SHAPES (bf16's
 * all, f32's and f64's from GEMM_LAYER_FIRST; those of equal FLOPs share a
 * point, their mean time).
 * With `per_result` > 0 (seconds per result element, bf16's) each rate is
 * that of the multiply-adds alone: its GEMM's time less its result's
 * elements at per_result, which the cost model adds back at the priced
 * GEMM's own result (cost_measured_gemm_seconds). */
static void add_gemm_curve(cJSON *gc, const cal_state *c, int d, double per_result)
{
    gemm_point pts[NGEMM + NGEMM_RESULT];
    int n = 0;
    for (int k = 0; k < NGEMM; k++) {
        const int64_t *sh = GEMM_SHAPES[k];
        double flop = 2.0 * (double)sh[0] * (double)sh[1] * (double)sh[2];
        if (c->gemm_at[d][k] > 0)
            n = add_gemm_point(pts, n, flop,
                               flop / c->gemm_at[d][k] - per_result * (double)(sh[0] * sh[2]));
    }
    for (int r = GEMM_LAYER_FIRST; d < 2 && r < NGEMM_RESULT; r++) {
        const int64_t *sh = GEMM_RESULT_SHAPES[r];
        if (c->gemm_layer_s[d][r] > 0)
            n = add_gemm_point(pts, n, 2.0 * (double)sh[0] * (double)sh[1] * (double)sh[2],
                               c->gemm_layer_s[d][r] - per_result * (double)(sh[0] * sh[2]));
    }
    for (int r = 0; d == 2 && r < NGEMM_RESULT; r++) {
        const int64_t *sh = GEMM_RESULT_SHAPES[r];
        if (c->gemm_result_s[r] > 0)
            n = add_gemm_point(pts, n, 2.0 * (double)sh[0] * (double)sh[1] * (double)sh[2],
                               c->gemm_result_s[r] - per_result * (double)(sh[0] * sh[2]));
    }
    cJSON *arr = cJSON_AddArrayToObject(gc, DT_NAME[d]);
    for (int i = 0; i < n; i++) {
        cJSON *pt = cJSON_CreateObject();
        cJSON_AddNumberToObject(pt, "flops", pts[i].flop);
        cJSON_AddNumberToObject(pt, "flops_per_s", pts[i].flop / pts[i].t);
        cJSON_AddItemToArray(arr, pt);
    }
}

/* What a byte of a streamed result costs as a share of a byte read
 * (cost_measured_ew_seconds), from the add (2 bytes read per byte written)
 * and the scale (1 per 1) at each size that codegen streams: with the
 * weight w, time ratio r = scale / add = (1 + w) / (2 + w), so w = (2r -
 * 1) / (1 - r), kept in [0, 2] (2: a write reads its line first, then
 * writes it).  The median over those sizes, or -1 when none was measured. */
static double write_weight(const cal_state *c)
{
    double w[NEW];
    int n = 0;
    for (int e = 0; e < NEW; e++) {
        if (c->ew_at[e] <= 0 || c->scale_s[e] <= 0 || 4 * EW_ELEMS[e] < IR_STREAM_MIN_BYTES)
            continue;
        double r = c->scale_s[e] / (12.0 * (double)EW_ELEMS[e] / c->ew_at[e]);
        w[n++] = r >= 0.75 ? 2 : fmax(0, (2 * r - 1) / (1 - r));
    }
    return n ? cal_median(w, n) : -1;
}

/* A figure the loader requires to be > 0: a fitted 0 becomes 1 ns. */
static double positive(double v)
{
    return v > 1e-9 ? v : 1e-9;
}

/* The profile as JSON: the seed-style figures every consumer of cost_hw
 * reads, and the "calibration" section with the fits and their samples. */
static cJSON *profile_json(cal_state *c)
{
    const cal_options *o = c->o;
    double flops[3];
    /* All FLOPs over all time: the large shapes, which take the
     * milliseconds the predictions are judged on, weigh the most (the small
     * ones run from cache and faster). */
    for (int d = 0; d < 3; d++)
        flops[d] = c->gemm_time[d] > 0 ? c->gemm_flop[d] / c->gemm_time[d] : 0;
    double ew = cal_median(c->ew, c->new_);
    const coll_fit *ag = &c->coll[0];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "name", o->name);
    cJSON_AddStringToObject(root, "status", "calibrated");
    char src[512];
    snprintf(src, sizeof src,
             "einc calibrate --runtime=%s --ranks %d%s: measured through the einc runtime "
             "(docs/cost-model.md, Calibration). A 'device' is one %s; figures are per device "
             "with all %d devices busy.",
             o->mpi ? "mpi" : "threads", o->ranks, o->quick ? " --quick" : "",
             o->mpi ? "MPI rank" : "thread of the threads backend", o->ranks);
    cJSON_AddStringToObject(root, "source", src);
    /* Which machine these figures belong to: `--hw host` warns when used
     * on another one, and the cache is keyed by it (machine.c). */
    cJSON *mj = cost_machine_to_json(&c->machine);
    if (mj)
        cJSON_AddItemToObject(root, "machine", mj);
    cJSON *peak = cJSON_AddObjectToObject(root, "peak_flops");
    cJSON_AddNumberToObject(peak, "bf16", positive(flops[2]));
    cJSON_AddNumberToObject(peak, "f32", positive(flops[0]));
    cJSON_AddNumberToObject(peak, "f64", positive(flops[1]));
    cJSON_AddStringToObject(peak, "source", "MEASURED: GEMM FLOPs / time per device through rt_einsum, over four shapes");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page / o->ranks : 1e9;
    cJSON_AddNumberToObject(root, "hbm_bytes", mem);
    cJSON_AddStringToObject(root, "hbm_bytes_source", "MEASURED: physical memory / devices");
    cJSON_AddNumberToObject(root, "hbm_bandwidth", positive(ew));
    cJSON_AddStringToObject(root, "hbm_bandwidth_source",
                            "MEASURED: elementwise add, (2 inputs + 1 output) bytes / time per device");
    cJSON_AddNumberToObject(root, "ici_oneway_bandwidth", positive(ag->bw));
    cJSON_AddNumberToObject(root, "ici_bidi_bandwidth", positive(ag->bw));
    cJSON_AddStringToObject(root, "ici_bidi_bandwidth_source",
                            "MEASURED: AllGather fit's per-step bandwidth (both directions share memory)");
    cJSON_AddNumberToObject(root, "ici_latency", positive(ag->l_sync));
    cJSON_AddStringToObject(root, "ici_latency_source", "MEASURED: AllGather fit's L_sync");
    cJSON *wrap = cJSON_AddObjectToObject(root, "wraparound");
    cJSON_AddStringToObject(wrap, "rule", "always");
    cJSON_AddNumberToObject(root, "dcn_bandwidth", positive(ag->bw));
    cJSON_AddStringToObject(root, "dcn_bandwidth_source", "MEASURED: as ici (one host)");

    cJSON *cal = cJSON_AddObjectToObject(root, "calibration");
    cJSON_AddStringToObject(cal, "runtime", o->mpi ? "mpi" : "threads");
    cJSON_AddNumberToObject(cal, "devices", o->ranks);
    cJSON_AddNumberToObject(cal, "runs", o->repeat);
    cJSON_AddNumberToObject(cal, "rounds", o->rounds);
    if (c->load[0] >= 0)
        cJSON_AddNumberToObject(cal, "load_average", c->load[0]);
    cJSON_AddStringToObject(cal, "model",
                            "T = t_launch + (P-1) * (l_sync + shard_bytes / bandwidth) + shard_bytes / "
                            "local_bandwidth + (runs - P) * seconds_per_run, shard_bytes = "
                            "buffer_bytes / P, runs = contiguous runs copied per device (P for a flat "
                            "buffer) (seed 004, MeshSlice; the own shard's copy and the runs are "
                            "absent where free)");
    cJSON *colls = cJSON_AddObjectToObject(cal, "collectives");
    for (int k = 0; k < NKINDS; k++) {
        const coll_fit *f = &c->coll[k];
        cJSON *j = cJSON_AddObjectToObject(colls, KIND_KEY[k]);
        cJSON_AddNumberToObject(j, "t_launch", f->t_launch); /* >= 0: the fit's own value */
        cJSON_AddNumberToObject(j, "l_sync", f->l_sync);
        cJSON_AddNumberToObject(j, "bandwidth", positive(f->bw));
        if (f->bw_local > 0)
            cJSON_AddNumberToObject(j, "local_bandwidth", f->bw_local);
        if (f->t_run > 0)
            cJSON_AddNumberToObject(j, "seconds_per_run", f->t_run);
        if (f->has_small) {
            cJSON *sm = cJSON_AddObjectToObject(j, "small_messages");
            cJSON_AddNumberToObject(sm, "below_bytes", f->split);
            cJSON_AddNumberToObject(sm, "t_launch", f->small_t_launch);
            cJSON_AddNumberToObject(sm, "l_sync", f->small_l_sync);
            cJSON_AddNumberToObject(sm, "bandwidth", positive(f->small_bw));
            if (f->small_bw_local > 0)
                cJSON_AddNumberToObject(sm, "local_bandwidth", f->small_bw_local);
            if (f->small_t_run > 0)
                cJSON_AddNumberToObject(sm, "seconds_per_run", f->small_t_run);
        }
        if (f->large_bw > 0) {
            cJSON *lg = cJSON_AddObjectToObject(j, "large_messages");
            cJSON_AddNumberToObject(lg, "from_bytes", f->large_from);
            cJSON_AddNumberToObject(lg, "at_bytes", f->large_at);
            cJSON_AddNumberToObject(lg, "bandwidth", f->large_bw);
        }
        cJSON_AddNumberToObject(j, "rms_rel_residual", f->rms);
        cJSON_AddNumberToObject(j, "max_rel_residual", f->max);
        cJSON_AddNumberToObject(j, "samples_used", f->used);
        cJSON *arr = cJSON_AddArrayToObject(j, "samples");
        for (int i = 0; i < f->n; i++) {
            cJSON *s = cJSON_CreateObject();
            cJSON_AddNumberToObject(s, "group", f->s[i].p);
            cJSON_AddNumberToObject(s, "buffer_bytes", f->s[i].bytes);
            cJSON_AddNumberToObject(s, "runs", f->s[i].runs);
            cJSON_AddNumberToObject(s, "measured_s", f->s[i].t);
            cJSON_AddNumberToObject(s, "fitted_s", f->s[i].fit);
            cJSON_AddNumberToObject(s, "rel_residual", (f->s[i].fit - f->s[i].t) / f->s[i].t);
            cJSON_AddBoolToObject(s, "outlier", f->s[i].outlier);
            cJSON_AddItemToArray(arr, s);
        }
    }
    cJSON *g = cJSON_AddObjectToObject(cal, "gemm_flops");
    for (int d = 0; d < 3; d++)
        cJSON_AddNumberToObject(g, DT_NAME[d], positive(flops[d]));
    /* The rate by size: a GEMM whose operands stay in cache runs faster
     * than the large ones behind gemm_flops.  bf16's result elements are
     * priced apart where measured (add_gemm_curve). */
    cJSON *gc = cJSON_AddObjectToObject(cal, "gemm_curve");
    double per_result = cal_gemm_result_seconds(c);
    for (int d = 0; d < 3; d++)
        add_gemm_curve(gc, c, d, d == 2 ? per_result : 0);
    if (per_result > 0) {
        cJSON *pr = cJSON_AddObjectToObject(cal, "gemm_seconds_per_result_element");
        cJSON_AddNumberToObject(pr, DT_NAME[2], per_result);
    }
    cJSON_AddNumberToObject(cal, "elementwise_bandwidth", positive(ew));
    double w = write_weight(c);
    if (w >= 0)
        cJSON_AddNumberToObject(cal, "elementwise_write_weight", w);
    /* The bandwidth by bytes moved per device: small arrays stay in the
     * caches and go several times faster. */
    add_curve(cal, "elementwise_curve", c->ew_at);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cJSON_AddNumberToObject(cal, "cores", cores > 0 ? (double)cores : (double)o->ranks);
    add_fn_costs(cal, "function_seconds_per_element", c->fn_seconds[0], c->fn_seconds[1],
                 FN_ELEMS[0], FN_ELEMS[1]);
    add_fn_costs(cal, "function_seconds_per_element_in_cache", c->fn_seconds[2],
                 c->fn_seconds[3], FN_ELEMS[2], FN_ELEMS[3]);
    /* The loop the streaming figures are relative to, neg's, per element:
     * the cost pass adds a function's figure to it, not to the add's
     * time from the curve, which ran apart from it (cost_op.c,
     * fn_streaming_per_elem). */
    if (c->fn_seconds[1][IR_FN_NEG] > 0)
        cJSON_AddNumberToObject(cal, "function_baseline_seconds_per_element",
                                c->fn_seconds[1][IR_FN_NEG] / (double)FN_ELEMS[1]);
    /* What a row group's member costs beyond the group's memory traffic
     * (rowpass.c). */
    double pass = cal_row_pass_seconds(c);
    if (pass >= 0)
        cJSON_AddNumberToObject(cal, "row_pass_seconds_per_element", pass);
    /* What a causal mask member costs a softmax's row group, its pass
     * included (maskpass.c). */
    double mask = cal_row_mask_seconds(c);
    if (mask >= 0)
        cJSON_AddNumberToObject(cal, "row_mask_seconds_per_element", mask);
    return root;
}

/* Writes `text` to `path` through a temporary file and rename. */
static int write_atomic(const char *path, const char *text)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "einc calibrate: error: cannot create a file beside %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    fchmod(fd, 0644);
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    bool ok = off == n && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "einc calibrate: error: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int cal_write_profile(cal_state *c, cost_hw *hw)
{
    cJSON *root = profile_json(c);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "einc calibrate: error: out of memory\n");
        return -1;
    }
    /* The written profile must load: check the text before replacing the file. */
    char err[512];
    if (cost_hw_parse(text, c->o->output, hw, err, sizeof err) != 0) {
        fprintf(stderr, "einc calibrate: error: the measured profile does not load: %s\n", err);
        free(text);
        return -1;
    }
    size_t len = strlen(text);
    char *withnl = malloc(len + 2);
    if (withnl) {
        memcpy(withnl, text, len);
        memcpy(withnl + len, "\n", 2);
    }
    int w = withnl ? write_atomic(c->o->output, withnl) : -1;
    free(withnl);
    free(text);
    return w;
}
