/*
 * speculate.c - speculative decoding (--generate N --speculate K): a small
 * draft program proposes K tokens, one run each, and the target verifies
 * them in one run over a window of K + 1 tokens; an acceptance rule keeps
 * the target's distribution exactly (seed 002, appendix D; Leviathan et
 * al., "Fast Inference from Transformers via Speculative Decoding", ICML
 * 2023, Algorithm 1; Chen et al., "Accelerating Large Language Model
 * Decoding with Speculative Sampling", 2023).
 *
 * The target is the executable's program, compiled with a window of
 * W = K + 1 new tokens (`-D T=K+1`: i32 tokens [B, W], a scalar position,
 * logits [B, W, V]); the draft is its companion (`einc --draft`), a
 * one-token decode program with logits [B, V] or [B, 1, V].  Both keep
 * their own KV caches.  All rows advance in lockstep (one scalar
 * position per program).
 *
 * One round, every sequence of length n (its last token x = ids[n-1] not
 * yet in either cache; the target's cache holds 0..n-2):
 *   1. the draft is fed the tokens its cache lacks, up to x at n-1 (one
 *      run each: 1 after a rejection, 2 after K acceptances, T0 at the
 *      start, its prefill); its last logits give q_1; it samples d_1 ~ q_1
 *      and is run on d_1 at n for q_2, ... up to d_K (K runs in all);
 *   2. the target runs once at position n-1 on [x, d_1 .. d_K]: row t of
 *      its logits is p_{t+1}, the target's distribution after d_t;
 *   3. for j = 1..K, d_j is accepted when u_j < p_j(d_j) / q_j(d_j); at
 *      the first rejection the token is drawn from norm(max(0, p_j - q_j))
 *      and the round ends; if all K are accepted one more is drawn from
 *      p_{K+1} (by sample.c's rule, as plain decoding draws it).
 * Each accepted or residual token is distributed exactly as p_j given the
 * tokens before it (Leviathan et al., Theorem 3.5; seed 002 appendix D),
 * for any pair of distributions, so temperature, top-k and top-p apply to
 * p and q alike: both are sample.c's distribution of their logits
 * (softmax(l / T) on the kept tokens, renormalised; greedy a one-hot at
 * the first maximum).  Greedy is then the same rule: d_j is accepted iff
 * it is the target's argmax, and the residual is the target's argmax, so
 * the tokens are greedy decoding's.
 *
 * Batches: the rows advance together by a + 1 tokens, a the smallest
 * accepted count of the rows.  A row that accepted more keeps its
 * accepted d_{a+1} as its (a+1)-th token (target-distributed as above);
 * a row that stopped at a takes its residual draw.  Whether a row's token
 * is emitted depends only on draws before it (the other rows' and its own
 * earlier ones), never on the token itself, so every row's tokens keep
 * the target's distribution; the rows' later accepted drafts are dropped
 * (they cost acceptance, not correctness).
 *
 * The caches: a round writes positions n-1 .. n-1+K of the target's cache
 * and n-1 .. n-2+K of the draft's, some with tokens that are then
 * rejected.  They are never read as history: the next round starts at
 * n' - 1 <= n - 1 + K and writes its window from there before any read,
 * and the programs' causal masks (`S <= Pos + T`) read positions up to
 * the query's own, all of which hold accepted tokens.  So entries past
 * the position are stale only where nothing reads them.  The prompt's
 * prefill runs the target over chunks of W tokens (the last padded with
 * token 0, whose positions a later window overwrites before they are
 * read) and the draft token by token.  The target's cache must hold
 * T0 + N - 1 + K positions (the last window starts at T0 + N - 2 at
 * most); prepare checks it.
 *
 * Stop tokens: a row that makes a --stop-token runs on in the lockstep (its
 * tokens are valid ids, its outputs unused); the loop ends when every row
 * has made one, and the tokens after each row's stop are -1, as
 * --generate leaves them.
 *
 * Draws: u = rt_sample_uniform(seed, r, b * (2K + 2) + slot) in round r,
 * row b: slots 0..K-1 the draft's samples, K..2K-1 the acceptance tests,
 * 2K the residual or the extra token: reproducible from --seed, distinct
 * for every use.  Every device computes the same tokens from the logits,
 * gathered whole (rt_sample_gather_whole; each sharding works, and a
 * replicated output is a copy).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_job.h"
#include "rt_speculate.h"

/* ---- distributions (sample.c's rule, as probabilities) ---- */

