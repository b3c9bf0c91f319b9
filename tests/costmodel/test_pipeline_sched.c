/*
 * test_pipeline_sched.c - pipeline schedules and their cost
 * (passes/costmodel/pipeline.h): every schedule runs every work item once
 * and its timeline respects the dependencies and never overlaps two items
 * on a stage (checked here independently of the simulator); bubbles, steps
 * and memory peaks against the papers' closed forms; zero-bubble against
 * 1F1B; ZB-H2 against ZB-H1 and its flushed step's bound; a hop on the critical path by hand; bad parameters; the printed
 * table's first row against the known 1F1B pattern; the core-idle bubble
 * of stages sharing CPUs by hand.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "pipeline.h"

#define MAXZ 8

static const int ZS[] = {1, 2, 4, 8};
static const int MS[] = {1, 2, 4, 8, 16};

/* Times of one run: arrays of MAXZ, filled per case. */
typedef struct times {
    double f[MAXZ], b[MAXZ], w[MAXZ];
} times;

static times uniform(double f, double b, double w)
{
    times t;
    for (int s = 0; s < MAXZ; s++) {
        t.f[s] = f;
        t.b[s] = b;
        t.w[s] = w;
    }
    return t;
}

static pp_params params(const times *t, int Z, int M, int v, double p2p)
{
    return (pp_params){.stages = Z, .microbatches = M, .chunks = v, .t_f = t->f, .t_b = t->b,
                       .t_w = t->w, .t_p2p = p2p};
}

static int build(const pp_params *p, pp_schedule sch, pp_plan *plan)
{
    char err[256] = "";
    int rc = pp_build(p, sch, plan, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "pp_build(%s, Z=%d, M=%d): %s\n", pp_schedule_name(sch), p->stages,
                p->microbatches, err);
    return rc;
}

