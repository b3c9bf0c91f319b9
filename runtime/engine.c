/*
 * engine.c - the queue of completion requests, static batching, and
 * continuous batching (seed 002, "Batching"; Orca, OSDI'22).
 *
 * Continuous batching, when the program's position is one per row
 * (g->per_row: `KC[B, At[B], K, H]`): before each step device 0 fills the
 * free slots with queued requests at position 0 (schedule_step); the step
 * runs each row at its own position e->at[b]; after it each running row
 * moves one position on and a row that stopped frees its slot at once
 * (after_iteration).  The cache is not cleared: a row writes its position
 * p before the program reads, and the program's mask `S <= At[B]` reads
 * only positions its own request wrote, so the stale entries past p that
 * the slot's earlier requests left are never read.  A free slot runs at
 * position 0 with token 0, where its next request writes first.  The
 * other devices follow e->batches as below, asleep on e->stepped while
 * device 0 samples and schedules (a barrier there, which polls with
 * sched_yield where devices outnumber cores, hides their idle core from
 * the kernel, which would place the HTTP thread and clients on it, and
 * measured no better: docs/generation.md); the step's own first barrier
 * (rt_run_timed, rt_prefill_run) comes after every device copied e->feed
 * and e->at and keeps device 0 from moving them early.
 * With a prefill program (`einc --prefill`, engine_prefill.c's essay),
 * schedule_step may choose it for the step: every row then moves by its
 * count of real tokens (a prompt's next chunk, or one), and after_iteration
 * samples each row from the logits at its last real token.
 * --static-batching (e->gang) keeps this loop but lets free slots take
 * queued requests only when no row runs: a batch of up to B requests runs
 * until its last row ends, as static batching does, with the same
 * program (and prefill program) as continuous batching.
 *
 * Static batching, with a scalar position:
 * The decode program takes one token per row, tokens [B], and ONE
 * position for all rows, so the B rows (slots) of a batch advance
 * together.  When the engine is idle, device 0 takes up to B queued
 * requests as a batch (unused rows are padding, fed token 0), the states
 * (the KV cache) are zeroed, and the steps run at positions 0, 1, 2, ...:
 * at position s a row feeds its prompt's token s while s is inside its
 * prompt, then its own generated tokens, so a row with a shorter prompt
 * starts generating earlier (its prompt is read one token per step, as
 * --generate does).  The output at position s >= prompt_len - 1 is the
 * row's next token, sampled with the request's own settings and a uniform
 * number drawn from its seed and s (sample.c), so a request's text does
 * not depend on its row or on the other rows.  A row stops at a
 * --stop-token id or a stop string (neither is part of its text), at its
 * max_tokens, or when its client went away; the batch ends when every row
 * has stopped, and only then is the next batch taken: requests arriving
 * meanwhile wait in the queue (bounded by --max-queue; beyond it 503).
 *
 * Sharded logits (a vocab-parallel LM head): once device 0 knows a
 * step's rows (a batch taken, a step scheduled, or the static step
 * before), it plans what the step gathers to sample from (plan_step): K,
 * the largest rt_sample_slots of the rows that sample after it (1 for
 * greedy, k for top-k, V for a temperature or top-p without top-k), and
 * then (value, index) pairs or whole rows, whichever are fewer bytes
 * (rt_sample_choose).  Every device gathers that after the step
 * (rt_sample_gather_step) and device 0 picks each row with its request's
 * settings (sample_shard.c's essay): the token the whole row gives.  A
 * step where no row samples (every row in its prompt) gathers nothing.
 * The plan travels with the step's tokens (e->plan; share()).
 *
 * Devices: device 0 takes the batch and samples under e->mu, noting the
 * connections to wake (touch), which it resumes once it has released the
 * mutex (wake_connections; rt_serve.h); the others
 * wait for e->batches to move,
 * then every step reads e->feed and e->live after a barrier that orders
 * device 0's writes before their reads.  e->live is written only by a
 * step (not by taking a batch), so a device late to read the last step's
 * 0 cannot see the next batch's value: that needs the next step's
 * barriers, which it has not reached.
 *
 * Under MPI (the backend has a broadcast: each device is a process, and
 * only rank 0 has the HTTP server, the queue and the requests) the other
 * ranks cannot read e->feed, e->at, e->rows or e->live: after device 0
 * has taken a batch or scheduled a step, and after each static step,
 * every device calls share(), which broadcasts them from device 0 into
 * the other ranks' engines (at shutdown, rows 0 ends every rank's loop).
 * Device 0 enters it only with a batch or at shutdown, so while the
 * server waits for requests the other ranks wait in that one broadcast,
 * sleeping between polls (dev->ops->broadcast's `idle`).  The threads
 * backend keeps the shared memory above: its devices wait for a batch on
 * a condition variable, which costs no CPU, and a step costs one barrier
 * rather than a broadcast's copy and barriers.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_serve.h"

int rt_engine_submit(rt_engine *e, rt_request *r)
{
    pthread_mutex_lock(&e->mu);
    int ok = !e->shutdown && e->queued < e->max_queue;
    if (ok) {
        r->refs++;
        r->arrived = rt_now();
        e->queue[(e->head + e->queued) % e->max_queue] = r;
        e->queued++;
        pthread_cond_broadcast(&e->work);
    }
    pthread_mutex_unlock(&e->mu);
    return ok ? 0 : -1;
}

/* Drops a reference with e->mu held. */
static void release_locked(rt_request *r)
{
    if (--r->refs == 0)
        rt_request_free(r);
}

