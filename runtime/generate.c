/*
 * generate.c - the generation loop of a decode program (--generate N):
 * feed each prompt token, then each generated one, to a program that takes
 * one token per sequence and writes it into its KV cache (a `state`).
 *
 * The program's interface, found by shape (and checked before the run):
 *  - the tokens: its one i32 input of rank 1, [B] (sharded or not);
 *  - the position: its one i32 scalar input, the cache slot written;
 *  - the next token: greedy decoding reads its one i32 output of shape [B]
 *    (an argmax in the program) if it has one, else the argmax of the
 *    logits; sampling (--temperature T > 0) reads the logits, its one
 *    floating-point output of shape [B, V].  Either must be replicated (the
 *    output written without subscripts), so every device holds the whole
 *    array and picks the same tokens with no communication.
 *
 * Step s (0-based) runs the program with position s on tokens ids[:, s]:
 * the prompt's for s < T0, then the tokens generated so far.  Steps T0-1
 * onwards each make one new token per sequence, so N tokens take T0+N-1
 * steps, and the prompt is read one token per step (prefill as decode
 * steps; the time to first token is the T0 prompt steps).  With
 * --prompt-cached P the states given by --input hold positions 0..P-1
 * already (the same model compiled with a window of P new tokens wrote
 * them in one run, its prefill, and --output saved them), so the steps
 * start at s = P.  Sampling draws
 * from softmax(logits / T) with a uniform number from splitmix64 of the
 * seed, the step and the sequence: the same on every device and every run.
 * Device 0 records the tokens; each step is timed as --repeat times a run
 * (rt_run_timed, into job->times).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

/* The index of the one tensor of ts[0..n) that `match` accepts, -1 if there
 * is none, -2 if there are several. */
static int32_t find_one(const rt_tensor_desc *ts, int32_t n, int (*match)(const rt_tensor_desc *))
{
    int32_t k = -1;
    for (int32_t i = 0; i < n; i++)
        if (match(&ts[i]))
            k = k == -1 ? i : -2;
    return k;
}

/* [B], or [B, 1]: one new token per sequence written with a window dim
 * of size 1 (the decode of a model whose prefill has T new tokens). */
static int one_per_row(const rt_tensor_desc *t)
{
    return t->rank == 1 || (t->rank == 2 && t->global_shape[1] == 1);
}

static int is_tokens(const rt_tensor_desc *t)
{
    return t->role == RT_ROLE_INPUT && t->dtype == RT_I32 && one_per_row(t);
}
static int is_position(const rt_tensor_desc *t)
{
    return t->role == RT_ROLE_INPUT && t->dtype == RT_I32 && t->rank == 0;
}
static int is_next(const rt_tensor_desc *t)
{
    return t->dtype == RT_I32 && one_per_row(t);
}
/* [B, V], or [B, 1, V]. */
static int is_logits(const rt_tensor_desc *t)
{
    return t->dtype != RT_I32 && (t->rank == 2 || (t->rank == 3 && t->global_shape[1] == 1));
}

/* An unsharded i32 [rows, cols] tensor named `name` (the prompt, the ids). */
static rt_tensor_desc ids_desc(const char *name, int64_t rows, int64_t cols)
{
    rt_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.dtype = RT_I32;
    d.rank = 2;
    d.global_shape[0] = d.local_shape[0] = rows;
    d.global_shape[1] = d.local_shape[1] = cols;
    return d;
}

/* Whether every device holds the whole of t. */
static int replicated(const rt_tensor_desc *t)
{
    return !memcmp(t->local_shape, t->global_shape, sizeof t->local_shape[0] * (size_t)t->rank);
}

