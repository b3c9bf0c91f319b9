/*
 * server.c - the HTTP side of --serve, on libmicrohttpd (Debian's
 * libmicrohttpd-dev) in its external epoll mode, run by one polling thread
 * of ours (poll_loop) for every connection.  A connection that must wait
 * for the engine, a stream for its next tokens or a whole answer for its
 * end, is suspended (MHD_suspend_connection) with its request's `waiter`
 * pointing at it; after the step that changed the request the engine
 * hands the step's waiters over in one batch (rt_server_wake): one
 * eventfd write per step.  The polling thread wakes once, resumes them
 * (MHD_resume_connection, in the thread that runs MHD, so nothing
 * contends) and writes the step's events to every resumed connection in
 * one pass.  The thread runs as SCHED_BATCH, so that its wake-up does not
 * preempt device 0, about to run the next step: what device 0 waited for
 * after each step, 300-460 us at 8-16 rows when it resumed each
 * connection itself (docs/generation.md, "Where a step's time goes"), was
 * mostly the woken HTTP thread taking its core.  A step thus costs the
 * HTTP side one wake-up and device 0 one system call, however many rows
 * it served, and the 2 cores the device threads share with the
 * connections see one thread for them.
 *
 *   POST /v1/completions  a completion (request.c); with "stream": true,
 *                         server-sent events: `data: {chunk}\n\n` as the
 *                         tokens come, then `data: [DONE]\n\n`
 *   GET  /health          200 {"status": "ok"}
 *   GET  /metrics         Prometheus text (metrics.c)
 * Errors answer with OpenAI's {"error": {...}} body: 400 for a bad request
 * (naming the field), 404 for an unknown path, 405 for another method,
 * 413 for a body over RT_MAX_BODY, 503 when the queue is full.  HTTP/1.1
 * connections stay open between requests (keep-alive): a streamed answer
 * ends with chunked encoding's last chunk, a whole one at its
 * Content-Length, and a request's state (upload, stream) lives from its
 * first byte to `completed`, not with the connection; reusing them saves a
 * request the accept, close and new connection memory that were a
 * quarter of a streamed row's cost (docs/performance-history.md, section
 * 16, "Connections kept alive").  A client
 * that goes away mid-stream cancels its row (the engine frees it at the
 * next step); one that goes away while waiting for a whole answer lets
 * its row run to the end, and the answer is dropped.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "rt_serve.h"

/* Seconds a connection may stay silent (an idle keep-alive, a client that
 * never sends its body) before it is closed and its thread freed; a
 * connection waiting for its tokens is not silent on the client's part. */
#define RT_IDLE_TIMEOUT 600u

/* Milliseconds rt_server_stop waits for the answers under way to be sent. */
#define RT_DRAIN_MS 5000

/* The largest request body read: far more than a prompt the cache holds. */
#define RT_MAX_BODY (1 << 20)

typedef struct rt_server rt_server;

/* The HTTP daemon of one engine and its polling thread. */
struct rt_server {
    rt_engine *e;
    struct MHD_Daemon *daemon;
    /* Requests begun and not yet completed (answer sent, or the client
     * gone): rt_server_stop lets them finish before it closes the
     * connections.  Written by the polling thread, read by the stopping one. */
    atomic_long open;
    pthread_t thread;            /* poll_loop */
    int started;                 /* 1: thread runs */
    atomic_int stopping;         /* 1: poll_loop returns at its next wake-up */
    int epfd;                    /* poll_loop's epoll: MHD's epoll fd and wakefd; -1: none */
    int wakefd;                  /* eventfd: waiters handed over, or stopping; -1: none */
    pthread_mutex_t mu;          /* guards handoff and nhandoff */
    void **handoff;              /* [cap] connections to resume, from rt_server_wake */
    void **resuming;             /* [cap] poll_loop's copy of them while it resumes */
    int64_t nhandoff, cap;
};

/* One connection's request body, read in pieces, and its request while
 * it waits for a whole (non-streaming) answer. */
typedef struct upload {
    char *body;
    size_t len;
    int too_large;               /* 1: over RT_MAX_BODY; the rest is read and dropped */
    rt_request *r;               /* queued, not streamed: one reference, until answered */
} upload;

/* A streaming answer: the SSE bytes made but not yet handed to MHD.  Its
 * two buffers keep their memory from step to step, so that an event
 * costs no allocation once they have grown to a step's size. */
