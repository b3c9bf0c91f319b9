/*
 * serve_load.c - bench/serve.py's load generator in C (--client c): the
 * protocol work of bench/serve_client.py (streamed POST /v1/completions
 * sent at given times, HTTP/1.1 chunked answers, server-sent events, the
 * characters of each event's text) in one epoll loop, at a few
 * microseconds of CPU per token rather than the Python loop's tens, so
 * that on the 2 cores the server shares with it the client takes little
 * of what the steps need (docs/generation.md, "Where a step's time goes").
 *
 *   serve_load PORT START CAP [reuse|new [POOL]] < requests
 *
 * Connections (--connections of bench/serve.py): `new` (the default here)
 * opens a TCP connection per request and closes it after the answer;
 * `reuse` keeps a pool of HTTP/1.1 keep-alive connections, as wrk or
 * aiohttp's ClientSession do: a request due takes an idle one, else opens
 * one (so at most one a request in flight), and an answer's end (the last
 * chunk of a streamed one, a whole one's Content-Length) returns its
 * connection to the pool unless the server said `Connection: close`.
 * POOL > 0 bounds the connections: a request due while all are busy
 * waits for one, and SENT is still when it was due (its wait counts in
 * its time to first token, as the server's queue does).  A reused connection the
 * server closed before answering is replaced by a new one, the request
 * sent again.
 *
 * stdin: one request a line, `OFFSET BODY`: its send time in seconds
 * after START (CLOCK_MONOTONIC seconds, as Python's time.monotonic()) and
 * its JSON body, sent as is.  A streamed answer (chunked, server-sent
 * events) ends at its last chunk; a whole one ("stream": false) at its
 * Content-Length, with no token times.  Runs until every answer has ended or CAP
 * seconds after START.  stdout, one line a request in input order:
 *   `req I STATUS SENT DONE T1 T2 ...` (DONE -1: no complete answer; a
 *   chunk of k characters counts as k tokens spread evenly over the gap
 *   since the previous chunk, as serve_client.py does), then
 *   `cpu SECONDS`, this process's CPU time.
 * Errors (bad input, out of memory): a message on stderr, exit 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct conn {
    char *req;          /* the HTTP request's bytes */
    size_t req_len, req_off;
    double at;          /* send time, absolute */
    int fd;             /* -1: not sent yet or ended */
    int status;
    double sent, done, last;
    double *times;      /* token times */
    size_t ntimes, cap;
    char *buf;          /* bytes received, not yet parsed */
    size_t len, room;
    int head;           /* 1: reading the headers */
    int chunked;
    long length;        /* a whole answer's Content-Length; -1: none given */
    long left;          /* chunk bytes to read; -1: a size line next; -2: its CRLF next;
                           -3: the last chunk's CRLF next */
    char *body;         /* decoded body bytes not yet split into events */
    size_t blen, broom;
    int ended;
    int reused;         /* 1: sent on a pooled connection */
    int waited;         /* 1: due while the bounded pool was busy */
    int close;          /* 1: the server's answer said `Connection: close` */
} conn;

/* The client's connections: the idle ones of the pool, and the count. */
typedef struct pool {
    int reuse;          /* 1: keep-alive connections, reused */
    size_t max;         /* 0: unbounded */
    size_t open;        /* connections open */
    int *idle;          /* [nidle] connected, between answers */
    size_t nidle, room;
} pool;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Arms `tfd` to expire at `at` (CLOCK_MONOTONIC seconds, absolute). */
static void arm(int tfd, double at)
{
    struct itimerspec its = {0};
    its.it_value.tv_sec = (time_t)at;
    its.it_value.tv_nsec = (long)((at - (double)its.it_value.tv_sec) * 1e9);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1; /* all zero would disarm it */
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "serve_load: out of memory\n");
        exit(1);
    }
    return q;
}

static void append(char **p, size_t *len, size_t *room, const char *data, size_t n)
{
    if (*len + n + 1 > *room) {
        *room = 2 * (*len + n + 1);
        *p = xrealloc(*p, *room);
    }
    memcpy(*p + *len, data, n);
    *len += n;
    (*p)[*len] = 0;
}

/* The characters of the JSON string value after `"text":` in event e,
 * as Python's len(json.loads(...)) counts them (code points; a \u escape
 * pair of surrogates is one). */
static long text_chars(const char *e)
{
    const char *p = strstr(e, "\"text\":\"");
    if (!p)
        return 0;
    long k = 0;
    for (p += 8; *p && *p != '"'; p++) {
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                unsigned v = (unsigned)strtoul((char[5]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
                p += 4;
                if (v >= 0xd800 && v < 0xdc00 && p[1] == '\\' && p[2] == 'u')
                    p += 6; /* its low surrogate */
            }
            k++;
        } else if (((unsigned char)*p & 0xc0) != 0x80) {
            k++;
        }
    }
    return k;
}

static void add_tokens(conn *c, long k, double t)
{
    for (long i = 0; i < k; i++) {
        if (c->ntimes == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 64;
            c->times = xrealloc(c->times, c->cap * sizeof *c->times);
        }
        c->times[c->ntimes++] = c->last + (t - c->last) * (double)(i + 1) / (double)k;
    }
    if (k > 0)
        c->last = t;
}