int rt_generate_prepare(rt_job *job, rt_generate *g, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    memset(g, 0, sizeof *g);
    job->gen = g; /* released with the job, also after a failure here */
    g->n = o->generate;
    g->temperature = o->temperature;
    g->seed = o->shuffle_seed;
    g->tokens = find_one(p->inputs, p->ninputs, is_tokens);
    g->position = find_one(p->inputs, p->ninputs, is_position);
    g->next = find_one(p->outputs, p->noutputs, is_next);
    g->logits = find_one(p->outputs, p->noutputs, is_logits);
    if (g->tokens < 0 || g->position < 0)
        return rt_errf(err, errlen, "--generate: the program needs one i32 input of shape [B] (the "
                       "tokens) and one i32 scalar input (the position); it has %s %s",
                       (g->tokens < 0 ? g->tokens : g->position) == -2 ? "several" : "no",
                       g->tokens < 0 ? "token inputs" : "position inputs");
    if (g->temperature > 0 || g->next < 0)
        g->next = -1; /* sampling, or greedy without an argmax: the logits decide */
    const rt_tensor_desc *tok = &p->inputs[g->tokens];
    g->batch = tok->global_shape[0];
    if (g->next >= 0 && (p->outputs[g->next].global_shape[0] != g->batch ||
                         !replicated(&p->outputs[g->next])))
        return rt_errf(err, errlen, "--generate: output '%s' is the next token of each sequence: "
                       "it must have shape [%lld] and be replicated (written without subscripts)",
                       p->outputs[g->next].name, (long long)g->batch);
    if (g->next < 0) {
        if (g->logits < 0)
            return rt_errf(err, errlen, "--generate: the program needs %s floating-point output "
                           "of shape [B, V] (the logits)%s", g->logits == -2 ? "exactly one" : "one",
                           g->temperature > 0 ? " to sample from" : " or one i32 output [B]");
        const rt_tensor_desc *l = &p->outputs[g->logits];
        if (l->global_shape[0] != g->batch || !replicated(l))
            return rt_errf(err, errlen, "--generate: output '%s' holds the logits: it must have "
                           "shape [%lld, V] and be replicated (written without subscripts)",
                           l->name, (long long)g->batch);
        g->vocab = l->global_shape[l->rank - 1];
    }
    if (job->in_paths[g->tokens] || job->in_paths[g->position])
        return rt_errf(err, errlen, "--generate feeds '%s' and '%s' itself: give the prompt with "
                       "--prompt-ids", tok->name, p->inputs[g->position].name);
    /* The prompt: i32 [B, T0]. */
    if (!o->prompt_ids)
        return rt_errf(err, errlen, "--generate needs --prompt-ids FILE.npy (i32, [%lld, T])",
                       (long long)g->batch);
    rt_npy_header h;
    if (rt_npy_read_header(o->prompt_ids, &h, err, errlen))
        return -1;
    if (h.rank != 2 || h.shape[0] != g->batch || h.shape[1] < 1 || strcmp(h.descr, "<i4")) {
        char shape[64];
        rt_format_shape(shape, sizeof shape, h.rank, h.shape);
        return rt_errf(err, errlen, "--prompt-ids %s: expected '<i4' of shape (%lld, T) with T >= "
                       "1, got '%s' %s", o->prompt_ids, (long long)g->batch, h.descr, shape);
    }
    g->prompt_len = h.shape[1];
    if (g->n > INT32_MAX - g->prompt_len)
        return rt_errf(err, errlen, "--generate %lld: too many tokens", (long long)g->n);
    g->steps = g->prompt_len + g->n - 1;
    g->first = o->prompt_cached > 0 ? o->prompt_cached : 0;
    if (g->first >= g->prompt_len)
        return rt_errf(err, errlen, "--prompt-cached %lld: the prompt has %lld tokens, and the "
                       "last one must be run to make the first new token: at most %lld",
                       (long long)g->first, (long long)g->prompt_len,
                       (long long)g->prompt_len - 1);
    for (int32_t i = 0; g->first > 0 && i < p->ninputs; i++)
        if (p->inputs[i].role == RT_ROLE_STATE && !job->in_paths[i])
            return rt_errf(err, errlen, "--prompt-cached %lld: state '%s' holds the cache of the "
                           "first %lld positions: give it with --input %s=FILE.npy (a prefill "
                           "run's --output)", (long long)g->first, p->inputs[i].name,
                           (long long)g->first, p->inputs[i].name);
    int64_t len = g->prompt_len + g->n;
    g->ids = calloc((size_t)(g->batch * len), sizeof *g->ids);
    if (!g->ids)
        return rt_errf(err, errlen, "out of memory");
    /* Read whole, then spread into ids[:, 0..T0). */
    rt_tensor_desc d = ids_desc("prompt", g->batch, g->prompt_len);
    int32_t *prompt = malloc((size_t)(g->batch * g->prompt_len) * sizeof *prompt + 1);
    int64_t start[2] = {0, 0};
    int rc = prompt ? rt_npy_read_block(o->prompt_ids, &h, &d, start, d.local_shape, prompt, err,
                                        errlen)
                    : rt_errf(err, errlen, "out of memory");
    for (int64_t b = 0; rc == 0 && b < g->batch; b++)
        memcpy(g->ids + b * len, prompt + b * g->prompt_len, (size_t)g->prompt_len * sizeof *prompt);
    free(prompt);
    job->repeat = g->steps - g->first;
    return rc;
}

