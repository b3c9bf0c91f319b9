/*
 * rt_serve.h - serving a decode program over HTTP (--serve): the tokenizer
 * (tokenizer.c), a completion request and its JSON (request.c), the queue
 * and the engine, static or continuous batching (engine.c), its chunked
 * prefill (engine_prefill.c), its Prometheus metrics
 * (metrics.c), the HTTP server (server.c) and the flags and set-up
 * (serve.c).  docs/generation.md, "Serving", describes the API.
 *
 * Threads: libmicrohttpd runs every connection on one polling thread
 * (server.c); device 0's thread (the engine) takes batches from the queue
 * and runs the steps on every device; they meet under rt_engine.mu.  A
 * connection that waits for the engine (its next tokens, or its whole
 * answer) is suspended rather than blocked, its request's `waiter`; after
 * each step the engine hands the connections whose requests the step
 * changed to the polling thread in one batch, which resumes them, once it
 * has released the mutex (rt_engine.resume).  Under MPI every rank has an
 * engine, but only rank 0's has the server and the requests; the others
 * receive its batches and tokens by broadcast (engine.c).
 */
#ifndef EINC_RT_SERVE_H
#define EINC_RT_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_job.h"

/* ---- tokenizer.c ---- */

/* How text becomes token ids and back.  Byte-level when the vocabulary has
 * >= 256 tokens (each byte of the UTF-8 text is one id); ASCII when it has
 * 128..255 (examples/fortunes/prepare.py's table: a character's id is its
 * code, and a byte >= 128 becomes '?').  A real tokenizer would add a kind. */
typedef struct rt_tokenizer {
    int kind;                    /* RT_TOKENIZER_BYTES or RT_TOKENIZER_ASCII */
    int64_t vocab;               /* V, the model's vocabulary */
} rt_tokenizer;

enum { RT_TOKENIZER_BYTES = 1, RT_TOKENIZER_ASCII = 2 };

/* Chooses the tokenizer for a vocabulary of `vocab` tokens; -1 and a
 * message if it is below 128 (no text tokenizer fits). */
int rt_tokenizer_init(rt_tokenizer *t, int64_t vocab, char *err, size_t errlen);
/* Encodes text[0..len) into ids (caller-owned, room for len ids: one per
 * byte); returns the count.  No errors. */
int64_t rt_tokenizer_encode(const rt_tokenizer *t, const char *text, size_t len, int32_t *ids);
/* Writes the bytes of token `id` into out (room for 4) and returns their
 * count: 1 for a byte or character, 0 for an id with no text (>= 256). */
int rt_tokenizer_decode(const rt_tokenizer *t, int32_t id, char *out);
/* The bytes of an unfinished UTF-8 character ending text[0..len) (0 to 3:
 * a first byte of a 2-, 3- or 4-byte character and fewer continuation
 * bytes than it needs), or 0.  A byte-level model (V >= 256) makes a
 * character one byte a step; a streamed event holding part of one is not
 * UTF-8, which JSON text must be (RFC 8259, section 8.1), so the engine
 * sends those bytes with the rest of their character.  Bytes that can
 * begin no character (0x80-0xC1, 0xF5-0xFF) are not waited for: no later
 * byte makes them UTF-8.  Reads only text[0..len). */
size_t rt_utf8_partial(const char *text, size_t len);
/* The bytes (1 to 4) of the UTF-8 character text[0..len) begins with
 * (RFC 3629, section 4: no overlong form, surrogate or code point over
 * U+10FFFF), or 0 when it begins with none or len is 0.  Reads only
 * text[0..len). */
size_t rt_utf8_char(const char *text, size_t len);

/* ---- request.c ---- */

/* Most stop strings a request may give (OpenAI's limit). */
#define RT_MAX_STOP 4

/* One completion request: what request.c parsed (read-only afterwards),
 * then what the engine wrote (under rt_engine.mu).  Shared by the
 * connection and the engine, freed when both released it (refs). */
