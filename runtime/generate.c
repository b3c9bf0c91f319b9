/*
 * generate.c - the generation loop of a decode program (--generate N):
 * feed each prompt token, then each generated one, to a program that takes
 * one token per sequence and writes it into its KV cache (a `state`).
 *
 * The program's interface, found by shape (and checked before the run):
 *  - the tokens: its one i32 input of rank 1, [B] (sharded or not);
 *  - the position: its one i32 scalar input, the cache slot written; or
 *    one position per row, an i32 [B] input that a state write uses as
 *    `KC[B, At[B], ...]` (the descriptor's row_positions), for continuous
 *    batching: --generate then gives every row the same position (the
 *    rows of one prompt array advance together), --serve one per slot;
 *  - the next token: greedy decoding reads its one i32 output of shape [B]
 *    (an argmax in the program) if it has one, which must be replicated;
 *    else the argmax of the logits; sampling (--temperature T > 0) reads
 *    the logits, its one floating-point output of shape [B, V] or
 *    [B, 1, V].  The logits may be replicated or sharded along B and V (a
 *    vocab-parallel LM head, seed 002): every device takes part in
 *    sample_shard.c's gather of (value, index) pairs after each step and
 *    picks the same tokens.
 *
 * Step s (0-based) runs the program with position s on tokens ids[:, s]:
 * the prompt's for s < T0, then the tokens generated so far.  Steps T0-1
 * onwards each make one new token per sequence, so N tokens take T0+N-1
 * steps, and the prompt is read one token per step (prefill as decode
 * steps; the time to first token is the T0 prompt steps).  With
 * --prompt-cached P the states given by --input hold positions 0..P-1
 * already (the same model compiled with a window of P new tokens wrote
 * them in one run, its prefill, and --output saved them), so the steps
 * start at s = P.  The steps must fit the cache: step s writes position
 * s, which the position input's index_bound (the cache length) bounds, so
 * a prompt and N that need more are refused before anything runs rather
 * than by the cache write mid-run.
 *
 * Sampling (sample.c) draws with a uniform number from splitmix64 of the
 * seed, the step and the sequence: the same on every device and every run.
 * A sequence that makes a --stop-token ends there: its later tokens are
 * -1 (fed to the program as 0, and their outputs unused), and the loop
 * ends early once every sequence has ended.  Device 0 records the tokens;
 * each step is timed as --repeat times a run (rt_run_timed, into
 * job->times).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_job.h"
#include "rt_serve.h"
#include "rt_speculate.h"

int32_t rt_find_one(const rt_tensor_desc *ts, int32_t n, int (*match)(const rt_tensor_desc *))
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
    return t->role == RT_ROLE_INPUT && t->dtype == RT_I32 && one_per_row(t) && !t->row_positions;
}
/* A scalar, or one position per row (`At[B]`, marked by the compiler). */
static int is_position(const rt_tensor_desc *t)
{
    return t->role == RT_ROLE_INPUT && t->dtype == RT_I32 &&
           (t->rank == 0 || (t->rank == 1 && t->row_positions));
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


/* Sets g->vocab from the logits output g->logits, or says why it cannot
 * be read: none or several, or another batch.  Any sharding is read
 * (rt_sample_sharded; the program's checks keep its blocks even). */
int rt_generate_check_logits(const rt_program *p, rt_generate *g, char *err, size_t errlen)
{
    if (g->logits < 0)
        return rt_errf(err, errlen, "--generate: the program needs %s floating-point output "
                       "of shape [B, V] or [B, 1, V] (the logits)%s",
                       g->logits == -2 ? "exactly one" : "one",
                       g->sampling.temperature > 0 ? " to sample from" : " or one i32 output [B]");
    const rt_tensor_desc *l = &p->outputs[g->logits];
    char shape[64];
    rt_format_shape(shape, sizeof shape, l->rank, l->global_shape);
    if (l->global_shape[0] != g->batch)
        return rt_errf(err, errlen, "--generate: output '%s' %s holds the logits: its first dim "
                       "must be the batch of the tokens, %lld", l->name, shape,
                       (long long)g->batch);
    g->vocab = l->global_shape[l->rank - 1];
    return 0;
}

/* Checks every --stop-token against the vocabulary: the logits' last dim,
 * or without logits the rows the tokens look up (their index_bound). */
static int check_stop_tokens(const rt_program *p, const rt_generate *g, char *err, size_t errlen)
{
    int64_t bound = g->vocab > 0 ? g->vocab : p->inputs[g->tokens].index_bound;
    for (int i = 0; i < g->nstop; i++)
        if (bound > 0 && g->stop[i] >= bound)
            return rt_errf(err, errlen, "--stop-token %d: the vocabulary has %lld tokens (%s "
                           "'%s'): ids are from 0 to %lld", g->stop[i], (long long)bound,
                           g->vocab > 0 ? "logits" : "token input",
                           g->vocab > 0 ? p->outputs[g->logits].name : p->inputs[g->tokens].name,
                           (long long)bound - 1);
    return 0;
}

int rt_generate_find(const rt_program *p, rt_generate *g, char *err, size_t errlen)
{
    g->tokens = rt_find_one(p->inputs, p->ninputs, is_tokens);
    g->position = rt_find_one(p->inputs, p->ninputs, is_position);
    g->next = rt_find_one(p->outputs, p->noutputs, is_next);
    g->logits = rt_find_one(p->outputs, p->noutputs, is_logits);
    if (g->tokens < 0 || g->position < 0)
        return rt_errf(err, errlen, "--generate: the program needs one i32 input of shape [B] (the "
                       "tokens) and one i32 scalar input (the position) or one per row "
                       "(`At[B]` in a state write); it has %s %s",
                       (g->tokens < 0 ? g->tokens : g->position) == -2 ? "several" : "no",
                       g->tokens < 0 ? "token inputs" : "position inputs");
    g->batch = p->inputs[g->tokens].global_shape[0];
    const rt_tensor_desc *at = &p->inputs[g->position];
    g->per_row = at->rank == 1;
    if (g->per_row && at->global_shape[0] != g->batch)
        return rt_errf(err, errlen, "--generate: the positions '%s' are one per row of %lld rows, "
                       "and the tokens '%s' have %lld", at->name, (long long)at->global_shape[0],
                       p->inputs[g->tokens].name, (long long)g->batch);
    return 0;
}

void rt_generate_set_positions(rt_device *dev, const rt_program *p, const rt_generate *g,
                               void *const *in, const int32_t *rows, int32_t pos)
{
    const rt_tensor_desc *at = &p->inputs[g->position];
    int32_t *mine = in[g->position];
    if (!g->per_row) {
        *mine = pos;
        return;
    }
    int64_t start[RT_MAX_RANK];
    rt_block_start(at, p->axis_sizes, dev->coord, start);
    for (int64_t i = 0; i < at->local_shape[0]; i++)
        mine[i] = rows ? rows[start[0] + i] : pos;
}

rt_sampling rt_sampling_of_options(const rt_options *o)
{
    return (rt_sampling){.temperature = o->temperature, .top_k = o->top_k,
                         .top_p = o->top_p_given ? o->top_p : 1, .seed = o->shuffle_seed};
}

int rt_generate_prompt_header(const rt_options *o, rt_generate *g, char *err, size_t errlen)
{
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
    return 0;
}

int rt_generate_read_prompt(const rt_options *o, rt_generate *g, char *err, size_t errlen)
{
    rt_npy_header h;
    if (rt_npy_read_header(o->prompt_ids, &h, err, errlen))
        return -1;
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
    return rc;
}

int rt_generate_prepare(rt_job *job, rt_generate *g, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    memset(g, 0, sizeof *g);
    job->gen = g; /* released with the job, also after a failure here */
    g->n = o->generate;
    g->sampling = rt_sampling_of_options(o);
    g->stop = o->stop;
    g->nstop = o->nstop;
    if (o->speculate) /* the draft proposes, the windowed program verifies */
        return rt_speculate_prepare(job, g, err, errlen);
    if (rt_generate_find(p, g, err, errlen))
        return -1;
    if ((o->top_k || o->top_p_given) && !(o->temperature > 0))
        return rt_errf(err, errlen, "%s samples: give --temperature T > 0 as well (T = 1 samples "
                       "from the model's own distribution)", o->top_k ? "--top-k" : "--top-p");
    if (g->sampling.temperature > 0 || g->next < 0)
        g->next = -1; /* sampling, or greedy without an argmax: the logits decide */
    if (g->next >= 0 && !rt_replicated(&p->outputs[g->next]) && g->logits >= 0)
        g->next = -1; /* a sharded argmax: the logits decide (sample_shard.c) */
    const rt_tensor_desc *tok = &p->inputs[g->tokens];
    g->batch = tok->global_shape[0];
    if (g->next >= 0 && (p->outputs[g->next].global_shape[0] != g->batch ||
                         !rt_replicated(&p->outputs[g->next])))
        return rt_errf(err, errlen, "--generate: output '%s' is the next token of each sequence: "
                       "it must have shape [%lld] and be replicated (written without subscripts), "
                       "or the program must output its logits [B, V] as well",
                       p->outputs[g->next].name, (long long)g->batch);
    if (g->next < 0 && rt_generate_check_logits(p, g, err, errlen))
        return -1;
    if (g->sampling.top_k > g->vocab && g->next < 0)
        return rt_errf(err, errlen, "--top-k %lld: the logits '%s' have %lld tokens: K must be "
                       "from 1 to %lld", (long long)g->sampling.top_k,
                       p->outputs[g->logits].name, (long long)g->vocab, (long long)g->vocab);
    if (check_stop_tokens(p, g, err, errlen))
        return -1;
    if (job->in_paths[g->tokens] || job->in_paths[g->position])
        return rt_errf(err, errlen, "--generate feeds '%s' and '%s' itself: give the prompt with "
                       "--prompt-ids", tok->name, p->inputs[g->position].name);
    if (rt_generate_prompt_header(o, g, err, errlen))
        return -1;
    if (g->n > INT32_MAX - g->prompt_len)
        return rt_errf(err, errlen, "--generate %lld: too many tokens", (long long)g->n);
    g->steps = g->prompt_len + g->n - 1;
    g->first = o->prompt_cached > 0 ? o->prompt_cached : 0;
    int64_t cache = p->inputs[g->position].index_bound;
    /* The last new token is not fed back, so N tokens need T0 + N - 1 positions. */
    if (cache > 0 && g->steps > cache) {
        char advice[96];
        if (g->prompt_len <= cache)
            snprintf(advice, sizeof advice, "at most %lld new tokens fit after this prompt",
                     (long long)(cache - g->prompt_len + 1));
        else
            snprintf(advice, sizeof advice, "the prompt alone is longer than the cache");
        return rt_errf(err, errlen, "--generate %lld: the prompt's %lld tokens and %lld new ones "
                       "need positions 0 to %lld, and the cache holds %lld (position input '%s' "
                       "is below %lld): %s; nothing was run", (long long)g->n,
                       (long long)g->prompt_len, (long long)g->n, (long long)g->steps - 1,
                       (long long)cache, p->inputs[g->position].name, (long long)cache, advice);
    }
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
    int rc = rt_generate_read_prompt(o, g, err, errlen);
    job->repeat = g->steps - g->first;
    return rc;
}

void rt_generate_release(rt_generate *g)
{
    rt_engine_free(g->engine);
    rt_speculate_free(g->spec);
    free(g->ids);
    memset(g, 0, sizeof *g);
}

int rt_generate_is_stop(const rt_generate *g, int32_t token)
{
    for (int i = 0; i < g->nstop; i++)
        if (token == g->stop[i])
            return 1;
    return 0;
}

void rt_generate_device(rt_device *dev, rt_job *job, void *const *in, void *const *out)
{
    const rt_program *p = job->prog;
    rt_generate *g = job->gen;
    if (g->engine) { /* --serve: the engine's batches instead of one prompt */
        rt_engine_device(dev, job, in, out);
        return;
    }
    if (g->spec) { /* --speculate: draft and target runs */
        rt_speculate_device(dev, job, in, out);
        return;
    }
    int64_t len = g->prompt_len + g->n;
    /* This device's copy of the tokens (every device picks the same). */
    int32_t *ids = rt_xmalloc(dev, (size_t)(g->batch * len) * sizeof *ids);
    memcpy(ids, g->ids, (size_t)(g->batch * len) * sizeof *ids);
    const rt_tensor_desc *tok = &p->inputs[g->tokens];
    int64_t start[RT_MAX_RANK];
    rt_block_start(tok, p->axis_sizes, dev->coord, start);
    int32_t *next = rt_xmalloc(dev, (size_t)g->batch * sizeof *next);
    int32_t *tin = in[g->tokens];
    int64_t s = g->first;
    for (int64_t live = g->batch; s < g->steps && live > 0; s++) {
        for (int64_t i = 0; i < tok->local_shape[0]; i++) /* an ended sequence's -1 as 0 */
            tin[i] = ids[(start[0] + i) * len + s] < 0 ? 0 : ids[(start[0] + i) * len + s];
        rt_generate_set_positions(dev, p, g, in, NULL, (int32_t)s);
        rt_run_timed(dev, job, in, out, s - g->first);
        if (s + 1 < g->prompt_len)
            continue;
        if (g->next >= 0) /* the program's argmax, replicated */
            memcpy(next, out[g->next], (size_t)g->batch * sizeof *next);
        else /* every device takes part: the logits may be sharded */
            rt_sample_sharded(dev, p, g, out[g->logits], s, next);
        live = 0;
        for (int64_t b = 0; b < g->batch; b++) {
            int32_t *row = ids + b * len;
            if (s >= g->prompt_len && (row[s] < 0 || rt_generate_is_stop(g, row[s]))) {
                row[s + 1] = -1; /* ended at its stop token */
                continue;
            }
            row[s + 1] = next[b];
            live += !rt_generate_is_stop(g, row[s + 1]);
        }
    }
    /* Positions never reached (every sequence ended) stay -1 too. */
    for (int64_t b = 0; b < g->batch; b++)
        for (int64_t t = s + 1; t < len; t++)
            ids[b * len + t] = -1;
    if (dev->id == 0) {
        memcpy(g->ids, ids, (size_t)(g->batch * len) * sizeof *ids);
        g->ran = s - g->first;
    }
    free(next);
    free(ids);
}

int64_t rt_generate_print_tokens(FILE *f, const rt_generate *g)
{
    int64_t len = g->prompt_len + g->n, ended = 0;
    for (int64_t b = 0; b < g->batch; b++) {
        const int32_t *row = g->ids + b * len;
        if (b < 16)
            fprintf(f, "tokens %lld:", (long long)b);
        for (int64_t s = g->prompt_len; s < len && row[s] >= 0; s++) {
            if (b < 16)
                fprintf(f, " %d", row[s]);
            ended += rt_generate_is_stop(g, row[s]);
        }
        if (b < 16)
            fputc('\n', f);
    }
    return ended;
}

int rt_generate_write_ids(const rt_job *job, char *err, size_t errlen)
{
    const rt_generate *g = job->gen;
    if (!job->opt->generated)
        return 0;
    rt_tensor_desc d = ids_desc("generated", g->batch, g->prompt_len + g->n);
    return rt_npy_write(job->opt->generated, &d, g->ids, err, errlen) ? -1 : 0;
}

/* --stats: what each sampling step gathered from the logits (the plan is
 * the same every step: rt_sample_plan_generate), and the other way's
 * bytes, which it beat. */
static void print_gather(FILE *f, const rt_program *p, const rt_generate *g)
{
    rt_sample_plan c = rt_sample_plan_generate(p, g);
    if (rt_replicated(&p->outputs[g->logits]))
        fprintf(f, "sampling gather per step: none (the logits are replicated)\n");
    else if (c.whole)
        fprintf(f, "sampling gather per step: whole rows, %lld bytes per device (pairs: %lld)\n",
                (long long)c.bytes, (long long)c.pair_bytes);
    else
        fprintf(f, "sampling gather per step: pairs, K = %lld per shard, %lld bytes per device "
                   "(whole rows: %lld)\n", (long long)c.slots, (long long)c.bytes,
                (long long)c.whole_bytes);
}

int rt_generate_finish(FILE *f, const rt_job *job, char *err, size_t errlen)
{
    const rt_generate *g = job->gen;
    if (g->engine) /* --serve reported as it went */
        return 0;
    if (g->spec)
        return rt_speculate_finish(f, job, err, errlen);
    int64_t ended = rt_generate_print_tokens(f, g);
    /* Steps first .. first+ran-1 ran; those at s >= T0 made the 2nd, 3rd, ... tokens. */
    double prefill = 0, decode = 0;
    int64_t made = 1;
    for (int64_t s = g->first; s < g->first + g->ran; s++) {
        *(s < g->prompt_len ? &prefill : &decode) += job->times[s - g->first];
        made += s >= g->prompt_len;
    }
    char cached[64] = "", stops[64] = "";
    if (g->first > 0)
        snprintf(cached, sizeof cached, ", %lld of them cached", (long long)g->first);
    if (g->nstop > 0)
        snprintf(stops, sizeof stops, ", %lld ended at a stop token", (long long)ended);
    fprintf(f, "generated %lld token%s for %lld sequences (prompt %lld tokens%s, %s%s): time to "
               "first token %.3f ms", (long long)made, made == 1 ? "" : "s", (long long)g->batch,
            (long long)g->prompt_len, cached, g->sampling.temperature > 0 ? "sampled" : "greedy",
            stops, 1e3 * prefill);
    if (made > 1)
        fprintf(f, ", time per output token %.3f ms, %.1f tokens/s",
                1e3 * decode / (double)(made - 1), (double)(g->batch * (made - 1)) / decode);
    fprintf(f, " (%s backend, %lld devices)\n", job->launcher->name,
            (long long)rt_mesh_size(job->prog));
    if (job->opt->stats && g->next < 0)
        print_gather(f, job->prog, g);
    return rt_generate_write_ids(job, err, errlen);
}

/* Appends the ids of --stop-token's value, one or a comma list, to o->stop. */
static int parse_stop_tokens(const char *val, rt_options *o, char *err, size_t errlen)
{
    for (const char *p = val;; p++) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char id[16] = "";
        uint64_t v;
        if (n < sizeof id)
            memcpy(id, p, n);
        if (n >= sizeof id ||
            rt_parse_count("--stop-token", id, 0, INT32_MAX, &v, err, errlen)) /* "" fails */
            return rt_errf(err, errlen, "--stop-token expects token ids from 0 to %d, one or a "
                           "comma list (1,2), got '%.80s'", INT32_MAX, val);
        int32_t *l = realloc(o->stop, (size_t)(o->nstop + 1) * sizeof *l);
        if (!l)
            return rt_errf(err, errlen, "out of memory");
        l[o->nstop++] = (int32_t)v;
        o->stop = l;
        if (!comma)
            return 0;
        p = comma;
    }
}