void rt_generate_release(rt_generate *g)
{
    free(g->ids);
    memset(g, 0, sizeof *g);
}

/* A uniform number in [0, 1) from splitmix64 of (seed, step, sequence). */
static double uniform(uint64_t seed, int64_t step, int64_t b)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(step * 1000003 + b + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* The next token of sequence b from its row of logits: the first maximum
 * (NaN counts as the largest, as numpy.argmax), or a draw from
 * softmax(row / T). */
static int32_t pick(const rt_generate *g, int32_t dtype, const void *logits, int64_t b, int64_t s)
{
    int64_t V = g->vocab, best = 0;
    double m = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
        double x = rt_element(dtype, logits, b * V + v);
        if (x > m || (isnan(x) && !isnan(m))) {
            m = x;
            best = v;
        }
    }
    if (!(g->temperature > 0) || isnan(m) || isinf(m))
        return (int32_t)best;
    double z = 0;
    for (int64_t v = 0; v < V; v++)
        z += exp((rt_element(dtype, logits, b * V + v) - m) / g->temperature);
    double u = uniform(g->seed, s, b) * z, c = 0;
    for (int64_t v = 0; v < V; v++) {
        c += exp((rt_element(dtype, logits, b * V + v) - m) / g->temperature);
        if (u < c)
            return (int32_t)v;
    }
    return (int32_t)best; /* rounding left u past the last bucket */
}

void rt_generate_device(rt_device *dev, rt_job *job, void *const *in, void *const *out)
{
    const rt_program *p = job->prog;
    rt_generate *g = job->gen;
    int64_t len = g->prompt_len + g->n;
    /* This device's copy of the tokens (every device picks the same). */
    int32_t *ids = rt_xmalloc(dev, (size_t)(g->batch * len) * sizeof *ids);
    memcpy(ids, g->ids, (size_t)(g->batch * len) * sizeof *ids);
    const rt_tensor_desc *tok = &p->inputs[g->tokens];
    int64_t start[RT_MAX_RANK];
    rt_block_start(tok, p->axis_sizes, dev->coord, start);
    int32_t *tin = in[g->tokens];
    for (int64_t s = g->first; s < g->steps; s++) {
        for (int64_t i = 0; i < tok->local_shape[0]; i++)
            tin[i] = ids[(start[0] + i) * len + s];
        *(int32_t *)in[g->position] = (int32_t)s;
        rt_run_timed(dev, job, in, out, s - g->first);
        if (s + 1 < g->prompt_len)
            continue;
        for (int64_t b = 0; b < g->batch; b++)
            ids[b * len + s + 1] = g->next >= 0 ? ((const int32_t *)out[g->next])[b]
                                                : pick(g, p->outputs[g->logits].dtype,
                                                       out[g->logits], b, s);
    }
    if (dev->id == 0)
        memcpy(g->ids, ids, (size_t)(g->batch * len) * sizeof *ids);
    free(ids);
}

