/*
 * test_pipeline_blocking.c - the interleaved, zero-bubble and zb-h2 schedules' per-stage orders
 * (pp_build, passes/costmodel/pipeline_sched.c) run as the executor runs
 * them (codegen/pipeline.c): each stage takes its items strictly in order,
 * an item's receive blocks until the neighbour's send of that item's input
 * is done, sends never block (runtime/p2p.c buffers them).  Written here
 * independently of the cost model's simulator: a stage runs its next item
 * when the item that sends it its input (F of the model chunk before, B
 * of the one after, the last chunk's B its own F; a W its own B) has run; the run must
 * finish every item without a step in which no stage can go on (a
 * deadlock), for the training orders and for their forwards alone (an
 * interleaved forward).
 */
#include <CUnit/CUnit.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "pipeline.h"

/* Whether stage s's item `it` has its input: done[kind][m][q] for model chunk q. */
static bool ready(const pp_item *it, int s, int Z, int v, const bool *done, int M)
{
    int q = it->chunk * Z + s, m = it->microbatch, nq = Z * v;
#define DONE(k, qq) done[((k) * M + m) * nq + (qq)]
    if (it->kind == PP_F)
        return q == 0 || DONE(0, q - 1);
    if (it->kind == PP_W)
        return DONE(1, q);
    return q == nq - 1 ? DONE(0, q) : DONE(1, q + 1);
#undef DONE
}

/* Runs the plan's orders (forwards only when `forward_only`); true if all finish. */
static bool runs_to_end(const pp_plan *plan, bool forward_only)
{
    int Z = plan->stages, v = plan->chunks, M = plan->microbatches;
    bool *done = calloc((size_t)3 * (size_t)M * (size_t)(Z * v), sizeof *done);
    int *next = calloc((size_t)Z, sizeof *next);
    bool ok = done && next, moved = true;
    while (ok && moved) {
        moved = false;
        for (int s = 0; s < Z; s++) {
            const pp_stage_plan *st = &plan->stage[s];
            while (next[s] < st->n_items && forward_only && st->items[next[s]].kind != PP_F)
                next[s]++;
            if (next[s] == st->n_items)
                continue;
            const pp_item *it = &st->items[next[s]];
            if (!ready(it, s, Z, v, done, M))
                continue; /* blocked in its receive */
            done[((int)it->kind * M + it->microbatch) * (Z * v) + it->chunk * Z + s] = true;
            next[s]++;
            moved = true;
        }
    }
    for (int s = 0; ok && s < Z; s++)
        ok = next[s] == plan->stage[s].n_items;
    free(done);
    free(next);
    return ok;
}

static void test_interleaved_orders_run(void)
{
    for (int Z = 2; Z <= 8; Z *= 2)
        for (int v = 2; v <= 4; v++)
            for (int M = Z; M <= 4 * Z; M += Z) {
                double t[16];
                for (int s = 0; s < 8; s++) {
                    t[s] = 1;
                    t[8 + s] = 2;
                }
                pp_params p = {.stages = Z, .microbatches = M, .chunks = v, .t_f = t, .t_b = t + 8};
                pp_plan plan;
                char err[256];
                CU_ASSERT_EQUAL_FATAL(pp_build(&p, PP_INTERLEAVED, &plan, err, sizeof err), 0);
                CU_ASSERT(runs_to_end(&plan, false));
                CU_ASSERT(runs_to_end(&plan, true));
                pp_plan_free(&plan);
            }
}

/* Zero-bubble's and zb-h2's orders (W placed by simulating the times),
 * with uniform and uneven stage times and with and without hops: every
 * stage runs its F, B and W items in order to the end. */
static void test_split_orders_run(void)
{
    for (int sch = PP_ZB_H1; sch <= PP_ZB_H2; sch++)
        for (int Z = 2; Z <= 8; Z *= 2)
            for (int M = 1; M <= 4 * Z; M *= 2)
                for (int k = 0; k < 2; k++) {
                    double t[24];
                    for (int s = 0; s < 8; s++) {
                        t[s] = 1 + 0.1 * k * s;
                        t[8 + s] = 1.2 - 0.05 * k * s;
                        t[16 + s] = 1.3 + 0.03 * k * s;
                    }
                    pp_params p = {.stages = Z, .microbatches = M, .chunks = 1, .t_f = t, .t_b = t + 8,
                                   .t_w = t + 16, .t_p2p = 0.1 * k};
                    pp_plan plan;
                    char err[256];
                    CU_ASSERT_EQUAL_FATAL(pp_build(&p, (pp_schedule)sch, &plan, err, sizeof err), 0);
                    CU_ASSERT(runs_to_end(&plan, false));
                    pp_plan_free(&plan);
                }
}

/* The check can fail: a stage that takes its backward before the
 * forward that feeds it never finishes. */
static void test_bad_order_blocks(void)
{
    double t[4] = {1, 1, 2, 2};
    pp_params p = {.stages = 2, .microbatches = 2, .chunks = 2, .t_f = t, .t_b = t + 2};
    pp_plan plan;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(pp_build(&p, PP_INTERLEAVED, &plan, err, sizeof err), 0);
    pp_stage_plan *last = &plan.stage[1];
    int f = -1, b = -1; /* stage 1's F0.1 and B0.1 (the last model chunk) */
    for (int i = 0; i < last->n_items; i++) {
        if (last->items[i].microbatch == 0 && last->items[i].chunk == 1)
            *(last->items[i].kind == PP_F ? &f : &b) = i;
    }
    CU_ASSERT_FATAL(f >= 0 && b > f);
    pp_item tmp = last->items[f];
    last->items[f] = last->items[b];
    last->items[b] = tmp;
    CU_ASSERT_FALSE(runs_to_end(&plan, false));
    pp_plan_free(&plan);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"interleaved orders run to the end with blocking receives", test_interleaved_orders_run},
        {"zero-bubble and zb-h2 orders run to the end with blocking receives", test_split_orders_run},
        {"a backward ahead of its forward blocks", test_bad_order_blocks},
    };
    einc_add_suite("pipeline_blocking", tests, (int)(sizeof tests / sizeof tests[0]));
}