/* Device 0: ends its current phase (RT_PHASE_*, rt_serve.h) now, adding
 * its wall time to e->phase_pending; the next phase begins now. */
static void phase(rt_engine *e, int ph)
{
    double now = rt_now();
    e->phase_pending[ph] += now - e->phase_mark;
    e->phase_mark = now;
}

/* Device 0, e->mu held: moves the pending phase times into the metrics. */
static void flush_phases(rt_engine *e)
{
    for (int i = 0; i < RT_NPHASES; i++) {
        e->metrics.phase_seconds[i] += e->phase_pending[i];
        e->phase_pending[i] = 0;
    }
}

/* Device 0, e->mu held, when r's text, ready, finish or aborted changed:
 * takes its suspended connection, if any, for wake_connections. */
static void touch(rt_engine *e, rt_request *r)
{
    if (r->waiter) {
        e->woken[e->nwoken++] = r->waiter;
        r->waiter = NULL;
    }
}

/* Device 0, e->mu released: hands the connections touch took to the HTTP
 * thread, which resumes them (rt_server_wake: one batch, one wake-up per
 * step).  Outside the mutex, so that a resumed connection finds it free
 * and the server's lock is never taken under it. */
static void wake_connections(rt_engine *e)
{
    if (e->nwoken > 0)
        e->resume(e->server, e->woken, e->nwoken);
    e->nwoken = 0;
}

void rt_engine_release(rt_engine *e, rt_request *r)
{
    pthread_mutex_lock(&e->mu);
    release_locked(r);
    pthread_mutex_unlock(&e->mu);
}

void rt_engine_stop(rt_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->shutdown = 1;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
}

/* Answers every queued request 503 (e->mu held): the server is stopping. */
static void refuse_queued(rt_engine *e)
{
    for (; e->queued > 0; e->queued--, e->head = (e->head + 1) % e->max_queue) {
        e->queue[e->head]->aborted = 1;
        touch(e, e->queue[e->head]);
        release_locked(e->queue[e->head]);
    }
}

/* Device 0, e->mu held, once the next step's rows are known: plans what
 * it gathers from sharded logits (engine.c's essay).  A row samples after
 * the step when it runs at its prompt's last position or later: row b at
 * at[b], or with at NULL (static batching) every row at `pos`. */
static void plan_step(rt_engine *e, const int32_t *at, int64_t pos)
{
    const rt_generate *g = e->gen;
    int64_t slots = 0;
    for (int64_t b = 0; e->sharded && b < g->batch; b++) {
        const rt_request *r = e->batch[b];
        if (r && !r->finish && (at ? at[b] : pos) + 1 >= r->prompt_len) {
            int64_t k = rt_sample_slots(&r->sampling, g->vocab);
            slots = k > slots ? k : slots;
        }
    }
    /* Every row's pairs go to every device (device 0 picks them all), so
     * B rows of pairs and no tokens after. */
    e->plan = rt_sample_choose(slots, g->batch, e->vocab_shards, 0, g->batch, g->vocab,
                               e->logit_bytes);
}

/* Device 0, e->mu held: announces a batch (or step) of n rows to the
 * other devices (follow_batch), unlocks e->mu, wakes the connections of
 * the requests refused meanwhile and returns n. */
