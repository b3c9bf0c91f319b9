/*
 * test_sample_plan.c - how a step samples from sharded logits: the choice
 * of (value, index) pairs or whole rows by their bytes (rt_sample_choose,
 * runtime/sample_shard.c) against its closed form, with the crossover
 * worked by hand; and --serve's pair path, where one K (the largest any
 * row of the step needs) summarises every row and each row is picked
 * with its own settings (rt_sample_summarise + rt_sample_pick_pairs),
 * against the whole-row path (rt_sample_row) on random f64, f32 and bf16
 * rows with many ties, token for token.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_test_util.h"

/* B = 8 rows, V = 128, f32, G = 4 shards, as --serve plans them (every
 * row's pairs to every device, no tokens after): pairs 8 * 4 * K * 16 =
 * 512 K bytes against whole rows 8 * 128 * 4 = 4096, so pairs up to K = 7
 * and whole rows from K = 8 (equal bytes go to whole rows). */
static void test_crossover_serve(void)
{
    for (int64_t k = 1; k <= 128; k++) {
        rt_sample_plan c = rt_sample_choose(k, 8, 4, 0, 8, 128, 4);
        CU_ASSERT_EQUAL(c.whole_bytes, 4096);
        CU_ASSERT_EQUAL(c.pair_bytes, 512 * k);
        if (k <= 7) {
            CU_ASSERT_EQUAL(c.whole, 0);
            CU_ASSERT_EQUAL(c.slots, k);
            CU_ASSERT_EQUAL(c.bytes, 512 * k);
        } else {
            CU_ASSERT_EQUAL(c.whole, 1);
            CU_ASSERT_EQUAL(c.slots, 0);
            CU_ASSERT_EQUAL(c.bytes, 4096);
        }
    }
    /* No row samples (every row in its prompt): nothing is gathered. */
    rt_sample_plan none = rt_sample_choose(0, 8, 4, 0, 8, 128, 4);
    CU_ASSERT(none.slots == 0 && !none.whole && none.bytes == 0);
    /* bf16 logits halve the rows: the crossover moves to K = 4. */
    CU_ASSERT_EQUAL(rt_sample_choose(3, 8, 4, 0, 8, 128, 2).whole, 0);
    CU_ASSERT_EQUAL(rt_sample_choose(4, 8, 4, 0, 8, 128, 2).whole, 1);
}

/* --generate's form: the device's B_l rows of pairs over V's G shards,
 * then the B tokens as f64.  Seed 002's LLaMA-2 13B (V = 32,000), B = 32,
 * f32, G = 8 (docs/generation.md's table): top-k 40 leaves 32 * 8 * 40 *
 * 16 + 32 * 8 = 164,096 bytes, greedy 4,352, whole rows 4,096,000; pairs
 * cost more only from K = 32,000 * 4 / (8 * 16) = 1000 on (K 999 pairs:
 * 4,091,904 + 256 < 4,096,000; K 1000: 4,096,256). */
static void test_crossover_generate(void)
{
    rt_sample_plan topk = rt_sample_choose(40, 32, 8, 256, 32, 32000, 4);
    CU_ASSERT(!topk.whole && topk.slots == 40 && topk.bytes == 164096);
    CU_ASSERT_EQUAL(topk.whole_bytes, 4096000);
    rt_sample_plan greedy = rt_sample_choose(1, 32, 8, 256, 32, 32000, 4);
    CU_ASSERT(!greedy.whole && greedy.bytes == 4352);
    CU_ASSERT(!rt_sample_choose(999, 32, 8, 256, 32, 32000, 4).whole);
    rt_sample_plan big = rt_sample_choose(1000, 32, 8, 256, 32, 32000, 4);
    CU_ASSERT(big.whole && big.bytes == 4096000 && big.pair_bytes == 4096256);
    /* Sampling without top-k (K = V) on V sharded 8 ways: whole rows. */
    CU_ASSERT(rt_sample_choose(32000, 32, 8, 256, 32, 32000, 4).whole);
    /* With B sharded 4 ways too (B_l = 8), the pairs' rows shrink. */
    rt_sample_plan split = rt_sample_choose(40, 8, 8, 256, 32, 32000, 4);
    CU_ASSERT(!split.whole && split.bytes == 8 * 8 * 40 * 16 + 256);
}

#define MAXV 40
#define ROWS 6

/* A row's settings: greedy, top-k, temperature alone, top-p alone, or
 * top-k with top-p, as requests of one --serve step may mix them. */
static rt_sampling draw_settings(uint64_t *state, int64_t vocab)
{
    *state = rt_splitmix64(*state);
    uint64_t r = *state;
    rt_sampling s = {.temperature = 0.5 + (double)(r % 4) * 0.5, .top_p = 1, .seed = r >> 8};
    switch (r / 4 % 5) {
    case 0: s.temperature = 0; break;
    case 1: s.top_k = 1 + (int64_t)(r / 32 % (uint64_t)vocab); break;
    case 2: break;
    case 3: s.top_p = 0.5; break;
    default: s.top_k = 1 + (int64_t)(r / 32 % 6); s.top_p = 0.8; break;
    }
    return s;
}

