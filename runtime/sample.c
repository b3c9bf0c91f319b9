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
 *
 * The rule runs in two halves so that a row split over devices (a
 * vocab-parallel LM head, sample_shard.c) needs only a few entries of each
 * part: rt_sample_top summarises a block of the row (its first maximum,
 * or its k first entries in the order above, with global indices), and
 * rt_sample_pick finishes from the summaries of every block.  The order
 * is total, so a row's first k entries are among its blocks' first k, and
 * its first maximum is the first of theirs.  rt_sample_row is the two on
 * one block, so the replicated and the sharded paths share every step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* Larger logit first, then smaller index: a total order on entries
 * without NaN, so qsort (not stable) still gives the stable order the rule
 * names.  Never called on a NaN: a row (or shard) whose maximum is NaN is
 * decided greedily before anything is sorted. */
static int by_logit(const void *a, const void *b)
{
    const rt_sample_entry *x = a, *y = b;
    if (x->value != y->value)
        return x->value > y->value ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

int64_t rt_sample_slots(const rt_sampling *s, int64_t vocab)
{
    if (!(s->temperature > 0))
        return 1;
    return s->top_k > 0 && s->top_k < vocab ? s->top_k : vocab;
}

/* Whether entry x comes after y in the rule's order (smaller logit, or an
 * equal one at a larger index): by_logit(x, y) > 0, without the call. */
static int after(const rt_sample_entry *x, const rt_sample_entry *y)
{
    return x->value != y->value ? x->value < y->value : x->index > y->index;
}

/* Restores the heap order below heap[i] (heap[0..k): every parent comes
 * after its children in the rule's order, so heap[0] is the last kept). */
static void sift_down(rt_sample_entry *heap, int64_t k, int64_t i)
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= k)
            return;
        if (c + 1 < k && after(&heap[c + 1], &heap[c]))
            c++;
        if (!after(&heap[c], &heap[i]))
            return;
        rt_sample_entry t = heap[i];
        heap[i] = heap[c];
        heap[c] = t;
        i = c;
    }
}

/* Moves the first k of work[0..n) in the rule's order (0 < k < n) into
 * work[0..k), sorted: a bounded heap of the k best so far, whose root is
 * the worst of them, then a sort of the k -- O(n log k) against the full
 * sort's O(n log n), which a top-k row of a large vocabulary (k = 40 of
 * 128k, say) would otherwise pay per token.  The order is total (no NaN
 * reaches here, ties go by index), so the k are exactly the full sort's
 * first k (tests/runtime/test_sample.c compares the two). */
static void select_first(rt_sample_entry *work, int64_t n, int64_t k)
{
    for (int64_t i = k / 2 - 1; i >= 0; i--)
        sift_down(work, k, i);
    for (int64_t v = k; v < n; v++)
        if (after(&work[0], &work[v])) { /* better than the worst kept */
            work[0] = work[v];
            sift_down(work, k, 0);
        }
    qsort(work, (size_t)k, sizeof *work, by_logit);
}

/* Fills top[from..slots) with padding (index -1), which rt_sample_pick
 * skips. */
static void pad(rt_sample_entry *top, int64_t from, int64_t slots)
{
    for (int64_t i = from; i < slots; i++)
        top[i] = (rt_sample_entry){.value = -INFINITY, .index = -1};
}

void rt_sample_top(const rt_sampling *s, int32_t dtype, const void *row, int64_t n,
                   int64_t offset, int64_t slots, rt_sample_entry *work, rt_sample_entry *top)
{
    if (n < 1) { /* an empty shard says nothing */
        pad(top, 0, slots);
        return;
    }
    int64_t best = 0;
    double m = -INFINITY;
    for (int64_t v = 0; v < n; v++) {
        double x = rt_element(dtype, row, v);
        if (x > m || (isnan(x) && !isnan(m))) {
            m = x;
            best = v;
        }
        work[v].value = x;
        work[v].index = offset + v;
    }
    /* Greedy, or a maximum that makes the whole row's greedy (a NaN or
     * +Inf here is at least as large as any other shard's maximum): the
     * first maximum alone decides. */
    if (slots == 1 || !(s->temperature > 0) || isnan(m) || m == INFINITY) {
        top[0] = (rt_sample_entry){.value = m, .index = offset + best};
        pad(top, 1, slots);
        return;
    }
    int64_t kept = n < slots ? n : slots;
    if (kept < n)
        select_first(work, n, kept);
    else
        qsort(work, (size_t)n, sizeof *work, by_logit);
    if (top != work)
        memmove(top, work, (size_t)kept * sizeof *top);
    pad(top, kept, slots);
}

/* Whether entry (x, i) comes before the maximum so far (m, j) under the
 * greedy rule over a whole row: NaN largest, then the larger value, then
 * (equal values, or both NaN) the smaller index -- numpy.argmax's first
 * maximum, whatever order the shards' entries arrive in. */
static int before(double x, int64_t i, double m, int64_t j)
{
    if (isnan(x) != isnan(m))
        return isnan(x);
    if (isnan(x) || x == m)
        return i < j;
    return x > m;
}

int32_t rt_sample_pick(const rt_sampling *s, rt_sample_entry *pairs, int64_t n, int sorted,
                       double u)
{
    int64_t best = -1, kept = 0;
    double m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (pairs[i].index < 0)
            continue;
        if (best < 0 || before(pairs[i].value, pairs[i].index, m, best)) {
            m = pairs[i].value;
            best = pairs[i].index;
        }
        pairs[kept++] = pairs[i]; /* the padding squeezed out */
    }
    if (!(s->temperature > 0) || isnan(m) || isinf(m))
        return (int32_t)best;
    if (!sorted)
        qsort(pairs, (size_t)kept, sizeof *pairs, by_logit);
    int64_t k = s->top_k > 0 && s->top_k < kept ? s->top_k : kept;
    double c = 0;
    for (int64_t i = 0; i < k; i++) { /* value becomes the running sum c_i */
        c += exp((pairs[i].value - m) / s->temperature);
        pairs[i].value = c;
    }
    int64_t nk = k;
    if (s->top_p < 1)
        for (nk = 1; nk < k && pairs[nk - 1].value < s->top_p * pairs[k - 1].value; nk++)
            ;
    double target = u * pairs[nk - 1].value;
    for (int64_t i = 0; i < nk; i++)
        if (target < pairs[i].value)
            return (int32_t)pairs[i].index;
    return (int32_t)pairs[nk - 1].index;
}

int32_t rt_sample_row(const rt_sampling *s, int32_t dtype, const void *row, int64_t vocab,
                      double u, rt_sample_entry *work)
{
    /* The whole row is one shard: its summary is already in order. */
    int64_t slots = rt_sample_slots(s, vocab);
    rt_sample_top(s, dtype, row, vocab, 0, slots, work, work);
    return rt_sample_pick(s, work, slots, 1, u);
}