typedef struct stream {
    rt_engine *e;
    rt_request *r;               /* one reference, dropped by stream_free */
    struct MHD_Connection *c;    /* the connection it answers: suspended while it waits */
    size_t sent;                 /* bytes of r->text put into events so far */
    char *piece;                 /* [piece_cap] the text of the next event, copied under e->mu */
    size_t piece_cap;
    char *pending;               /* [pending_cap] SSE bytes, malloc'd */
    size_t pending_cap;
    size_t plen, poff;           /* their length, and how many MHD has taken */
    int done;                    /* 1: the last event and [DONE] are in pending */
    double event_seconds;        /* wall time making events so far (rt_metrics.event_seconds) */
} stream;

/* Queues an answer with a body copied from `body` (NULL: out of memory,
 * 500), and counts its status. */
static enum MHD_Result respond(rt_engine *e, struct MHD_Connection *c, int status,
                               const char *type, const char *body)
{
    if (!body) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        body = "{\"error\": {\"message\": \"out of memory\"}}";
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, POST");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    pthread_mutex_lock(&e->mu);
    rt_metrics_status(&e->metrics, status);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* An error answer in OpenAI's shape. */
static enum MHD_Result respond_error(rt_engine *e, struct MHD_Connection *c, int status,
                                     const char *message, const char *param)
{
    char *body = rt_error_json(message, param, status);
    enum MHD_Result rc = respond(e, c, status, "application/json", body);
    free(body);
    return rc;
}

/* Grows *buf (capacity *cap) to hold `need` bytes; 0, or -1 when out of
 * memory (*buf unchanged). */
static int reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *p = realloc(*buf, c);
    if (!p)
        return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* Appends `data: text\n\n` to s->pending (text NULL: out of memory). */
static void add_event(stream *s, const char *text)
{
    if (!text)
        text = "{\"error\": {\"message\": \"out of memory\"}}";
    size_t n = strlen(text);
    if (reserve(&s->pending, &s->pending_cap, s->plen + n + 8))
        return;
    memcpy(s->pending + s->plen, "data: ", 6);
    memcpy(s->pending + s->plen + 6, text, n);
    memcpy(s->pending + s->plen + 6 + n, "\n\n", 2);
    s->plen += n + 8;
}

/* MHD's reader of a streaming answer: hands over up to `max` SSE bytes
 * of the text that can be sent, or the end; with neither yet, suspends
 * the connection until the engine changes the request and returns 0.
 * Under the engine's mutex it only copies the new text: the event is
 * made after, so that device 0, which takes the mutex after every step,
 * does not wait for it.  A streamed row costs one event a step, so the
 * event is written into the stream's own buffers (rt_request_event), not
 * built in allocated pieces. */
static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *s = cls;
    rt_request *r = s->r;
    if (s->poff == s->plen) {
        if (s->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        s->plen = s->poff = 0;
        pthread_mutex_lock(&s->e->mu);
        if (r->ready == s->sent && !r->finish && !r->aborted) {
            r->waiter = s->c;
            MHD_suspend_connection(s->c);
            pthread_mutex_unlock(&s->e->mu);
            return 0;
        }
        int aborted = r->aborted;
        const char *finish = r->finish && r->ready == r->len ? r->finish : NULL;
        size_t n = aborted ? 0 : r->ready - s->sent;
        int ok = !reserve(&s->piece, &s->piece_cap, n + 1);
        if (ok && n) /* r->text is NULL until the first text */
            memcpy(s->piece, r->text + s->sent, n);
        s->sent += n;
        s->done = aborted || (r->finish && s->sent == r->len);
        pthread_mutex_unlock(&s->e->mu);
        double began = rt_now();
        if (aborted) {
            char *json = rt_error_json("the server is shutting down", NULL, 503);
            add_event(s, json);
            free(json);
        } else if (ok && !reserve(&s->pending, &s->pending_cap, rt_request_event_room(n))) {
            /* r's number and stream, all the event reads besides, are fixed */
            s->plen = rt_request_event(r, s->piece, n, finish, s->pending);
        } else {
            ok = 0;
        }
        if (s->done)
            add_event(s, "[DONE]");
        s->event_seconds += rt_now() - began;
        if (!ok || s->poff == s->plen) /* out of memory */
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = s->plen - s->poff < max ? s->plen - s->poff : max;
    memcpy(buf, s->pending + s->poff, n);
    s->poff += n;
    return (ssize_t)n;
}

/* MHD's end of a streaming answer, also when the client went away. */
static void stream_free(void *cls)
{
    stream *s = cls;
    pthread_mutex_lock(&s->e->mu);
    if (!s->r->finish)
        s->r->cancelled = 1; /* nobody reads it: free the row */
    s->e->metrics.event_seconds += s->event_seconds;
    pthread_mutex_unlock(&s->e->mu);
    rt_engine_release(s->e, s->r);
    free(s->piece);
    free(s->pending);
    free(s);
}

/* Answers a queued request r as server-sent events (takes r's reference). */
static enum MHD_Result answer_stream(rt_engine *e, struct MHD_Connection *c, rt_request *r)
{
    stream *s = calloc(1, sizeof *s);
    struct MHD_Response *resp =
        s ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_stream, s, stream_free)
          : NULL;
    if (!resp) {
        free(s);
        pthread_mutex_lock(&e->mu);
        r->cancelled = 1;
        pthread_mutex_unlock(&e->mu);
        rt_engine_release(e, r);
        return respond(e, c, 500, "application/json", NULL);
    }
    s->e = e;
    s->r = r;
    s->c = c;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    pthread_mutex_lock(&e->mu);
    rt_metrics_status(&e->metrics, MHD_HTTP_OK);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* The whole answer to u->r, queued without streaming: once it has ended;
 * until then the connection is suspended (MHD calls handle again when the
 * engine resumes it). */
static enum MHD_Result answer_whole(rt_engine *e, struct MHD_Connection *c, upload *u)
{
    rt_request *r = u->r;
    pthread_mutex_lock(&e->mu);
    if (!r->finish && !r->aborted) {
        r->waiter = c;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&e->mu);
        return MHD_YES;
    }
    char *body = r->aborted ? NULL : rt_request_json(r, r->text, r->len, r->finish);
    int aborted = r->aborted;
    pthread_mutex_unlock(&e->mu);
    u->r = NULL;
    rt_engine_release(e, r);
    if (aborted)
        return respond_error(e, c, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is shutting down",
                             NULL);
    enum MHD_Result rc = respond(e, c, MHD_HTTP_OK, "application/json", body);
    free(body);
    return rc;
}

/* POST /v1/completions with body u (again, once resumed, while u->r waits). */
static enum MHD_Result completions(rt_engine *e, struct MHD_Connection *c, upload *u)
{
    if (u->r)
        return answer_whole(e, c, u);
    if (u->too_large)
        return respond_error(e, c, MHD_HTTP_CONTENT_TOO_LARGE, "the request body is over 1 MiB",
                             NULL);
    pthread_mutex_lock(&e->mu);
    uint64_t number = ++e->numbered;
    pthread_mutex_unlock(&e->mu);
    char err[512], param[64];
    rt_request *r;
    if (rt_request_parse(u->body ? u->body : "", u->len, &e->tok, e->cache, &e->defaults, number,
                         &r, param, sizeof param, err, sizeof err))
        return respond_error(e, c, MHD_HTTP_BAD_REQUEST, err, param[0] ? param : NULL);
    if (e->greedy_only && r->sampling.temperature > 0) {
        rt_request_free(r);
        return respond_error(e, c, MHD_HTTP_BAD_REQUEST, "this model serves greedy decoding "
                             "only (its logits are not replicated): temperature must be 0",
                             "temperature");
    }
    if (rt_engine_submit(e, r)) {
        rt_request_free(r);
        return respond_error(e, c, MHD_HTTP_SERVICE_UNAVAILABLE, "the queue is full (--max-queue)"
                             " or the server is shutting down: retry later", NULL);
    }
    if (r->stream)
        return answer_stream(e, c, r);
    u->r = r;
    return answer_whole(e, c, u);
}

/* The answer to a whole request: by path, then method. */
static enum MHD_Result route(rt_engine *e, struct MHD_Connection *c, const char *url,
                             const char *method, upload *u)
{
    int get = !strcmp(method, MHD_HTTP_METHOD_GET), post = !strcmp(method, MHD_HTTP_METHOD_POST);
    int known = !strcmp(url, "/health") || !strcmp(url, "/metrics") ||
                !strcmp(url, "/v1/completions");
    if (!known)
        return respond_error(e, c, MHD_HTTP_NOT_FOUND, "unknown path: this server answers POST "
                             "/v1/completions, GET /health and GET /metrics", NULL);
    if (!strcmp(url, "/v1/completions"))
        return post ? completions(e, c, u)
                    : respond_error(e, c, MHD_HTTP_METHOD_NOT_ALLOWED,
                                    "/v1/completions takes POST", NULL);
    if (!get)
        return respond_error(e, c, MHD_HTTP_METHOD_NOT_ALLOWED, "this path takes GET", NULL);
    if (!strcmp(url, "/health"))
        return respond(e, c, MHD_HTTP_OK, "application/json", "{\"status\": \"ok\"}");
    pthread_mutex_lock(&e->mu);
    char *text = rt_metrics_text(&e->metrics, e->queued);
    pthread_mutex_unlock(&e->mu);
    enum MHD_Result rc = respond(e, c, MHD_HTTP_OK, "text/plain; version=0.0.4", text);
    free(text);
    return rc;
}

/* MHD's handler: called first with no body, then with each piece of it,
 * then once more with none when it is all read. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **con_cls)
{
    (void)version;
    rt_server *sv = cls;
    upload *u = *con_cls;
    if (!u) {
        u = calloc(1, sizeof *u);
        *con_cls = u;
        if (u)
            atomic_fetch_add(&sv->open, 1);
        return u ? MHD_YES : MHD_NO;
    }
    if (*size) {
        char *body = u->too_large || u->len + *size > RT_MAX_BODY ? NULL
                                                                  : realloc(u->body, u->len + *size);
        if (body) {
            memcpy(body + u->len, data, *size);
            u->body = body;
            u->len += *size;
        } else {
            u->too_large = 1;
        }
        *size = 0;
        return MHD_YES;
    }
    return route(sv->e, c, url, method, u);
}

/* MHD's end of a request: frees its body (and drops a request it never
 * answered: the daemon stopped). */
static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
    (void)c, (void)why;
    rt_server *sv = cls;
    upload *u = *con_cls;
    if (u) {
        if (u->r)
            rt_engine_release(sv->e, u->r);
        free(u->body);
        atomic_fetch_sub(&sv->open, 1);
    }
    free(u);
    *con_cls = NULL;
}