void rt_sample_probs(const rt_sampling *s, int32_t dtype, const void *row, int64_t vocab,
                     rt_sample_entry *work, double *probs)
{
    int64_t slots = rt_sample_slots(s, vocab);
    rt_sample_top(s, dtype, row, vocab, 0, slots, work, work);
    memset(probs, 0, (size_t)vocab * sizeof *probs);
    double m = work[0].value;
    if (slots == 1 || !(s->temperature > 0) || isnan(m) || isinf(m)) {
        probs[work[0].index] = 1; /* greedy: the first maximum */
        return;
    }
    int64_t k = s->top_k > 0 && s->top_k < slots ? s->top_k : slots;
    double c = 0;
    for (int64_t i = 0; i < k; i++) { /* value becomes c_i, as rt_sample_pick */
        c += exp((work[i].value - m) / s->temperature);
        work[i].value = c;
    }
    int64_t nk = k;
    if (s->top_p < 1)
        for (nk = 1; nk < k && work[nk - 1].value < s->top_p * work[k - 1].value; nk++)
            ;
    double prev = 0, total = work[nk - 1].value;
    for (int64_t i = 0; i < nk; i++) {
        probs[work[i].index] = (work[i].value - prev) / total;
        prev = work[i].value;
    }
}

int32_t rt_sample_residual(const double *p, const double *q, int64_t vocab, double u)
{
    double total = 0;
    for (int64_t v = 0; v < vocab; v++)
        total += p[v] > q[v] ? p[v] - q[v] : 0;
    int use_p = !(total > 0); /* p == q: nothing is rejected; p itself, to be safe */
    if (use_p)
        for (int64_t v = 0; v < vocab; v++)
            total += p[v];
    double target = u * total, c = 0;
    int32_t last = 0;
    for (int64_t v = 0; v < vocab; v++) {
        double w = use_p ? p[v] : (p[v] > q[v] ? p[v] - q[v] : 0);
        if (w <= 0)
            continue;
        c += w;
        last = (int32_t)v;
        if (target < c)
            return (int32_t)v;
    }
    return last;
}

int rt_speculate_accept(double p, double q, double u)
{
    if (!(q > 0)) /* never proposed by the rule; accept only what the target allows */
        return p > 0;
    return u < p / q; /* u < min(1, p/q): u < 1 always */
}

/* ---- the loop ---- */

/* One run of program `p` on every device between two barriers over the
 * mesh `mask`; device 0 adds its seconds to *acc. */
static void timed(rt_device *dev, const rt_program *p, uint32_t mask, void *const *in,
                  void *const *out, double *acc)
{
    dev->ops->barrier(dev, mask);
    double t0 = rt_now();
    p->run(dev, in, out);
    dev->ops->barrier(dev, mask);
    if (dev->id == 0)
        *acc += rt_now() - t0;
}

/* This device's work: buffers and the shared view of the two programs. */
typedef struct spec_run {
    rt_device *dev;
    const rt_job *job;
    const rt_generate *g;
    rt_speculate *s;
    uint32_t mask;               /* every axis of the target's mesh */
    void **din, **dout;          /* the draft's buffers */
    int32_t *ids;                /* [B, len], this device's copy */
    int64_t len;                 /* T0 + N */
    void *tl, *dl;               /* whole logits: target [B, W, V], draft [B, V] */
    double *q;                   /* [B, K, V]: the draft's distributions this round */
    double *p;                   /* [V]: one target distribution */
    int32_t *draft;              /* [B, K]: the proposed tokens */
    int64_t *accepted;           /* [B]: each row's accepted count this round */
    rt_sample_entry *work;       /* V entries */
} spec_run;

/* Feeds the draft token `tok[b]` for every row at position `pos`. */
static void draft_step(spec_run *r, const int32_t *tok, int64_t stride, int64_t pos)
{
    const rt_program *dp = r->s->draft;
    const rt_generate *dg = &r->s->dgen;
    const rt_tensor_desc *t = &dp->inputs[dg->tokens];
    int64_t start[RT_MAX_RANK];
    rt_block_start(t, dp->axis_sizes, r->dev->coord, start);
    int32_t *mine = r->din[dg->tokens];
    for (int64_t i = 0; i < t->local_shape[0]; i++)
        mine[i] = tok[(start[0] + i) * stride];
    rt_generate_set_positions(r->dev, dp, dg, r->din, NULL, (int32_t)pos);
    timed(r->dev, dp, r->mask, r->din, r->dout, &r->s->draft_time);
    if (r->dev->id == 0)
        r->s->draft_runs++;
}

/* Runs the target at `pos` on window tokens win[b * W + t]. */
static void target_step(spec_run *r, void *const *in, void *const *out, const int32_t *win,
                        int64_t pos, double *acc)
{
    const rt_program *p = r->job->prog;
    const rt_tensor_desc *t = &p->inputs[r->g->tokens];
    int64_t start[RT_MAX_RANK], w = r->s->window;
    rt_block_start(t, p->axis_sizes, r->dev->coord, start);
    int32_t *mine = in[r->g->tokens];
    for (int64_t i = 0; i < t->local_shape[0]; i++)
        for (int64_t j = 0; j < t->local_shape[1]; j++)
            mine[i * t->local_shape[1] + j] = win[(start[0] + i) * w + start[1] + j];
    *(int32_t *)in[r->g->position] = (int32_t)pos;
    timed(r->dev, p, r->mask, in, out, acc);
}