int rt_generate_finish(FILE *f, const rt_job *job, char *err, size_t errlen)
{
    const rt_generate *g = job->gen;
    int64_t len = g->prompt_len + g->n;
    for (int64_t b = 0; b < g->batch && b < 16; b++) {
        fprintf(f, "tokens %lld:", (long long)b);
        for (int64_t s = g->prompt_len; s < len; s++)
            fprintf(f, " %d", g->ids[b * len + s]);
        fputc('\n', f);
    }
    double prefill = 0, decode = 0;
    for (int64_t s = g->first; s < g->steps; s++)
        *(s < g->prompt_len ? &prefill : &decode) += job->times[s - g->first];
    char cached[64] = "";
    if (g->first > 0)
        snprintf(cached, sizeof cached, ", %lld of them cached", (long long)g->first);
    fprintf(f, "generated %lld tokens for %lld sequences (prompt %lld tokens%s, %s): time to first "
               "token %.3f ms", (long long)g->n, (long long)g->batch, (long long)g->prompt_len,
            cached, g->temperature > 0 ? "sampled" : "greedy", 1e3 * prefill);
    if (g->n > 1)
        fprintf(f, ", time per output token %.3f ms, %.1f tokens/s", 1e3 * decode / (double)(g->n - 1),
                (double)(g->batch * (g->n - 1)) / decode);
    fprintf(f, " (%s backend, %lld devices)\n", job->launcher->name,
            (long long)rt_mesh_size(job->prog));
    if (!job->opt->generated)
        return 0;
    rt_tensor_desc d = ids_desc("generated", g->batch, len);
    if (rt_npy_write(job->opt->generated, &d, g->ids, err, errlen))
        return -1;
    return 0;
}

int rt_parse_generate_flag(const char *flag, const char *val, rt_options *o, char *err,
                           size_t errlen)
{
    uint64_t n;
    if (!strcmp(flag, "--prompt-cached")) {
        if (rt_parse_count(flag, val, 0, INT32_MAX, &n, err, errlen))
            return -1;
        o->prompt_cached = (int64_t)n;
        return 0;
    }
    if (!strcmp(flag, "--generate")) {
        if (rt_parse_count(flag, val, 1, 1000000, &n, err, errlen))
            return -1;
        o->generate = (int64_t)n;
        return 0;
    }
    if (!strcmp(flag, "--temperature")) {
        char *end;
        errno = 0;
        double t = strtod(val, &end);
        if (*end || errno || !(t >= 0) || !isfinite(t))
            return rt_errf(err, errlen, "--temperature expects a number >= 0, got '%s'", val);
        o->temperature = t;
        return 0;
    }
    const char **dst = !strcmp(flag, "--prompt-ids") ? &o->prompt_ids
                       : !strcmp(flag, "--generated") ? &o->generated
                                                      : NULL;
    if (!dst)
        return 1;
    if (!*val)
        return rt_errf(err, errlen, "%s needs a file name", flag);
    *dst = val;
    return 0;
}

int rt_generate_for_reference(rt_generate *rg, const rt_generate *g, const rt_program *ref,
                              const rt_program *p, char *err, size_t errlen)
{
    *rg = *g;
    rg->ids = NULL;
    rg->tokens = rt_find_tensor(ref->inputs, ref->ninputs, p->inputs[g->tokens].name);
    rg->position = rt_find_tensor(ref->inputs, ref->ninputs, p->inputs[g->position].name);
    rg->next = g->next >= 0 ? rt_find_tensor(ref->outputs, ref->noutputs, p->outputs[g->next].name) : -1;
    rg->logits = g->logits >= 0
                     ? rt_find_tensor(ref->outputs, ref->noutputs, p->outputs[g->logits].name)
                     : -1;
    if (rg->tokens < 0 || rg->position < 0 || (g->next >= 0 && rg->next < 0) ||
        (g->logits >= 0 && rg->logits < 0))
        return rt_errf(err, errlen, "the reference program lacks the tensors generation uses");
    int64_t len = g->prompt_len + g->n;
    rg->ids = malloc((size_t)(g->batch * len) * sizeof *rg->ids + 1);
    if (!rg->ids)
        return rt_errf(err, errlen, "out of memory");
    /* The prompt: the generated part is what the reference makes. */
    for (int64_t b = 0; b < g->batch; b++)
        memcpy(rg->ids + b * len, g->ids + b * len, (size_t)g->prompt_len * sizeof *rg->ids);
    return 0;
}
