/*
 * metrics.c - the counters of --serve and their Prometheus text (GET
 * /metrics): answers by HTTP status, completion tokens, the queue's
 * length, the rows running, the decode steps run and what they gathered
 * from sharded logits to sample from, and histograms of the time to
 * first token (a request's arrival to its first token: queueing plus its
 * prompt's steps) and of the inter-token latency (between two tokens of
 * one request: one decode step of the whole batch), and where the
 * engine's time goes: device 0's wall time by phase (rt_serve.h,
 * RT_PHASE_*) and the HTTP thread's time making streamed events, counters
 * in seconds that divided by the steps give a step's split
 * (bench/serve_phases.py).  The format is Prometheus' text exposition
 * 0.0.4: cumulative `_bucket{le="..."}` lines, then `_sum` and `_count`.
 */
#include <stdio.h>
#include <stdlib.h>

#include "rt_serve.h"

/* Upper bounds of the buckets, seconds: a step of a small model on a CPU
 * is well under a millisecond, a big one's tens of milliseconds. */
static const double bounds[RT_NBUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                           0.05,   0.1,   0.25,   0.5,   1,    2.5};
static const int statuses[6] = {200, 400, 404, 405, 413, 503};

void rt_metrics_status(rt_metrics *m, int status)
{
    for (int i = 0; i < 6; i++)
        if (statuses[i] == status) {
            m->by_status[i]++;
            return;
        }
    m->other_status++;
}

void rt_histogram_observe(rt_histogram *h, double seconds)
{
    int i = 0;
    while (i < RT_NBUCKETS && seconds > bounds[i])
        i++;
    h->counts[i]++;
    h->sum += seconds;
    h->count++;
}

/* Appends one histogram's lines to f. */
static void print_histogram(FILE *f, const char *name, const char *help, const rt_histogram *h)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t below = 0;
    for (int i = 0; i < RT_NBUCKETS; i++) {
        below += h->counts[i];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)below);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
    fprintf(f, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

char *rt_metrics_text(const rt_metrics *m, int64_t queued)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return NULL;
    fprintf(f, "# HELP einc_requests_total HTTP answers, by status code.\n"
               "# TYPE einc_requests_total counter\n");
    for (int i = 0; i < 6; i++)
        fprintf(f, "einc_requests_total{code=\"%d\"} %llu\n", statuses[i],
                (unsigned long long)m->by_status[i]);
    fprintf(f, "einc_requests_total{code=\"other\"} %llu\n", (unsigned long long)m->other_status);
    fprintf(f, "# HELP einc_generation_tokens_total Completion tokens generated.\n"
               "# TYPE einc_generation_tokens_total counter\n"
               "einc_generation_tokens_total %llu\n", (unsigned long long)m->tokens);
    fprintf(f, "# HELP einc_queue_length Requests waiting for a batch.\n"
               "# TYPE einc_queue_length gauge\neinc_queue_length %lld\n", (long long)queued);
    fprintf(f, "# HELP einc_running_rows Slots of the batch running a request.\n"
               "# TYPE einc_running_rows gauge\neinc_running_rows %lld\n", (long long)m->running);
    fprintf(f, "# HELP einc_iterations_total Steps run (one per iteration of the batch).\n"
               "# TYPE einc_iterations_total counter\neinc_iterations_total %llu\n",
            (unsigned long long)m->iterations);
    fprintf(f, "# HELP einc_prefill_steps_total Of those, steps of the prefill program (chunked "
               "prefill).\n# TYPE einc_prefill_steps_total counter\neinc_prefill_steps_total %llu\n",
            (unsigned long long)m->prefill_steps);
    /* Sharded logits: what each step gathered to sample from (0 with
     * replicated logits).  Bytes over steps is the bytes per step. */
    static const char *const paths[2] = {"pairs", "whole"};
    fprintf(f, "# HELP einc_sample_gather_steps_total Steps that gathered sharded logits to sample "
               "from, as (value, index) pairs or whole rows.\n"
               "# TYPE einc_sample_gather_steps_total counter\n");
    for (int i = 0; i < 2; i++)
        fprintf(f, "einc_sample_gather_steps_total{path=\"%s\"} %llu\n", paths[i],
                (unsigned long long)m->gather_steps[i]);
    fprintf(f, "# HELP einc_sample_gather_bytes_total Bytes those gathers left on each device.\n"
               "# TYPE einc_sample_gather_bytes_total counter\n");
    for (int i = 0; i < 2; i++)
        fprintf(f, "einc_sample_gather_bytes_total{path=\"%s\"} %llu\n", paths[i],
                (unsigned long long)m->gather_bytes[i]);
    /* Where device 0's time goes (rt_serve.h, RT_PHASE_*): over
     * einc_iterations_total, the split of a step. */
    static const char *const phases[RT_NPHASES] = {"step", "sample", "bookkeep", "wake", "idle"};
    fprintf(f, "# HELP einc_engine_seconds_total Device 0's wall time by phase: the program's "
               "step, sampling, bookkeeping, waking connections, idle.\n"
               "# TYPE einc_engine_seconds_total counter\n");
    for (int i = 0; i < RT_NPHASES; i++)
        fprintf(f, "einc_engine_seconds_total{phase=\"%s\"} %.9g\n", phases[i],
                m->phase_seconds[i]);
    fprintf(f, "# HELP einc_http_event_seconds_total The HTTP thread's wall time making streamed "
               "events (JSON and SSE bytes), counted when each stream ends.\n"
               "# TYPE einc_http_event_seconds_total counter\neinc_http_event_seconds_total "
               "%.9g\n", m->event_seconds);
    print_histogram(f, "einc_time_to_first_token_seconds",
                    "From a request's arrival to its first token.", &m->ttft);
    print_histogram(f, "einc_inter_token_latency_seconds",
                    "Between two consecutive tokens of a request.", &m->itl);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}