/* Splits c->body into events; 1 at [DONE]. */
static int events(conn *c, double t)
{
    char *start = c->body, *end;
    int done = 0;
    if (!start) /* no body bytes yet */
        return 0;
    while ((end = strstr(start, "\n\n"))) {
        *end = 0;
        if (!strncmp(start, "data: ", 6)) {
            if (!strcmp(start + 6, "[DONE]"))
                done = 1;
            else
                add_tokens(c, text_chars(start + 6), t);
        }
        start = end + 2;
    }
    c->blen -= (size_t)(start - c->body);
    memmove(c->body, start, c->blen + 1);
    return done;
}

/* Consumes c->buf; 1 when the answer is complete. */
static int parse(conn *c, double t)
{
    if (c->head) {
        char *end = strstr(c->buf, "\r\n\r\n");
        if (!end)
            return 0;
        *end = 0;
        c->status = atoi(strchr(c->buf, ' ') ? strchr(c->buf, ' ') + 1 : "0");
        for (char *h = c->buf; *h; h++)
            *h = (char)(*h >= 'A' && *h <= 'Z' ? *h + 32 : *h);
        c->chunked = strstr(c->buf, "transfer-encoding: chunked") != NULL;
        c->close = strstr(c->buf, "connection: close") != NULL;
        const char *cl = strstr(c->buf, "content-length:");
        c->length = cl ? strtol(cl + 15, NULL, 10) : -1;
        size_t used = (size_t)(end + 4 - c->buf);
        c->len -= used;
        memmove(c->buf, c->buf + used, c->len + 1);
        c->head = 0;
    }
    if (!c->chunked) {
        c->length -= c->length >= 0 ? (long)c->len : 0; /* the body bytes still to come */
        append(&c->body, &c->blen, &c->broom, c->buf, c->len);
        c->len = 0;
        return events(c, t) || c->length == 0;
    }
    size_t off = 0;
    for (;;) {
        if (c->left == -1) {
            char *end = strstr(c->buf + off, "\r\n");
            if (!end)
                break;
            c->left = strtol(c->buf + off, NULL, 16);
            off = (size_t)(end + 2 - c->buf);
            if (c->left == 0)
                c->left = -3;
        }
        if (c->left == -3) { /* the last chunk: its (empty) trailer's CRLF next */
            if (c->len - off < 2)
                break;
            c->len -= off + 2; /* a kept connection starts the next answer clean */
            memmove(c->buf, c->buf + off + 2, c->len + 1);
            events(c, t);
            return 1;
        }
        if (c->left > 0) {
            size_t take = c->len - off < (size_t)c->left ? c->len - off : (size_t)c->left;
            append(&c->body, &c->blen, &c->broom, c->buf + off, take);
            off += take;
            c->left -= (long)take;
            if (c->left > 0)
                break;
            c->left = -2;
        }
        if (c->len - off < 2)
            break;
        off += 2; /* the chunk's CRLF */
        c->left = -1;
    }
    c->len -= off;
    memmove(c->buf, c->buf + off, c->len + 1);
    events(c, t); /* [DONE] is not the end: the last chunk is, then the connection is free */
    return 0;
}

/* Ends c's answer at t; its connection goes back to the pool when the
 * answer was complete and framed (the connection is at a message's end). */
static void finish(int ep, pool *p, conn *c, double t, int complete)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (p->reuse && complete && !c->close && (c->chunked || c->length == 0) && c->len == 0) {
        if (p->nidle == p->room) {
            p->room = p->room ? 2 * p->room : 64;
            p->idle = xrealloc(p->idle, p->room * sizeof *p->idle);
        }
        p->idle[p->nidle++] = c->fd;
    } else {
        close(c->fd);
        p->open--;
    }
    c->fd = -1;
    c->ended = 1;
    c->done = complete ? t : -1;
}

/* Gives c a connection, an idle one of the pool or a new one, and waits
 * for it to take the request; -1 when none could be opened. */
static int open_for(int ep, pool *p, conn *c, const struct sockaddr_in *addr)
{
    c->reused = p->reuse && p->nidle > 0;
    if (c->reused) {
        c->fd = p->idle[--p->nidle];
    } else {
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (c->fd < 0 || (connect(c->fd, (const struct sockaddr *)addr, sizeof *addr) &&
                          errno != EINPROGRESS)) {
            if (c->fd >= 0)
                close(c->fd);
            c->fd = -1;
            return -1;
        }
        p->open++;
    }
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    return 0;
}

/* c's pooled connection was closed by the server before it answered
 * (an idle timeout): sends c again on a new one; -1 (c ended) when none
 * could be opened. */
static int reopen(int ep, pool *p, conn *c, const struct sockaddr_in *addr)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    p->open--;
    c->req_off = 0;
    p->reuse = 0; /* this once: a new connection, not another idle one */
    int failed = open_for(ep, p, c, addr);
    p->reuse = 1;
    if (failed)
        c->ended = 1;
    return failed;
}