typedef struct rt_request {
    int32_t *prompt;             /* the prompt's token ids, malloc'd */
    int64_t prompt_len;          /* >= 1, <= the cache length */
    int64_t max_tokens;          /* >= 1; prompt_len + max_tokens - 1 <= the cache length */
    rt_sampling sampling;        /* temperature, top_k, top_p, seed */
    char *stop[RT_MAX_STOP];     /* stop strings, malloc'd; not part of the text */
    int nstop;                   /* entries in stop */
    int stream;                  /* 1: server-sent events */
    uint64_t number;             /* the request's number, its id cmpl-N */
    double arrived;              /* rt_now() when queued, seconds */
    /* Written by the engine, read by the connection, under rt_engine.mu. */
    char *text;                  /* the completion's bytes so far, malloc'd */
    size_t len, cap;             /* bytes in text, and its room */
    size_t ready;                /* text[0..ready) can be sent: no stop string may begin there */
    int64_t tokens;              /* completion tokens made */
    double last;                 /* rt_now() of the last token, seconds */
    const char *finish;          /* "stop" or "length" when done, else NULL */
    int aborted;                 /* 1: the server shut down before it ran */
    int cancelled;               /* 1: the client went away: the engine ends the row */
    int refs;                    /* holders: the connection, and the engine once queued */
    /* The connection waiting for text, ready, finish or aborted to change,
     * suspended (server.c), or NULL.  Set by the connection, taken by the
     * engine when it changes them (engine.c's touch), which resumes it
     * after the step: a step wakes its B rows' connections, not every
     * queued one. */
    void *waiter;
} rt_request;

/* Parses a POST /v1/completions body (body[0..len), JSON) into a new
 * request *out (malloc'd, refs 1), checking every field against the
 * model: unknown fields, wrong types, a missing or empty prompt, a prompt
 * longer than `cache` positions, max_tokens < 1 or beyond the cache.
 * Fields not given take `defaults` (the command line's sampling flags);
 * the seed, when not given, is defaults->seed + number.  Returns 0, or
 * -1 with a message in err and the offending field's name in param (size
 * paramlen, cut short before a UTF-8 character that does not fit; "" if
 * none): the caller answers HTTP 400. */
int rt_request_parse(const char *body, size_t len, const rt_tokenizer *tok, int64_t cache,
                     const rt_sampling *defaults, uint64_t number, rt_request **out,
                     char *param, size_t paramlen, char *err, size_t errlen);
/* Frees a request and what it owns; NULL is fine. */
void rt_request_free(rt_request *r);
/* The JSON of a completion object with text[0..len) and `finish` (NULL:
 * none yet), malloc'd, or NULL when out of memory.  A streamed chunk
 * (r->stream) reads only r's number, fixed once parsed, so it needs no
 * lock; a whole answer adds the usage, r->tokens: under rt_engine.mu, or
 * once r has finished. */
char *rt_request_json(const rt_request *r, const char *text, size_t len, const char *finish);
/* The bytes a streamed chunk's JSON takes besides its escaped text (at
 * most 6 bytes a text byte): its fields, a 20-digit id and created, and
 * the longest finish reason, with room to spare. */
#define RT_CHUNK_JSON_FIXED 256
/* The bytes rt_request_event may write for len bytes of text. */
size_t rt_request_event_room(size_t len);
/* Writes the server-sent event `data: {chunk}\n\n` of a streamed request
 * r (r->stream) with text[0..len) and `finish` (NULL: none yet) at `out`,
 * which has rt_request_event_room(len) bytes, and returns the bytes
 * written: the chunk is rt_request_json's, made without allocating (the
 * HTTP thread writes one per streamed row and step).  Reads only r's
 * number, fixed once parsed: no lock needed. */
size_t rt_request_event(const rt_request *r, const char *text, size_t len, const char *finish,
                        char *out);
/* The JSON of an error answer: {"error": {"message", "type", "param",
 * "code"}}, malloc'd, or NULL when out of memory. */
char *rt_error_json(const char *message, const char *param, int status);

/* ---- metrics.c ---- */

/* Bucket bounds (seconds) of the latency histograms. */
#define RT_NBUCKETS 12

