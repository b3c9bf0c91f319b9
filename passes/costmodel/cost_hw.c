/*
 * cost_hw.c - reading hardware profiles (hw/NAME.json) with cJSON.
 *
 * A profile is data, not code, so a user can add a chip or a calibration run
 * can write one without rebuilding einc.  Every figure carries a "*_source"
 * string beside it; the loader ignores those.  The loader is strict: a
 * missing, non-numeric or non-positive figure is an error naming the file and
 * the field, because a zero bandwidth would make every estimate infinite and
 * a silently defaulted one would make it quietly wrong.
 */
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "costmodel.h"

/* The build points EINC_HW_DIR at the source tree's hw/ (passes/costmodel/CMakeLists.txt). */
#ifdef EINC_HW_DIR
#define HW_DIR_DEFAULT EINC_HW_DIR
#else
#define HW_DIR_DEFAULT "hw"
#endif

/* Largest profile file accepted; real ones are ~3 KB. */
#define MAX_PROFILE_BYTES (1 << 20)

static void set_err(char *err, size_t errsize, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errsize, const char *fmt, ...)
{
    if (!err || errsize == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsize, fmt, ap);
    va_end(ap);
}

/* Reads field `key` of `obj` (described as `where` in messages) as a
 * finite positive number. */
static int get_positive(const cJSON *obj, const char *key, const char *where,
                        const char *origin, double *out, char *err, size_t errsize)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!f) {
        set_err(err, errsize, "%s: missing field \"%s%s\"", origin, where, key);
        return -1;
    }
    if (!cJSON_IsNumber(f)) {
        set_err(err, errsize, "%s: field \"%s%s\" must be a number", origin, where, key);
        return -1;
    }
    double v = f->valuedouble;
    if (!isfinite(v) || v <= 0) {
        set_err(err, errsize, "%s: field \"%s%s\" must be > 0 (got %g)", origin, where, key, v);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_wrap(const cJSON *root, const char *origin, cost_hw *hw,
                      char *err, size_t errsize)
{
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "wraparound");
    if (!cJSON_IsObject(w)) {
        set_err(err, errsize, "%s: missing object \"wraparound\" (with \"rule\")", origin);
        return -1;
    }
    const cJSON *rule = cJSON_GetObjectItemCaseSensitive(w, "rule");
    if (!cJSON_IsString(rule)) {
        set_err(err, errsize, "%s: \"wraparound.rule\" must be a string", origin);
        return -1;
    }
    static const struct { const char *name; cost_wrap_rule rule; bool sized; } rules[] = {
        {"always", COST_WRAP_ALWAYS, false},
        {"never", COST_WRAP_NEVER, false},
        {"size_equals", COST_WRAP_SIZE_EQUALS, true},
        {"size_multiple_of", COST_WRAP_SIZE_MULTIPLE_OF, true},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (strcmp(rule->valuestring, rules[i].name) != 0)
            continue;
        hw->wrap = rules[i].rule;
        hw->wrap_size = 0;
        if (rules[i].sized) {
            double s;
            if (get_positive(w, "size", "wraparound.", origin, &s, err, errsize) < 0)
                return -1;
            if (s != floor(s) || s > 1e9) {
                set_err(err, errsize, "%s: \"wraparound.size\" must be a whole number of chips (got %g)",
                        origin, s);
                return -1;
            }
            hw->wrap_size = (int64_t)s;
        }
        return 0;
    }
    set_err(err, errsize,
            "%s: unknown \"wraparound.rule\" \"%s\" (expected always, never, size_equals or size_multiple_of)",
            origin, rule->valuestring);
    return -1;
}

/* Reads field `key` of `obj` as a finite number >= 0 (a fitted time may be 0). */
static int get_nonneg(const cJSON *obj, const char *key, const char *where, const char *origin,
                      double *out, char *err, size_t errsize)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble < 0) {
        set_err(err, errsize, "%s: field \"%s%s\" must be a number >= 0", origin, where, key);
        return -1;
    }
    *out = f->valuedouble;
    return 0;
}

/* The optional curve `key` of `cal`: 1 to COST_EW_POINTS points of
 * {"bytes", "bandwidth"}, ascending in bytes, into bytes[], bw[] and *n
 * (left 0 when absent).  Returns 0, or -1 with `err` set. */
