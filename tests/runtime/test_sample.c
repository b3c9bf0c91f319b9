/*
 * test_sample.c - rt_sample_row (runtime/sample.c) on small rows whose
 * answers follow from the rule by hand, independently of run_sample.py's
 * NumPy: with logits (0, ln 3) and T = 1 the probabilities are 1/4 and
 * 3/4, so the draws u below 3/4 take token 1 and the others token 0;
 * top-k and top-p cut where their definitions say; ties go to the lower
 * index; greedy is numpy.argmax; and rt_sample_uniform is a fixed
 * function of (seed, step, sequence) in [0, 1).  rt_sample_top's
 * partial selection of a row's first k entries (a bounded heap) against
 * the full sort it replaced, entry for entry, on rows with many ties.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cunit_main.h"
#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_test_util.h"

/* rt_sample_row on an f64 row of V <= 8 with settings (t, k, p). */
static int32_t pick(const double *row, int64_t vocab, double t, int64_t k, double p, double u)
{
    rt_sampling s = {.temperature = t, .top_k = k, .top_p = p, .seed = 0};
    rt_sample_entry work[8];
    return rt_sample_row(&s, RT_F64, row, vocab, u, work);
}

static void test_two_tokens(void)
{
    const double row[2] = {0, log(3.0)};
    /* Sorted: token 1 (weight 1), token 0 (weight 1/3); c = 1, 4/3. */
    CU_ASSERT_EQUAL(pick(row, 2, 1, 0, 1, 0.0), 1);
    CU_ASSERT_EQUAL(pick(row, 2, 1, 0, 1, 0.74), 1);
    CU_ASSERT_EQUAL(pick(row, 2, 1, 0, 1, 0.76), 0);
    CU_ASSERT_EQUAL(pick(row, 2, 1, 0, 1, 0.999999), 0);
    /* T = 0.5 squares the odds: 1/10 and 9/10. */
    CU_ASSERT_EQUAL(pick(row, 2, 0.5, 0, 1, 0.89), 1);
    CU_ASSERT_EQUAL(pick(row, 2, 0.5, 0, 1, 0.91), 0);
    /* top-k 1 keeps token 1 whatever u is. */
    CU_ASSERT_EQUAL(pick(row, 2, 1, 1, 1, 0.99), 1);
    /* top-p: token 1 alone has mass 3/4, so p <= 3/4 keeps it alone. */
    CU_ASSERT_EQUAL(pick(row, 2, 1, 0, 0.75, 0.99), 1);
    CU_ASSERT_EQUAL(pick(row, 2, 1, 0, 0.76, 0.99), 0);
}

static void test_top_k_top_p(void)
{
    /* Probabilities proportional to 8, 4, 2, 1, 1 (tokens 3, 0, 4, 1, 2). */
    const double row[5] = {log(4.0), 0, 0, log(8.0), log(2.0)};
    /* top-k 2: tokens 3 and 0, masses 2/3 and 1/3. */
    CU_ASSERT_EQUAL(pick(row, 5, 1, 2, 1, 0.66), 3);
    CU_ASSERT_EQUAL(pick(row, 5, 1, 2, 1, 0.67), 0);
    CU_ASSERT_EQUAL(pick(row, 5, 1, 2, 1, 0.9999), 0);
    /* top-p 0.8 over all 5 (total 16): 8, 12, 14 >= 12.8 keeps 3 tokens. */
    CU_ASSERT_EQUAL(pick(row, 5, 1, 0, 0.8, 0.9999), 4);
    CU_ASSERT_EQUAL(pick(row, 5, 1, 0, 0.8, 12.5 / 14), 4);
    CU_ASSERT_EQUAL(pick(row, 5, 1, 0, 0.8, 11.5 / 14), 0);
    /* top-k 4 (total 15) then top-p 0.5: 8 >= 7.5 keeps token 3 alone. */
    CU_ASSERT_EQUAL(pick(row, 5, 1, 4, 0.5, 0.9999), 3);
    /* The tail: u near 1 over all tokens reaches the last, ties to the higher index. */
    CU_ASSERT_EQUAL(pick(row, 5, 1, 0, 1, 0.9999), 2);
    CU_ASSERT_EQUAL(pick(row, 5, 1, 0, 1, 14.5 / 16), 1); /* c = 8, 12, 14, 15, 16 */
}