/* One step of ROWS rows with mixed settings, in f64, f32 or bf16: the pairs
 * with the step's K (every shard of every row summarised alike, the
 * summaries concatenated in shard order or reversed) give each row
 * rt_sample_row's token on the whole row, for several draws. */
static void test_pairs_equal_rows(void)
{
    uint64_t state = 2026;
    int64_t checked = 0, mismatches = 0, stepk_above_row = 0;
    for (int trial = 0; trial < 400; trial++) {
        int64_t vocab = 8 + trial % (MAXV - 7);
        const int32_t dtypes[3] = {RT_F64, RT_F32, RT_BF16};
        int32_t dtype = dtypes[trial % 3];
        size_t es = rt_dtype_size(dtype);
        double store[ROWS][MAXV]; /* f64-aligned room for a row of any dtype */
        unsigned char *rows[ROWS];
        rt_sampling set[ROWS];
        int64_t K = 0;
        for (int b = 0; b < ROWS; b++) {
            rows[b] = (unsigned char *)store[b];
            for (int64_t v = 0; v < vocab; v++)
                test_store(dtype, rows[b], v, test_draw_logit(&state, trial % 4 == 0));
            set[b] = draw_settings(&state, vocab);
            int64_t k = rt_sample_slots(&set[b], vocab);
            K = k > K ? k : K;
        }
        for (int G = 1; G <= 4; G++) {
            double pairs[4 * MAXV * 2];
            rt_sample_entry work[4 * MAXV];
            for (int b = 0; b < ROWS; b++) {
                stepk_above_row += K > rt_sample_slots(&set[b], vocab);
                for (int g = 0; g < G; g++) { /* uneven blocks when G does not divide V */
                    int64_t lo = g * vocab / G, hi = (g + 1) * vocab / G;
                    int at = trial % 3 == 0 ? G - 1 - g : g;
                    rt_sample_summarise(dtype, rows[b] + (size_t)lo * es, hi - lo, lo, K, work,
                                        pairs + at * 2 * K);
                }
                for (int64_t step = 0; step < 4; step++) {
                    double u = rt_sample_uniform(set[b].seed, step, 0);
                    rt_sample_entry wrow[MAXV];
                    int32_t want = rt_sample_row(&set[b], dtype, rows[b], vocab, u, wrow);
                    int32_t got = rt_sample_pick_pairs(&set[b], pairs, G * K, G == 1, u, work);
                    mismatches += got != want;
                    checked++;
                }
            }
        }
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT(checked > 30000);
    /* The step's K is often above what a row needs: that case is tested. */
    CU_ASSERT(stepk_above_row > 2000);
}

/* By hand: a greedy row summarised with the K = 3 of a top-k 3 row
 * beside it still takes its first maximum (2.0 at 1 and 4: token 1), and
 * the top-k row its draw among tokens 1, 4 and 0 (weights 1, 1, e^-1 at
 * T = 1: c = 1, 2, 2 + e^-1; u = 0.45 picks token 4). */
static void test_mixed_by_hand(void)
{
    const double row[6] = {1, 2, 0, -1, 2, 0.5};
    double pairs[2 * 3 * 2];
    rt_sample_entry work[6];
    rt_sample_summarise(RT_F64, row, 3, 0, 3, work, pairs);
    rt_sample_summarise(RT_F64, row + 3, 3, 3, 3, work, pairs + 6);
    rt_sampling greedy = {.temperature = 0, .top_p = 1};
    rt_sampling topk = {.temperature = 1, .top_k = 3, .top_p = 1};
    CU_ASSERT_EQUAL(rt_sample_pick_pairs(&greedy, pairs, 6, 0, 0.99, work), 1);
    double c2 = 2 + exp(-1.0);
    CU_ASSERT_EQUAL(rt_sample_pick_pairs(&topk, pairs, 6, 0, 0.45, work), 4);
    CU_ASSERT_EQUAL(rt_sample_pick_pairs(&topk, pairs, 6, 0, 0.4, work), 1);
    CU_ASSERT_EQUAL(rt_sample_pick_pairs(&topk, pairs, 6, 0, 2.0 / c2 + 1e-9, work), 0);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"--serve's choice: pairs up to the crossover, whole rows from it", test_crossover_serve},
        {"--generate's choice and bytes: the closed form", test_crossover_generate},
        {"pairs with the step's K = whole rows, mixed settings, ties", test_pairs_equal_rows},
        {"a greedy and a top-k row from the same pairs, by hand", test_mixed_by_hand},
    };
    einc_add_suite("rt_sample_choose + the pair path", tests, (int)(sizeof tests / sizeof tests[0]));
}
