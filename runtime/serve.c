/*
 * serve.c - the --serve mode of an executable: its flags, its checks
 * against the program, and the engine's set-up before the devices start.
 *
 * The server runs until SIGINT or SIGTERM: their handler wakes a thread
 * through a pipe, which asks the engine to stop, and the job ends normally (status 0) once the
 * running batch has finished.  Under MPI, rank 0 owns the HTTP server and
 * catches the signals; its engine broadcasts the batches and each step's
 * tokens to the other ranks (engine.c), which end when it stops.  They
 * keep the default action of SIGINT and SIGTERM: a signal there ends the
 * rank, and mpirun the job, as for any failed rank.  (mpirun itself turns
 * a SIGINT or SIGTERM it gets into an abort of every rank, status 1: to
 * stop the server cleanly, signal rank 0's process.)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "rt_serve.h"

/* --max-queue's default: requests waiting while a batch runs. */
#define RT_DEFAULT_QUEUE 64

int rt_parse_serve_flag(const char *flag, const char *val, rt_options *o, char *err,
                        size_t errlen)
{
    uint64_t n;
    if (!strcmp(flag, "--serve")) {
        o->serve = 1;
        return 0;
    }
    if (!strcmp(flag, "--port")) {
        if (rt_parse_count(flag, val, 0, 65535, &n, err, errlen))
            return -1;
        o->port = (int64_t)n;
        o->port_given = 1;
        return 0;
    }
    if (!strcmp(flag, "--max-queue")) {
        if (rt_parse_count(flag, val, 1, 1000000, &n, err, errlen))
            return -1;
        o->max_queue = (int64_t)n;
        return 0;
    }
    if (!strcmp(flag, "--prefill-budget")) {
        if (rt_parse_count(flag, val, 1, 1000000, &n, err, errlen))
            return -1;
        o->prefill_budget = (int64_t)n;
        return 0;
    }
    if (!strcmp(flag, "--static-batching")) {
        o->static_batching = 1;
        return 0;
    }
    if (strcmp(flag, "--host"))
        return 1;
    struct in_addr addr;
    if (inet_pton(AF_INET, val, &addr) != 1)
        return rt_errf(err, errlen, "--host '%.80s' is not an IPv4 address (like 127.0.0.1; "
                       "the default binds to 127.0.0.1 only)", val);
    o->host = val;
    return 0;
}

int rt_serve_check_mode(const rt_program *p, const rt_options *o, char *err, size_t errlen)
{
    const char *clash = p->trains ? "a program that trains"
                        : o->generate ? "--generate" : o->repeat_given ? "--repeat"
                        : o->prompt_ids ? "--prompt-ids" : o->generated ? "--generated"
                        : o->prompt_cached ? "--prompt-cached" : o->check ? "--check"
                        : o->noutputs ? "--output" : NULL;
    if (clash)
        return rt_errf(err, errlen, "--serve: not with %s (the server takes its prompts over "
                       "HTTP and runs until SIGINT or SIGTERM)", clash);
    if ((o->top_k || o->top_p_given) && !(o->temperature > 0))
        return rt_errf(err, errlen, "%s samples: give --temperature T > 0 as well (or per "
                       "request)", o->top_k ? "--top-k" : "--top-p");
    return 0;
}

/* The write end of the pipe that wakes wait_signals.  A signal handler
 * can reach nothing but file-scope state, so this is set once, before the
 * handler is installed, and only read afterwards. */
static int signal_pipe = -1;

/* SIGINT and SIGTERM: wake wait_signals (write is async-signal-safe). */
static void on_signal(int sig)
{
    (void)sig;
    char c = 1;
    if (write(signal_pipe, &c, 1) < 0) {
        /* nothing more can be done in a handler */
    }
}

/* The thread that turns SIGINT and SIGTERM (a byte on e->wake[0]) into
 * rt_engine_stop; rt_engine_free also wakes it that way. */
static void *wait_signals(void *arg)
{
    rt_engine *e = arg;
    char c;
    while (read(e->wake[0], &c, 1) < 0 && errno == EINTR)
        ;
    rt_engine_stop(e);
    return NULL;
}

/* Installs on_signal for SIGINT and SIGTERM and starts wait_signals.
 * A handler rather than sigwait: OpenBLAS's threads start before main
 * and would take a blocked-elsewhere signal with its default action. */