void rt_server_wake(struct rt_server *sv, void *const *waiters, int64_t n)
{
    if (!sv || n <= 0)
        return;
    pthread_mutex_lock(&sv->mu);
    /* Each connection waits at most once (a waiter is taken when handed
     * over and set again only after its resume), and at most max_queue + B
     * connections wait, so cap = max_queue + B always holds them; beyond
     * it (never), resuming here is still correct, only slower. */
    int64_t room = sv->cap - sv->nhandoff, put = n < room ? n : room;
    int was_empty = sv->nhandoff == 0;
    memcpy(sv->handoff + sv->nhandoff, waiters, (size_t)put * sizeof *waiters);
    sv->nhandoff += put;
    pthread_mutex_unlock(&sv->mu);
    for (int64_t i = put; i < n; i++)
        MHD_resume_connection(waiters[i]);
    /* One write wakes poll_loop; while it has not taken the last batch
     * yet (handoff not empty) the count it has not read covers this one
     * too: it reads wakefd before it takes handoff. */
    uint64_t one = 1;
    if (was_empty && put > 0) {
        ssize_t w = write(sv->wakefd, &one, sizeof one); /* fails only at a count of 2^64 - 1 */
        (void)w;
    }
}

/* The polling thread: waits for MHD's sockets (its epoll fd) or a wake-up
 * (wakefd), resumes the handed-over connections, runs MHD, until
 * rt_server_stop sets stopping. */