static void test_names(void)
{
    for (int i = 0; i < PP_SCHEDULE_COUNT; i++)
        CU_ASSERT_EQUAL(pp_schedule_lookup(pp_schedule_name((pp_schedule)i)), i);
    CU_ASSERT_STRING_EQUAL(pp_schedule_name(PP_ZB_H1), "zb-h1");
    CU_ASSERT_STRING_EQUAL(pp_schedule_name(PP_ZB_H2), "zb-h2");
    CU_ASSERT_TRUE(pp_schedule_splits(PP_ZB_H1) && pp_schedule_splits(PP_ZB_H2));
    CU_ASSERT_FALSE(pp_schedule_splits(PP_1F1B) || pp_schedule_splits(PP_GPIPE) ||
                    pp_schedule_splits(PP_INTERLEAVED));
    CU_ASSERT_STRING_EQUAL(pp_schedule_name(PP_1F1B), "1f1b");
    CU_ASSERT_EQUAL(pp_schedule_lookup("zb"), -1);
    CU_ASSERT_EQUAL(pp_schedule_lookup(NULL), -1);
    /* zero-bubble names no table: the pipeline pass resolves it to zb-h1
     * or zb-h2, and pp_build refuses it. */
    CU_ASSERT_EQUAL(pp_schedule_lookup("zero-bubble"), PP_ZB_AUTO);
    CU_ASSERT_STRING_EQUAL(pp_schedule_name((pp_schedule)PP_ZB_AUTO), "zero-bubble");
    CU_ASSERT_TRUE(pp_schedule_splits((pp_schedule)PP_ZB_AUTO));
    double t[2] = {1, 1};
    pp_params p = {.stages = 2, .microbatches = 4, .chunks = 1, .t_f = t, .t_b = t, .t_w = t};
    pp_plan plan;
    char err[256] = "";
    CU_ASSERT_EQUAL(pp_build(&p, (pp_schedule)PP_ZB_AUTO, &plan, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown schedule"));
}

/* Index of (kind, model chunk k, microbatch m) in a [3][Z v][M] array. */
static size_t idx(int kind, int k, int m, int K, int M)
{
    return ((size_t)kind * (size_t)K + (size_t)k) * (size_t)M + (size_t)m;
}

/* Checks completeness, durations, dependencies and no overlap of `plan`
 * built from `p`; returns the number of violations. */
static int check_timeline(const pp_plan *plan, const pp_params *p)
{
    int Z = plan->stages, M = plan->microbatches, v = plan->chunks, K = Z * v;
    int kinds = pp_schedule_splits(plan->schedule) ? 3 : 2;
    double *end = malloc(3 * (size_t)K * (size_t)M * sizeof *end);
    int *count = calloc(3 * (size_t)K * (size_t)M, sizeof *count);
    int bad = 0;
    double step = 0.0;
    for (int s = 0; s < Z; s++) {
        const pp_stage_plan *st = &plan->stage[s];
        for (int i = 0; i < st->n_items; i++) {
            const pp_item *it = &st->items[i];
            if ((int)it->kind >= kinds || it->microbatch < 0 || it->microbatch >= M || it->chunk < 0 ||
                it->chunk >= v) {
                bad++;
                continue;
            }
            const double *t = it->kind == PP_F ? p->t_f : it->kind == PP_B ? p->t_b : p->t_w;
            bad += fabs(it->end - it->start - t[s] / v) > 1e-9;
            bad += i > 0 && it->start < st->items[i - 1].end - 1e-12; /* overlap on the stage */
            size_t j = idx(it->kind, it->chunk * Z + s, it->microbatch, K, M);
            count[j]++;
            end[j] = it->end;
            step = fmax(step, it->end);
        }
    }
    for (size_t j = 0; j < (size_t)kinds * K * M; j++)
        bad += count[j] != 1;
    bad += fabs(step - plan->step) > 1e-9;
    for (int s = 0; s < Z && bad == 0; s++) {
        for (int i = 0; i < plan->stage[s].n_items; i++) {
            const pp_item *it = &plan->stage[s].items[i];
            int k = it->chunk * Z + s, m = it->microbatch;
            int dk = it->kind == PP_F ? k - 1 : it->kind == PP_B && k < K - 1 ? k + 1 : k;
            int dkind = it->kind == PP_W ? PP_B : it->kind == PP_B && k < K - 1 ? PP_B : PP_F;
            if (it->kind == PP_F && k == 0)
                continue;
            double hop = dk % Z == s ? 0.0 : p->t_p2p;
            bad += it->start < end[idx(dkind, dk, m, K, M)] + hop - 1e-9;
        }
    }
    free(end);
    free(count);
    return bad;
}

/* Every schedule, every Z and M, uneven stage times and a hop: each item
 * once, with its time, after its inputs, one at a time per stage. */
static void test_timeline_valid(void)
{
    times t;
    for (int s = 0; s < MAXZ; s++) {
        t.f[s] = 1.0 + 0.1 * s;
        t.b[s] = 2.0 - 0.15 * s;
        t.w[s] = 0.7 + 0.05 * s;
    }
    for (int sch = 0; sch < PP_SCHEDULE_COUNT; sch++) {
        for (size_t zi = 0; zi < sizeof ZS / sizeof ZS[0]; zi++) {
            for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
                int Z = ZS[zi], M = MS[mi], v = sch == PP_INTERLEAVED ? 2 : 1;
                if (sch == PP_INTERLEAVED && M % Z != 0)
                    continue;
                for (int hop = 0; hop < 2; hop++) {
                    pp_params p = params(&t, Z, M, v, hop * 0.3);
                    pp_plan plan;
                    CU_ASSERT_EQUAL_FATAL(build(&p, (pp_schedule)sch, &plan), 0);
                    int bad = check_timeline(&plan, &p);
                    if (bad)
                        fprintf(stderr, "%s Z=%d M=%d hop=%d: %d violations\n",
                                pp_schedule_name((pp_schedule)sch), Z, M, hop, bad);
                    CU_ASSERT_EQUAL(bad, 0);
                    CU_ASSERT_TRUE(plan.bubble >= 0.0 && plan.bubble < 1.0);
                    CU_ASSERT_TRUE(plan.ideal <= plan.step + 1e-12);
                    pp_plan_free(&plan);
                }
            }
        }
    }
}

/* Uniform times, free hops: (Z - 1) / (M + Z - 1) for GPipe and 1F1B
 * (Huang et al.; Narayanan et al. 2021, section 2.2), step (M + Z - 1)
 * (t_f + t_b); stage s of 1F1B holds min(Z - s, M), GPipe M. */
static void test_gpipe_1f1b_closed_forms(void)
{
    times t = uniform(1.0, 2.0, 0.0);
    for (int sch = PP_GPIPE; sch <= PP_1F1B; sch++) {
        for (size_t zi = 0; zi < sizeof ZS / sizeof ZS[0]; zi++) {
            for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
                int Z = ZS[zi], M = MS[mi];
                pp_params p = params(&t, Z, M, 1, 0.0);
                pp_plan plan;
                CU_ASSERT_EQUAL_FATAL(build(&p, (pp_schedule)sch, &plan), 0);
                CU_ASSERT_DOUBLE_EQUAL(plan.bubble, (Z - 1.0) / (M + Z - 1.0), 1e-12);
                CU_ASSERT_DOUBLE_EQUAL(plan.step, (M + Z - 1.0) * 3.0, 1e-12);
                CU_ASSERT_DOUBLE_EQUAL(plan.ideal, M * 3.0, 1e-12);
                for (int s = 0; s < Z; s++) {
                    int want = sch == PP_GPIPE ? M : (Z - s < M ? Z - s : M);
                    CU_ASSERT_EQUAL(plan.stage[s].peak_held, want);
                }
                CU_ASSERT_TRUE(sch == PP_GPIPE ? plan.peak_held == M : plan.peak_held <= Z);
                pp_plan_free(&plan);
            }
        }
    }
}

