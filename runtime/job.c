/*
 * job.c - what an einc executable does, independent of the backend.
 *
 *   1. parse the command line; --help and --info answer and exit;
 *   2. check the program's descriptors, match --input/--output names to its
 *      tensors (unknown, missing and duplicate names are errors) and check
 *      every input file's header before any device starts, so that a bad
 *      file is one clear message, not a crash in a device;
 *      A training program (train.c) also resolves --data, --resume and
 *      --save here, and opens its datasets;
 *   3. the launcher runs rt_job_device on every device: read its shards
 *      (or generate them; a state starts at zero), run the program
 *      `repeat` times between barriers or, for a training program, its
 *      steps, gather the outputs and counters to the root;
 *   4. the root writes outputs (atomically) or prints summaries, runs the
 *      unsharded reference for --check and compares (check.c), prints
 *      --stats and the median time of --repeat.
 * Every error ends the job with status 1 and a message from the root.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_job.h"
#include "rt_serve.h"

static int64_t bytes_of(const rt_tensor_desc *t, const int64_t *shape)
{
    return rt_numel(t->rank, shape) * (int64_t)rt_dtype_size(t->dtype);
}

/* Whether --output names input k, a state of a program that does not train. */
static bool state_output(const rt_job *job, int32_t k)
{
    if (job->train || job->prog->inputs[k].role != RT_ROLE_STATE)
        return false;
    for (int i = 0; i < job->opt->noutputs; i++)
        if (!strcmp(job->opt->outputs[i].name, job->prog->inputs[k].name))
            return true;
    return false;
}

void rt_run_timed(rt_device *dev, rt_job *job, void *const *in, void *const *out, int64_t r)
{
    const rt_program *p = job->prog;
    uint32_t all = p->naxes ? (1u << p->naxes) - 1 : 0;
    dev->ops->barrier(dev, all);
    double t0 = rt_now();
    if (r == 0)
        dev->profile.origin = t0;
    p->run(dev, in, out);
    dev->ops->barrier(dev, all);
    if (dev->id == 0 && job->times)
        job->times[r] = rt_now() - t0;
}

/* Runs the program job->repeat times (rt_run_timed). */
static void run_repeat(rt_device *dev, rt_job *job, void *const *in, void *const *out)
{
    for (int64_t r = 0; r < job->repeat; r++)
        rt_run_timed(dev, job, in, out, r);
}

void **rt_job_load_inputs(rt_device *dev, const rt_job *job)
{
    const rt_program *p = job->prog;
    char err[1024];
    void **in = rt_xmalloc(dev, (size_t)(p->ninputs + 1) * sizeof *in);
    for (int32_t i = 0; i < p->ninputs; i++) {
        const rt_tensor_desc *t = &p->inputs[i];
        in[i] = rt_alloc(dev, bytes_of(t, t->local_shape));
        if (!job->in_paths[i] && job->train && job->train->data_file[i] >= 0)
            continue; /* each step copies its batch */
        if (!job->in_paths[i] && t->role == RT_ROLE_STATE) {
            memset(in[i], 0, (size_t)bytes_of(t, t->local_shape));
            continue;
        }
        /* The block's parts: one, or a block-cyclic dim's v (layout.c). */
        for (int32_t j = 0; j < rt_block_nparts(t); j++) {
            int64_t start[RT_MAX_RANK], ext[RT_MAX_RANK], off;
            rt_block_part(t, p->axis_sizes, dev->coord, j, start, ext, &off);
            char *dst = (char *)in[i] + (size_t)off * rt_dtype_size(t->dtype);
            if (!job->in_paths[i])
                rt_random_fill_block(job->opt->seed, t, start, ext, dst);
            else if (rt_npy_read_block(job->in_paths[i], &job->in_headers[i], t, start, ext, dst, err,
                                       sizeof err))
                rt_fatal(dev, "%s", err);
        }
    }
    return in;
}

void **rt_job_alloc_outputs(rt_device *dev, const rt_program *p)
{
    void **out = rt_xmalloc(dev, (size_t)(p->noutputs + 1) * sizeof *out);
    for (int32_t i = 0; i < p->noutputs; i++)
        out[i] = rt_alloc(dev, bytes_of(&p->outputs[i], p->outputs[i].local_shape));
    return out;
}

void rt_job_free_buffers(rt_device *dev, const rt_program *p, void **in, void **out)
{
    for (int32_t i = 0; i < p->noutputs; i++)
        rt_free(dev, out[i]);
    for (int32_t i = 0; i < p->ninputs; i++)
        rt_free(dev, in[i]);
    free(in);
    free(out);
}