static int get_curve(const cJSON *cal, const char *key, const char *origin, double *bytes,
                     double *bw, int *n, char *err, size_t errsize)
{
    const cJSON *curve = cJSON_GetObjectItemCaseSensitive(cal, key);
    if (!curve)
        return 0;
    int np = cJSON_IsArray(curve) ? cJSON_GetArraySize(curve) : -1;
    if (np < 1 || np > COST_EW_POINTS) {
        set_err(err, errsize, "%s: \"calibration.%s\" must be an array of 1 to %d points", origin,
                key, COST_EW_POINTS);
        return -1;
    }
    char where[96];
    snprintf(where, sizeof where, "calibration.%s[].", key);
    for (int i = 0; i < np; i++) {
        const cJSON *pt = cJSON_GetArrayItem(curve, i);
        if (get_positive(pt, "bytes", where, origin, &bytes[i], err, errsize) < 0 ||
            get_positive(pt, "bandwidth", where, origin, &bw[i], err, errsize) < 0)
            return -1;
        if (i > 0 && bytes[i] <= bytes[i - 1]) {
            set_err(err, errsize, "%s: \"calibration.%s\" must be in ascending \"bytes\"", origin,
                    key);
            return -1;
        }
    }
    *n = np;
    return 0;
}

/* The optional "large_messages" of collective fit `c` (`where` its path in
 * messages) into fit: the largest buffers' own rate, from_bytes < at_bytes
 * and a bandwidth, all positive (cost_measured_coll_time); absent, no
 * floor.  -1 with a message in err on a bad field. */
static int get_large(const cJSON *c, const char *where, const char *origin, cost_coll_fit *fit,
                     char *err, size_t errsize)
{
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(c, "large_messages");
    if (!lg)
        return 0;
    char lwhere[128];
    snprintf(lwhere, sizeof lwhere, "%slarge_messages.", where);
    if (!cJSON_IsObject(lg)) {
        set_err(err, errsize, "%s: \"%s\" must be an object", origin, lwhere);
        return -1;
    }
    if (get_positive(lg, "from_bytes", lwhere, origin, &fit->large_from, err, errsize) < 0 ||
        get_positive(lg, "at_bytes", lwhere, origin, &fit->large_at, err, errsize) < 0 ||
        get_positive(lg, "bandwidth", lwhere, origin, &fit->large_bw, err, errsize) < 0)
        return -1;
    if (!(fit->large_from < fit->large_at)) {
        set_err(err, errsize, "%s: field \"%sfrom_bytes\" must be below \"at_bytes\"", origin,
                lwhere);
        return -1;
    }
    return 0;
}

/* The optional "calibration" section of `einc calibrate`: per collective
 * kind t_launch, l_sync (seconds, >= 0) and bandwidth (bytes/s, > 0), and
 * the elementwise bandwidth.  Absent: hw->measured stays false. */