/* Interleaved, v = 2 and 4: the bubble is (Z - 1) / (v M + Z - 1)
 * (Narayanan et al. SC'21, section 2.2.2), below 1F1B's; the activations
 * held per stage, in (microbatch, chunk) pairs. */
static void test_interleaved_bubble(void)
{
    const double ratios[] = {1.0, 2.0}; /* t_b / t_f */
    for (int r = 0; r < 2; r++) {
        times t = uniform(1.0, ratios[r], 0.0);
        for (int v = 2; v <= 4; v += 2) {
            for (size_t zi = 0; zi < sizeof ZS / sizeof ZS[0]; zi++) {
                for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
                    int Z = ZS[zi], M = MS[mi];
                    if (M % Z != 0)
                        continue;
                    pp_params p = params(&t, Z, M, v, 0.0);
                    pp_plan plan;
                    CU_ASSERT_EQUAL_FATAL(build(&p, PP_INTERLEAVED, &plan), 0);
                    double want = (Z - 1.0) / (v * M + Z - 1.0);
                    if (fabs(plan.bubble - want) > 1e-12)
                        fprintf(stderr, "interleaved Z=%d M=%d v=%d tb/tf=%g: bubble %.15g want %.15g\n",
                                Z, M, v, ratios[r], plan.bubble, want);
                    CU_ASSERT_DOUBLE_EQUAL(plan.bubble, want, 1e-12);
                    /* Megatron's warm-up 2 (Z - s - 1) + (v - 1) Z plus the
                     * first steady forward; all v M when M = Z. */
                    for (int s = 0; s < Z; s++) {
                        int held = M == Z ? v * M : 2 * (Z - s - 1) + (v - 1) * Z + 1;
                        CU_ASSERT_EQUAL(plan.stage[s].peak_held, held);
                    }
                    pp_plan_free(&plan);
                }
            }
        }
    }
}

/* Zero-bubble ZB-H1 with t_f = t_b = t_w at M = 2 Z: at most half of
 * 1F1B's bubble (1F1B's backward = B + W), no more than Z microbatches
 * held (F done and B not done, and F done and W not done) on any stage. */
static void test_zero_bubble(void)
{
    times zb = uniform(1.0, 1.0, 1.0), whole = uniform(1.0, 2.0, 0.0);
    /* Also with transfers of 8% of a forward: a W must not fill a wait
     * much shorter than itself (the step would grow by the difference). */
    for (size_t k = 0; k < 2 * sizeof ZS / sizeof ZS[0]; k++) {
        int Z = ZS[k % (sizeof ZS / sizeof ZS[0])], M = 2 * Z;
        double hop = k < sizeof ZS / sizeof ZS[0] ? 0.0 : 0.08;
        pp_params pz = params(&zb, Z, M, 1, hop), p1 = params(&whole, Z, M, 1, hop);
        pp_plan a, b;
        CU_ASSERT_EQUAL_FATAL(build(&pz, PP_ZB_H1, &a), 0);
        CU_ASSERT_EQUAL_FATAL(build(&p1, PP_1F1B, &b), 0);
        CU_ASSERT_TRUE(a.bubble <= 0.5 * b.bubble + 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(a.ideal, b.ideal, 1e-12);
        CU_ASSERT_TRUE(a.step <= b.step);
        CU_ASSERT_TRUE(a.peak_held <= Z);
        CU_ASSERT_TRUE(a.peak_held_w <= Z);
        pp_plan_free(&a);
        pp_plan_free(&b);
    }
    /* Memory bound over every Z and M. */
    for (size_t zi = 0; zi < sizeof ZS / sizeof ZS[0]; zi++) {
        for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
            pp_params p = params(&zb, ZS[zi], MS[mi], 1, 0.0);
            pp_plan a;
            CU_ASSERT_EQUAL_FATAL(build(&p, PP_ZB_H1, &a), 0);
            CU_ASSERT_TRUE(a.peak_held_w <= ZS[zi]);
            CU_ASSERT_TRUE(a.peak_held <= ZS[zi]);
            pp_plan_free(&a);
        }
    }
}