/* The phases of device 0's loop that rt_metrics.phase_seconds splits its
 * wall time into (metrics.c prints them as einc_engine_seconds_total):
 * the program's run and the gather of sharded logits, on every device
 * (STEP); choosing each row's next token from the logits (SAMPLE); the
 * rest of a step's bookkeeping under rt_engine.mu: the tokens' text, stop
 * strings, histograms, freed slots, scheduling the next step (BOOKKEEP);
 * resuming the connections the step changed (WAKE); waiting for a request
 * while no row runs (IDLE). */
enum { RT_PHASE_STEP, RT_PHASE_SAMPLE, RT_PHASE_BOOKKEEP, RT_PHASE_WAKE, RT_PHASE_IDLE,
       RT_NPHASES };

/* A Prometheus histogram: counts per upper bound, their sum and count. */
typedef struct rt_histogram {
    uint64_t counts[RT_NBUCKETS + 1]; /* observations <= bound i (not cumulative); last: +Inf */
    double sum;                  /* seconds */
    uint64_t count;
} rt_histogram;

/* The server's counters, under rt_engine.mu. */
typedef struct rt_metrics {
    uint64_t by_status[6];       /* answers with status 200, 400, 404, 405, 413, 503 */
    uint64_t other_status;       /* any other status */
    uint64_t tokens;             /* completion tokens made */
    rt_histogram ttft;           /* time to first token: arrival to first token, seconds */
    rt_histogram itl;            /* inter-token latency: between a request's tokens, seconds */
    int64_t running;             /* gauge: slots running a request in the current step */
    uint64_t iterations;         /* steps run (iterations of the batch), prefill ones included */
    uint64_t prefill_steps;      /* of those, steps of the prefill program (chunked prefill) */
    /* Sharded logits: the steps that gathered (value, index) pairs [0] or
     * whole rows [1] to sample from, and the bytes those gathers left on
     * each device (rt_sample_plan.bytes); a step that samples no row
     * gathers nothing and counts in neither. */
    uint64_t gather_steps[2];
    uint64_t gather_bytes[2];
    double phase_seconds[RT_NPHASES]; /* device 0's wall time per phase (RT_PHASE_*), seconds */
    double event_seconds;        /* the HTTP thread's wall time making streamed events (the
                                  * JSON and SSE bytes of new text), seconds; added when a
                                  * stream ends */
} rt_metrics;

/* Counts one answer with HTTP status `status`. */
void rt_metrics_status(rt_metrics *m, int status);
/* Adds one observation of `seconds` to h. */
void rt_histogram_observe(rt_histogram *h, double seconds);
/* The Prometheus text exposition (version 0.0.4) of m and the queue's
 * length, malloc'd, or NULL when out of memory. */
char *rt_metrics_text(const rt_metrics *m, int64_t queued);

/* ---- engine.c ---- */

struct rt_prefill;

/* The queue, the batch being run and the interface of the program.
 * Created by rt_serve_prepare, shared by the connections (which queue
 * requests and wait for their tokens) and every device (device 0 takes a
 * batch and samples; the others follow it). */