static void test_ties_and_greedy(void)
{
    const double tie[4] = {1, 2, 2, 0};
    CU_ASSERT_EQUAL(pick(tie, 4, 0, 0, 1, 0.5), 1); /* the first maximum */
    CU_ASSERT_EQUAL(pick(tie, 4, 1, 1, 1, 0.99), 1); /* top-k 1 of a tie: the lower index */
    const double nan_row[3] = {5, NAN, 7};
    CU_ASSERT_EQUAL(pick(nan_row, 3, 1, 0, 1, 0.99), 1); /* NaN: greedy, as numpy.argmax */
    const double inf_row[3] = {5, 1, INFINITY};
    CU_ASSERT_EQUAL(pick(inf_row, 3, 1, 0, 1, 0.01), 2);
    const double masked[3] = {-INFINITY, 0, -INFINITY};
    CU_ASSERT_EQUAL(pick(masked, 3, 1, 0, 1, 0.99), 1); /* masked tokens are never drawn */
    const double none[2] = {-INFINITY, -INFINITY};
    CU_ASSERT_EQUAL(pick(none, 2, 1, 0, 1, 0.5), 0);
    const float f32[3] = {0.5f, 3.0f, 1.0f};
    rt_sampling s = {.temperature = 0, .top_p = 1};
    rt_sample_entry work[3];
    CU_ASSERT_EQUAL(rt_sample_row(&s, RT_F32, f32, 3, 0.3, work), 1);
}

static void test_uniform(void)
{
    double a = rt_sample_uniform(7, 3, 1);
    CU_ASSERT(a >= 0 && a < 1);
    CU_ASSERT_EQUAL(a, rt_sample_uniform(7, 3, 1)); /* a function of its arguments */
    CU_ASSERT_NOT_EQUAL(a, rt_sample_uniform(8, 3, 1));
    CU_ASSERT_NOT_EQUAL(a, rt_sample_uniform(7, 4, 1));
    CU_ASSERT_NOT_EQUAL(a, rt_sample_uniform(7, 3, 0));
}

/* The rule's order, as the full sort before the partial selection used it. */
static int reference_order(const void *a, const void *b)
{
    const rt_sample_entry *x = a, *y = b;
    if (x->value != y->value)
        return x->value > y->value ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* rt_sample_top's first k = the full sort's first k, for rows of n with
 * ties (7 levels, -Inf, -0.0) or with distinct values, k from 1 to n,
 * at a shard offset; and the padding after them. */
static void test_top_k_selection(void)
{
    static const int64_t sizes[] = {1, 2, 3, 7, 64, 129, 300};
    uint64_t state = 11;
    rt_sample_entry *work = malloc(300 * sizeof *work), *want = malloc(300 * sizeof *want);
    rt_sample_entry *top = malloc(301 * sizeof *top);
    double *row = malloc(300 * sizeof *row);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int distinct = 0; distinct < 2; distinct++)
            for (int64_t k = 1, n = sizes[si]; k <= n + 1; k = k < 9 ? k + 1 : k * 2 + 1) {
                for (int64_t v = 0; v < n; v++) {
                    row[v] = distinct ? (double)(rt_splitmix64(state + (uint64_t)v) % 1000003)
                                      : test_draw_logit(&state, 0);
                    want[v] = (rt_sample_entry){.value = row[v], .index = 1000 + v};
                }
                state++;
                qsort(want, (size_t)n, sizeof *want, reference_order);
                rt_sampling s = {.temperature = 1, .top_k = k, .top_p = 1};
                rt_sample_top(&s, RT_F64, row, n, 1000, k, work, top);
                int same = 1;
                for (int64_t j = 0; j < k; j++)
                    same &= j < n ? top[j].index == want[j].index &&
                                        (top[j].value == want[j].value)
                                  : top[j].index == -1;
                CU_ASSERT(same);
                if (!same)
                    fprintf(stderr, "top-k selection differs: n %lld k %lld distinct %d\n",
                            (long long)n, (long long)k, distinct);
            }
    free(row);
    free(top);
    free(want);
    free(work);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"two tokens: temperature, top-k, top-p", test_two_tokens},
        {"top-k and top-p cuts", test_top_k_top_p},
        {"ties, greedy, NaN, Inf, masked", test_ties_and_greedy},
        {"uniform draws", test_uniform},
        {"top-k partial selection = the full sort's first k", test_top_k_selection},
    };
    einc_add_suite("rt_sample_row", tests, (int)(sizeof tests / sizeof tests[0]));
}