void rt_job_device(rt_device *dev, rt_job *job)
{
    const rt_program *p = job->prog;
    if (job->trace_cap > 0) /* the spans of --profile and --trace */
        dev->profiling = job->opt->profile ? RT_PROFILE_IN_STEP : RT_PROFILE_SPANS;
    void **in = rt_job_load_inputs(dev, job);
    void **out = rt_job_alloc_outputs(dev, p);
    if (job->train)
        rt_train_device(dev, job, in, out);
    else if (job->gen)
        rt_generate_device(dev, job, in, out);
    else
        run_repeat(dev, job, in, out);
    for (int32_t k = 0; k < p->ninputs; k++) /* the same order on every rank */
        if (state_output(job, k))
            dev->ops->gather(dev, &p->inputs[k], in[k], job->state_out ? job->state_out[k] : NULL);
    for (int32_t i = 0; i < p->noutputs && !job->opt->discard_outputs; i++)
        dev->ops->gather(dev, &p->outputs[i], out[i], job->global_out ? job->global_out[i] : NULL);
    rt_job_free_buffers(dev, p, in, out);
    dev->ops->collect_i64(dev, dev->peak_bytes, job->peak);
    if (job->trace_cap > 0)
        rt_trace_collect(dev, job);
}

/* ---- steps of rt_main ---- */

int32_t rt_find_tensor(const rt_tensor_desc *ts, int32_t n, const char *name)
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

/* An --output that names no output must name a param or state of a
 * training program (its value after the last step). */
static int check_state_output(const rt_program *p, const char *name, char *err, size_t errlen)
{
    int32_t k = rt_find_tensor(p->inputs, p->ninputs, name);
    /* A state changes in any program: a KV cache is written in place. */
    if (k >= 0 && (p->inputs[k].role == RT_ROLE_STATE ||
                   (p->trains && p->inputs[k].role != RT_ROLE_INPUT)))
        return 0;
    if (k >= 0 && p->inputs[k].role == RT_ROLE_INPUT)
        return rt_errf(err, errlen, "--output %s: '%s' is an input, not an output%s", name, name,
                       p->trains ? " (a training program also writes its params and states)"
                                 : "");
    if (k >= 0)
        return rt_errf(err, errlen, "--output %s: '%s' is a param of a program that does not "
                       "train, so it never changes", name, name);
    int n = snprintf(err, errlen, "--output %s: the program has no output%s named '%s'; it "
                     "has:", name, p->trains ? ", param or state" : "", name);
    for (int32_t j = 0; j < p->noutputs && n > 0 && (size_t)n < errlen; j++)
        n += snprintf(err + n, errlen - (size_t)n, " %s", p->outputs[j].name);
    for (int32_t j = 0; p->trains && j < p->ninputs && n > 0 && (size_t)n < errlen; j++)
        if (p->inputs[j].role != RT_ROLE_INPUT)
            n += snprintf(err + n, errlen - (size_t)n, " %s", p->inputs[j].name);
    return -1;
}

/* Matches --input/--output to the program; fills job->in_paths; checks
 * the output paths. */
static int resolve_names(rt_job *job, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    for (int i = 0; i < o->ninputs; i++) {
        int32_t k = rt_find_tensor(p->inputs, p->ninputs, o->inputs[i].name);
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
        if (rt_find_tensor(p->outputs, p->noutputs, o->outputs[i].name) < 0 &&
            check_state_output(p, o->outputs[i].name, err, errlen))
            return -1;
        for (int j = 0; j < i; j++)
            if (!strcmp(o->outputs[i].name, o->outputs[j].name)) {
                snprintf(err, errlen, "output '%s' is given twice", o->outputs[i].name);
                return -1;
            }
        if (job->rank == 0 && check_output_path(o->outputs[i].name, o->outputs[i].path, err, errlen))
            return -1;
    }
    return 0;
}

/* Every input and param has a value: a file, a --data dataset, or
 * --random-inputs; a state not given starts at zero. */
static int check_missing(const rt_job *job, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    for (int32_t k = 0; k < p->ninputs && !job->opt->random_inputs; k++) {
        const rt_tensor_desc *t = &p->inputs[k];
        if (job->in_paths[k] || t->role == RT_ROLE_STATE ||
            (job->train && job->train->data_file[k] >= 0) ||
            (job->gen && (k == job->gen->tokens || k == job->gen->position)))
            continue;
        if (t->role == RT_ROLE_PARAM)
            return rt_errf(err, errlen, "missing --input %s=FILE.npy for param '%s' (or use "
                           "--random-inputs SEED, --params DIR%s)", t->name, t->name,
                           p->trains ? ", or --resume DIR" : "");
        return rt_errf(err, errlen, "missing --input %s=FILE.npy for input '%s' (or use %s"
                       "--random-inputs SEED)", t->name, t->name,
                       p->trains ? "--data NAME=FILE.npy, or " : "");
    }
    return 0;
}