/* The prompt's positions 0 .. n-2 into the target's cache, W at a time. */
static void prefill(spec_run *r, void *const *in, void *const *out, int32_t *win, int64_t n)
{
    int64_t w = r->s->window, B = r->g->batch;
    for (int64_t c = 0; c < n - 1; c += w) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < w; t++)
                win[b * w + t] = c + t < n - 1 ? r->ids[b * r->len + c + t] : 0;
        target_step(r, in, out, win, c, &r->s->prefill_time);
    }
}

/* Step 1 of a round: the draft catches up to x at n-1, then proposes K
 * tokens per row into r->draft, their distributions into r->q. */
static void propose(spec_run *r, int64_t round, int64_t n, int64_t *draft_len)
{
    const rt_generate *g = r->g;
    rt_speculate *s = r->s;
    int64_t K = s->k, V = g->vocab, B = g->batch;
    const rt_tensor_desc *dl = &s->draft->outputs[s->dgen.logits];
    for (int64_t pos = *draft_len; pos < n; pos++)
        draft_step(r, r->ids + pos, r->len, pos);
    for (int64_t j = 0; j < K; j++) {
        rt_sample_gather_whole(r->dev, dl, r->dout[s->dgen.logits], r->dl);
        for (int64_t b = 0; b < B; b++) {
            const char *row = (const char *)r->dl + (size_t)(b * V) * rt_dtype_size(dl->dtype);
            double u = rt_sample_uniform(g->sampling.seed, round, b * (2 * K + 2) + j);
            r->draft[b * K + j] = rt_sample_row(&g->sampling, dl->dtype, row, V, u, r->work);
            rt_sample_probs(&g->sampling, dl->dtype, row, V, r->work, r->q + (b * K + j) * V);
        }
        if (j + 1 < K)
            draft_step(r, r->draft + j, K, n + j);
    }
    *draft_len = n - 1 + K; /* x, d_1 .. d_{K-1} at n-1 .. n+K-2 */
}

/* Steps 2-3: verifies the proposals in one target run at n-1, appends
 * a + 1 tokens to every row (at most `room`); returns a + 1. */
static int64_t verify(spec_run *r, void *const *in, void *const *out, int32_t *win,
                      int64_t round, int64_t n, int64_t room)
{
    const rt_generate *g = r->g;
    rt_speculate *s = r->s;
    const rt_program *tp = r->job->prog;
    const rt_tensor_desc *tl = &tp->outputs[g->logits];
    int64_t K = s->k, W = s->window, V = g->vocab, B = g->batch;
    size_t es = rt_dtype_size(tl->dtype);
    for (int64_t b = 0; b < B; b++) {
        win[b * W] = r->ids[b * r->len + n - 1];
        memcpy(win + b * W + 1, r->draft + b * K, (size_t)K * sizeof *win);
    }
    target_step(r, in, out, win, n - 1, &s->target_time);
    rt_sample_gather_whole(r->dev, tl, out[g->logits], r->tl);
    /* Each row's own accepted count, then the lockstep's minimum. */
    int64_t a = K;
    for (int64_t b = 0; b < B; b++) {
        int64_t ab = 0;
        for (; ab < K; ab++) {
            const char *row = (const char *)r->tl + (size_t)((b * W + ab) * V) * es;
            rt_sample_probs(&g->sampling, tl->dtype, row, V, r->work, r->p);
            int32_t d = r->draft[b * K + ab];
            double u = rt_sample_uniform(g->sampling.seed, round, b * (2 * K + 2) + K + ab);
            if (!rt_speculate_accept(r->p[d], r->q[(b * K + ab) * V + d], u))
                break;
        }
        r->accepted[b] = ab;
        if (r->dev->id == 0) {
            s->accepted += ab;
            s->tested += ab < K ? ab + 1 : K;
        }
        a = ab < a ? ab : a;
    }
    int64_t made = a + 1 < room ? a + 1 : room;
    for (int64_t b = 0; b < B; b++) {
        int32_t *row = r->ids + b * r->len + n;
        int64_t ab = r->accepted[b];
        for (int64_t j = 0; j < a && j < made; j++)
            row[j] = r->draft[b * K + j];
        if (a >= made)
            continue;
        const char *lrow = (const char *)r->tl + (size_t)((b * W + a) * V) * es;
        double u = rt_sample_uniform(g->sampling.seed, round, b * (2 * K + 2) + 2 * K);
        if (ab > a) { /* accepted beyond the lockstep: its own d_{a+1} */
            row[a] = r->draft[b * K + a];
        } else if (a == K) { /* all accepted: one more from p_{K+1}, as plain decoding */
            row[a] = rt_sample_row(&g->sampling, tl->dtype, lrow, V, u, r->work);
        } else { /* rejected at a + 1: the residual norm(max(0, p - q)) */
            rt_sample_probs(&g->sampling, tl->dtype, lrow, V, r->work, r->p);
            row[a] = rt_sample_residual(r->p, r->q + (b * K + a) * V, V, u);
        }
    }
    return made;
}