static int64_t publish(rt_engine *e, int64_t n)
{
    e->rows = n;
    e->metrics.running = n;
    e->batches++;
    pthread_cond_broadcast(&e->stepped);
    phase(e, RT_PHASE_BOOKKEEP);
    flush_phases(e);
    pthread_mutex_unlock(&e->mu);
    wake_connections(e);
    phase(e, RT_PHASE_WAKE);
    return n;
}

/* Device 0: waits for a request (or shutdown) and takes up to B queued
 * requests into e->batch, their first tokens into e->feed.  Returns the
 * rows taken, 0 at shutdown (the queued requests are answered 503). */
static int64_t take_batch(rt_engine *e)
{
    int64_t B = e->gen->batch, n = 0;
    pthread_mutex_lock(&e->mu);
    phase(e, RT_PHASE_BOOKKEEP);
    while (!e->queued && !e->shutdown)
        pthread_cond_wait(&e->work, &e->mu);
    phase(e, RT_PHASE_IDLE);
    if (e->shutdown)
        refuse_queued(e);
    for (int64_t b = 0; b < B; b++) {
        rt_request *r = NULL;
        if (e->queued > 0) {
            r = e->queue[e->head];
            e->head = (e->head + 1) % e->max_queue;
            e->queued--;
            n++;
        }
        e->batch[b] = r;
        e->feed[b] = r ? r->prompt[0] : 0;
    }
    plan_step(e, NULL, 0);
    return publish(e, n);
}

/* The other devices: wait until device 0 has taken batch number `seen` + 1;
 * its rows (0: shutdown). */
static int64_t follow_batch(rt_engine *e, uint64_t seen)
{
    pthread_mutex_lock(&e->mu);
    while (e->batches == seen)
        pthread_cond_wait(&e->stepped, &e->mu);
    int64_t rows = e->rows;
    pthread_mutex_unlock(&e->mu);
    return rows;
}

/* Whether token t is a --stop-token id. */
static int is_stop_id(const rt_engine *e, int32_t t)
{
    for (int i = 0; i < e->nstop_ids; i++)
        if (e->stop_ids[i] == t)
            return 1;
    return 0;
}

/* The bytes at the end of r->text that may begin one of its stop
 * strings: held back from the client until the next token decides. */
static size_t held_back(const rt_request *r)
{
    size_t most = 0;
    for (int i = 0; i < r->nstop; i++) {
        size_t n = strlen(r->stop[i]);
        for (size_t k = n - 1; k > most; k--) /* the longest proper prefix that ends text */
            if (k <= r->len && !memcmp(r->text + r->len - k, r->stop[i], k)) {
                most = k;
                break;
            }
    }
    return most;
}

/* Appends token t to request r at time `now` (e->mu held): the metrics,
 * the text, and whether r stops (a stop id or string, max_tokens). */
static void emit(rt_engine *e, rt_request *r, int32_t t, double now)
{
    r->tokens++;
    e->metrics.tokens++;
    rt_histogram_observe(r->tokens == 1 ? &e->metrics.ttft : &e->metrics.itl,
                         now - (r->tokens == 1 ? r->arrived : r->last));
    r->last = now;
    if (is_stop_id(e, t)) {
        r->finish = "stop";
        r->ready = r->len;
        return;
    }
    if (r->len + 4 > r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        char *text = realloc(r->text, cap);
        if (!text) { /* out of memory: end the row with what it has */
            r->finish = "length";
            r->ready = r->len;
            return;
        }
        r->text = text;
        r->cap = cap;
    }
    r->len += (size_t)rt_tokenizer_decode(&e->tok, t, r->text + r->len);
    for (int i = 0; i < r->nstop; i++) {
        size_t n = strlen(r->stop[i]);
        if (n <= r->len && !memcmp(r->text + r->len - n, r->stop[i], n)) {
            r->len -= n;
            r->finish = "stop";
            r->ready = r->len;
            return;
        }
    }
    if (r->tokens >= r->max_tokens)
        r->finish = "length";
    /* Held back, until the next token decides: a stop string's beginning,
     * and an unfinished UTF-8 character (an event must be UTF-8) */
    size_t stop = held_back(r), part = rt_utf8_partial(r->text, r->len);
    r->ready = r->finish ? r->len : r->len - (stop > part ? stop : part);
}