int rt_job_resolve_inputs(rt_job *job, char *err, size_t errlen)
{
    if (resolve_names(job, err, errlen) || rt_params_resolve(job, err, errlen) ||
        check_missing(job, err, errlen) || rt_check_input_files(job, err, errlen))
        return -1;
    return 0;
}

int rt_check_input_files(rt_job *job, char *err, size_t errlen)
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

void rt_job_init(rt_job *job, const rt_program *p, const rt_options *o, const rt_launcher *l)
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
}

void rt_job_alloc(rt_job *job, int root, int traced)
{
    const rt_program *p = job->prog;
    if (traced && (job->opt->trace || job->opt->profile))
        job->trace_cap = rt_trace_capacity(p, job->repeat);
    if (!root)
        return;
    if (job->trace_cap > 0) {
        job->trace = calloc((size_t)(job->trace_cap * 3 * rt_mesh_size(p)), sizeof *job->trace);
        job->origins = calloc((size_t)rt_mesh_size(p), sizeof *job->origins);
        if (!job->trace || !job->origins)
            rt_fatal(NULL, "out of memory for --trace");
    }
    job->global_out = calloc((size_t)p->noutputs + 1, sizeof *job->global_out);
    job->times = calloc((size_t)job->repeat, sizeof *job->times);
    job->peak = calloc((size_t)rt_mesh_size(p), sizeof *job->peak);
    if (!job->global_out || !job->times || !job->peak)
        rt_fatal(NULL, "out of memory");
    /* --discard-outputs: a timing run of a program whose outputs are GiB
     * (einc calibrate's) spent half its time gathering and summing them. */
    for (int32_t i = 0; i < p->noutputs && !job->opt->discard_outputs; i++) {
        const rt_tensor_desc *t = &p->outputs[i];
        job->global_out[i] = malloc((size_t)bytes_of(t, t->global_shape) + 1);
        if (!job->global_out[i])
            rt_fatal(NULL, "out of memory for output '%s'", t->name);
    }
    job->state_out = calloc((size_t)p->ninputs + 1, sizeof *job->state_out);
    if (!job->state_out)
        rt_fatal(NULL, "out of memory");
    for (int32_t k = 0; k < p->ninputs; k++) {
        const rt_tensor_desc *t = &p->inputs[k];
        if (state_output(job, k) && !(job->state_out[k] = malloc((size_t)bytes_of(t, t->global_shape) + 1)))
            rt_fatal(NULL, "out of memory for state '%s'", t->name);
    }
    if (job->train)
        rt_train_alloc(job->train, p, job->repeat);
}

void rt_job_release(rt_job *job)
{
    if (job->global_out)
        for (int32_t i = 0; i < job->prog->noutputs; i++)
            free(job->global_out[i]);
    free(job->global_out);
    if (job->state_out)
        for (int32_t k = 0; k < job->prog->ninputs; k++)
            free(job->state_out[k]);
    free(job->state_out);
    for (int32_t k = 0; job->param_paths && k < job->prog->ninputs; k++)
        free(job->param_paths[k]);
    free(job->param_paths);
    free(job->in_paths);
    free(job->in_headers);
    free(job->times);
    free(job->peak);
    free(job->trace);
    free(job->origins);
}

static void print_summary(const rt_tensor_desc *t, const void *x)
{
    int64_t n = rt_numel(t->rank, t->global_shape);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += rt_element(t->dtype, x, i);
    printf("%s: %s (", t->name, rt_dtype_name(t->dtype));
    for (int32_t d = 0; d < t->rank; d++)
        printf("%s%lld", d ? ", " : "", (long long)t->global_shape[d]);
    printf("%s sum=%.9g values=[", t->rank == 1 ? ",)" : ")", sum);
    for (int64_t i = 0; i < n && i < 4; i++)
        printf("%s%.7g", i ? ", " : "", rt_element(t->dtype, x, i));
    printf("%s]\n", n > 4 ? ", ..." : "");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Root: writes the --output files that name a param or state (their
 * values after the last step or run). */
static int write_state_outputs(const rt_job *job)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    int status = 0;
    char err[1024];
    for (int i = 0; i < o->noutputs; i++) {
        if (rt_find_tensor(p->outputs, p->noutputs, o->outputs[i].name) >= 0)
            continue;
        int32_t k = rt_find_tensor(p->inputs, p->ninputs, o->outputs[i].name);
        void *v = job->train ? job->train->final[k] : job->state_out[k];
        if (rt_npy_write(o->outputs[i].path, &p->inputs[k], v, err, sizeof err)) {
            fprintf(stderr, "einrt: error: output '%s': %s\n", p->inputs[k].name, err);
            status = -1;
        }
    }
    return status;
}