static int catch_signals(rt_engine *e, char *err, size_t errlen)
{
    if (pipe(e->wake))
        return rt_errf(err, errlen, "cannot make a pipe: %s", strerror(errno));
    signal_pipe = e->wake[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (pthread_create(&e->signals, NULL, wait_signals, e))
        return rt_errf(err, errlen, "cannot start the signal thread");
    e->signals_started = 1;
    return 0;
}

/* Checks what rt_serve_prepare needs of the program beyond its interface:
 * the cache length, and no --input for what the engine feeds or zeroes. */
static int check_program(const rt_job *job, const rt_generate *g, int64_t *cache, char *err,
                         size_t errlen)
{
    const rt_program *p = job->prog;
    *cache = p->inputs[g->position].index_bound;
    if (*cache <= 0)
        return rt_errf(err, errlen, "--serve: the position input '%s' indexes no cache (it "
                       "has no index bound)", p->inputs[g->position].name);
    for (int32_t i = 0; i < p->ninputs; i++)
        if (job->in_paths[i] && (i == g->tokens || i == g->position ||
                                 p->inputs[i].role == RT_ROLE_STATE))
            return rt_errf(err, errlen, "--serve feeds '%s' itself (every batch starts with "
                           "empty states at position 0): drop its --input", p->inputs[i].name);
    return 0;
}

/* Whether the program's i32 next-token output (an argmax in it) can serve
 * greedy decoding: one, of the batch, replicated.  Sets g->vocab from the
 * rows the tokens look up.  Used only by a program without one logits
 * output: sharded logits are served too (the engine gathers them). */
static int greedy_next(const rt_program *p, rt_generate *g)
{
    if (g->next < 0)
        return 0;
    const rt_tensor_desc *n = &p->outputs[g->next];
    g->vocab = p->inputs[g->tokens].index_bound;
    return n->global_shape[0] == g->batch && g->vocab > 0 && rt_replicated(n);
}

int rt_serve_prepare(rt_job *job, rt_generate *g, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    memset(g, 0, sizeof *g);
    job->gen = g; /* released with the job, also after a failure here */
    g->sampling.temperature = 1; /* the logits must be there to sample from */
    if (rt_generate_find(p, g, err, errlen))
        return -1;
    int greedy_only = 0;
    if (rt_generate_check_logits(p, g, err, errlen)) {
        if (!greedy_next(p, g))
            return -1; /* neither: check_logits's message */
        greedy_only = 1;
        g->logits = -1;
        if (o->temperature > 0)
            return rt_errf(err, errlen, "--temperature: this program serves greedy decoding only "
                           "(its next-token output '%s'; %s)", p->outputs[g->next].name, err);
    }
    if (!greedy_only)
        g->next = -1; /* the logits decide, greedy or sampled */
    int64_t cache;
    if (check_program(job, g, &cache, err, errlen))
        return -1;
    rt_engine *e = calloc(1, sizeof *e);
    if (!e)
        return rt_errf(err, errlen, "out of memory");
    g->engine = e;
    e->gen = g;
    e->cache = cache;
    e->greedy_only = greedy_only;
    if (!greedy_only) {
        const rt_tensor_desc *l = &p->outputs[g->logits];
        e->sharded = !rt_replicated(l);
        e->vocab_shards = 1;
        for (int32_t k = 0; k < l->dim_naxes[l->rank - 1]; k++)
            e->vocab_shards *= p->axis_sizes[l->dim_axes[l->rank - 1][k]];
        e->logit_bytes = (int64_t)rt_dtype_size(l->dtype);
    }
    e->max_queue = o->max_queue ? o->max_queue : RT_DEFAULT_QUEUE;
    e->defaults = rt_sampling_of_options(o);
    e->stop_ids = o->stop;
    e->nstop_ids = o->nstop;
    for (int i = 0; i < o->nstop; i++)
        if (o->stop[i] >= g->vocab)
            return rt_errf(err, errlen, "--stop-token %d: the vocabulary has %lld tokens",
                           o->stop[i], (long long)g->vocab);
    if (rt_tokenizer_init(&e->tok, g->vocab, err, errlen))
        return -1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->stepped, NULL);
    e->queue = calloc((size_t)e->max_queue, sizeof *e->queue);
    e->batch = calloc((size_t)g->batch, sizeof *e->batch);
    e->feed = calloc((size_t)g->batch, sizeof *e->feed);
    e->at = calloc((size_t)g->batch, sizeof *e->at);
    e->woken = calloc((size_t)(e->max_queue + g->batch), sizeof *e->woken);
    if (!e->queue || !e->batch || !e->feed || !e->at || !e->woken)
        return rt_errf(err, errlen, "out of memory");
    e->gang = o->static_batching;
    if (o->prefill_budget && !job->prefill)
        return rt_errf(err, errlen, "--prefill-budget bounds the chunks of a prefill program, "
                       "and none is linked (einc --prefill P.ein)");
    if (job->prefill && rt_prefill_prepare(job, e, err, errlen))
        return -1;
    if (e->pf)
        e->pf->budget = o->prefill_budget;
    job->repeat = 1; /* each step is timed into job->times[0] */
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-answer must not end the process */
    /* Under MPI only rank 0 serves, so only its signals stop the engine. */
    return job->launcher->ranks_are_devices && job->rank != 0 ? 0
                                                              : catch_signals(e, err, errlen);
}
