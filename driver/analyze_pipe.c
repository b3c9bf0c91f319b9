/*
 * analyze_pipe.c - `einc analyze --stages Z`: what pipelining the
 * program's repeat block over Z stages would give (analyze_pipe.h).
 *
 * One stage is the program's plan on its mesh holding |L| / Z of the
 * layers; the first stage also runs what comes before the block (the
 * embedding), the last what comes after (head and loss).  For each
 * microbatch count M the program is priced at batch B / M, its ops split
 * into per-layer F, B and W (passes/costmodel/pipe_work.c), and
 * pipe_price (passes/costmodel/pipe_price.c, shared with the cost pass of
 * a compiled pipelined program) puts the stage times through the
 * schedules' simulation (passes/costmodel/pipeline.h), which gives
 * the pipeline's makespan, its bubble and the microbatches each stage
 * holds.  After the last microbatch each stage reduces its accumulated
 * weight gradients and updates its params: that is added, not overlapped
 * (Megatron-LM's default).  Memory per stage: its share of the params, the
 * accumulated gradients and the optimizer state, plus the activations of
 * the microbatches it holds (seed 000: 1F1B keeps at most Z, GPipe M).
 * Each row is priced as the compiler's default compiles that pair: with
 * zb-h1's and zb-h2's split where it applies (pipe_work_of's `split`), and with
 * FSDP gradients reduced per microbatch when their deferred sums would
 * not fit the HBM (fall_back, the order of pass_pipeline_grad_fallback).
 *
 * The bubble seed 000 and Narayanan et al. (SC'21) derive for uniform
 * stages, (Z - 1) / (v M + Z - 1) of the step, is printed beside the
 * simulated one: they differ when the first and last stages carry the
 * embedding and the head, or when the transfers are not free.
 */
#include "analyze_pipe.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "pipe_work.h"
#include "pipeline_grad.h"

/* plan_compile_quiet's closure: the program as written. */
typedef struct as_written {
    analyze_compile_fn compile;
    void *ctx;
} as_written;

static ir_module *call_as_written(void *ctx, diag_ctx *d)
{
    const as_written *c = ctx;
    return c->compile(c->ctx, NULL, IR_REMAT_NONE, d);
}

/* The module's work with the batch dim at `size` (restored after), as a
 * schedule that splits the backward runs it (`split`) or not; the ops
 * are costed again only with `annotate`. */
static int work_at(ir_module *m, const analyze_table *t, int64_t size, bool annotate, bool split, pipe_work *w,
                   char *err, size_t errlen)
{
    int64_t keep = m->dims[t->batch].size;
    m->dims[t->batch].size = size;
    if (annotate)
        cost_annotate_ops(m, t->hw);
    int rc = pipe_work_of(m, split, w, err, errlen);
    m->dims[t->batch].size = keep;
    return rc;
}

/* The repeat block's dim (the first forward loop's), or -1. */
static int layer_dim(const ir_module *m)
{
    for (const ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_LOOPBEGIN && !op->u.loop.reverse)
            return op->u.loop.dim;
    return -1;
}

/* Row `row` re-priced as the compiler's default (--grad-sync=auto,
 * passes/pipeline_choose.c) compiles a pair whose stage exceeds the HBM
 * with every stacked gradient deferred: the FSDP gradients kept per
 * microbatch one at a time in pass_pipeline_grad_fallback's order until
 * the stage fits, all of them when none does; their names, the first
 * *nkept of `names` (m's strings, valid while m is), 0 when none.  m's
 * ops are costed at batch `size`.  Returns pipe_price's code. */
static int fall_back(ir_module *m, const analyze_table *t, const analyze_pipe_opts *o, int64_t size, int s, int mb,
                     double *scratch, pp_params *used, analyze_pipe_row *row, const char **names, int *nkept,
                     char *err, size_t errlen)
{
    *nkept = 0;
    double hbm = t->hw->hbm_bytes;
    if (hbm <= 0 || row->memory <= hbm)
        return 0;
    int nn = pass_pipeline_grad_fallback(m, layer_dim(m), names, PIPE_GRAD_FALLBACK_MAX), rc = 0;
    for (int i = 1; rc == 0 && i <= nn; i++) {
        pipe_work w;
        m->pipe.grad_mb = names;
        m->pipe.ngrad_mb = i;
        rc = work_at(m, t, size, false, pp_schedule_splits((pp_schedule)s), &w, err, errlen);
        if (rc == 0)
            rc = pipe_price_chunks(&w, t->hw, o->stages, w.layers / o->stages, mb, (pp_schedule)s, o->chunks, o->dcn,
                                   scratch, used, row, err, errlen);
        if (rc == 0)
            *nkept = i;
        if (rc == 0 && row->memory <= hbm)
            break;
    }
    m->pipe.grad_mb = NULL;
    m->pipe.ngrad_mb = 0;
    return rc;
}