/* Whether every row has made a --stop-token among ids[T0 .. n). */
static int all_stopped(const spec_run *r, int64_t n)
{
    for (int64_t b = 0; b < r->g->batch; b++) {
        int64_t t = r->g->prompt_len;
        while (t < n && !rt_generate_is_stop(r->g, r->ids[b * r->len + t]))
            t++;
        if (t == n)
            return 0;
    }
    return 1;
}

/* -1 after each row's first stop token and past the last token made, as
 * --generate leaves them; returns the longest row's tokens (its stop
 * token included). */
static int64_t mark_ended(spec_run *r, int64_t n)
{
    int64_t longest = 0;
    for (int64_t b = 0; b < r->g->batch; b++) {
        int32_t *row = r->ids + b * r->len;
        int64_t t = r->g->prompt_len;
        while (t < n && !rt_generate_is_stop(r->g, row[t]))
            t++;
        t = t < n ? t + 1 : n;
        longest = t - r->g->prompt_len > longest ? t - r->g->prompt_len : longest;
        for (; t < r->len; t++)
            row[t] = -1;
    }
    return longest;
}

void rt_speculate_device(rt_device *dev, rt_job *job, void *const *in, void *const *out)
{
    const rt_program *p = job->prog;
    rt_generate *g = job->gen;
    rt_speculate *s = g->spec;
    int64_t B = g->batch, V = g->vocab, K = s->k, W = s->window;
    spec_run r = {.dev = dev, .job = job, .g = g, .s = s,
                  .mask = p->naxes ? (1u << p->naxes) - 1 : 0, .len = g->prompt_len + g->n};
    r.din = rt_job_load_inputs(dev, &s->djob);
    r.dout = rt_job_alloc_outputs(dev, s->draft);
    const rt_tensor_desc *tl = &p->outputs[g->logits];
    const rt_tensor_desc *dl = &s->draft->outputs[s->dgen.logits];
    r.ids = rt_xmalloc(dev, (size_t)(B * r.len) * sizeof *r.ids);
    memcpy(r.ids, g->ids, (size_t)(B * r.len) * sizeof *r.ids);
    r.tl = rt_xmalloc(dev, (size_t)(B * W * V) * rt_dtype_size(tl->dtype));
    r.dl = rt_xmalloc(dev, (size_t)(B * V) * rt_dtype_size(dl->dtype));
    r.q = rt_xmalloc(dev, (size_t)(B * K * V) * sizeof *r.q);
    r.p = rt_xmalloc(dev, (size_t)V * sizeof *r.p);
    r.draft = rt_xmalloc(dev, (size_t)(B * K) * sizeof *r.draft);
    r.accepted = rt_xmalloc(dev, (size_t)B * sizeof *r.accepted);
    r.work = rt_xmalloc(dev, (size_t)V * sizeof *r.work);
    int32_t *win = rt_xmalloc(dev, (size_t)(B * W) * sizeof *win);
    double t0 = rt_now();
    int64_t n = g->prompt_len, draft_len = 0, round = 0;
    prefill(&r, in, out, win, n);
    while (n < r.len) {
        propose(&r, round, n, &draft_len);
        int64_t made = verify(&r, in, out, win, round, n, r.len - n);
        /* The draft's cache holds the accepted tokens up to n - 1 + a. */
        draft_len = n + made - 1 < draft_len ? n + made - 1 : draft_len;
        if (round == 0 && dev->id == 0)
            s->first_time = rt_now() - t0;
        n += made;
        round++;
        if (g->nstop > 0 && all_stopped(&r, n))
            break; /* every row has ended (an ended row runs on with its own tokens) */
    }
    int64_t longest = mark_ended(&r, n);
    if (dev->id == 0) {
        s->made = longest;
        memcpy(g->ids, r.ids, (size_t)(B * r.len) * sizeof *r.ids);
        s->rounds = round;
        s->total_time = rt_now() - t0;
        g->ran = round;
    }
    free(win);
    free(r.work);
    free(r.accepted);
    free(r.draft);
    free(r.p);
    free(r.q);
    free(r.dl);
    free(r.tl);
    free(r.ids);
    rt_job_free_buffers(dev, s->draft, r.din, r.dout);
}
