/*
 * job.c - what an einc executable does, independent of the backend.
 *
 *   1. parse the command line; --help and --info answer and exit;
 *   2. check the program's descriptors, match --input/--output names to its
 *      tensors (unknown, missing and duplicate names are errors) and check
 *      every input file's header before any device starts, so that a bad
 *      file is one clear message, not a crash in a device;
 *   3. the launcher runs rt_job_device on every device: read its shards
 *      (or generate them), run the program `repeat` times between barriers,
 *      gather the outputs and counters to the root;
 *   4. the root writes outputs (atomically) or prints summaries, runs the
 *      unsharded reference for --check and compares, prints --stats and
 *      the median time of --repeat.
 * Every error ends the job with status 1 and a message from the root.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rt_internal.h"

/* Relative-error tolerance of --check per dtype. */
static double check_tol(int32_t dtype)
{
    return dtype == RT_F64 ? 1e-10 : dtype == RT_BF16 ? 1e-2 : 1e-4;
}

static int64_t bytes_of(const rt_tensor_desc *t, const int64_t *shape)
{
    return rt_numel(t->rank, shape) * (int64_t)rt_dtype_size(t->dtype);
}

void rt_job_device(rt_device *dev, rt_job *job)
{
    const rt_program *p = job->prog;
    char err[1024];
    if (job->trace_cap > 0) /* the spans of --profile and --trace */
        dev->profiling = job->opt->profile ? RT_PROFILE_IN_STEP : RT_PROFILE_SPANS;
    void **in = rt_xmalloc(dev, (size_t)(p->ninputs + 1) * sizeof *in);
    void **out = rt_xmalloc(dev, (size_t)(p->noutputs + 1) * sizeof *out);
    for (int32_t i = 0; i < p->ninputs; i++) {
        const rt_tensor_desc *t = &p->inputs[i];
        int64_t start[RT_MAX_RANK];
        rt_block_start(t, p->axis_sizes, dev->coord, start);
        in[i] = rt_alloc(dev, bytes_of(t, t->local_shape));
        if (job->in_paths[i]) {
            if (rt_npy_read_block(job->in_paths[i], &job->in_headers[i], t, start,
                                  t->local_shape, in[i], err, sizeof err))
                rt_fatal(dev, "%s", err);
        } else {
            rt_random_fill_block(job->opt->seed, t, start, t->local_shape, in[i]);
        }
    }
    for (int32_t i = 0; i < p->noutputs; i++)
        out[i] = rt_alloc(dev, bytes_of(&p->outputs[i], p->outputs[i].local_shape));
    uint32_t all = p->naxes ? (1u << p->naxes) - 1 : 0;
    for (int64_t r = 0; r < job->repeat; r++) {
        dev->ops->barrier(dev, all);
        double t0 = rt_now();
        if (r == 0)
            dev->profile.origin = t0;
        p->run(dev, in, out);
        dev->ops->barrier(dev, all);
        if (dev->id == 0 && job->times)
            job->times[r] = rt_now() - t0;
    }
    for (int32_t i = 0; i < p->noutputs; i++)
        dev->ops->gather(dev, &p->outputs[i], out[i], job->global_out ? job->global_out[i] : NULL);
    for (int32_t i = 0; i < p->noutputs; i++)
        rt_free(dev, out[i]);
    for (int32_t i = 0; i < p->ninputs; i++)
        rt_free(dev, in[i]);
    free(in);
    free(out);
    dev->ops->collect_i64(dev, dev->peak_bytes, job->peak);
    if (job->trace_cap > 0)
        rt_trace_collect(dev, job);
}

/* ---- steps of rt_main ---- */

/* Index of the tensor named `name` in ts[0..n), or -1. */
static int32_t find_tensor(const rt_tensor_desc *ts, int32_t n, const char *name)
{
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(ts[i].name, name))
            return i;
    return -1;
}

/* Refuses, before the run, an --output path that rt_npy_write would
 * refuse after it (rt_output_target: a path that exists and is not a
 * regular file, or a dangling link), so a bad path does not cost the run. */
