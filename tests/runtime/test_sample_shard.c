/*
 * test_sample_shard.c - vocab-parallel sampling's summary and merge
 * (rt_sample_top, rt_sample_pick; runtime/sample.c) against
 * rt_sample_row on the whole row: rows with ties, NaN, +-Inf and -0.0,
 * split into 1..4 shards (even and uneven, the summaries concatenated in
 * shard order and reversed), greedy and sampled with top-k and top-p,
 * must give the same token for every draw.  Hand-made cases check what
 * the merge must get right: the first maximum across shards, ties by the
 * lower global index, and top-k that takes entries from several shards.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_test_util.h"

#define MAXV 24

/* The token the merge of `nshards` summaries of the f64 row gives, the
 * shards cut at cuts[0] = 0 < cuts[1] < ... < cuts[nshards] = vocab and
 * their summaries concatenated in reverse when `reverse`. */
static int32_t merged(const rt_sampling *s, const double *row, int64_t vocab, const int64_t *cuts,
                      int nshards, int reverse, double u)
{
    int64_t slots = rt_sample_slots(s, vocab);
    rt_sample_entry work[MAXV], pairs[4 * MAXV];
    for (int i = 0; i < nshards; i++) {
        int at = reverse ? nshards - 1 - i : i;
        rt_sample_top(s, RT_F64, row + cuts[i], cuts[i + 1] - cuts[i], cuts[i], slots, work,
                      pairs + at * slots);
    }
    return rt_sample_pick(s, pairs, nshards * slots, nshards == 1, u);
}

/* rt_sample_row on the whole row. */
static int32_t whole(const rt_sampling *s, const double *row, int64_t vocab, double u)
{
    rt_sample_entry work[MAXV];
    return rt_sample_row(s, RT_F64, row, vocab, u, work);
}

static void test_random_rows(void)
{
    const double temps[] = {0, 0.7, 1.3};
    const int64_t ks[] = {0, 1, 2, 3, 5, MAXV};
    const double ps[] = {1, 0.9, 0.4};
    uint64_t state = 12345;
    int64_t checked = 0, mismatches = 0, sampled_not_greedy = 0;
    for (int trial = 0; trial < 300; trial++) {
        int64_t vocab = 4 + trial % (MAXV - 3);
        double row[MAXV];
        for (int64_t v = 0; v < vocab; v++)
            row[v] = test_draw_logit(&state, trial % 3 == 0);
        for (int nshards = 1; nshards <= 4; nshards++) {
            /* Even blocks when nshards divides vocab, else uneven ones. */
            int64_t cuts[5] = {0};
            for (int i = 1; i <= nshards; i++)
                cuts[i] = i * vocab / nshards;
            for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++)
                for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++)
                    for (size_t p = 0; p < sizeof ps / sizeof ps[0]; p++) {
                        if (temps[t] == 0 && (k > 0 || p > 0))
                            continue; /* greedy ignores the cuts */
                        rt_sampling s = {.temperature = temps[t],
                                         .top_k = ks[k] < vocab ? ks[k] : 0,
                                         .top_p = ps[p], .seed = 3};
                        for (int d = 0; d < 4; d++) {
                            double u = rt_sample_uniform(9, trial, d);
                            int32_t want = whole(&s, row, vocab, u);
                            for (int reverse = 0; reverse < 2; reverse++) {
                                int32_t got = merged(&s, row, vocab, cuts, nshards, reverse, u);
                                mismatches += got != want;
                                checked++;
                            }
                            rt_sampling greedy = {.temperature = 0, .top_p = 1};
                            sampled_not_greedy += want != whole(&greedy, row, vocab, u);
                        }
                    }
        }
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT(checked > 10000);
    /* The rows and draws do exercise sampling, not only its greedy fallbacks. */
    CU_ASSERT(sampled_not_greedy > 1000);
}

static void test_first_maximum_across_shards(void)
{
    rt_sampling greedy = {.temperature = 0, .top_p = 1};
    int64_t halves[3] = {0, 3, 6};
    /* The maximum 2 at 1 and 4: the first, wherever the summaries arrive. */
    const double tie[6] = {0, 2, 1, 1, 2, 0};
    CU_ASSERT_EQUAL(merged(&greedy, tie, 6, halves, 2, 0, 0.5), 1);
    CU_ASSERT_EQUAL(merged(&greedy, tie, 6, halves, 2, 1, 0.5), 1);
    /* NaN is the largest: the first NaN, in the second shard. */
    const double nan_row[6] = {9, INFINITY, 1, 1, NAN, NAN};
    CU_ASSERT_EQUAL(merged(&greedy, nan_row, 6, halves, 2, 1, 0.5), 4);
    /* A NaN decides greedily even when sampling. */
    rt_sampling hot = {.temperature = 1, .top_k = 3, .top_p = 1};
    CU_ASSERT_EQUAL(merged(&hot, nan_row, 6, halves, 2, 1, 0.99), 4);
    /* -0.0 and 0.0 are equal: the first of them. */
    const double zeros[6] = {-1, -1, 0.0, -0.0, -1, -1};
    int64_t thirds[4] = {0, 3, 4, 6};
    CU_ASSERT_EQUAL(merged(&greedy, zeros, 6, thirds, 3, 1, 0.5), 2);
}

static void test_top_k_across_shards(void)
{
    /* Weights 8, 4, 2, 1 at tokens 5, 0, 3, 1 (ln of them), the rest
     * -Inf: top-k 2 keeps tokens 5 and 0 (masses 2/3, 1/3), one from each
     * half, so a merge that kept one shard's entries would never give 0. */
    const double row[6] = {log(4.0), 0, -INFINITY, log(2.0), -INFINITY, log(8.0)};
    int64_t halves[3] = {0, 3, 6};
    rt_sampling s = {.temperature = 1, .top_k = 2, .top_p = 1};
    CU_ASSERT_EQUAL(merged(&s, row, 6, halves, 2, 0, 0.66), 5);
    CU_ASSERT_EQUAL(merged(&s, row, 6, halves, 2, 1, 0.67), 0);
    /* top-k 3 with top-p 0.8 (total 14): 8, 12 >= 11.2 keeps two. */
    rt_sampling sp = {.temperature = 1, .top_k = 3, .top_p = 0.8};
    CU_ASSERT_EQUAL(merged(&sp, row, 6, halves, 2, 1, 0.9999), 0);
    /* Equal logits in both halves: top-k 1 takes the lower global index. */
    const double tie[6] = {0, 0, 3, 0, 0, 3};
    rt_sampling one = {.temperature = 1, .top_k = 1, .top_p = 1};
    CU_ASSERT_EQUAL(merged(&one, tie, 6, halves, 2, 1, 0.99), 2);
    /* A shard smaller than k: its padding is never drawn. */
    int64_t cuts[3] = {0, 1, 6};
    rt_sampling four = {.temperature = 1, .top_k = 4, .top_p = 1};
    for (int d = 0; d < 16; d++) {
        double u = rt_sample_uniform(1, d, 0);
        CU_ASSERT_EQUAL(merged(&four, row, 6, cuts, 2, 0, u), whole(&four, row, 6, u));
    }
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"random rows split into 1..4 shards = whole rows", test_random_rows},
        {"first maximum across shards: ties, NaN, -0.0", test_first_maximum_across_shards},
        {"top-k across shards: entries from each, ties, padding", test_top_k_across_shards},
    };
    einc_add_suite("rt_sample_top + rt_sample_pick", tests, (int)(sizeof tests / sizeof tests[0]));
}