/* Root: outputs, check, stats, timing.  Returns 0 or -1. */
static int finish_root(rt_job *job)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    int status = 0;
    char err[1024];
    if (job->train)
        rt_train_summary(stdout, job);
    if (job->gen && rt_generate_finish(stdout, job, err, sizeof err)) {
        fprintf(stderr, "einrt: error: --generated: %s\n", err);
        status = -1;
    }
    if (write_state_outputs(job))
        status = -1;
    for (int32_t i = 0; i < p->noutputs && !o->discard_outputs; i++) {
        const rt_tensor_desc *t = &p->outputs[i];
        const char *path = NULL;
        for (int k = 0; k < o->noutputs; k++)
            if (!strcmp(o->outputs[k].name, t->name))
                path = o->outputs[k].path;
        if (!path && !o->serve) { /* --serve's last step's outputs mean nothing */
            print_summary(t, job->global_out[i]);
        } else if (path && rt_npy_write(path, t, job->global_out[i], err, sizeof err)) {
            fprintf(stderr, "einrt: error: output '%s': %s\n", t->name, err);
            status = -1;
        }
    }
    rt_trace_align(job);
    if (o->profile && job->trace) {
        rt_profile_print(stdout, job);
        rt_pipe_bubble_print(stdout, job);
    }
    if (o->trace && job->trace && rt_trace_write(job, o->trace, err, sizeof err)) {
        fprintf(stderr, "einrt: error: %s\n", err);
        status = -1;
    }
    if (o->check && rt_run_check(job))
        status = -1;
    if (o->stats || o->profile) { /* --profile: the largest; --stats: every device's */
        int64_t n = rt_mesh_size(p), maxi = 0;
        for (int64_t d = 0; d < n; d++)
            if (job->peak[d] > job->peak[maxi])
                maxi = d;
        printf("peak memory per device: max %lld bytes (device %lld)\n",
               (long long)job->peak[maxi], (long long)maxi);
        for (int64_t d = 0; d < n && n <= 64 && o->stats; d++)
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

/* The checks of the command line against the program that need no file:
 * training flags need a program that trains, and a training program takes
 * --steps, not --repeat.  -1 and a message if one fails. */
static int check_mode(const rt_program *p, const rt_options *o, char *err, size_t errlen)
{
    const char *flag = rt_training_flag(o);
    if (flag && !p->trains)
        return rt_errf(err, errlen, "%s: this program does not train (it has no `optimize` "
                       "statement)", flag);
    if (p->trains && o->repeat_given)
        return rt_errf(err, errlen, "--repeat: this program trains, and each run is one "
                       "training step; use --steps N");
    if (o->generate && (p->trains || o->repeat_given))
        return rt_errf(err, errlen, "--generate: %s", p->trains ? "this program trains"
                       : "each generated token is one run; --repeat does not apply");
    if ((o->ndraft_inputs || o->draft_params) && !o->speculate)
        return rt_errf(err, errlen, "%s gives the draft's values: it needs --speculate K",
                       o->draft_params ? "--draft-params" : "--draft-input");
    if (o->speculate && (!o->generate || o->serve))
        return rt_errf(err, errlen, "--speculate K speculates the tokens of --generate N%s",
                       o->serve ? "; --serve does not speculate" : ": give --generate");
    if (o->discard_outputs && (o->check || o->noutputs || p->trains || o->generate || o->serve))
        return rt_errf(err, errlen, "--discard-outputs runs the program only to time it: it "
                       "cannot go with %s", o->check ? "--check" : o->noutputs ? "--output"
                       : p->trains ? "training" : o->generate ? "--generate" : "--serve");
    if (o->serve)
        return rt_serve_check_mode(p, o, err, errlen);
    if (!o->generate && (o->prompt_ids || o->temperature > 0 || o->generated || o->prompt_cached ||
                         o->top_k || o->top_p_given || o->nstop))
        return rt_errf(err, errlen, "%s needs --generate N",
                       o->prompt_ids ? "--prompt-ids" : o->generated ? "--generated"
                       : o->prompt_cached ? "--prompt-cached" : o->top_k ? "--top-k"
                       : o->top_p_given ? "--top-p" : o->nstop ? "--stop-token" : "--temperature");
    return 0;
}

int rt_prepare(rt_prepared *pr, int argc, char **argv, const rt_program *prog,
               const rt_program *draft, const rt_program *prefill, const rt_launcher *l, int rank,
               int nranks, char *err, size_t errlen)
{
    memset(pr, 0, sizeof *pr);
    rt_options *o = &pr->opt;
    if (rt_parse_options(argc, argv, o, err, errlen))
        return RT_PREP_ERROR;
    if (o->help)
        return RT_PREP_HELP;
    if (rt_check_program(prog, err, errlen)) {
        char why[900];
        snprintf(why, sizeof why, "%s", err);
        return rt_errf(err, errlen, "bad program: %s", why);
    }
    if (o->info)
        return RT_PREP_INFO;
    if (l->ranks_are_devices && nranks != rt_mesh_size(prog))
        return rt_errf(err, errlen, "the program's mesh has %lld devices but the job has %d "
                       "ranks; run it with mpirun -np %lld", (long long)rt_mesh_size(prog),
                       nranks, (long long)rt_mesh_size(prog));
    if (check_mode(prog, o, err, errlen))
        return RT_PREP_ERROR;
    rt_job *job = &pr->job;
    rt_job_init(job, prog, o, l);
    job->draft = draft;
    job->prefill = prefill;
    pr->job_ready = 1;
    job->rank = rank;
    job->nranks = nranks;
    int ok = resolve_names(job, err, errlen) == 0 &&
             rt_params_resolve(job, err, errlen) == 0 &&
             rt_check_paths(o, prog, err, errlen) == 0 &&
             (!prog->trains || rt_train_prepare(job, &pr->train, &pr->data, err, errlen) == 0) &&
             (!o->generate || rt_generate_prepare(job, &pr->gen, err, errlen) == 0) &&
             (!o->serve || rt_serve_prepare(job, &pr->gen, err, errlen) == 0) &&
             check_missing(job, err, errlen) == 0 &&
             rt_check_input_files(job, err, errlen) == 0;
    return ok ? RT_PREP_RUN : RT_PREP_FILES;
}

int rt_prepared_release(rt_prepared *pr, char *err, size_t errlen)
{
    rt_job *job = &pr->job;
    int rc = 0;
    if (pr->job_ready) {
        rc = job->train ? rt_train_release(&pr->train, job->prog, err, errlen) : 0;
        if (job->gen)
            rt_generate_release(job->gen);
        rt_data_close(&pr->data);
        rt_job_release(job);
    }
    rt_free_options(&pr->opt);
    memset(pr, 0, sizeof *pr);
    return rc;
}

int rt_main(int argc, char **argv, const rt_program *prog, const rt_program *draft,
            const rt_program *prefill, const rt_launcher *l)
{
    /* The only write to the environment, before MPI_Init or any thread
     * could read it (rt_bf16.h). */
    rt_bf16_gemm_environ();
    int rank = 0, nranks = 1;
    l->init(&argc, &argv, &rank, &nranks);
    int root = rank == 0;
    char err[1024];
    rt_prepared prep;
    rt_prepared *pr = &prep;
    int what = rt_prepare(pr, argc, argv, prog, draft, prefill, l, rank, nranks, err,
                          sizeof err);
    if (what == RT_PREP_HELP || what == RT_PREP_INFO) {
        if (root && what == RT_PREP_HELP)
            rt_print_help(stdout, argv[0]);
        else if (root)
            rt_print_info(stdout, prog);
        rt_prepared_release(pr, err, sizeof err);
        l->finish(0);
    }
    if (what == RT_PREP_ERROR) {
        if (root)
            fprintf(stderr, "einrt: error: %s\n", err);
        rt_prepared_release(pr, err, sizeof err);
        l->finish(1);
    }
    int ok = what == RT_PREP_RUN;
    if (!ok && root)
        fprintf(stderr, "einrt: error: %s\n", err);
    if (!l->all_ok(ok)) {
        /* A file that only some ranks cannot read (another directory,
         * another host): those ranks say why, once the root is known to
         * be fine, so a fault shared by every rank is reported once. */
        int root_ok = l->all_ok(root ? ok : 1);
        if (!ok && !root && root_ok)
            fprintf(stderr, "einrt: error: rank %d: %s\n", rank, err);
        rt_prepared_release(pr, err, sizeof err);
        l->finish(1);
    }
    rt_job *job = &pr->job;
    rt_job_alloc(job, root, 1);
    l->run(job);
    int status = root ? finish_root(job) : 0;
    if (rt_prepared_release(pr, err, sizeof err)) {
        fprintf(stderr, "einrt: error: %s\n", err);
        status = -1;
    }
    l->finish(status ? 1 : 0);
}