/* names[0..n) one after the other, each ended by its NUL, in a block of
 * their own (malloc; NULL when n is 0 or memory runs out, *oom then
 * set). */
static char *copy_names(const char *const *names, int n, bool *oom)
{
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += strlen(names[i]) + 1;
    char *s = n ? malloc(len) : NULL;
    *oom = n && !s;
    for (size_t at = 0, i = 0; s && i < (size_t)n; i++) {
        size_t k = strlen(names[i]) + 1;
        memcpy(s + at, names[i], k);
        at += k;
    }
    return s;
}

int analyze_pipe_run(analyze_pipe *p, const analyze_table *t, const analyze_pipe_opts *opts,
                     analyze_compile_fn compile, void *ctx, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->opts = *opts;
    p->best = -1;
    int z = opts->stages;
    if (t->batch < 0) {
        snprintf(err, errlen, "--stages needs a batch dim to split into microbatches; the program's inputs have none");
        return -1;
    }
    as_written aw = {compile, ctx};
    char why[200];
    ir_module *m = plan_compile_quiet(call_as_written, &aw, why, sizeof why);
    if (!m) {
        snprintf(err, errlen, "the program does not compile: %s", why);
        return -1;
    }
    pipe_work full;
    int rc = pipe_work_of(m, false, &full, err, errlen);
    p->layers = full.layers;
    p->unpipelined = m->totals.step_time;
    p->update = full.update_stacked + full.update_other;
    /* Each stage reduces its own layers' share of the stacked gradients
     * once per step (pipe_work.sync_stacked), the stages side by side. */
    p->grad_sync = full.sync_pre + full.sync_post + full.sync_stacked / z;
    p->stage_sums = pipe_work_zsums_time(&full, t->hw, z, opts->dcn);
    if (rc == 0 && full.layers % z != 0) {
        snprintf(err, errlen, "%lld layers do not split into %d stages of equal size",
                 (long long)full.layers, z);
        rc = -1;
    }
    p->hop = pipe_work_hop(t->hw, full.carry_bytes, opts->dcn);
    int64_t parts = analyze_batch_parts(m, t->batch);
    if (rc == 0 && opts->microbatches > 0 && t->batch_size % ((int64_t)opts->microbatches * parts) != 0) {
        snprintf(err, errlen, "%d microbatches do not divide batch %s = %lld into multiples of its %lld shards",
                 opts->microbatches, t->batch_name, (long long)t->batch_size, (long long)parts);
        rc = -1;
    }
    p->arrays = rc == 0 ? malloc(3 * (size_t)z * sizeof *p->arrays) : NULL;
    double *scratch = rc == 0 ? malloc(3 * (size_t)z * sizeof *scratch) : NULL;
    if (rc == 0 && (!p->arrays || !scratch)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    /* The schedules priced at each M: --schedule's, or every one; for
     * --schedule=zero-bubble zb-h2, then zb-h1 when zb-h2's stage does not
     * fit the HBM, as the pipeline pass resolves it
     * (pass_pipeline_resolve_zb): one row per M. */
    bool zb_auto = opts->schedule == PP_ZB_AUTO;
    int cands[PP_SCHEDULE_COUNT], ncand = 0;
    if (zb_auto) {
        cands[ncand++] = PP_ZB_H2;
        cands[ncand++] = PP_ZB_H1;
    } else {
        for (int s = 0; s < PP_SCHEDULE_COUNT; s++)
            if (opts->schedule < 0 || s == opts->schedule)
                cands[ncand++] = s;
    }
    for (int mb = 1; rc == 0 && mb <= 64 && p->n < ANALYZE_PIPE_MAX; mb *= 2) {
        if (opts->microbatches > 0 ? mb != opts->microbatches : t->batch_size % ((int64_t)mb * parts) != 0)
            continue;
        /* [1]: as zb-h1's and zb-h2's split backward runs it (pipe_work_of). */
        pipe_work w[2];
        int64_t size = t->batch_size / mb;
        rc = work_at(m, t, size, true, false, &w[0], err, errlen);
        if (rc == 0)
            rc = work_at(m, t, size, false, true, &w[1], err, errlen);
        double h2_memory = 0;
        for (int k = 0; rc == 0 && k < ncand && p->n < ANALYZE_PIPE_MAX; k++) {
            int s = cands[k];
            analyze_pipe_row *row = &p->rows[p->n];
            pp_params used;
            int r = pipe_price_chunks(&w[pp_schedule_splits((pp_schedule)s)], t->hw, z, p->layers / z, mb,
                                      (pp_schedule)s, opts->chunks, opts->dcn, scratch, &used, row, err, errlen);
            const char *names[PIPE_GRAD_FALLBACK_MAX];
            int nkept = 0;
            bool oom = false;
            if (r == 0)
                r = fall_back(m, t, opts, size, s, mb, scratch, &used, row, names, &nkept, err, errlen);
            if (r == 0 && zb_auto && s == PP_ZB_H2) {
                h2_memory = row->memory;
                if (t->hw->hbm_bytes > 0 && row->memory > t->hw->hbm_bytes)
                    continue; /* zb-h1 instead */
            }
            /* A copy: the names are m's, freed below. */
            if (r == 0 && (p->kept[p->n] = copy_names(names, nkept, &oom), p->nkept[p->n] = nkept, oom)) {
                snprintf(err, errlen, "out of memory");
                r = -1;
            }
            if (r < 0)
                rc = -1;
            if (r != 0)
                continue;
            p->zb_h2_memory[p->n] = zb_auto ? h2_memory : 0;
            if (p->best < 0 || row->step < p->rows[p->best].step) {
                p->best = p->n;
                memcpy(p->arrays, scratch, 3 * (size_t)z * sizeof *scratch);
                p->best_params = used;
                p->best_params.t_f = p->arrays;
                p->best_params.t_b = p->arrays + z;
                p->best_params.t_w = p->arrays + 2 * z;
            }
            p->n++;
            if (zb_auto)
                break;
        }
    }
    if (rc == 0 && p->n == 0) {
        snprintf(err, errlen, "no schedule applies (interleaved needs a multiple of %d layers per stage and "
                 "a multiple of %d microbatches)", opts->chunks > 1 ? opts->chunks : 2, z);
        rc = -1;
    }
    free(scratch);
    ir_module_free(m);
    return rc;
}

void analyze_pipe_free(analyze_pipe *p)
{
    free(p->arrays);
    p->arrays = NULL;
    for (int i = 0; i < ANALYZE_PIPE_MAX; i++) {
        free(p->kept[i]);
        p->kept[i] = NULL;
        p->nkept[i] = 0;
    }
}

void analyze_pipe_print(FILE *out, const analyze_pipe *p, const analyze_table *t)
{
    int z = p->opts.stages;
    int64_t chips = ir_mesh_devices(&t->mesh) * z;
    fprintf(out, "\npipelined over %d stages of %lld layers (%s between stages), one stage = the plan "
            "above: %lld chips in all\n", z, (long long)(p->layers / z), p->opts.dcn ? "DCN" : "ICI",
            (long long)chips);
    fprintf(out, "one stage-to-stage transfer at the full batch %.4g us; the step on one stage, unpipelined, "
            "%.4g us\n", p->hop * 1e6, p->unpipelined * 1e6);
    fprintf(out, "  %-12s %4s %12s %12s %12s %8s %9s %5s %12s\n", "schedule", "M", "step", "pipeline",
            "sync+update", "bubble", "(Z-1)/..", "held", "memory/stage");
    for (int i = 0; i < p->n; i++) {
        const analyze_pipe_row *r = &p->rows[i];
        char formula[16] = "-";
        if (r->bubble_formula >= 0)
            snprintf(formula, sizeof formula, "%.1f%%", 100 * r->bubble_formula);
        fprintf(out, "  %-12s %4d %9.4g us %9.4g us %9.4g us %7.1f%% %9s %5.3g %8.2f GiB%s",
                pp_schedule_name(r->schedule), r->microbatches, r->step * 1e6, r->pipeline * 1e6, r->sync * 1e6,
                100 * r->bubble, formula, r->held, r->memory / 1073741824.0,
                r->memory > t->hw->hbm_bytes ? " (does not fit)" : "");
        const char *g = p->kept[i];
        for (int k = 0; k < p->nkept[i]; g += strlen(g) + 1, k++)
            fprintf(out, "%s%s", k ? "," : "; per microbatch: ", g);
        fprintf(out, "\n");
    }
    for (int i = 0; i < p->n; i++)
        if (p->zb_h2_memory[i] > 0)
            fprintf(out, "schedule zero-bubble at M = %d -> %s (zb-h2 needs %.4g GiB per stage, %s %s's %.4g GiB)\n",
                    p->rows[i].microbatches, pp_schedule_name(p->rows[i].schedule), p->zb_h2_memory[i] / 1073741824.0,
                    p->rows[i].schedule == PP_ZB_H2 ? "within" : "above", t->hw->name,
                    t->hw->hbm_bytes / 1073741824.0);
    if (p->best < 0)
        return;
    const analyze_pipe_row *b = &p->rows[p->best];
    fprintf(out, "fastest: %s with %d microbatch%s", pp_schedule_name(b->schedule), b->microbatches,
            b->microbatches == 1 ? "" : "es");
    /* A chart wider than a screen shows nothing; its shape is the same at 2 Z. */
    if (b->microbatches > 2 * z) {
        fprintf(out, " (add --microbatches=%d --schedule=%s for its chart)\n", 2 * z, pp_schedule_name(b->schedule));
        return;
    }
    fprintf(out, "; its schedule (time slots of equal work):\n");
    pp_plan plan;
    char err[200];
    if (pp_build(&p->best_params, b->schedule, &plan, err, sizeof err) == 0) {
        pp_print_table(out, &plan);
        pp_plan_free(&plan);
    }
}

cJSON *analyze_pipe_json(const analyze_pipe *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "stages", p->opts.stages);
    cJSON_AddNumberToObject(o, "layers", (double)p->layers);
    cJSON_AddStringToObject(o, "link", p->opts.dcn ? "dcn" : "ici");
    cJSON_AddNumberToObject(o, "transfer_time", p->hop);
    cJSON_AddNumberToObject(o, "unpipelined_step_time", p->unpipelined);
    cJSON_AddNumberToObject(o, "update_time", p->update);
    cJSON_AddNumberToObject(o, "grad_sync_time", p->grad_sync);
    cJSON_AddNumberToObject(o, "stage_sum_time", p->stage_sums);
    cJSON *rows = cJSON_AddArrayToObject(o, "schedules");
    for (int i = 0; i < p->n; i++) {
        const analyze_pipe_row *r = &p->rows[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "schedule", pp_schedule_name(r->schedule));
        cJSON_AddNumberToObject(j, "microbatches", r->microbatches);
        cJSON_AddNumberToObject(j, "step_time", r->step);
        cJSON_AddNumberToObject(j, "pipeline_time", r->pipeline);
        cJSON_AddNumberToObject(j, "sync_time", r->sync);
        cJSON_AddNumberToObject(j, "bubble", r->bubble);
        if (r->bubble_formula >= 0)
            cJSON_AddNumberToObject(j, "bubble_formula", r->bubble_formula);
        else
            cJSON_AddNullToObject(j, "bubble_formula");
        cJSON_AddNumberToObject(j, "held_microbatches", r->held);
        cJSON_AddNumberToObject(j, "memory", r->memory);
        if (p->zb_h2_memory[i] > 0) { /* --schedule=zero-bubble, resolved to "schedule" */
            cJSON_AddStringToObject(j, "resolved_from", "zero-bubble");
            cJSON_AddNumberToObject(j, "zb_h2_memory", p->zb_h2_memory[i]);
        }
        /* The stacked gradients the compiler's default keeps per microbatch at this pair. */
        cJSON *kept = cJSON_AddArrayToObject(j, "grad_per_microbatch");
        const char *g = p->kept[i];
        for (int k = 0; k < p->nkept[i]; g += strlen(g) + 1, k++)
            cJSON_AddItemToArray(kept, cJSON_CreateString(g));
        cJSON_AddItemToArray(rows, j);
    }
    if (p->best >= 0)
        cJSON_AddStringToObject(o, "fastest", pp_schedule_name(p->rows[p->best].schedule));
    cJSON_AddNumberToObject(o, "fastest_microbatches", p->best >= 0 ? p->rows[p->best].microbatches : 0);
    return o;
}