static int check_output_path(const char *name, const char *path, char *err, size_t errlen)
{
    char *target, why[512];
    struct stat st;
    bool exists;
    if (rt_output_target(path, &target, &st, &exists, why, sizeof why) != 0)
        return rt_errf(err, errlen, "output '%s': %s", name, why);
    free(target);
    return 0;
}

/* Matches --input/--output to the program; fills job->in_paths; checks
 * the output paths. */
static int resolve_names(rt_job *job, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    for (int i = 0; i < o->ninputs; i++) {
        int32_t k = find_tensor(p->inputs, p->ninputs, o->inputs[i].name);
        if (k < 0) {
            int n = snprintf(err, errlen, "--input %s: the program has no input or param named "
                             "'%s'; it has:", o->inputs[i].name, o->inputs[i].name);
            for (int32_t j = 0; j < p->ninputs && n > 0 && (size_t)n < errlen; j++)
                n += snprintf(err + n, errlen - (size_t)n, " %s", p->inputs[j].name);
            return -1;
        }
        if (job->in_paths[k]) {
            snprintf(err, errlen, "input '%s' is given twice", o->inputs[i].name);
            return -1;
        }
        job->in_paths[k] = o->inputs[i].path;
    }
    for (int i = 0; i < o->noutputs; i++) {
        if (find_tensor(p->outputs, p->noutputs, o->outputs[i].name) < 0) {
            int n = snprintf(err, errlen, "--output %s: the program has no output named '%s'; "
                             "it has:", o->outputs[i].name, o->outputs[i].name);
            for (int32_t j = 0; j < p->noutputs && n > 0 && (size_t)n < errlen; j++)
                n += snprintf(err + n, errlen - (size_t)n, " %s", p->outputs[j].name);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(o->outputs[i].name, o->outputs[j].name)) {
                snprintf(err, errlen, "output '%s' is given twice", o->outputs[i].name);
                return -1;
            }
        if (job->rank == 0 && check_output_path(o->outputs[i].name, o->outputs[i].path, err, errlen))
            return -1;
    }
    if (!o->random_inputs)
        for (int32_t k = 0; k < p->ninputs; k++)
            if (!job->in_paths[k]) {
                snprintf(err, errlen, "missing --input %s=FILE.npy for %s '%s' (or use "
                         "--random-inputs SEED)", p->inputs[k].name,
                         p->inputs[k].role == RT_ROLE_PARAM ? "param" : "input", p->inputs[k].name);
                return -1;
            }
    return 0;
}

/* Reads and checks the header of every input file of the job. */
static int check_input_files(rt_job *job, char *err, size_t errlen)
{
    for (int32_t k = 0; k < job->prog->ninputs; k++) {
        if (!job->in_paths[k])
            continue;
        char why[900];
        if (rt_npy_read_header(job->in_paths[k], &job->in_headers[k], why, sizeof why))
            return rt_errf(err, errlen, "tensor '%s': %s", job->prog->inputs[k].name, why);
        if (rt_npy_check(&job->in_headers[k], job->in_paths[k], &job->prog->inputs[k], err,
                         errlen))
            return -1;
    }
    return 0;
}

/* Allocates the job's per-tensor arrays; `root` also gets output and counter arrays. */
static void job_init(rt_job *job, const rt_program *p, const rt_options *o,
                     const rt_launcher *l, int root)
{
    memset(job, 0, sizeof *job);
    job->prog = p;
    job->opt = o;
    job->launcher = l;
    job->repeat = o->repeat;
    job->in_paths = calloc((size_t)p->ninputs + 1, sizeof *job->in_paths);
    job->in_headers = calloc((size_t)p->ninputs + 1, sizeof *job->in_headers);
    if (!job->in_paths || !job->in_headers)
        rt_fatal(NULL, "out of memory");
    if (o->trace || o->profile)
        job->trace_cap = rt_trace_capacity(p, job->repeat);
    if (!root)
        return;
    if (job->trace_cap > 0) {
        job->trace = calloc((size_t)(job->trace_cap * 3 * rt_mesh_size(p)), sizeof *job->trace);
        if (!job->trace)
            rt_fatal(NULL, "out of memory for --trace");
    }
    job->global_out = calloc((size_t)p->noutputs + 1, sizeof *job->global_out);
    job->times = calloc((size_t)job->repeat, sizeof *job->times);
    job->peak = calloc((size_t)rt_mesh_size(p), sizeof *job->peak);
    if (!job->global_out || !job->times || !job->peak)
        rt_fatal(NULL, "out of memory");
    for (int32_t i = 0; i < p->noutputs; i++) {
        const rt_tensor_desc *t = &p->outputs[i];
        job->global_out[i] = malloc((size_t)bytes_of(t, t->global_shape) + 1);
        if (!job->global_out[i])
            rt_fatal(NULL, "out of memory for output '%s'", t->name);
    }
}