static void *poll_loop(void *arg)
{
    rt_server *sv = arg;
    /* SCHED_BATCH: a wake-up does not preempt the thread that woke it
     * (device 0, about to run the next step); the events go out when a
     * core is free, as when the device threads yield in a barrier. */
    struct sched_param none = {0};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &none);
    while (!atomic_load(&sv->stopping)) {
        MHD_UNSIGNED_LONG_LONG left = 0;
        int ms = 100; /* at most: the daemon's idle timeouts need no finer clock */
        if (MHD_get_timeout(sv->daemon, &left) == MHD_YES && left < 100)
            ms = (int)left;
        struct epoll_event ev[2];
        int n = epoll_wait(sv->epfd, ev, 2, ms);
        for (int i = 0; i < n; i++)
            if (ev[i].data.fd == sv->wakefd) {
                uint64_t count;
                if (read(sv->wakefd, &count, sizeof count) < 0)
                    count = 0; /* EAGAIN: another read took it; handoff is what counts */
                pthread_mutex_lock(&sv->mu);
                int64_t k = sv->nhandoff;
                memcpy(sv->resuming, sv->handoff, (size_t)k * sizeof *sv->handoff);
                sv->nhandoff = 0;
                pthread_mutex_unlock(&sv->mu);
                for (int64_t j = 0; j < k; j++)
                    MHD_resume_connection(sv->resuming[j]);
            }
        MHD_run(sv->daemon);
    }
    return NULL;
}