/* ZB-H1's closed form (Qi et al., section 3.1): with M >= Z and t_w <=
 * t_b, the step is M (t_f + t_b + t_w) + (Z - 1) (t_f + t_b - t_w): 1F1B
 * with the same work idles (Z - 1) (t_f + t_b + t_w), and the deferred W
 * passes fill 2 (Z - 1) t_w of that. */
static void test_zero_bubble_closed_form(void)
{
    const double tb[] = {1.0, 1.5, 2.0}, tw[] = {1.0, 0.5, 1.0};
    for (int c = 0; c < 3; c++) {
        times t = uniform(1.0, tb[c], tw[c]);
        for (size_t zi = 0; zi < sizeof ZS / sizeof ZS[0]; zi++) {
            for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
                int Z = ZS[zi], M = MS[mi];
                if (M < Z)
                    continue;
                pp_params p = params(&t, Z, M, 1, 0.0);
                pp_plan plan;
                CU_ASSERT_EQUAL_FATAL(build(&p, PP_ZB_H1, &plan), 0);
                double want = M * (1.0 + tb[c] + tw[c]) + (Z - 1) * (1.0 + tb[c] - tw[c]);
                if (fabs(plan.step - want) > 1e-9)
                    fprintf(stderr, "zero-bubble Z=%d M=%d t_b=%g t_w=%g: step %g want %g\n", Z, M,
                            tb[c], tw[c], plan.step, want);
                CU_ASSERT_DOUBLE_EQUAL(plan.step, want, 1e-9);
                pp_plan_free(&plan);
            }
        }
    }
}

/* ZB-H2 (Qi et al., section 3.1, figure 4).  Stage s runs 2 (Z - s - 1)
 * warm-up forwards and then one more before its first B, so stage s holds
 * min(2 (Z - s) - 1, M) microbatches (F done, B not done), and no stage
 * more than 2Z - 1 awaiting W.  Within a step that ends with the update
 * the last stage cannot start before (Z - 1) forwards and hops, so the step
 * is at least M (t_f + t_b + t_w) + (Z - 1) (t_f + hop); with uniform
 * times, M >= 2Z and t_b <= 2 t_w (the W passes of a stage cover the
 * cooldown's waits for B) ZB-H2 reaches it, where ZB-H1 (t_b > t_w) does
 * not.  With uniform times it is never slower than ZB-H1. */