typedef struct rt_engine {
    pthread_mutex_t mu;          /* guards everything below that changes */
    pthread_cond_t work;         /* device 0 waits on it: a request queued, shutdown */
    pthread_cond_t stepped;      /* the other devices wait on it: a batch taken or a step
                                    scheduled (e->batches moved); apart from work, so that a
                                    request's arrival wakes device 0 alone */
    rt_request **queue;          /* a ring of max_queue requests waiting for a batch */
    int64_t max_queue, head, queued;
    rt_request **batch;          /* [B] the rows of the running batch; NULL: a padding row */
    int32_t *feed;               /* [B] each row's token for the next step */
    int32_t *at;                 /* [B] continuous batching: each row's position for the next
                                    step (0 for a free slot) */
    uint64_t batches;            /* batches taken so far (continuous batching: steps
                                    scheduled); the other devices follow it */
    int64_t rows;                /* requests in the batch taken last (continuous: rows running
                                    in the step scheduled last); 0: shutdown */
    int live;                    /* after a step: 1 if some row of the batch runs on */
    rt_sample_plan plan;         /* sharded logits: what the next step gathers to sample from
                                    (device 0 plans it with the step's rows; the other devices
                                    read slots and whole, under MPI from share()) */
    int shutdown;                /* 1: finish the running batch, refuse the queued, stop */
    uint64_t numbered;           /* requests numbered so far (ids, default seeds) */
    rt_metrics metrics;
    /* Fixed after rt_serve_prepare. */
    rt_generate *gen;            /* the program's interface: tokens, position, logits; B, V */
    int64_t cache;               /* positions the cache holds: the position's index bound */
    int greedy_only;             /* 1: no replicated logits; the program's argmax output
                                    (gen->next) decides, and sampling requests get 400 */
    int gang;                    /* --static-batching: with one position per row, free slots
                                    take requests only when no row runs */
    int sharded;                 /* 1: the logits are sharded: each step gathers pairs or rows */
    int64_t vocab_shards;        /* G: the blocks the logits' V dim is split into */
    int64_t logit_bytes;         /* bytes of one element of the logits */
    rt_tokenizer tok;
    rt_sampling defaults;        /* the command line's sampling flags */
    const int32_t *stop_ids;     /* --stop-token ids: a row ends there (not in its text) */
    int nstop_ids;
    struct rt_prefill *pf;       /* chunked prefill: the prefill program and the next step's
                                    windows (engine_prefill.c), owned; NULL without one */
    struct rt_server *server;    /* the HTTP server (server.c), started by device 0 */
    pthread_t signals;           /* the thread that waits for SIGINT and SIGTERM (serve.c) */
    int signals_started;
    int wake[2];                 /* its pipe: a byte there stops the engine; 0 0 if none */
    /* Resumes the suspended connections waiters[0..n) (rt_request.waiter)
     * of server sv: rt_server_wake, which server.c sets before the first
     * request.  Called by device 0 without e->mu, once per step. */
    void (*resume)(struct rt_server *sv, void *const *waiters, int64_t n);
    void **woken;                /* [max_queue + B] the waiters device 0 took under e->mu
                                    and resumes once it has released it; device 0's alone */
    int64_t nwoken;              /* entries in woken */
    double phase_mark;           /* device 0: rt_now() when its current phase began */
    double phase_pending[RT_NPHASES]; /* device 0: phase seconds not yet in metrics (timed
                                         without e->mu; added under it at the next step) */
} rt_engine;

/* Queues r for a batch (taking a reference); 0, or -1 if the queue is full
 * or the server is shutting down (the caller answers 503). */
int rt_engine_submit(rt_engine *e, rt_request *r);
/* Drops one reference to r, under e->mu; frees it at zero. */
void rt_engine_release(rt_engine *e, rt_request *r);
/* Every device, for the whole job: take a batch, run it to its end, again,
 * until shutdown; with one position per row (gen->per_row), schedule
 * every step instead: free slots take queued requests (engine.c's essay). */
void rt_engine_device(rt_device *dev, rt_job *job, void *const *in, void *const *out);
/* Asks the engine to stop: the running batch ends, queued requests get
 * 503, the devices return.  Safe from any thread. */
void rt_engine_stop(rt_engine *e);
/* Stops the HTTP server and the signal thread, frees the engine; NULL is fine. */
void rt_engine_free(rt_engine *e);

/* ---- engine_prefill.c ---- */

/* The prefill program of --serve (`einc --prefill`) and what the next
 * step feeds it (engine_prefill.c's essay).  Created by
 * rt_prefill_prepare; win, count and due are written by device 0 under
 * rt_engine.mu when it schedules a step, read by every device (under MPI
 * from engine.c's share()) before the step's barrier. */
typedef struct rt_prefill {
    const rt_program *prog;      /* P: the model over a window of W tokens per row */
    rt_generate gen;             /* P's interface: tokens [B, W], positions [B] (per_row),
                                    logits [B, W, V] */
    int64_t window;              /* W */
    int32_t *shared;             /* [P's ninputs]: the serving program's input whose blocks P
                                    reads for each of its params and states (the same
                                    buffers), -1 for the tokens and positions; malloc'd */
    int32_t *win;                /* [B, W]: each row's window for the next step; malloc'd */
    int32_t *count;              /* [B]: the real tokens of each window (device 0): the
                                    prompt's next chunk, 1 when decoding, 0 for a free slot */
    int due;                     /* 1: the next step runs P rather than the decode step */
    int64_t budget;              /* --prefill-budget N: prompt tokens a step of P reads beyond
                                    one per row, over all rows (oldest request first); 0: no
                                    bound */
} rt_prefill;