int main(int argc, char **argv)
{
    pool p = {0};
    if (argc >= 5)
        p.reuse = !strcmp(argv[4], "reuse");
    if (argc >= 6)
        p.max = (size_t)atol(argv[5]);
    if (argc < 4 || argc > 6 || (argc >= 5 && !p.reuse && strcmp(argv[4], "new"))) {
        fprintf(stderr, "usage: serve_load PORT START CAP [reuse|new [POOL]] < requests\n");
        return 1;
    }
    int port = atoi(argv[1]);
    double start = atof(argv[2]), end = start + atof(argv[3]);
    conn *cs = NULL;
    size_t n = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    while ((got = getline(&line, &lcap, stdin)) > 0) {
        char *sp = strchr(line, ' ');
        if (!sp) {
            fprintf(stderr, "serve_load: a request line is `OFFSET BODY`\n");
            return 1;
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        cs = xrealloc(cs, (n + 1) * sizeof *cs);
        conn *c = &cs[n++];
        memset(c, 0, sizeof *c);
        c->at = start + atof(line);
        c->fd = -1;
        c->head = 1;
        c->left = -1;
        c->done = -1;
        size_t blen = strlen(sp + 1);
        c->req = xrealloc(NULL, blen + 256);
        c->req_len = (size_t)snprintf(c->req, blen + 256,
                                      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                                      "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                                      "\r\n%s", port, blen, sp + 1);
    }
    free(line);
    int ep = epoll_create1(0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    /* The next send time is a timerfd in the epoll set, not epoll_wait's
     * timeout: that counts whole milliseconds, and a wait under one (0 ms)
     * returned at once, so between sends under 1 ms apart the loop spun
     * and took a core's scheduler slices (3 ms) from the server's threads,
     * which made the gaps of the sending phase's ITL tail
     * (docs/generation.md, "Where the ITL tail came from"). */
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = NULL};
    if (ep < 0 || tfd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev)) {
        fprintf(stderr, "serve_load: cannot make its epoll set and timer\n");
        return 1;
    }
    size_t next = 0, live = 0, armed = (size_t)-1;
    char chunk[65536];
    while (next < n || live) {
        double t = now();
        if (t > end)
            break;
        for (; next < n && cs[next].at <= t; next++) {
            conn *c = &cs[next];
            if (!p.nidle && p.max && p.open >= p.max) {
                c->waited = 1;
                break; /* the pool is busy: the loop's head tries again after an answer */
            }
            c->sent = c->waited ? c->at : t;
            c->last = t;
            if (open_for(ep, &p, c, &addr)) {
                c->ended = 1;
                continue;
            }
            live++;
        }
        if (next < n && armed != next) {
            arm(tfd, cs[next].at);
            armed = next;
        }
        struct epoll_event evs[64];
        int k = epoll_wait(ep, evs, 64, 50); /* 50 ms: the cap's clock */
        for (int i = 0; i < k; i++) {
            conn *c = evs[i].data.ptr;
            t = now();
            if (!c) { /* the send timer: the loop's head sends what is due */
                uint64_t expirations;
                if (read(tfd, &expirations, sizeof expirations) < 0)
                    expirations = 0; /* EAGAIN: nothing to clear */
                continue;
            }
            if (evs[i].events & EPOLLOUT) {
                ssize_t w = send(c->fd, c->req + c->req_off, c->req_len - c->req_off,
                                 MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN && c->reused) {
                    if (reopen(ep, &p, c, &addr)) /* the server closed the idle one first */
                        live--;
                    continue;
                }
                if (w < 0 && errno != EAGAIN) {
                    finish(ep, &p, c, t, 0);
                    live--;
                    continue;
                }
                c->req_off += w > 0 ? (size_t)w : 0;
                if (c->req_off == c->req_len) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
                continue;
            }
            ssize_t r = recv(c->fd, chunk, sizeof chunk, 0);
            if (r < 0 && errno == EAGAIN)
                continue;
            if (r <= 0 && c->reused && c->head && !c->len) {
                if (reopen(ep, &p, c, &addr)) /* the server closed the idle one first */
                    live--;
                continue;
            }
            if (r <= 0) { /* closed: an unframed answer ends here */
                finish(ep, &p, c, t, r == 0 && !c->head && !c->chunked);
                live--;
                continue;
            }
            append(&c->buf, &c->len, &c->room, chunk, (size_t)r);
            if (parse(c, t)) {
                finish(ep, &p, c, t, 1);
                live--;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        conn *c = &cs[i];
        if (c->fd >= 0)
            close(c->fd);
        printf("req %zu %d %.9f %.9f", i, c->status, c->sent, c->ended ? c->done : -1.0);
        for (size_t j = 0; j < c->ntimes; j++)
            printf(" %.9f", c->times[j]);
        printf("\n");
        free(c->req);
        free(c->times);
        free(c->buf);
        free(c->body);
    }
    struct timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    printf("cpu %.9f\n", (double)cpu.tv_sec + 1e-9 * (double)cpu.tv_nsec);
    for (size_t i = 0; i < p.nidle; i++)
        close(p.idle[i]);
    free(p.idle);
    free(cs);
    close(tfd);
    close(ep);
    return 0;
}
