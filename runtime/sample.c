/*
 * sample.c - the choice of the next token from a row of logits (--generate):
 * greedy, temperature, top-k and top-p (nucleus) sampling.
 *
 * Seed 002 ("Sampling") samples each new token from the distribution the
 * model's logits give; top-k (Fan et al. 2018) and top-p (Holtzman et al.
 * 2020) cut its tail first.  The rule, for one row l[0..V) and a uniform
 * number u in [0, 1):
 *   - temperature 0: the first maximum (NaN counts as the largest, as
 *     numpy.argmax); so too when the maximum m is NaN or +-Inf, where the
 *     weights below are undefined;
 *   - else the tokens in order of decreasing logit, ties by increasing
 *     index (a stable sort); the first k of them (k = --top-k, all without
 *     it) with weights w_i = exp((l_i - m) / T), and c_i their running sums
 *     (in that order, in double);
 *   - top-p: the first n tokens, n the smallest with c_{n-1} >= p c_{k-1}
 *     (all k when p = 1): the smallest set of most likely tokens whose
 *     probability is at least p;
 *   - the token at the first i < n with u c_{n-1} < c_i (the last of the n
 *     if rounding leaves none).
 * The weights are unnormalised so that no division rounds them; NumPy's
 * cumsum gives the same sums in the same order (tests/runtime/
 * run_sample.py checks the rule against it).
 */
#include <math.h>
#include <stdlib.h>

#include "rt_generate.h"
#include "rt_internal.h"

double rt_sample_uniform(uint64_t seed, int64_t step, int64_t seq)
{
    /* splitmix64 of a counter made of the step and the sequence: every
     * device draws the same number without communication. */
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(step * 1000003 + seq + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* Larger logit first, then smaller index: a total order, so qsort (not
 * stable) still gives the stable order the rule names. */
static int by_logit(const void *a, const void *b)
{
    const rt_sample_entry *x = a, *y = b;
    if (x->value != y->value)
        return x->value > y->value ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

int32_t rt_sample_row(const rt_sampling *s, int32_t dtype, const void *row, int64_t vocab,
                      double u, rt_sample_entry *work)
{
    int64_t best = 0;
    double m = -INFINITY;
    for (int64_t v = 0; v < vocab; v++) {
        double x = rt_element(dtype, row, v);
        if (x > m || (isnan(x) && !isnan(m))) {
            m = x;
            best = v;
        }
        work[v].value = x;
        work[v].index = v;
    }
    if (!(s->temperature > 0) || isnan(m) || isinf(m))
        return (int32_t)best;
    qsort(work, (size_t)vocab, sizeof *work, by_logit);
    int64_t k = s->top_k > 0 && s->top_k < vocab ? s->top_k : vocab;
    double c = 0;
    for (int64_t i = 0; i < k; i++) { /* value becomes the running sum c_i */
        c += exp((work[i].value - m) / s->temperature);
        work[i].value = c;
    }
    int64_t n = k;
    if (s->top_p < 1)
        for (n = 1; n < k && work[n - 1].value < s->top_p * work[k - 1].value; n++)
            ;
    double target = u * work[n - 1].value;
    for (int64_t i = 0; i < n; i++)
        if (target < work[i].value)
            return (int32_t)work[i].index;
    return (int32_t)work[n - 1].index;
}