/* A device's buffers for P: its inputs (the serving program's blocks for
 * the params and states, its own for the tokens and positions), its
 * outputs and the whole logits [B, W, V] gathered after a step. */
typedef struct rt_prefill_bufs {
    void **in, **out;
    void *logits;
} rt_prefill_bufs;

/* With --serve and a prefill program linked (job->prefill): checks P
 * against the serving program (per-row positions, the same mesh, B and
 * V, every param and state of P one of the serving program's with the
 * same blocks) and creates e->pf.  -1 and a message. */
int rt_prefill_prepare(const rt_job *job, rt_engine *e, char *err, size_t errlen);
/* Device 0, e->mu held, once the next step's rows are in e->batch,
 * e->at and e->feed: whether the step runs P (some row has two or more
 * prompt tokens left, and no running row's window would pass the
 * cache's end); if so fills e->pf->win and e->pf->count (the chunks, oldest
 * request first, within e->pf->budget).  Sets and returns e->pf->due. */
int rt_prefill_plan(rt_engine *e);
/* Every device: allocates *bf, sharing `main_in`, the serving program's
 * input blocks.  Errors end the job (out of memory). */
void rt_prefill_open(rt_device *dev, const rt_engine *e, void *const *main_in, rt_prefill_bufs *bf);
/* Every device: copies its blocks of e->pf->win and e->at into P's
 * tokens and positions (before the barrier after which device 0 may move
 * them). */
void rt_prefill_feed(rt_device *dev, const rt_engine *e, rt_prefill_bufs *bf);
/* Every device: runs P between two barriers and gathers its logits whole
 * into bf->logits, which it returns ([B, W, V], on every device).  A
 * collective. */
const void *rt_prefill_run(rt_device *dev, const rt_engine *e, rt_prefill_bufs *bf);
/* Every device: frees what rt_prefill_open allocated (not the shared blocks). */
void rt_prefill_close(rt_device *dev, const rt_engine *e, rt_prefill_bufs *bf);
/* Frees e->pf's arrays and itself; NULL is fine. */
void rt_prefill_free(rt_prefill *pf);

/* ---- server.c ---- */

/* Starts the HTTP server on host:port (port 0: any free one) for engine e
 * and prints "listening on http://HOST:PORT" on stdout, flushed.  Returns
 * the server, or NULL and a message. */
struct rt_server *rt_server_start(rt_engine *e, const char *host, int64_t port, char *err,
                                  size_t errlen);
/* Stops the server (waits for its connections) and frees it; NULL is fine. */
void rt_server_stop(struct rt_server *s);
/* Device 0, after a step: hands the connections waiters[0..n) (suspended
 * MHD connections whose requests the step changed) to the server's
 * polling thread, which resumes them; one eventfd write wakes it.  Thread
 * safe; sv NULL or n 0 does nothing. */
void rt_server_wake(struct rt_server *sv, void *const *waiters, int64_t n);

/* ---- serve.c ---- */

/* Parses --serve, --port, --host and --max-queue into o; 1 if `flag` is
 * none of them, -1 and a message on a bad value. */
int rt_parse_serve_flag(const char *flag, const char *val, rt_options *o, char *err,
                        size_t errlen);
/* The checks of --serve against the program that need no file: not a
 * training program, not with --generate, --repeat, --prompt-ids,
 * --generated, --prompt-cached or --check.  -1 and a message. */
int rt_serve_check_mode(const rt_program *p, const rt_options *o, char *err, size_t errlen);
/* Before the run, with --serve: finds the decode interface (tokens,
 * position, replicated logits, or else a replicated i32 next-token output
 * for greedy decoding only), the cache length and the tokenizer,
 * creates the engine into g->engine and sets job->gen = g, and catches
 * SIGINT and SIGTERM (under MPI on rank 0 only, the rank that serves).
 * -1 and a message. */
int rt_serve_prepare(rt_job *job, rt_generate *g, char *err, size_t errlen);

#endif