/* Row b's next token after the step that ran it at position `pos`: the
 * program's argmax, or sampled with request r's settings and the uniform
 * number of its seed and `pos` (so the token depends on neither the row
 * nor the other rows) from the whole logits, or from the rows' pairs
 * when the step's `plan` gathered those.  `work`: V entries of scratch
 * (more than the G * K pairs of a row: rt_sample_choose takes pairs only
 * when 16 G K < V * dtype bytes <= 8 V). */
static int32_t next_token(const rt_engine *e, const rt_program *p, const void *logits,
                          const rt_sample_plan *plan, int64_t b, const rt_request *r, int64_t pos,
                          rt_sample_entry *work)
{
    const rt_generate *g = e->gen;
    if (e->greedy_only) /* `logits` is then the program's argmax [B] */
        return ((const int32_t *)logits)[b];
    double u = rt_sample_uniform(r->sampling.seed, pos, 0);
    if (plan->slots > 0) { /* f64 [B, G * K * 2]: row b's shards' summaries */
        int64_t n = e->vocab_shards * plan->slots;
        return rt_sample_pick_pairs(&r->sampling, (const double *)logits + b * 2 * n, n,
                                    e->vocab_shards == 1, u, work);
    }
    int32_t dtype = p->outputs[g->logits].dtype;
    size_t row_bytes = (size_t)g->vocab * rt_dtype_size(dtype);
    return rt_sample_row(&r->sampling, dtype, (const char *)logits + (size_t)b * row_bytes,
                         g->vocab, u, work);
}

/* Counts a step's gather in the metrics (e->mu held). */
static void count_gather(rt_engine *e, const rt_sample_plan *plan)
{
    if (plan->bytes > 0) {
        e->metrics.gather_steps[plan->whole]++;
        e->metrics.gather_bytes[plan->whole] += (uint64_t)plan->bytes;
    }
}

/* Device 0, after the step at position `pos`, which gathered by `plan`:
 * each row's next token from the logits (or its next prompt token), into
 * e->feed; e->live and the next step's plan; at the batch's end its
 * requests are released.  `work`: V entries of scratch. */
static void after_step(rt_engine *e, const rt_program *p, const void *logits,
                       const rt_sample_plan *plan, int64_t pos, rt_sample_entry *work)
{
    const rt_generate *g = e->gen;
    pthread_mutex_lock(&e->mu);
    e->metrics.iterations++;
    count_gather(e, plan);
    double now = rt_now();
    int live = 0;
    for (int64_t b = 0; b < g->batch; b++) {
        rt_request *r = e->batch[b];
        e->feed[b] = 0;
        if (!r || r->finish)
            continue;
        if (r->cancelled) { /* the client went away: free the row */
            r->finish = "stop";
            touch(e, r);
            continue;
        }
        if (pos + 1 < r->prompt_len) {
            e->feed[b] = r->prompt[pos + 1];
            live = 1;
            continue;
        }
        phase(e, RT_PHASE_BOOKKEEP);
        int32_t t = next_token(e, p, logits, plan, b, r, pos, work);
        phase(e, RT_PHASE_SAMPLE);
        emit(e, r, t, now);
        if (!r->finish && pos + 1 >= e->cache) /* the cache is full (parse checks before) */
            r->finish = "length";
        touch(e, r);
        e->feed[b] = t;
        live |= !r->finish;
    }
    e->live = live;
    plan_step(e, NULL, pos + 1);
    if (!live)
        e->metrics.running = 0;
    for (int64_t b = 0; !live && b < g->batch; b++)
        if (e->batch[b]) {
            release_locked(e->batch[b]);
            e->batch[b] = NULL;
        }
    phase(e, RT_PHASE_BOOKKEEP);
    flush_phases(e);
    pthread_mutex_unlock(&e->mu);
    wake_connections(e);
    phase(e, RT_PHASE_WAKE);
}

/* Continuous batching, device 0, before each step: fills the free slots
 * with queued requests (each at position 0, fed its prompt's first token)
 * and returns the rows that run in the step, waiting while there are
 * none; 0 at shutdown once the running rows have finished. */