/* The polling thread's epoll over MHD's epoll fd and wakefd, and the thread. */
static int start_polling(rt_server *sv, char *err, size_t errlen)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(sv->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    sv->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    sv->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event mhd = {.events = EPOLLIN, .data.fd = info ? info->epoll_fd : -1};
    struct epoll_event wake = {.events = EPOLLIN, .data.fd = sv->wakefd};
    if (!info || sv->wakefd < 0 || sv->epfd < 0 ||
        epoll_ctl(sv->epfd, EPOLL_CTL_ADD, info->epoll_fd, &mhd) ||
        epoll_ctl(sv->epfd, EPOLL_CTL_ADD, sv->wakefd, &wake) ||
        pthread_create(&sv->thread, NULL, poll_loop, sv))
        return rt_errf(err, errlen, "cannot start the HTTP polling thread (epoll, eventfd)");
    pthread_setname_np(sv->thread, "einc-http"); /* bench/serve_phases.py reads it */
    sv->started = 1;
    return 0;
}

struct rt_server *rt_server_start(rt_engine *e, const char *host, int64_t port, char *err,
                                  size_t errlen)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        rt_errf(err, errlen, "--host '%s' is not an IPv4 address (like 127.0.0.1)", host);
        return NULL;
    }
    rt_server *sv = calloc(1, sizeof *sv);
    if (!sv) {
        rt_errf(err, errlen, "out of memory");
        return NULL;
    }
    sv->e = e;
    atomic_init(&sv->open, 0);
    atomic_init(&sv->stopping, 0);
    sv->epfd = sv->wakefd = -1;
    pthread_mutex_init(&sv->mu, NULL);
    sv->cap = e->max_queue + e->gen->batch;
    sv->handoff = calloc((size_t)sv->cap, sizeof *sv->handoff);
    sv->resuming = calloc((size_t)sv->cap, sizeof *sv->resuming);
    e->resume = rt_server_wake;
    sv->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME,
                                  (uint16_t)port, NULL, NULL, handle, sv, MHD_OPTION_SOCK_ADDR,
                                  (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, completed,
                                  sv, MHD_OPTION_CONNECTION_TIMEOUT, RT_IDLE_TIMEOUT,
                                  MHD_OPTION_END);
    const union MHD_DaemonInfo *info =
        sv->daemon ? MHD_get_daemon_info(sv->daemon, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info) {
        rt_errf(err, errlen, "cannot listen on %s:%lld (the port is in use, or the address is "
                "not one of this host's)", host, (long long)port);
        rt_server_stop(sv);
        return NULL;
    }
    if (!sv->handoff || !sv->resuming || start_polling(sv, err, errlen)) {
        if (!sv->handoff || !sv->resuming)
            rt_errf(err, errlen, "out of memory");
        rt_server_stop(sv);
        return NULL;
    }
    printf("listening on http://%s:%u\n", host, (unsigned)info->port);
    fflush(stdout);
    return sv;
}

void rt_server_stop(struct rt_server *s)
{
    if (!s)
        return;
    /* The engine has ended every request, but the polling thread may not
     * have written their last events yet: wait for them (a client that
     * stopped reading gets RT_DRAIN_MS), then close every connection. */
    for (int ms = 0; s->started && atomic_load(&s->open) > 0 && ms < RT_DRAIN_MS; ms++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    if (s->started) {
        uint64_t one = 1;
        atomic_store(&s->stopping, 1);
        ssize_t w = write(s->wakefd, &one, sizeof one); /* else poll_loop's timeout, 100 ms */
        (void)w;
        pthread_join(s->thread, NULL);
    }
    /* Connections handed over after poll_loop's last pass: resumed, which
     * MHD_stop_daemon needs of every connection before it closes them. */
    for (int64_t i = 0; i < s->nhandoff; i++)
        MHD_resume_connection(s->handoff[i]);
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->wakefd >= 0)
        close(s->wakefd);
    pthread_mutex_destroy(&s->mu);
    free(s->handoff);
    free(s->resuming);
    free(s);
}