static void test_zb_h2(void)
{
    const double tb[] = {1.0, 2.0, 1.0, 1.2}, tw[] = {1.0, 1.0, 0.5, 1.3};
    for (int c = 0; c < 4; c++) {
        times t = uniform(1.0, tb[c], tw[c]);
        for (size_t zi = 0; zi < sizeof ZS / sizeof ZS[0]; zi++) {
            for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
                int Z = ZS[zi], M = MS[mi];
                for (int hop = 0; hop < 2; hop++) {
                    pp_params p = params(&t, Z, M, 1, hop * 0.08);
                    pp_plan h1, h2;
                    CU_ASSERT_EQUAL_FATAL(build(&p, PP_ZB_H1, &h1), 0);
                    CU_ASSERT_EQUAL_FATAL(build(&p, PP_ZB_H2, &h2), 0);
                    double bound = M * (1.0 + tb[c] + tw[c]) + (Z - 1) * (1.0 + hop * 0.08);
                    CU_ASSERT_TRUE(h2.step >= bound - 1e-9);
                    CU_ASSERT_TRUE(h2.step <= h1.step + 1e-9);
                    if (hop == 0 && M >= 2 * Z) {
                        if (fabs(h2.step - bound) > 1e-9)
                            fprintf(stderr, "zb-h2 Z=%d M=%d t_b=%g t_w=%g: step %g bound %g\n", Z, M, tb[c],
                                    tw[c], h2.step, bound);
                        CU_ASSERT_DOUBLE_EQUAL(h2.step, bound, 1e-9);
                    }
                    for (int s = 0; s < Z; s++) {
                        int want = 2 * (Z - s) - 1 < M ? 2 * (Z - s) - 1 : M;
                        CU_ASSERT_EQUAL(h2.stage[s].peak_held, want);
                    }
                    CU_ASSERT_TRUE(h2.peak_held_w <= 2 * Z - 1);
                    pp_plan_free(&h1);
                    pp_plan_free(&h2);
                }
            }
        }
    }
    /* t_b = 2 t_w, Z = 4, M = 8: ZB-H1 idles (Z - 1) (t_f + t_b - t_w) =
     * 6 per stage (step 38), ZB-H2 (Z - 1) t_f = 3 (step 35). */
    times t = uniform(1.0, 2.0, 1.0);
    pp_params p = params(&t, 4, 8, 1, 0.0);
    pp_plan h1, h2;
    CU_ASSERT_EQUAL_FATAL(build(&p, PP_ZB_H1, &h1), 0);
    CU_ASSERT_EQUAL_FATAL(build(&p, PP_ZB_H2, &h2), 0);
    CU_ASSERT_DOUBLE_EQUAL(h1.step, 38.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(h2.step, 35.0, 1e-12);
    CU_ASSERT_EQUAL(h1.peak_held_w, 4);
    CU_ASSERT_EQUAL(h2.peak_held_w, 7);
    pp_plan_free(&h1);
    pp_plan_free(&h2);
}

/* Z = 2, M = 1 by hand: the microbatch crosses the link once forward and
 * once backward, so step = t_f0 + hop + t_f1 + t_b1 + hop + t_b0 (+ t_w0,
 * the last W, for zero-bubble). */
static void test_hop_on_critical_path(void)
{
    times t = {.f = {1.0, 1.5}, .b = {2.0, 2.5}, .w = {0.5, 0.25}};
    double hop = 0.375, want = 1.0 + hop + 1.5 + 2.5 + hop + 2.0;
    for (int sch = 0; sch < PP_SCHEDULE_COUNT; sch++) {
        if (sch == PP_INTERLEAVED)
            continue;
        pp_params p = params(&t, 2, 1, 1, hop);
        pp_plan plan;
        CU_ASSERT_EQUAL_FATAL(build(&p, (pp_schedule)sch, &plan), 0);
        CU_ASSERT_DOUBLE_EQUAL(plan.step, want + (pp_schedule_splits((pp_schedule)sch) ? 0.5 : 0.0), 1e-12);
        pp_plan_free(&plan);
    }
    /* Interleaved, Z = 2, v = 2, M = 2 (= Z, so all forwards then all
     * backwards), per chunk t_f = 1, t_b = 2, hop h; model chunks 0..3 on
     * devices 0, 1, 0, 1.  By hand: device 1 ends its forwards at 5 + 3h
     * (F1 of chunk 3), runs B0 and B1 of chunk 3 until 9 + 3h; B0 of
     * chunk 2 on device 0 runs [7 + 4h, 9 + 4h], B1 [9 + 4h, 11 + 4h];
     * chunk 1: B0 [9 + 5h, 11 + 5h], B1 [11 + 5h, 13 + 5h]; chunk 0: B0
     * [11 + 6h, 13 + 6h], B1 [13 + 6h, 15 + 6h]. */
    times u = uniform(2.0, 4.0, 0.0);
    pp_params pi = params(&u, 2, 2, 2, hop);
    pp_plan plan;
    CU_ASSERT_EQUAL_FATAL(build(&pi, PP_INTERLEAVED, &plan), 0);
    CU_ASSERT_EQUAL(check_timeline(&plan, &pi), 0);
    CU_ASSERT_DOUBLE_EQUAL(plan.step, 15.0 + 6.0 * hop, 1e-12);
    pp_plan_free(&plan);
}