static int64_t schedule_step(rt_engine *e)
{
    int64_t B = e->gen->batch, n;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        if (e->shutdown)
            refuse_queued(e);
        n = 0;
        int admit = 1; /* --static-batching: only into an empty batch */
        for (int64_t b = 0; e->gang && b < B; b++)
            admit &= !e->batch[b];
        for (int64_t b = 0; b < B; b++) {
            if (admit && !e->batch[b] && e->queued > 0) {
                rt_request *r = e->queue[e->head];
                e->head = (e->head + 1) % e->max_queue;
                e->queued--;
                e->batch[b] = r;
                e->at[b] = 0;
                e->feed[b] = r->prompt[0];
            }
            n += e->batch[b] != NULL;
        }
        if (n > 0 || e->shutdown)
            break;
        phase(e, RT_PHASE_BOOKKEEP);
        pthread_cond_wait(&e->work, &e->mu);
        phase(e, RT_PHASE_IDLE);
    }
    if (e->pf && n > 0 && rt_prefill_plan(e))
        e->plan = (rt_sample_plan){0}; /* the prefill step gathers its logits whole */
    else
        plan_step(e, e->at, 0);
    return publish(e, n);
}

/* Row b's next token after a step of the prefill program, from the whole
 * logits `window` [B, W, V] at its window's offset t, its position `pos`:
 * sampled as next_token samples a whole row.  `work`: V entries. */
static int32_t window_token(const rt_engine *e, const void *window, int64_t b, int64_t t,
                            const rt_request *r, int64_t pos, rt_sample_entry *work)
{
    const rt_prefill *pf = e->pf;
    int32_t dtype = pf->prog->outputs[pf->gen.logits].dtype;
    size_t row_bytes = (size_t)e->gen->vocab * rt_dtype_size(dtype);
    double u = rt_sample_uniform(r->sampling.seed, pos, 0);
    return rt_sample_row(&r->sampling, dtype,
                         (const char *)window + (size_t)(b * pf->window + t) * row_bytes,
                         e->gen->vocab, u, work);
}

/* Continuous batching, device 0, after a step that gathered by `plan`:
 * each running row moves on, fed its next prompt token or the token it
 * made; a row that stopped (or whose client went away) frees its slot at
 * once, for the next step's schedule_step.  After a decode step every row
 * moves one position; after a step of the prefill program (`window`, its
 * whole logits; NULL after a decode step) row b moves e->pf->count[b]
 * positions and samples from its last real token's logits.  `work`: V
 * entries of scratch. */
static void after_iteration(rt_engine *e, const rt_program *p, const void *logits,
                            const rt_sample_plan *plan, rt_sample_entry *work, const void *window)
{
    pthread_mutex_lock(&e->mu);
    e->metrics.iterations++;
    e->metrics.prefill_steps += window != NULL;
    count_gather(e, plan);
    double now = rt_now();
    for (int64_t b = 0; b < e->gen->batch; b++) {
        rt_request *r = e->batch[b];
        if (!r)
            continue;
        int64_t n = window ? e->pf->count[b] : 1; /* >= 1 for a running row */
        int64_t pos = e->at[b] + n - 1;           /* its last real token's */
        if (r->cancelled) {
            r->finish = "stop";
        } else if (pos + 1 < r->prompt_len) {
            e->feed[b] = r->prompt[pos + 1];
            e->at[b] = (int32_t)(pos + 1);
            continue;
        } else {
            phase(e, RT_PHASE_BOOKKEEP);
            int32_t t = window ? window_token(e, window, b, n - 1, r, pos, work)
                               : next_token(e, p, logits, plan, b, r, pos, work);
            phase(e, RT_PHASE_SAMPLE);
            emit(e, r, t, now);
            if (!r->finish && pos + 1 >= e->cache) /* the cache is full (parse checks before) */
                r->finish = "length";
            e->feed[b] = t;
            e->at[b] = (int32_t)(pos + 1);
        }
        touch(e, r); /* before release_locked may free r */
        if (r->finish) { /* free the slot: a free row writes at 0, which its next request rewrites */
            release_locked(r);
            e->batch[b] = NULL;
            e->feed[b] = 0;
            e->at[b] = 0;
        }
    }
    e->metrics.running = 0;
    for (int64_t b = 0; b < e->gen->batch; b++)
        e->metrics.running += e->batch[b] != NULL;
    phase(e, RT_PHASE_BOOKKEEP);
    flush_phases(e);
    pthread_mutex_unlock(&e->mu);
    wake_connections(e);
    phase(e, RT_PHASE_WAKE);
}

