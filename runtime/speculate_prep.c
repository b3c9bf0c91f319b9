/*
 * speculate_prep.c - the checks before a speculative run (--generate N
 * --speculate K), the draft's inputs, and the report after it
 * (speculate.c runs the loop; docs/generation.md, "Speculative
 * decoding").
 *
 * The report's speed-up is an estimate from the run's own times: plain
 * decoding of N tokens is taken as N runs of the target at the mean time
 * of its verification runs (a decode step's time barely grows with a
 * window of a few tokens while it is memory-bound: seed 002, "Generation";
 * the weights are read once either way), against the loop's time after
 * the prompt's prefill.  bench/speculative.py measures the speed-up
 * against a one-token build of the same target instead.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_job.h"
#include "rt_speculate.h"

static int is_window_tokens(const rt_tensor_desc *t)
{
    return t->role == RT_ROLE_INPUT && t->dtype == RT_I32 && t->rank == 2 && !t->row_positions;
}
static int is_scalar_position(const rt_tensor_desc *t)
{
    return t->role == RT_ROLE_INPUT && t->dtype == RT_I32 && t->rank == 0;
}
static int is_window_logits(const rt_tensor_desc *t)
{
    return t->dtype != RT_I32 && t->dtype != RT_I8 && t->rank == 3;
}

/* The flags a speculative run does not take. */
static int check_flags(const rt_options *o, char *err, size_t errlen)
{
    const char *flag = o->prompt_cached ? "--prompt-cached"
                       : o->check ? "--check" : o->trace ? "--trace" : o->profile ? "--profile"
                                                                        : NULL;
    if (flag)
        return rt_errf(err, errlen, "--speculate does not take %s (docs/generation.md, "
                       "\"Speculative decoding\", limits)", flag);
    return 0;
}

/* The target's window interface into g (tokens [B, W], scalar position,
 * logits [B, W, V]) with W = K + 1. */
static int find_target(const rt_program *p, rt_generate *g, int64_t k, char *err, size_t errlen)
{
    g->tokens = rt_find_one(p->inputs, p->ninputs, is_window_tokens);
    g->position = rt_find_one(p->inputs, p->ninputs, is_scalar_position);
    g->logits = rt_find_one(p->outputs, p->noutputs, is_window_logits);
    g->next = -1;
    if (g->tokens < 0 || g->position < 0 || g->logits < 0)
        return rt_errf(err, errlen, "--speculate %lld: the target needs one i32 input [B, W] (the "
                       "window's tokens), one i32 scalar input (the position) and one "
                       "floating-point output [B, W, V] (the logits), W = K + 1 = %lld: compile "
                       "the model with a window of new tokens, -D T=%lld", (long long)k,
                       (long long)k + 1, (long long)k + 1);
    const rt_tensor_desc *t = &p->inputs[g->tokens], *l = &p->outputs[g->logits];
    g->batch = t->global_shape[0];
    g->vocab = l->global_shape[2];
    int64_t w = t->global_shape[1];
    if (w != k + 1)
        return rt_errf(err, errlen, "--speculate %lld: the target verifies K + 1 = %lld tokens a "
                       "run, and its tokens '%s' are [%lld, %lld] (a window of %lld): compile it "
                       "with -D T=%lld, or give --speculate %lld", (long long)k, (long long)k + 1,
                       t->name, (long long)g->batch, (long long)w, (long long)w, (long long)k + 1,
                       (long long)w - 1);
    if (l->global_shape[0] != g->batch || l->global_shape[1] != w)
        return rt_errf(err, errlen, "--speculate: the target's logits '%s' must be [%lld, %lld, V] "
                       "like its tokens '%s'", l->name, (long long)g->batch, (long long)w, t->name);
    return 0;
}

/* The draft's one-token interface into s->dgen, against the target's. */
static int find_draft(const rt_program *tp, const rt_generate *g, rt_speculate *s, char *err,
                      size_t errlen)
{
    const rt_program *d = s->draft;
    char why[900];
    if (rt_check_program(d, why, sizeof why))
        return rt_errf(err, errlen, "bad draft program: %s", why);
    int64_t n = rt_mesh_size(d);
    int same = d->naxes == tp->naxes;
    for (int32_t a = 0; same && a < d->naxes; a++)
        same = d->axis_sizes[a] == tp->axis_sizes[a];
    if (n != 1 && !same)
        return rt_errf(err, errlen, "the draft (%s) runs on a mesh of %lld devices unlike the "
                       "target's: it must have the target's mesh or one device", d->source_name,
                       (long long)n);
    s->dgen.sampling = g->sampling;
    if (rt_generate_find(d, &s->dgen, why, sizeof why) ||
        rt_generate_check_logits(d, &s->dgen, why, sizeof why))
        return rt_errf(err, errlen, "the draft (%s): %s", d->source_name, why);
    if (s->dgen.batch != g->batch || s->dgen.vocab != g->vocab)
        return rt_errf(err, errlen, "the draft (%s) has %lld rows of %lld tokens, the target %lld "
                       "of %lld: they must agree", d->source_name, (long long)s->dgen.batch,
                       (long long)s->dgen.vocab, (long long)g->batch, (long long)g->vocab);
    return 0;
}

/* Both caches hold every position the loop writes: the target's last
 * window starts at T0 + N - 2 at most and spans K + 1 positions, the
 * draft's last proposal is at T0 + N + K - 3. */