/* Whether `val` is one whole finite number (strtod's syntax), into *v. */
static int parse_number(const char *val, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(val, &end);
    return end != val && !*end && !errno && isfinite(*v);
}

int rt_parse_generate_flag(const char *flag, const char *val, rt_options *o, char *err,
                           size_t errlen)
{
    const struct {
        const char *flag;
        uint64_t lo, hi;
        int64_t *dst;
    } counts[] = {{"--prompt-cached", 0, INT32_MAX, &o->prompt_cached},
                  {"--generate", 1, 1000000, &o->generate},
                  {"--top-k", 1, INT32_MAX, &o->top_k}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        uint64_t n;
        if (strcmp(flag, counts[i].flag))
            continue;
        if (rt_parse_count(flag, val, counts[i].lo, counts[i].hi, &n, err, errlen))
            return -1;
        *counts[i].dst = (int64_t)n;
        return 0;
    }
    if (!strcmp(flag, "--top-p")) {
        if (!parse_number(val, &o->top_p) || !(o->top_p > 0 && o->top_p <= 1))
            return rt_errf(err, errlen, "--top-p expects a number in (0, 1] (the probability "
                           "mass kept), got '%.80s'", val);
        o->top_p_given = 1;
        return 0;
    }
    if (!strcmp(flag, "--stop-token"))
        return parse_stop_tokens(val, o, err, errlen);
    if (!strcmp(flag, "--temperature")) {
        if (!parse_number(val, &o->temperature) || !(o->temperature >= 0))
            return rt_errf(err, errlen, "--temperature expects a number >= 0, got '%s'", val);
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