static int parse_calibration(const cJSON *root, const char *origin, cost_hw *hw, char *err,
                             size_t errsize)
{
    const cJSON *cal = cJSON_GetObjectItemCaseSensitive(root, "calibration");
    if (!cal)
        return 0;
    if (!cJSON_IsObject(cal)) {
        set_err(err, errsize, "%s: \"calibration\" must be an object", origin);
        return -1;
    }
    const cJSON *colls = cJSON_GetObjectItemCaseSensitive(cal, "collectives");
    if (!cJSON_IsObject(colls)) {
        set_err(err, errsize, "%s: missing object \"calibration.collectives\"", origin);
        return -1;
    }
    static const char *const keys[COST_FIT_COUNT] = {"allgather", "reducescatter", "allreduce",
                                                     "alltoall"};
    for (int k = 0; k < COST_FIT_COUNT; k++) {
        char where[96];
        snprintf(where, sizeof where, "calibration.collectives.%s.", keys[k]);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(colls, keys[k]);
        if (!cJSON_IsObject(c)) {
            set_err(err, errsize, "%s: missing object \"calibration.collectives.%s\"", origin,
                    keys[k]);
            return -1;
        }
        cost_coll_fit *fit = &hw->fit[k];
        if (get_nonneg(c, "t_launch", where, origin, &fit->t_launch, err, errsize) < 0 ||
            get_nonneg(c, "l_sync", where, origin, &fit->l_sync, err, errsize) < 0 ||
            get_positive(c, "bandwidth", where, origin, &fit->bw, err, errsize) < 0)
            return -1;
        /* Optional: the own shard's copy (absent: free). */
        if (cJSON_GetObjectItemCaseSensitive(c, "local_bandwidth") &&
            get_positive(c, "local_bandwidth", where, origin, &fit->bw_local, err, errsize) < 0)
            return -1;
        if (cJSON_GetObjectItemCaseSensitive(c, "seconds_per_run") &&
            get_nonneg(c, "seconds_per_run", where, origin, &fit->t_run, err, errsize) < 0)
            return -1;
        if (get_large(c, where, origin, fit, err, errsize) < 0)
            return -1;
        /* Optional second fit for buffers that stay in the caches. */
        const cJSON *sm = cJSON_GetObjectItemCaseSensitive(c, "small_messages");
        if (!sm)
            continue;
        char swhere[128];
        snprintf(swhere, sizeof swhere, "%ssmall_messages.", where);
        if (!cJSON_IsObject(sm)) {
            set_err(err, errsize, "%s: \"%s\" must be an object", origin, swhere);
            return -1;
        }
        if (get_positive(sm, "below_bytes", swhere, origin, &fit->small_below, err, errsize) < 0 ||
            get_nonneg(sm, "t_launch", swhere, origin, &fit->small_t_launch, err, errsize) < 0 ||
            get_nonneg(sm, "l_sync", swhere, origin, &fit->small_l_sync, err, errsize) < 0 ||
            get_positive(sm, "bandwidth", swhere, origin, &fit->small_bw, err, errsize) < 0)
            return -1;
        if (cJSON_GetObjectItemCaseSensitive(sm, "local_bandwidth") &&
            get_positive(sm, "local_bandwidth", swhere, origin, &fit->small_bw_local, err,
                         errsize) < 0)
            return -1;
        if (cJSON_GetObjectItemCaseSensitive(sm, "seconds_per_run") &&
            get_nonneg(sm, "seconds_per_run", swhere, origin, &fit->small_t_run, err, errsize) < 0)
            return -1;
    }
    if (get_positive(cal, "elementwise_bandwidth", "calibration.", origin, &hw->elementwise_bw,
                     err, errsize) < 0)
        return -1;
    /* Optional (absent: a written byte costs what a read one does). */
    if (cJSON_GetObjectItemCaseSensitive(cal, "elementwise_write_weight") &&
        get_nonneg(cal, "elementwise_write_weight", "calibration.", origin, &hw->ew_write_weight,
                   err, errsize) < 0)
        return -1;
    /* Optional: the bandwidth by size. */
    if (get_curve(cal, "elementwise_curve", origin, hw->ew_bytes, hw->ew_bw, &hw->ew_npoints, err,
                  errsize) < 0)
        return -1;
    const cJSON *gc = cJSON_GetObjectItemCaseSensitive(cal, "gemm_curve");
    if (gc && !cJSON_IsObject(gc)) {
        set_err(err, errsize, "%s: \"calibration.gemm_curve\" must be an object", origin);
        return -1;
    }
    static const char *const dts[3] = {"f32", "f64", "bf16"}; /* ir_dtype order */
    for (int d = 0; gc && d < 3; d++) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(gc, dts[d]);
        if (!arr)
            continue;
        int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
        if (n < 1 || n > COST_EW_POINTS) {
            set_err(err, errsize, "%s: \"calibration.gemm_curve.%s\" must be an array of 1 to %d "
                    "points", origin, dts[d], COST_EW_POINTS);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            const cJSON *pt = cJSON_GetArrayItem(arr, i);
            if (get_positive(pt, "flops", "calibration.gemm_curve[].", origin,
                             &hw->gemm_flop[d][i], err, errsize) < 0 ||
                get_positive(pt, "flops_per_s", "calibration.gemm_curve[].", origin,
                             &hw->gemm_rate[d][i], err, errsize) < 0)
                return -1;
            if (i > 0 && hw->gemm_flop[d][i] <= hw->gemm_flop[d][i - 1]) {
                set_err(err, errsize, "%s: \"calibration.gemm_curve.%s\" must be in ascending "
                        "\"flops\"", origin, dts[d]);
                return -1;
            }
        }
        hw->gemm_npoints[d] = n;
    }
    /* Optional (absent: a curve of whole GEMMs' rates, results not priced
     * apart). */
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(cal, "gemm_seconds_per_result_element");
    if (gr && !cJSON_IsObject(gr)) {
        set_err(err, errsize, "%s: \"calibration.gemm_seconds_per_result_element\" must be an "
                "object", origin);
        return -1;
    }
    for (int d = 0; gr && d < 3; d++)
        if (cJSON_GetObjectItemCaseSensitive(gr, dts[d]) &&
            get_nonneg(gr, dts[d], "calibration.gemm_seconds_per_result_element.", origin,
                       &hw->gemm_result_time[d], err, errsize) < 0)
            return -1;
    if (cJSON_GetObjectItemCaseSensitive(cal, "devices") &&
        get_positive(cal, "devices", "calibration.", origin, &hw->cal_devices, err, errsize) < 0)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(cal, "cores") &&
        get_positive(cal, "cores", "calibration.", origin, &hw->cal_cores, err, errsize) < 0)
        return -1;
    /* Optional (absent: threads): an MPI profile's ranks run bound to
     * cores, BLAS included (cost_measured_blas_contention). */
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(cal, "runtime");
    hw->cal_mpi = cJSON_IsString(rt) && strcmp(rt->valuestring, "mpi") == 0;
    /* Optional: functions not measured cost only their memory traffic. */
    const cJSON *fns = cJSON_GetObjectItemCaseSensitive(cal, "function_seconds_per_element");
    if (fns && !cJSON_IsObject(fns)) {
        set_err(err, errsize, "%s: \"calibration.function_seconds_per_element\" must be an object",
                origin);
        return -1;
    }
    for (int f = 0; fns && f < IR_FN_COUNT; f++)
        if (cJSON_GetObjectItemCaseSensitive(fns, ir_func_name((ir_func)f)) &&
            get_nonneg(fns, ir_func_name((ir_func)f), "calibration.function_seconds_per_element.",
                       origin, &hw->fn_time[f], err, errsize) < 0)
            return -1;
    /* Optional: the same in cache (profiles before it have the above only). */
    const cJSON *fnc = cJSON_GetObjectItemCaseSensitive(cal, "function_seconds_per_element_in_cache");
    if (fnc && !cJSON_IsObject(fnc)) {
        set_err(err, errsize,
                "%s: \"calibration.function_seconds_per_element_in_cache\" must be an object", origin);
        return -1;
    }
    for (int f = 0; f < IR_FN_COUNT; f++) {
        hw->fn_time_cache[f] = hw->fn_time[f];
        hw->has_fn_cache[f] = fnc && cJSON_GetObjectItemCaseSensitive(fnc, ir_func_name((ir_func)f));
        if (hw->has_fn_cache[f] &&
            get_nonneg(fnc, ir_func_name((ir_func)f),
                       "calibration.function_seconds_per_element_in_cache.", origin,
                       &hw->fn_time_cache[f], err, errsize) < 0)
            return -1;
    }
    /* Optional (profiles before it: the loop's memory time comes from the
     * elementwise curve). */
    if (cJSON_GetObjectItemCaseSensitive(cal, "function_baseline_seconds_per_element") &&
        get_nonneg(cal, "function_baseline_seconds_per_element", "calibration.", origin,
                   &hw->fn_base_time, err, errsize) < 0)
        return -1;
    /* Optional (profiles before it: row groups' members pay only their
     * functions' in-cache cost). */
    if (cJSON_GetObjectItemCaseSensitive(cal, "row_pass_seconds_per_element")) {
        if (get_nonneg(cal, "row_pass_seconds_per_element", "calibration.", origin,
                       &hw->row_pass_time, err, errsize) < 0)
            return -1;
        hw->has_row_pass = true;
    }
    /* Optional (profiles before it: a mask member pays the row pass). */
    if (cJSON_GetObjectItemCaseSensitive(cal, "row_mask_seconds_per_element")) {
        if (get_nonneg(cal, "row_mask_seconds_per_element", "calibration.", origin,
                       &hw->row_mask_time, err, errsize) < 0)
            return -1;
        hw->has_row_mask = true;
    }
    hw->measured = true;
    return 0;
}

