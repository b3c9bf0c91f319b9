/*
 * engine_prefill.c - chunked prefill in --serve's continuous batching
 * (Sarathi: Agrawal et al., "SARATHI: Efficient LLM Inference by
 * Piggybacking Decodes with Chunked Prefills", 2023; vLLM's chunked
 * prefill): the prefill program P that `einc serve.ein --prefill P.ein`
 * links beside the decode step runs instead of it whenever a slot has two
 * or more prompt tokens left to read.
 *
 * P is the decode program's model over a window of W tokens per row with
 * one position per row (tokens [B, W], At[B], logits [B, W, V]; its cache
 * writes `KC[B, At[B]:W, ...]`, row b's window at At[b] .. At[b] + W - 1,
 * and its mask `S <= At[B] + W`).  It reads the decode program's blocks
 * of the params and caches, the same buffers (einc checked at compile
 * time that every param and state of P is one of the decode program's
 * with the same shape, dtype and sharding; rt_prefill_prepare checks the
 * blocks again), so a step of either program continues the other's.
 *
 * In a step of P every row moves on by its count of real tokens: a row
 * reading its prompt by its next chunk, min(W, the prompt tokens left); a
 * decoding row by its one token; an idle slot by none (fed token 0 at
 * position 0, where its next request writes first).  --prefill-budget N
 * bounds the prompt tokens a step reads beyond the one every running row
 * reads in any step (Sarathi-Serve's token budget: Agrawal et al.,
 * "Taming Throughput-Latency Tradeoff in LLM Inference with
 * Sarathi-Serve", OSDI'24; vLLM's max_num_batched_tokens): the chunks go
 * to the oldest requests first, and a prompt row left without one reads
 * one token, as in a decode step.  The rest of each
 * window is padding (token 0).  A row samples after the step when its
 * chunk reached the end of its prompt or it decodes, from the logits at
 * its last real token (engine.c's after_iteration).
 *
 * The padding's keys and values land in the cache past the row's last
 * real token, at positions the row has not reached; as the engine's
 * essay argues for stale entries, they are never read: the row's token at
 * such a position q is written by the step that feeds it, before that
 * step's attention reads q, and the row's later windows start past q.
 * Every position of a window must be inside the cache (P's window write
 * checks At[b] + W <= S, as for a scalar window): rather than clip the
 * padding, the engine runs the decode step whenever a running row is
 * within W - 1 positions of the cache's end (rt_prefill_plan), so
 * requests the decode program accepts are served unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_serve.h"

static int is_window_tokens(const rt_tensor_desc *t)
{
    return t->role == RT_ROLE_INPUT && t->dtype == RT_I32 && t->rank == 2 && !t->row_positions;
}
static int is_row_positions(const rt_tensor_desc *t)
{
    return t->role == RT_ROLE_INPUT && t->dtype == RT_I32 && t->rank == 1 && t->row_positions;
}
static int is_window_logits(const rt_tensor_desc *t)
{
    return t->dtype != RT_I32 && t->dtype != RT_I8 && t->rank == 3;
}

/* Whether tensors a and b have the same dtype, role and blocks. */
static int same_blocks(const rt_tensor_desc *a, const rt_tensor_desc *b)
{
    if (a->dtype != b->dtype || a->role != b->role || a->rank != b->rank)
        return 0;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->global_shape[d] != b->global_shape[d] || a->local_shape[d] != b->local_shape[d] ||
            a->dim_naxes[d] != b->dim_naxes[d] ||
            memcmp(a->dim_axes[d], b->dim_axes[d], (size_t)a->dim_naxes[d] * sizeof a->dim_axes[d][0]))
            return 0;
    return 1;
}