/* Builds with `p` and `sch`, expecting -1 and a message containing `needle`. */
static void expect_error(const pp_params *p, pp_schedule sch, const char *needle)
{
    pp_plan plan;
    char err[256] = "";
    CU_ASSERT_EQUAL(pp_build(p, sch, &plan, err, sizeof err), -1);
    CU_ASSERT_PTR_NULL(plan.stage);
    if (!strstr(err, needle))
        fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void test_bad_params(void)
{
    times t = uniform(1.0, 2.0, 1.0);
    pp_params p = params(&t, 0, 4, 1, 0.0);
    expect_error(&p, PP_1F1B, "0 stages");
    p = params(&t, 4, 0, 1, 0.0);
    expect_error(&p, PP_GPIPE, "0 microbatches");
    p = params(&t, 4, 8, 1, 0.0);
    expect_error(&p, PP_INTERLEAVED, "at least 2 chunks");
    p = params(&t, 4, 6, 2, 0.0);
    expect_error(&p, PP_INTERLEAVED, "multiple of the stages");
    p = params(&t, 4, 8, 2, 0.0);
    expect_error(&p, PP_1F1B, "1 chunk per stage");
    p = params(&t, 4, 8, 1, -1.0);
    expect_error(&p, PP_1F1B, "t_p2p");
    p = params(&t, 4, 8, 1, NAN);
    expect_error(&p, PP_1F1B, "t_p2p");
    t.b[2] = -0.5;
    p = params(&t, 4, 8, 1, 0.0);
    expect_error(&p, PP_GPIPE, "t_b[2]");
    t = uniform(1.0, 2.0, 1.0);
    t.f[3] = INFINITY;
    p = params(&t, 4, 8, 1, 0.0);
    expect_error(&p, PP_1F1B, "t_f[3]");
    t = uniform(1.0, 2.0, 1.0);
    p = params(&t, 4, 8, 1, 0.0);
    p.t_w = NULL;
    expect_error(&p, PP_ZB_H1, "t_w is missing");
    expect_error(&p, PP_ZB_H2, "t_w is missing");
    p = params(&t, 4, 8, 1, 0.0);
    expect_error(&p, (pp_schedule)7, "unknown schedule");
    p = params(&t, 4, 1 << 20, 1, 0.0);
    expect_error(&p, PP_1F1B, "items");
    /* Without t_w the other schedules still build. */
    p = params(&t, 4, 8, 1, 0.0);
    p.t_w = NULL;
    pp_plan plan;
    CU_ASSERT_EQUAL(pp_build(&p, PP_1F1B, &plan, NULL, 0), 0);
    pp_plan_free(&plan);
}

/* Prints `plan`'s table into a string (caller frees). */
static char *table_text(const pp_plan *plan)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pp_print_table(f, plan);
    fclose(f);
    return buf;
}


/* The core-idle bubble (pp_core_bubble) of Z = 4 stages sharing CPUs,
 * worked out by hand for GPipe, M = 2, F = B = 1, free hops, stage s on
 * CPU s mod 2: F0 F1 cross the stages in slots [0, 4] with the two CPUs
 * each running one of two stages at a time, stage 3's F1 ends at 5, then
 * the backwards run down the stages, one CPU at a time: B0 B1 of stage 3
 * [5, 7], of stage 2 [6, 8], of stage 1 [7, 9], of stage 0 [8, 10].  Span
 * 10, work 16: 1 - 16 / (2 x 10) = 20% idle CPU time, where the per-stage
 * bubble is 1 - 16 / (4 x 10) = 60%, GPipe's (Z - 1) / (M + Z - 1).  On
 * one CPU nothing waits (0%, span 16); with a CPU per stage it is the
 * plan's bubble and step, for every schedule. */