/* Copies optional string field `key` of `obj` into dst (size n); absent
 * leaves dst empty.  Longer text is cut: these fields identify, they are
 * not figures. */
static int get_string(const cJSON *obj, const char *key, const char *origin, char *dst, size_t n,
                      char *err, size_t errsize)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    dst[0] = 0;
    if (!f)
        return 0;
    if (!cJSON_IsString(f)) {
        set_err(err, errsize, "%s: field \"machine.%s\" must be a string", origin, key);
        return -1;
    }
    snprintf(dst, n, "%s", f->valuestring);
    return 0;
}

/* The optional "machine" object: which machine `einc calibrate` measured
 * (cost_machine).  Every field is optional; absent, hw->has_machine stays
 * false and the driver cannot tell whether the figures belong to the host. */
static int parse_machine(const cJSON *root, const char *origin, cost_hw *hw, char *err,
                         size_t errsize)
{
    const cJSON *mj = cJSON_GetObjectItemCaseSensitive(root, "machine");
    if (!mj)
        return 0;
    if (!cJSON_IsObject(mj)) {
        set_err(err, errsize, "%s: \"machine\" must be an object", origin);
        return -1;
    }
    cost_machine *m = &hw->machine;
    if (get_string(mj, "cpu_model", origin, m->cpu_model, sizeof m->cpu_model, err, errsize) ||
        get_string(mj, "isa", origin, m->isa, sizeof m->isa, err, errsize) ||
        get_string(mj, "blas_core", origin, m->blas_core, sizeof m->blas_core, err, errsize) ||
        get_string(mj, "blas_config", origin, m->blas_config, sizeof m->blas_config, err,
                   errsize))
        return -1;
    const cJSON *cores = cJSON_GetObjectItemCaseSensitive(mj, "cores");
    if (cores) {
        double c = cJSON_IsNumber(cores) ? cores->valuedouble : -1;
        if (!(c >= 1 && c <= 1e6 && c == floor(c))) {
            set_err(err, errsize, "%s: field \"machine.cores\" must be a whole number >= 1",
                    origin);
            return -1;
        }
        m->cores = (int)c;
    }
    hw->has_machine = true;
    return 0;
}