static void job_release(rt_job *job)
{
    if (job->global_out)
        for (int32_t i = 0; i < job->prog->noutputs; i++)
            free(job->global_out[i]);
    free(job->global_out);
    free(job->in_paths);
    free(job->in_headers);
    free(job->times);
    free(job->peak);
    free(job->trace);
}

/* Element i of a global array as double. */
static double element(int32_t dtype, const void *x, int64_t i)
{
    switch (dtype) {
    case RT_F64: return ((const double *)x)[i];
    case RT_BF16: return rt_bf16_to_f32(((const uint16_t *)x)[i]);
    default: return ((const float *)x)[i];
    }
}

static void print_summary(const rt_tensor_desc *t, const void *x)
{
    int64_t n = rt_numel(t->rank, t->global_shape);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += element(t->dtype, x, i);
    printf("%s: %s (", t->name, rt_dtype_name(t->dtype));
    for (int32_t d = 0; d < t->rank; d++)
        printf("%s%lld", d ? ", " : "", (long long)t->global_shape[d]);
    printf("%s sum=%.9g values=[", t->rank == 1 ? ",)" : ")", sum);
    for (int64_t i = 0; i < n && i < 4; i++)
        printf("%s%.7g", i ? ", " : "", element(t->dtype, x, i));
    printf("%s]\n", n > 4 ? ", ..." : "");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What --check found for one output. */
struct check_result {
    int64_t nonfinite_run; /* elements of the sharded run's output that are NaN or +-Inf */
    int64_t nonfinite_ref; /* the same in the reference's output */
    double rel_err;        /* max|a-b| / max(max|b|, 1e-30) over the elements finite in both */
};

/* Compares `n` elements of `dtype` of the sharded run's output `a` with the
 * reference's `b`: counts the non-finite elements of each and computes the
 * relative error.  NaN and Inf are counted, never fed to the error: a NaN
 * difference compares false with every maximum and tolerance, and Inf - Inf
 * is NaN, so either would let a broken output pass silently. */
static struct check_result compare_output(int32_t dtype, const void *a, const void *b,
                                          int64_t n)
{
    struct check_result r = {0, 0, 0.0};
    double maxdiff = 0, maxref = 0;
    for (int64_t e = 0; e < n; e++) {
        double x = element(dtype, a, e), y = element(dtype, b, e);
        int fx = isfinite(x), fy = isfinite(y);
        r.nonfinite_run += !fx;
        r.nonfinite_ref += !fy;
        if (fx && fy) {
            maxdiff = fmax(maxdiff, fabs(x - y));
            maxref = fmax(maxref, fabs(y));
        }
    }
    /* Finite f64 operands can still overflow in x - y; an Inf error then fails. */
    r.rel_err = maxdiff / fmax(maxref, 1e-30);
    return r;
}

/* Runs the reference program on one device in this thread and compares
 * every output with the sharded run's.  Every output is reported, one line
 * each; returns 0 if all are finite (in both runs) and within tolerance. */
static int run_check(const rt_job *job)
{
    const rt_program *ref = job->prog->reference;
    char err[1024];
    if (!ref) {
        fprintf(stderr, "einrt: error: --check: this program has no reference (it was built "
                        "without one)\n");
        return -1;
    }
    if (rt_check_program(ref, err, sizeof err)) {
        fprintf(stderr, "einrt: error: --check: reference program: %s\n", err);
        return -1;
    }
    if (rt_mesh_size(ref) != 1) {
        fprintf(stderr, "einrt: error: --check: the reference program's mesh has %lld devices, "
                        "expected 1\n", (long long)rt_mesh_size(ref));
        return -1;
    }
    rt_job rj;
    job_init(&rj, ref, job->opt, job->launcher, 1);
    rj.repeat = 1;
    free(rj.trace); /* --trace and --profile are about the sharded run */
    rj.trace = NULL;
    rj.trace_cap = 0;
    for (int32_t k = 0; k < ref->ninputs; k++) {
        int32_t j = find_tensor(job->prog->inputs, job->prog->ninputs, ref->inputs[k].name);
        if (j < 0) {
            fprintf(stderr, "einrt: error: --check: reference input '%s' is not an input of "
                            "the program\n", ref->inputs[k].name);
            job_release(&rj);
            return -1;
        }
        rj.in_paths[k] = job->in_paths[j];
    }
    if (check_input_files(&rj, err, sizeof err)) {
        fprintf(stderr, "einrt: error: --check: %s\n", err);
        job_release(&rj);
        return -1;
    }
    rt_device_ops ops = rt_solo_ops;
    ops.abort = job->launcher->abort;
    rt_device dev;
    rt_device_init(&dev, ref, &ops, NULL, 0);
    rt_job_device(&dev, &rj);
    rt_device_release(&dev);
    int status = 0;
    for (int32_t i = 0; i < job->prog->noutputs; i++) {
        const rt_tensor_desc *t = &job->prog->outputs[i];
        int32_t j = find_tensor(ref->outputs, ref->noutputs, t->name);
        if (j < 0 || ref->outputs[j].dtype != t->dtype || ref->outputs[j].rank != t->rank ||
            memcmp(ref->outputs[j].global_shape, t->global_shape,
                   sizeof t->global_shape[0] * (size_t)t->rank)) {
            fprintf(stderr, "einrt: error: --check: output '%s' has no matching output in the "
                            "reference\n", t->name);
            status = -1;
            continue;
        }
        int64_t n = rt_numel(t->rank, t->global_shape);
        struct check_result r = compare_output(t->dtype, job->global_out[i],
                                               rj.global_out[j], n);
        if (r.nonfinite_run || r.nonfinite_ref) {
            /* A NaN or Inf is a wrong result even when the reference has it at
             * the same place: the reference is built from the same source, so
             * a NaN in both is a bug of the program, not a match. */
            printf("check %s: FAILED: %lld of %lld elements are NaN or Inf in the run "
                   "(%lld in the reference)\n", t->name, (long long)r.nonfinite_run,
                   (long long)n, (long long)r.nonfinite_ref);
            fprintf(stderr, "einrt: error: --check: output '%s' is not finite: %lld of %lld "
                            "elements are NaN or Inf in the run (%lld in the reference)\n",
                    t->name, (long long)r.nonfinite_run, (long long)n,
                    (long long)r.nonfinite_ref);
            status = -1;
            continue;
        }
        double tol = check_tol(t->dtype);
        printf("check %s: max_rel_err=%.3g (tol %g)\n", t->name, r.rel_err, tol);
        /* Written so that a NaN error (never expected here) fails as well. */
        if (!(r.rel_err <= tol)) {
            fprintf(stderr, "einrt: error: --check: output '%s' differs from the reference: "
                            "max_rel_err %.3g > %g\n", t->name, r.rel_err, tol);
            status = -1;
        }
    }
    job_release(&rj);
    return status;
}

/* Root: outputs, check, stats, timing.  Returns 0 or -1. */
static int finish_root(rt_job *job)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    int status = 0;
    char err[1024];
    for (int32_t i = 0; i < p->noutputs; i++) {
        const rt_tensor_desc *t = &p->outputs[i];
        const char *path = NULL;
        for (int k = 0; k < o->noutputs; k++)
            if (!strcmp(o->outputs[k].name, t->name))
                path = o->outputs[k].path;
        if (!path) {
            print_summary(t, job->global_out[i]);
        } else if (rt_npy_write(path, t, job->global_out[i], err, sizeof err)) {
            fprintf(stderr, "einrt: error: output '%s': %s\n", t->name, err);
            status = -1;
        }
    }
    if (o->profile && job->trace)
        rt_profile_print(stdout, job);
    if (o->trace && job->trace && rt_trace_write(job, o->trace, err, sizeof err)) {
        fprintf(stderr, "einrt: error: %s\n", err);
        status = -1;
    }
    if (o->check && run_check(job))
        status = -1;
    if (o->stats) {
        int64_t n = rt_mesh_size(p), maxi = 0;
        for (int64_t d = 0; d < n; d++)
            if (job->peak[d] > job->peak[maxi])
                maxi = d;
        printf("peak memory per device: max %lld bytes (device %lld)\n",
               (long long)job->peak[maxi], (long long)maxi);
        for (int64_t d = 0; d < n && n <= 64; d++)
            printf("  device %lld: peak %lld bytes\n", (long long)d, (long long)job->peak[d]);
    }
    if (o->repeat_given) {
        qsort(job->times, (size_t)job->repeat, sizeof *job->times, cmp_double);
        int64_t r = job->repeat;
        double med = r % 2 ? job->times[r / 2] : 0.5 * (job->times[r / 2 - 1] + job->times[r / 2]);
        printf("median time per run: %.3f ms (%lld runs, %s backend, %lld devices)\n", 1e3 * med,
               (long long)r, job->launcher->name, (long long)rt_mesh_size(p));
    }
    return status;
}