/* The int32 entries of share()'s message: head, plan, prefill due, feed
 * [B], at [B] and with a prefill program the windows [B, W]. */
static int64_t share_size(const rt_engine *e)
{
    int64_t B = e->gen->batch;
    return 3 + 2 * B + (e->pf ? B * e->pf->window : 0);
}

/* Under MPI, every device: broadcasts `head` (rows, or live), the next
 * step's gather (e->plan: K pairs, -1 whole rows, 0 nothing) and e->feed
 * [B], with `with_at` e->at [B] too and, with a prefill program, whether
 * the step runs it and its windows e->pf->win [B, W], from device 0's
 * engine into every device's: 4 (3 + B) or 4 (3 + 2B [+ BW]) bytes.
 * `msg`: share_size entries of scratch.  Returns device 0's head.
 * `idle`: as dev->ops->broadcast. */
static int64_t share(rt_device *dev, rt_engine *e, int32_t *msg, int64_t head, int with_at,
                     int idle)
{
    int64_t B = e->gen->batch, n = with_at ? share_size(e) : 3 + B;
    size_t row = (size_t)B * sizeof *msg;
    size_t win = with_at ? (size_t)(n - 3 - 2 * B) * sizeof *msg : 0; /* the windows' bytes */
    if (dev->id == 0) {
        msg[0] = (int32_t)head;
        msg[1] = e->plan.whole ? -1 : (int32_t)e->plan.slots; /* K < V < 2^31 */
        msg[2] = e->pf && e->pf->due;
        memcpy(msg + 3, e->feed, row);
        if (with_at)
            memcpy(msg + 3 + B, e->at, row);
        if (win)
            memcpy(msg + 3 + 2 * B, e->pf->win, win);
    }
    dev->ops->broadcast(dev, msg, n * (int64_t)sizeof *msg, idle);
    if (dev->id != 0) { /* the other devices need only what to gather */
        e->plan.whole = msg[1] < 0;
        e->plan.slots = msg[1] > 0 ? msg[1] : 0;
        memcpy(e->feed, msg + 3, row);
        if (with_at)
            memcpy(e->at, msg + 3 + B, row);
        if (win) {
            e->pf->due = msg[2];
            memcpy(e->pf->win, msg + 3 + 2 * B, win);
        }
    }
    return msg[0];
}

/* Device 0 takes a batch (or schedules a step, `continuous`); the others
 * follow it: through shared memory (follow_batch), or through share()
 * when the backend broadcasts.  Its rows; 0: shutdown. */
static int64_t next_batch(rt_device *dev, rt_engine *e, int32_t *msg, int continuous,
                          uint64_t seen)
{
    int64_t rows = 0;
    if (dev->id == 0)
        rows = continuous ? schedule_step(e) : take_batch(e);
    else if (!msg)
        rows = follow_batch(e, seen);
    return msg ? share(dev, e, msg, rows, continuous, 1) : rows;
}

/* Every device: zeroes its blocks of the states (a batch starts with an
 * empty cache, as --generate does). */
static void zero_states(const rt_program *p, void *const *in)
{
    for (int32_t i = 0; i < p->ninputs; i++)
        if (p->inputs[i].role == RT_ROLE_STATE)
            memset(in[i], 0, (size_t)rt_numel(p->inputs[i].rank, p->inputs[i].local_shape) *
                                 rt_dtype_size(p->inputs[i].dtype));
}