bool cost_machine_same(const cost_machine *a, const cost_machine *b)
{
    return strcmp(a->cpu_model, b->cpu_model) == 0 && a->cores == b->cores &&
           strcmp(a->isa, b->isa) == 0 && strcmp(a->blas_core, b->blas_core) == 0;
}

static const char *or_unknown(const char *s)
{
    return s[0] ? s : "unknown";
}

void cost_machine_describe(const cost_machine *m, char *buf, size_t n)
{
    if (!buf || n == 0)
        return;
    char cores[32] = "unknown";
    if (m->cores > 0)
        snprintf(cores, sizeof cores, "%d", m->cores);
    snprintf(buf, n, "%s, %s cores, %s, OpenBLAS %s", or_unknown(m->cpu_model), cores,
             or_unknown(m->isa), or_unknown(m->blas_core));
}

/* Appends a lower-case slug of `s` (alphanumerics, runs of anything else
 * as one '-') to buf at *len, at most `room` characters. */
static void append_slug(char *buf, size_t n, size_t *len, const char *s, size_t room)
{
    size_t start = *len;
    bool dash = *len > 0; /* a separator before a new part */
    for (const char *p = s; *p && *len + 2 < n && *len - start < room; p++) {
        char ch = *p;
        bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                     (ch >= 'A' && ch <= 'Z');
        if (!alnum) {
            dash = *len > 0;
            continue;
        }
        if (dash && buf[*len - 1] != '-')
            buf[(*len)++] = '-';
        dash = false;
        buf[(*len)++] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    }
    buf[*len] = 0;
}