/* P's interface into pf->gen and pf->window, against the decode program's g. */
static int find_interface(const rt_program *p, const rt_generate *g, rt_prefill *pf, char *err,
                          size_t errlen)
{
    rt_generate *pg = &pf->gen;
    pg->tokens = rt_find_one(p->inputs, p->ninputs, is_window_tokens);
    pg->position = rt_find_one(p->inputs, p->ninputs, is_row_positions);
    pg->logits = rt_find_one(p->outputs, p->noutputs, is_window_logits);
    pg->next = -1;
    pg->per_row = 1;
    if (pg->tokens < 0 || pg->position < 0 || pg->logits < 0)
        return rt_errf(err, errlen, "the prefill program (%s) needs one i32 input [B, W] (the "
                       "window's tokens), one i32 input [B] of per-row positions (`KC[B, At[B]:W, "
                       "...]`) and one floating-point output [B, W, V] (the logits)", p->source_name);
    const rt_tensor_desc *t = &p->inputs[pg->tokens], *l = &p->outputs[pg->logits];
    pg->batch = t->global_shape[0];
    pg->vocab = l->global_shape[2];
    pf->window = t->global_shape[1];
    if (pg->batch != g->batch || l->global_shape[0] != g->batch || l->global_shape[1] != pf->window ||
        p->inputs[pg->position].global_shape[0] != g->batch || (g->vocab && pg->vocab != g->vocab))
        return rt_errf(err, errlen, "the prefill program (%s): tokens '%s' [%lld, %lld] and logits "
                       "'%s' [%lld, %lld, %lld] must be [B, W] and [B, W, V] with the serving "
                       "program's B = %lld and V = %lld", p->source_name, t->name,
                       (long long)pg->batch, (long long)pf->window, l->name,
                       (long long)l->global_shape[0], (long long)l->global_shape[1],
                       (long long)pg->vocab, (long long)g->batch, (long long)g->vocab);
    if (pf->window < 1 || pf->window > INT32_MAX)
        return rt_errf(err, errlen, "the prefill program (%s): a window of %lld tokens",
                       p->source_name, (long long)pf->window);
    return 0;
}

int rt_prefill_prepare(const rt_job *job, rt_engine *e, char *err, size_t errlen)
{
    const rt_program *m = job->prog, *p = job->prefill;
    const rt_generate *g = e->gen;
    char why[900];
    if (rt_check_program(p, why, sizeof why))
        return rt_errf(err, errlen, "bad prefill program: %s", why);
    if (!g->per_row)
        return rt_errf(err, errlen, "--serve with a prefill program: the serving program's "
                       "position '%s' must be one per row (`At[B]`, continuous batching)",
                       m->inputs[g->position].name);
    int same = p->naxes == m->naxes;
    for (int32_t a = 0; same && a < p->naxes; a++)
        same = p->axis_sizes[a] == m->axis_sizes[a];
    if (!same)
        return rt_errf(err, errlen, "the prefill program (%s) runs on another mesh than the "
                       "serving program's", p->source_name);
    rt_prefill *pf = calloc(1, sizeof *pf);
    if (!pf)
        return rt_errf(err, errlen, "out of memory");
    e->pf = pf;
    pf->prog = p;
    if (find_interface(p, g, pf, err, errlen))
        return -1;
    pf->shared = malloc((size_t)(p->ninputs + 1) * sizeof *pf->shared);
    pf->win = calloc((size_t)(g->batch * pf->window), sizeof *pf->win);
    pf->count = calloc((size_t)g->batch, sizeof *pf->count);
    if (!pf->shared || !pf->win || !pf->count)
        return rt_errf(err, errlen, "out of memory");
    for (int32_t i = 0; i < p->ninputs; i++) {
        pf->shared[i] = -1;
        if (i == pf->gen.tokens || i == pf->gen.position)
            continue;
        int32_t j = rt_find_tensor(m->inputs, m->ninputs, p->inputs[i].name);
        if (j < 0 || !same_blocks(&p->inputs[i], &m->inputs[j]) ||
            (m->inputs[j].role != RT_ROLE_PARAM && m->inputs[j].role != RT_ROLE_STATE))
            return rt_errf(err, errlen, "the prefill program (%s): '%s' is not a param or state "
                           "of the serving program with the same blocks", p->source_name,
                           p->inputs[i].name);
        pf->shared[i] = j;
    }
    return 0;
}

/* The row whose request arrived first among those that read their prompt
 * and have no chunk yet (pf->count[b] == 1, two or more prompt tokens
 * left); -1 if none. */
static int64_t oldest_waiting(const rt_engine *e)
{
    int64_t best = -1;
    for (int64_t b = 0; b < e->gen->batch; b++) {
        const rt_request *r = e->batch[b];
        if (r && e->pf->count[b] == 1 && e->at[b] + 1 < r->prompt_len &&
            (best < 0 || r->arrived < e->batch[best]->arrived))
            best = b;
    }
    return best;
}

/* pf->count: every running row's real tokens in the step: one, and for
 * rows reading their prompts, oldest request first, up to W (the chunk)
 * while pf->budget lasts (the tokens beyond the first; 0: no bound). */
