/*
 * test_pipe_fill.c - the greedy W fill's choice (runtime/pipe_fill.c,
 * rt_pipe_fill_choose) on rows worked out by hand: which position each
 * call returns, given which receives have arrived.  Codes are
 * microbatch * 4 + kind (0 F, 1 B, 2 W), as codegen/pipeline.c's table.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_pipe_fill.h"

#define F(m) ((m) * 4)
#define B(m) ((m) * 4 + 1)
#define W(m) ((m) * 4 + 2)
#define RECV_F 1u
#define RECV_B 2u

/* The arrivals a case scripts: the codes whose message has arrived (any
 * other never has), and the probes asked. */
typedef struct script {
    const int32_t *arrived;
    int narrived;
    int probes;
} script;

static int32_t scripted(void *ctx, int32_t code)
{
    script *s = ctx;
    s->probes++;
    for (int i = 0; i < s->narrived; i++)
        if (s->arrived[i] == code)
            return 1;
    return 0;
}

/* Runs the choice n times on `row` and checks the positions against
 * `want`, then that one call more returns -1. */
static void check_row(const int32_t *row, int n, uint32_t kinds, script *s, const int32_t *want,
                      int want_probes)
{
    uint8_t done[32];
    int32_t cursor = 0, got[32];
    memset(done, 0, sizeof done);
    for (int i = 0; i < n; i++)
        got[i] = rt_pipe_fill_choose(row, n, &cursor, done, kinds, scripted, s);
    int same = memcmp(got, want, (size_t)n * sizeof *got) == 0;
    CU_ASSERT(same);
    if (!same) {
        fprintf(stderr, "\n  got ");
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n  want");
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    CU_ASSERT_EQUAL(rt_pipe_fill_choose(row, n, &cursor, done, kinds, scripted, s), -1);
    CU_ASSERT_EQUAL(s->probes, want_probes);
    /* W items keep their table order among themselves. */
    int32_t last_w = -1;
    for (int i = 0; i < n; i++)
        if ((row[got[i]] & 3) == 2) {
            CU_ASSERT(got[i] > last_w);
            last_w = got[i];
        }
}

/* A first stage's row (its B items receive), M = 4. */
static const int32_t FIRST[] = {F(0), F(1), B(0), F(2), B(1), W(0), F(3), B(2), W(1), B(3), W(2), W(3)};

/* Every message there when asked: the table's order. */
static void test_all_arrived(void)
{
    const int32_t arrived[] = {B(0), B(1), B(2), B(3)};
    script s = {arrived, 4, 0};
    const int32_t want[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    check_row(FIRST, 12, RECV_B, &s, want, 4);
}

/* No message ever there: before each B the earliest W whose B has run
 * (B0 waits with nothing to run: W0's B is B0 itself), then the B once
 * no W is runnable; the W the table reaches after running early is
 * skipped. */
static void test_none_arrived(void)
{
    script s = {NULL, 0, 0};
    const int32_t want[] = {0, 1, 2, 3, 5, 4, 6, 8, 7, 10, 9, 11};
    /* probes: B0 once; B1, B2, B3 twice (once before their W, once after) */
    check_row(FIRST, 12, RECV_B, &s, want, 7);
}

/* B1's message there, the others not: B1 runs in place and so does W0
 * after it; B2 and B3 each run a W first. */
static void test_some_arrived(void)
{
    const int32_t arrived[] = {B(1)};
    script s = {arrived, 1, 0};
    const int32_t want[] = {0, 1, 2, 3, 4, 5, 6, 8, 7, 10, 9, 11};
    check_row(FIRST, 12, RECV_B, &s, want, 6);
}

/* A last stage (its F items receive, M = 3): a W fills the wait for F1
 * and F2, never one whose B has not run (W1 before F1: B1 comes after
 * it). */
static void test_last_stage(void)
{
    const int32_t row[] = {F(0), B(0), F(1), B(1), W(0), F(2), B(2), W(1), W(2)};
    script s = {NULL, 0, 0};
    const int32_t want[] = {0, 1, 4, 2, 3, 7, 5, 6, 8};
    check_row(row, 9, RECV_F, &s, want, 5);
}

/* Only the earliest W not yet run is a candidate: with W1 before W0 in
 * the table, W1 is not runnable before B1, and W0 (whose B has run) must
 * not overtake it, or the sums W items add to would change order. */
static void test_earliest_w_only(void)
{
    const int32_t row[] = {F(0), B(0), F(1), B(1), W(1), W(0)};
    script s = {NULL, 0, 0};
    const int32_t want[] = {0, 1, 2, 3, 4, 5};
    check_row(row, 6, RECV_B, &s, want, 2);
}

/* A stage that receives nothing (one stage, or a kind mask of 0) never
 * probes and runs the table's order. */
static void test_no_receives(void)
{
    script s = {NULL, 0, 0};
    const int32_t want[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    check_row(FIRST, 12, 0, &s, want, 0);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"every message there: the table's order", test_all_arrived},
        {"no message there: a W before each waiting B", test_none_arrived},
        {"one message there: its B in place", test_some_arrived},
        {"last stage: a W before each waiting F, only once its B ran", test_last_stage},
        {"only the earliest W not yet run fills", test_earliest_w_only},
        {"no receives: no probes, the table's order", test_no_receives},
    };
    einc_add_suite("runtime pipeline W fill", tests, (int)(sizeof tests / sizeof tests[0]));
}