void cost_machine_key(const cost_machine *m, char *buf, size_t n)
{
    if (!buf || n == 0)
        return;
    /* FNV-1a over the compared fields, NUL-separated, so that CPU names
     * which slug alike (or are cut short) still get their own file. */
    uint32_t h = 2166136261u;
    char cores[32];
    snprintf(cores, sizeof cores, "%d", m->cores);
    const char *parts[4] = {m->cpu_model, cores, m->isa, m->blas_core};
    for (int i = 0; i < 4; i++)
        for (const char *p = parts[i];; p++) {
            h = (h ^ (uint8_t)*p) * 16777619u;
            if (!*p)
                break;
        }
    char tail[2 * COST_MACHINE_STR + 48];
    snprintf(tail, sizeof tail, "%dc-%s-%s-%08x", m->cores, or_unknown(m->isa),
             or_unknown(m->blas_core), h);
    size_t len = 0;
    buf[0] = 0;
    size_t room = n > 48 + 2 ? n - 48 - 2 : 0;
    append_slug(buf, n, &len, or_unknown(m->cpu_model), room < 48 ? room : 48);
    append_slug(buf, n, &len, tail, n);
}

cJSON *cost_machine_to_json(const cost_machine *m)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    bool ok = cJSON_AddStringToObject(j, "cpu_model", m->cpu_model) &&
              cJSON_AddNumberToObject(j, "cores", m->cores) &&
              cJSON_AddStringToObject(j, "isa", m->isa) &&
              cJSON_AddStringToObject(j, "blas_core", m->blas_core) &&
              cJSON_AddStringToObject(j, "blas_config", m->blas_config);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int cost_hw_parse(const char *json, const char *origin, cost_hw *hw, char *err, size_t errsize)
{
    memset(hw, 0, sizeof *hw);
    hw->ew_write_weight = 1; /* a streamed byte written costs a read one's unless calibrated */
    if (!origin)
        origin = "<profile>";
    snprintf(hw->path, sizeof hw->path, "%s", origin);
    cJSON *root = cJSON_Parse(json);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= json ? (size_t)(at - json) : 0;
        set_err(err, errsize, "%s: invalid JSON near byte %zu", origin, off);
        return -1;
    }
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        set_err(err, errsize, "%s: a profile must be a JSON object", origin);
        goto out;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0]) {
        set_err(err, errsize, "%s: missing string field \"name\"", origin);
        goto out;
    }
    snprintf(hw->name, sizeof hw->name, "%s", name->valuestring);
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(root, "status");
    hw->calibrated = !(cJSON_IsString(status) && strcmp(status->valuestring, "uncalibrated") == 0);

    const cJSON *peak = cJSON_GetObjectItemCaseSensitive(root, "peak_flops");
    if (!cJSON_IsObject(peak)) {
        set_err(err, errsize, "%s: missing object \"peak_flops\" (bf16, f32, f64 in FLOP/s)", origin);
        goto out;
    }
    static const struct { const char *key; ir_dtype t; } dts[] = {
        {"bf16", IR_BF16}, {"f32", IR_F32}, {"f64", IR_F64},
    };
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
        if (get_positive(peak, dts[i].key, "peak_flops.", origin, &hw->peak_flops[dts[i].t],
                         err, errsize) < 0)
            goto out;
    /* Optional: the narrow rates a chip may have (absent: none). */
    if ((cJSON_GetObjectItemCaseSensitive(peak, "int8") &&
         get_positive(peak, "int8", "peak_flops.", origin, &hw->peak_int8, err, errsize) < 0) ||
        (cJSON_GetObjectItemCaseSensitive(peak, "fp8") &&
         get_positive(peak, "fp8", "peak_flops.", origin, &hw->peak_fp8, err, errsize) < 0))
        goto out;

    struct { const char *key; double *dst; } figs[] = {
        {"hbm_bytes", &hw->hbm_bytes},
        {"hbm_bandwidth", &hw->hbm_bw},
        {"ici_oneway_bandwidth", &hw->ici_oneway_bw},
        {"ici_bidi_bandwidth", &hw->ici_bidi_bw},
        {"ici_latency", &hw->ici_latency},
        {"dcn_bandwidth", &hw->dcn_bw},
    };
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++)
        if (get_positive(root, figs[i].key, "", origin, figs[i].dst, err, errsize) < 0)
            goto out;
    if (parse_wrap(root, origin, hw, err, errsize) < 0)
        goto out;
    /* Optional: the compiler the chip's programs go through overlaps a
     * tensor-parallel collective with its matmul (absent: it does not). */
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(root, "collective_matmul");
    if (cm && !cJSON_IsBool(cm)) {
        set_err(err, errsize, "%s: field \"collective_matmul\" must be true or false", origin);
        goto out;
    }
    hw->collective_matmul = cJSON_IsTrue(cm);
    if (parse_calibration(root, origin, hw, err, errsize) < 0)
        goto out;
    if (parse_machine(root, origin, hw, err, errsize) < 0)
        goto out;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* Opens the profile `path` for reading: without blocking on a FIFO
 * (O_NONBLOCK, cleared once open), and only a regular file.  NULL and why
 * in err otherwise.  Every profile a user names is opened by it. */