static void share_budget(rt_engine *e)
{
    rt_prefill *pf = e->pf;
    int64_t left = pf->budget ? pf->budget : INT64_MAX;
    for (int64_t b = 0; b < e->gen->batch; b++)
        pf->count[b] = e->batch[b] != NULL;
    for (int64_t b; pf->window > 1 && left > 0 && (b = oldest_waiting(e)) >= 0;) {
        int64_t more = e->batch[b]->prompt_len - e->at[b]; /* >= 2 */
        more = (more < pf->window ? more : pf->window) - 1;
        more = more < left ? more : left;
        pf->count[b] = (int32_t)(1 + more);
        left -= more;
    }
}

int rt_prefill_plan(rt_engine *e)
{
    rt_prefill *pf = e->pf;
    int64_t B = e->gen->batch, W = pf->window;
    int due = 0;
    pf->due = 0;
    for (int64_t b = 0; b < B; b++) {
        const rt_request *r = e->batch[b];
        if (r && e->at[b] + W > e->cache)
            return 0; /* its window would pass the cache's end: the decode step (even when
                         a row before it has a prompt to read: pf->due stays 0) */
        if (r && e->at[b] + 1 < r->prompt_len)
            due = 1;
    }
    pf->due = due;
    if (pf->due)
        share_budget(e);
    for (int64_t b = 0; pf->due && b < B; b++) {
        const rt_request *r = e->batch[b];
        int64_t at = e->at[b], n = pf->count[b];
        int32_t *w = pf->win + b * W;
        memset(w, 0, (size_t)W * sizeof *w);
        w[0] = e->feed[b]; /* the prompt's token at `at`, or the token made last */
        for (int64_t t = 1; t < n; t++)
            w[t] = r->prompt[at + t];
    }
    return pf->due;
}

void rt_prefill_open(rt_device *dev, const rt_engine *e, void *const *main_in, rt_prefill_bufs *bf)
{
    const rt_prefill *pf = e->pf;
    const rt_program *p = pf->prog;
    bf->in = rt_xmalloc(dev, (size_t)(p->ninputs + 1) * sizeof *bf->in);
    for (int32_t i = 0; i < p->ninputs; i++) {
        const rt_tensor_desc *t = &p->inputs[i];
        bf->in[i] = pf->shared[i] >= 0 ? main_in[pf->shared[i]]
                    : rt_alloc(dev, rt_numel(t->rank, t->local_shape) *
                                        (int64_t)rt_dtype_size(t->dtype));
    }
    bf->out = rt_job_alloc_outputs(dev, p);
    const rt_tensor_desc *l = &p->outputs[pf->gen.logits];
    bf->logits = rt_xmalloc(dev, (size_t)rt_numel(l->rank, l->global_shape) * rt_dtype_size(l->dtype));
}

void rt_prefill_feed(rt_device *dev, const rt_engine *e, rt_prefill_bufs *bf)
{
    const rt_prefill *pf = e->pf;
    const rt_program *p = pf->prog;
    const rt_tensor_desc *t = &p->inputs[pf->gen.tokens];
    int64_t start[RT_MAX_RANK], W = pf->window;
    rt_block_start(t, p->axis_sizes, dev->coord, start);
    int32_t *mine = bf->in[pf->gen.tokens];
    for (int64_t i = 0; i < t->local_shape[0]; i++)
        for (int64_t j = 0; j < t->local_shape[1]; j++)
            mine[i * t->local_shape[1] + j] = pf->win[(start[0] + i) * W + start[1] + j];
    rt_generate_set_positions(dev, p, &pf->gen, bf->in, e->at, 0);
}

const void *rt_prefill_run(rt_device *dev, const rt_engine *e, rt_prefill_bufs *bf)
{
    const rt_prefill *pf = e->pf;
    const rt_program *p = pf->prog;
    uint32_t all = p->naxes ? (1u << p->naxes) - 1 : 0;
    dev->ops->barrier(dev, all);
    p->run(dev, bf->in, bf->out);
    dev->ops->barrier(dev, all);
    rt_sample_gather_whole(dev, &p->outputs[pf->gen.logits], bf->out[pf->gen.logits], bf->logits);
    return bf->logits;
}

void rt_prefill_close(rt_device *dev, const rt_engine *e, rt_prefill_bufs *bf)
{
    const rt_prefill *pf = e->pf;
    const rt_program *p = pf->prog;
    for (int32_t i = 0; i < p->ninputs; i++)
        if (pf->shared[i] < 0)
            rt_free(dev, bf->in[i]);
    for (int32_t i = 0; i < p->noutputs; i++)
        rt_free(dev, bf->out[i]);
    free(bf->in);
    free(bf->out);
    free(bf->logits);
}

void rt_prefill_free(rt_prefill *pf)
{
    if (!pf)
        return;
    free(pf->shared);
    free(pf->win);
    free(pf->count);
    free(pf);
}