void rt_engine_device(rt_device *dev, rt_job *job, void *const *in, void *const *out)
{
    const rt_program *p = job->prog;
    rt_engine *e = job->gen->engine;
    const rt_generate *g = e->gen;
    uint32_t all = p->naxes ? (1u << p->naxes) - 1 : 0;
    const rt_tensor_desc *tok = &p->inputs[g->tokens];
    int64_t start[RT_MAX_RANK];
    rt_block_start(tok, p->axis_sizes, dev->coord, start);
    rt_sample_entry *work = NULL;
    /* Sharded logits (a vocab-parallel LM head): every device gathers the
     * pairs or the whole rows of each step as planned (e->plan) into
     * `gathered`, whose size, the whole logits', bounds both, and device 0
     * samples from it. */
    const void *sampled = NULL;
    void *gathered = NULL;
    const rt_tensor_desc *l = e->greedy_only ? NULL : &p->outputs[g->logits];
    if (l) {
        if (e->sharded)
            gathered = rt_xmalloc(dev, (size_t)rt_numel(l->rank, l->global_shape) *
                                           rt_dtype_size(l->dtype));
        sampled = gathered ? gathered : out[g->logits];
    } else {
        sampled = out[g->next];
    }
    if (dev->id == 0) {
        char err[512];
        work = rt_xmalloc(dev, (size_t)g->vocab * sizeof *work);
        e->phase_mark = rt_now();
        e->server = rt_server_start(e, job->opt->host ? job->opt->host : "127.0.0.1",
                                    job->opt->port_given ? job->opt->port : 8080, err, sizeof err);
        if (!e->server)
            rt_fatal(NULL, "--serve: %s", err);
    }
    int32_t *tin = in[g->tokens];
    /* Under MPI: the scratch of share(); NULL: shared memory (threads). */
    int32_t *msg = dev->ops->broadcast
                       ? rt_xmalloc(dev, (size_t)share_size(e) * sizeof *msg) : NULL;
    rt_prefill_bufs pbuf = {0};
    if (e->pf && g->per_row)
        rt_prefill_open(dev, e, in, &pbuf);
    for (uint64_t seen = 0; g->per_row; seen++) { /* continuous batching */
        if (next_batch(dev, e, msg, 1, seen) == 0)
            break;
        int prefill = e->pf && e->pf->due; /* this step runs the prefill program */
        if (prefill) {
            rt_prefill_feed(dev, e, &pbuf);
        } else {
            for (int64_t i = 0; i < tok->local_shape[0]; i++)
                tin[i] = e->feed[start[0] + i];
            rt_generate_set_positions(dev, p, g, in, e->at, 0);
        }
        /* Every device has read e->feed, e->at, e->pf and e->plan before device 0
         * moves them in after_iteration: the step's first barrier orders them. */
        rt_sample_plan plan = e->plan;
        if (prefill) {
            const void *window = rt_prefill_run(dev, e, &pbuf);
            if (dev->id == 0) {
                phase(e, RT_PHASE_STEP);
                after_iteration(e, p, NULL, &plan, work, window);
            }
            continue;
        }
        rt_run_timed(dev, job, in, out, 0);
        if (gathered)
            rt_sample_gather_step(dev, p, l, &plan, out[g->logits], gathered);
        if (dev->id == 0) {
            phase(e, RT_PHASE_STEP);
            after_iteration(e, p, sampled, &plan, work, NULL);
        }
    }
    if (pbuf.in)
        rt_prefill_close(dev, e, &pbuf);
    for (uint64_t seen = 0; !g->per_row; seen++) { /* static batching */
        if (next_batch(dev, e, msg, 0, seen) == 0)
            break;
        zero_states(p, in);
        for (int64_t pos = 0;; pos++) {
            for (int64_t i = 0; i < tok->local_shape[0]; i++)
                tin[i] = e->feed[start[0] + i];
            rt_generate_set_positions(dev, p, g, in, NULL, (int32_t)pos);
            rt_sample_plan plan = e->plan; /* read before the run's barrier, as e->feed */
            rt_run_timed(dev, job, in, out, 0);
            if (gathered)
                rt_sample_gather_step(dev, p, l, &plan, out[g->logits], gathered);
            if (dev->id == 0) {
                phase(e, RT_PHASE_STEP);
                after_step(e, p, sampled, &plan, pos, work);
            }
            if (msg) /* e->feed, e->live and e->plan, from device 0 */
                e->live = (int)share(dev, e, msg, e->live, 0, 0);
            else /* e->feed and e->live written */
                dev->ops->barrier(dev, all);
            if (!e->live)
                break;
        }
    }
    free(msg);
    free(gathered);
    free(work);
}

void rt_engine_free(rt_engine *e)
{
    if (!e)
        return;
    rt_server_stop(e->server); /* every request has finished or been refused */
    if (e->signals_started) {
        char c = 0;
        if (write(e->wake[1], &c, 1) == 1) /* wakes wait_signals if no signal did */
            pthread_join(e->signals, NULL);
    }
    if (e->wake[0] > 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(e->wake[0]);
        close(e->wake[1]);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->stepped);
    free(e->queue);
    free(e->batch);
    free(e->feed);
    free(e->at);
    free(e->woken);
    rt_prefill_free(e->pf);
    free(e);
}