int rt_main(int argc, char **argv, const rt_program *prog, const rt_launcher *l)
{
    int rank = 0, nranks = 1;
    l->init(&argc, &argv, &rank, &nranks);
    int root = rank == 0;
    char err[1024];
    rt_options opt;
    if (rt_parse_options(argc, argv, &opt, err, sizeof err)) {
        if (root)
            fprintf(stderr, "einrt: error: %s\n", err);
        rt_free_options(&opt);
        l->finish(1);
    }
    if (opt.help) {
        if (root)
            rt_print_help(stdout, argv[0]);
        rt_free_options(&opt);
        l->finish(0);
    }
    if (rt_check_program(prog, err, sizeof err)) {
        if (root)
            fprintf(stderr, "einrt: error: bad program: %s\n", err);
        rt_free_options(&opt);
        l->finish(1);
    }
    if (opt.info) {
        if (root)
            rt_print_info(stdout, prog);
        rt_free_options(&opt);
        l->finish(0);
    }
    if (l->ranks_are_devices && nranks != rt_mesh_size(prog)) {
        if (root)
            fprintf(stderr, "einrt: error: the program's mesh has %lld devices but the job has "
                            "%d ranks; run it with mpirun -np %lld\n",
                    (long long)rt_mesh_size(prog), nranks, (long long)rt_mesh_size(prog));
        rt_free_options(&opt);
        l->finish(1);
    }
    rt_job job;
    job_init(&job, prog, &opt, l, root);
    job.rank = rank;
    job.nranks = nranks;
    int ok = resolve_names(&job, err, sizeof err) == 0 &&
             check_input_files(&job, err, sizeof err) == 0;
    if (!ok && root)
        fprintf(stderr, "einrt: error: %s\n", err);
    if (!l->all_ok(ok)) {
        /* A file that only some ranks cannot read (another directory,
         * another host): those ranks say why, once the root is known to
         * be fine, so a fault shared by every rank is reported once. */
        int root_ok = l->all_ok(root ? ok : 1);
        if (!ok && !root && root_ok)
            fprintf(stderr, "einrt: error: rank %d: %s\n", rank, err);
        job_release(&job);
        rt_free_options(&opt);
        l->finish(1);
    }
    l->run(&job);
    int status = root ? finish_root(&job) : 0;
    job_release(&job);
    rt_free_options(&opt);
    l->finish(status ? 1 : 0);
}