static void test_core_bubble(void)
{
    times t = uniform(1.0, 1.0, 1.0), whole = uniform(1.0, 2.0, 0.0);
    pp_params p = params(&t, 4, 2, 1, 0.0);
    pp_plan plan;
    double span = 0;
    CU_ASSERT_EQUAL_FATAL(build(&p, PP_GPIPE, &plan), 0);
    CU_ASSERT_DOUBLE_EQUAL(pp_core_bubble(&p, &plan, 2, &span), 0.2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(span, 10.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(pp_core_bubble(&p, &plan, 1, &span), 0.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(span, 16.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(plan.bubble, 0.6, 1e-12);
    CU_ASSERT_EQUAL(pp_core_bubble(&p, &plan, 0, &span), -1);
    pp_plan_free(&plan);
    for (int sch = 0; sch < PP_SCHEDULE_COUNT; sch++) {
        pp_params q = params(pp_schedule_splits(sch) ? &t : &whole, 4, 8, sch == PP_INTERLEAVED ? 2 : 1, 0.1);
        CU_ASSERT_EQUAL_FATAL(build(&q, sch, &plan), 0);
        for (int cores = 4; cores <= 8; cores += 4) {
            CU_ASSERT_DOUBLE_EQUAL(pp_core_bubble(&q, &plan, cores, &span), plan.bubble, 1e-12);
            CU_ASSERT_DOUBLE_EQUAL(span, plan.step, 1e-12);
        }
        /* Fewer CPUs: no CPU idles more than a stage of its own would. */
        double b2 = pp_core_bubble(&q, &plan, 2, NULL);
        CU_ASSERT_TRUE(b2 >= 0 && b2 <= plan.bubble);
        pp_plan_free(&plan);
    }
}

/* 1F1B, Z = 4, M = 8 in unit slots: stage 0 runs its 3 warm-up forwards
 * and a fourth, waits for the first backward to come down the pipeline
 * (B0 reaches it after F0 went through 4 stages and back through 3), then
 * alternates, then drains; the last stage starts after 3 slots and
 * alternates F, B. */
static void test_table_1f1b(void)
{
    times t = uniform(1.0, 2.0, 0.0);
    pp_params p = params(&t, 4, 8, 1, 0.0);
    pp_plan plan;
    CU_ASSERT_EQUAL_FATAL(build(&p, PP_1F1B, &plan), 0);
    char *text = table_text(&plan);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "stage 0 | F0 F1 F2 F3 .  .  .  B0 F4 B1 F5 B2 F6 B3 F7 "
                                        "B4 .  B5 .  B6 .  B7\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "stage 3 | .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 "
                                        "F6 B6 F7 B7 .  .  .\n"));
    /* The summary line has the real times: t_f = 1, t_b = 2. */
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "step 33 s, ideal 24 s, bubble 27.3%, peak held 4"));
    free(text);
    pp_plan_free(&plan);

    /* Zero-bubble: the last stage runs F and B back to back, putting off
     * its first Z - 1 W passes (it holds Z microbatches, as 1F1B's first
     * stage), and the first stage runs each W right after its B. */
    t = uniform(1.0, 1.0, 1.0);
    CU_ASSERT_EQUAL_FATAL(build(&p, PP_ZB_H1, &plan), 0);
    text = table_text(&plan);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "stage 0 | F0 F1 F2 F3 .  .  .  B0 W0 F4 B1 W1 F5 B2 W2 "
                                        "F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "stage 3 | .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 "
                                        "F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "bubble 11.1%, peak held 4 (awaiting W: 4)"));
    free(text);
    pp_plan_free(&plan);

    /* ZB-H2: the first stage runs 2Z - 1 = 7 forwards before B0 arrives,
     * where ZB-H1 idles 3 slots; the last stage starts 3 slots late and
     * runs F and B back to back until its warm-up is done. */
    CU_ASSERT_EQUAL_FATAL(build(&p, PP_ZB_H2, &plan), 0);
    text = table_text(&plan);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "zb-h2, Z=4 stages, M=8 microbatches"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "stage 0 | F0 F1 F2 F3 F4 F5 F6 B0 W0 F7 B1 "));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "stage 3 | .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 "));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "peak held 7 (awaiting W: 7)"));
    free(text);
    pp_plan_free(&plan);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"schedule names", test_names},
        {"every item once, after its inputs, no overlap", test_timeline_valid},
        {"gpipe and 1f1b bubble, step and memory", test_gpipe_1f1b_closed_forms},
        {"interleaved bubble", test_interleaved_bubble},
        {"zero-bubble halves 1f1b's bubble at M = 2Z", test_zero_bubble},
        {"zero-bubble step, ZB-H1 closed form", test_zero_bubble_closed_form},
        {"zb-h2: warm-up, memory, the flushed step's bound", test_zb_h2},
        {"hops on the critical path", test_hop_on_critical_path},
        {"bad parameters are errors", test_bad_params},
        {"1f1b, zero-bubble and zb-h2 tables, Z=4 M=8", test_table_1f1b},
        {"core-idle bubble of stages sharing CPUs", test_core_bubble},
    };
    einc_add_suite("pipeline schedules", tests, (int)(sizeof tests / sizeof tests[0]));
}