static FILE *open_profile(const char *path, char *err, size_t errsize)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errsize, "cannot open hardware profile '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    int flags;
    FILE *f = NULL;
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode))
        set_err(err, errsize, "hardware profile '%s' is not a regular file", path);
    else if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
             !(f = fdopen(fd, "rb")))
        set_err(err, errsize, "cannot open hardware profile '%s': %s", path, strerror(errno));
    if (!f)
        close(fd);
    return f;
}

/* Reads a whole file into a malloc'd NUL-terminated buffer. */
static char *read_file(const char *path, char *err, size_t errsize)
{
    FILE *f = open_profile(path, err, errsize);
    if (!f)
        return NULL;
    char *buf = malloc(MAX_PROFILE_BYTES + 1);
    if (!buf) {
        fclose(f);
        set_err(err, errsize, "%s: out of memory", path);
        return NULL;
    }
    size_t n = fread(buf, 1, MAX_PROFILE_BYTES + 1, f);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        set_err(err, errsize, "%s: read error", path);
        return NULL;
    }
    if (n > MAX_PROFILE_BYTES) {
        free(buf);
        set_err(err, errsize, "%s: larger than %d bytes, not a hardware profile", path,
                MAX_PROFILE_BYTES);
        return NULL;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        set_err(err, errsize, "%s: contains a NUL byte, not a JSON profile", path);
        return NULL;
    }
    return buf;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int cost_hw_load(const char *name_or_path, cost_hw *hw, char *err, size_t errsize)
{
    if (!name_or_path || !name_or_path[0]) {
        set_err(err, errsize, "empty hardware profile name");
        return -1;
    }
    char path[COST_HW_PATH_MAX];
    if (strchr(name_or_path, '/') || ends_with(name_or_path, ".json")) {
        if (snprintf(path, sizeof path, "%s", name_or_path) >= (int)sizeof path) {
            set_err(err, errsize, "hardware profile path too long: %s", name_or_path);
            return -1;
        }
    } else {
        const char *dir = getenv("EINC_HW_DIR");
        if (!dir || !dir[0])
            dir = HW_DIR_DEFAULT;
        if (snprintf(path, sizeof path, "%s/%s.json", dir, name_or_path) >= (int)sizeof path) {
            set_err(err, errsize, "hardware profile path too long: %s/%s.json", dir, name_or_path);
            return -1;
        }
        struct stat st;
        if (stat(path, &st) != 0) {
            set_err(err, errsize,
                    "unknown hardware profile '%s': no file %s (profiles live in %s; "
                    "set EINC_HW_DIR or pass a path to a .json file)",
                    name_or_path, path, dir);
            return -1;
        }
    }
    char *text = read_file(path, err, errsize);
    if (!text)
        return -1;
    int rc = cost_hw_parse(text, path, hw, err, errsize);
    free(text);
    return rc;
}

bool cost_hw_axis_wraps(const cost_hw *hw, int64_t size)
{
    switch (hw->wrap) {
    case COST_WRAP_ALWAYS:
        return true;
    case COST_WRAP_NEVER:
        return false;
    case COST_WRAP_SIZE_EQUALS:
        return size == hw->wrap_size;
    case COST_WRAP_SIZE_MULTIPLE_OF:
        return hw->wrap_size > 0 && size % hw->wrap_size == 0;
    }
    return false;
}