static int check_caches(const rt_program *tp, const rt_generate *g, const rt_speculate *s,
                        char *err, size_t errlen)
{
    int64_t need[2] = {g->prompt_len + g->n - 1 + s->k, g->prompt_len + g->n + s->k - 2};
    const rt_tensor_desc *pos[2] = {&tp->inputs[g->position],
                                    &s->draft->inputs[s->dgen.position]};
    for (int i = 0; i < 2; i++)
        if (pos[i]->index_bound > 0 && need[i] > pos[i]->index_bound)
            return rt_errf(err, errlen, "--generate %lld --speculate %lld: the prompt's %lld "
                           "tokens, %lld new ones and K more for the last %s need %lld cache "
                           "positions, and the %s's cache holds %lld (position input '%s'); "
                           "nothing was run", (long long)g->n, (long long)s->k,
                           (long long)g->prompt_len, (long long)g->n,
                           i ? "proposals" : "window", (long long)need[i],
                           i ? "draft" : "target", (long long)pos[i]->index_bound, pos[i]->name);
    return 0;
}

/* The draft's job: its own --input (--draft-input), --params
 * (--draft-params) and the shared --random-inputs. */
static int prepare_draft_job(const rt_job *job, rt_speculate *s, char *err, size_t errlen)
{
    const rt_options *o = job->opt;
    s->dopt = *o;
    s->dopt.inputs = o->draft_inputs;
    s->dopt.ninputs = o->ndraft_inputs;
    s->dopt.outputs = NULL;
    s->dopt.noutputs = 0;
    s->dopt.params = o->draft_params;
    s->dopt.resume = NULL;
    rt_job_init(&s->djob, s->draft, &s->dopt, job->launcher);
    s->djob_ready = 1;
    s->djob.rank = job->rank;
    s->djob.nranks = job->nranks;
    s->djob.gen = &s->dgen; /* its tokens and position are the loop's */
    char why[900];
    if (rt_job_resolve_inputs(&s->djob, why, sizeof why)) {
        /* The messages name the target's flags; say which they are. */
        return rt_errf(err, errlen, "the draft (%s; --draft-input, --draft-params): %s",
                       s->draft->source_name, why);
    }
    return 0;
}

int rt_speculate_prepare(rt_job *job, rt_generate *g, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    int64_t k = o->speculate;
    if (!job->draft)
        return rt_errf(err, errlen, "--speculate %lld: this executable has no draft program: "
                       "build it with einc TARGET.ein --draft DRAFT.ein -o EXE", (long long)k);
    if (check_flags(o, err, errlen))
        return -1;
    rt_speculate *s = calloc(1, sizeof *s);
    if (!s)
        return rt_errf(err, errlen, "out of memory");
    g->spec = s;
    s->k = k;
    s->window = k + 1;
    s->draft = job->draft;
    if (find_target(p, g, k, err, errlen) || find_draft(p, g, s, err, errlen))
        return -1;
    if (g->sampling.top_k > g->vocab)
        return rt_errf(err, errlen, "--top-k %lld: the logits '%s' have %lld tokens: K must be "
                       "from 1 to %lld", (long long)g->sampling.top_k,
                       p->outputs[g->logits].name, (long long)g->vocab, (long long)g->vocab);
    if ((o->top_k || o->top_p_given) && !(o->temperature > 0))
        return rt_errf(err, errlen, "%s samples: give --temperature T > 0 as well",
                       o->top_k ? "--top-k" : "--top-p");
    if (job->in_paths[g->tokens] || job->in_paths[g->position])
        return rt_errf(err, errlen, "--generate feeds '%s' and '%s' itself: give the prompt with "
                       "--prompt-ids", p->inputs[g->tokens].name, p->inputs[g->position].name);
    if (rt_generate_prompt_header(o, g, err, errlen) || check_caches(p, g, s, err, errlen) ||
        prepare_draft_job(job, s, err, errlen))
        return -1;
    g->steps = g->prompt_len + g->n - 1;
    job->repeat = 1;
    return rt_generate_read_prompt(o, g, err, errlen);
}

int rt_speculate_finish(FILE *f, const rt_job *job, char *err, size_t errlen)
{
    const rt_generate *g = job->gen;
    const rt_speculate *s = g->spec;
    int64_t ended = rt_generate_print_tokens(f, g), made = s->made;
    double decode = s->total_time - s->prefill_time;
    char stops[64] = "";
    if (g->nstop > 0)
        snprintf(stops, sizeof stops, ", %lld ended at a stop token", (long long)ended);
    fprintf(f, "generated %lld tokens for %lld sequences (prompt %lld tokens, %s%s, "
               "speculative): time to first token %.3f ms, time per output token %.3f ms, %.1f "
               "tokens/s (%s backend, %lld devices)\n", (long long)made, (long long)g->batch,
            (long long)g->prompt_len, g->sampling.temperature > 0 ? "sampled" : "greedy", stops,
            1e3 * s->first_time, 1e3 * decode / (double)made,
            (double)(g->batch * made) / decode, job->launcher->name,
            (long long)rt_mesh_size(job->prog));
    double rate = s->tested > 0 ? (double)s->accepted / (double)s->tested : 0;
    double per_run = s->rounds > 0 ? (double)made / (double)s->rounds : 0;
    double plain = s->rounds > 0 ? (double)made * s->target_time / (double)s->rounds : 0;
    fprintf(f, "speculative: K=%lld, acceptance rate %.2f, %.2f tokens per target run (%lld "
               "target runs, %lld draft runs), speed-up %.2fx over plain decoding of the same "
               "program (estimated: %lld target runs of %.3f ms)\n", (long long)s->k, rate,
            per_run, (long long)s->rounds, (long long)s->draft_runs,
            decode > 0 ? plain / decode : 0, (long long)made,
            s->rounds > 0 ? 1e3 * s->target_time / (double)s->rounds : 0);
    return rt_generate_write_ids(job, err, errlen);
}

void rt_speculate_free(rt_speculate *s)
{
    if (!s)
        return;
    if (s->djob_ready)
        rt_job_release(&s->djob);
    free(s);
}
