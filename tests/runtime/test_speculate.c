/*
 * test_speculate.c - the pieces of speculative decoding's acceptance rule
 * (runtime/speculate.c; Leviathan et al. 2023, Algorithm 1) on rows whose
 * answers follow by hand: rt_sample_probs gives sample.c's distribution
 * (logits (0, ln 3) at T = 1: 1/4 and 3/4; top-k and top-p cut as the rule
 * says; greedy a one-hot at the first maximum); rt_speculate_accept
 * accepts with probability min(1, p/q); rt_sample_residual draws from
 * norm(max(0, p - q)), and from p when p = q.  Also the exactness the rule
 * is for, summed by hand over a grid of draws: accepted-or-residual has
 * distribution p.
 */
#include <CUnit/CUnit.h>
#include <math.h>

#include "cunit_main.h"
#include "rt_speculate.h"

static void probs(const double *row, int64_t vocab, double t, int64_t k, double p, double *out)
{
    rt_sampling s = {.temperature = t, .top_k = k, .top_p = p};
    rt_sample_entry work[8];
    rt_sample_probs(&s, RT_F64, row, vocab, work, out);
}

static void test_probs(void)
{
    const double two[2] = {0, log(3.0)};
    double q[5];
    probs(two, 2, 1, 0, 1, q);
    CU_ASSERT_DOUBLE_EQUAL(q[0], 0.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(q[1], 0.75, 1e-12);
    probs(two, 2, 0.5, 0, 1, q); /* T = 0.5 squares the odds: 1/10, 9/10 */
    CU_ASSERT_DOUBLE_EQUAL(q[0], 0.1, 1e-12);
    probs(two, 2, 0, 0, 1, q); /* greedy */
    CU_ASSERT(q[0] == 0 && q[1] == 1);
    /* Weights 8, 4, 2, 1, 1 (tokens 3, 0, 4, 1, 2). */
    const double row[5] = {log(4.0), 0, 0, log(8.0), log(2.0)};
    probs(row, 5, 1, 2, 1, q); /* top-k 2: 2/3, 1/3 */
    CU_ASSERT_DOUBLE_EQUAL(q[3], 2.0 / 3, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(q[0], 1.0 / 3, 1e-12);
    CU_ASSERT(q[1] == 0 && q[2] == 0 && q[4] == 0);
    probs(row, 5, 1, 0, 0.8, q); /* top-p 0.8: 8, 4, 2 of 14 */
    CU_ASSERT_DOUBLE_EQUAL(q[4], 2.0 / 14, 1e-12);
    CU_ASSERT(q[1] == 0 && q[2] == 0);
    const double tie[3] = {1, 1, 0};
    probs(tie, 3, 0, 0, 1, q); /* greedy: the first maximum */
    CU_ASSERT(q[0] == 1 && q[1] == 0);
}

static void test_accept_and_residual(void)
{
    CU_ASSERT(rt_speculate_accept(0.5, 0.5, 0.999));  /* p = q: always */
    CU_ASSERT(rt_speculate_accept(0.2, 0.4, 0.49));   /* p/q = 1/2 */
    CU_ASSERT(!rt_speculate_accept(0.2, 0.4, 0.5));
    CU_ASSERT(!rt_speculate_accept(0, 1, 0));         /* greedy mismatch */
    CU_ASSERT(rt_speculate_accept(1, 1, 0.999999));   /* greedy match */
    const double p[3] = {0.5, 0.3, 0.2}, q[3] = {0.2, 0.6, 0.2};
    /* max(0, p - q) = (0.3, 0, 0): token 0 whatever u is. */
    CU_ASSERT_EQUAL(rt_sample_residual(p, q, 3, 0.0), 0);
    CU_ASSERT_EQUAL(rt_sample_residual(p, q, 3, 0.999), 0);
    const double p2[3] = {0.4, 0.4, 0.2}, q2[3] = {0.1, 0.2, 0.7};
    /* (0.3, 0.2, 0) normalised: 0.6, 0.4. */
    CU_ASSERT_EQUAL(rt_sample_residual(p2, q2, 3, 0.59), 0);
    CU_ASSERT_EQUAL(rt_sample_residual(p2, q2, 3, 0.61), 1);
    /* p = q: from p. */
    CU_ASSERT_EQUAL(rt_sample_residual(p, p, 3, 0.85), 2);
}

/* P(token v) of one speculative step with draft q and target p, by
 * midpoint sums over a grid of (u_draft, u_accept, u_residual): it must be
 * p(v) (Leviathan et al., Theorem 3.5). */
static void test_exact(void)
{
    const double p[3] = {0.5, 0.3, 0.2}, q[3] = {0.1, 0.3, 0.6};
    double got[3] = {0, 0, 0};
    const int n = 200;
    for (int i = 0; i < n; i++) {
        double ud = (i + 0.5) / n; /* the draft's token by inverse CDF of q */
        int d = ud < q[0] ? 0 : ud < q[0] + q[1] ? 1 : 2;
        for (int j = 0; j < n; j++) {
            double ua = (j + 0.5) / n;
            if (rt_speculate_accept(p[d], q[d], ua)) {
                got[d] += 1.0 / n / n;
                continue;
            }
            for (int k = 0; k < n; k++)
                got[rt_sample_residual(p, q, 3, (k + 0.5) / n)] += 1.0 / n / n / n;
        }
    }
    for (int v = 0; v < 3; v++)
        CU_ASSERT_DOUBLE_EQUAL(got[v], p[v], 2e-3);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"rt_sample_probs is sample.c's distribution", test_probs},
        {"acceptance and the residual", test_accept_and_residual},
        {"accepted or residual tokens have distribution p", test_exact},
    };
    einc_add_suite("speculate", tests, (int)(sizeof tests / sizeof tests[0]));
}
