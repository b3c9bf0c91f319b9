/*
 * plan_print.c - the auto-sharding table (plan.h): each candidate's label
 * (seed 000's family, or what its plan turned out to be), the text table a
 * reader of seed 000 recognises and the JSON interface fixed by
 * docs/propagation.md ("Auto-sharding").
 */
#include "plan.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double gib = 1024.0 * 1024.0 * 1024.0; /* bytes, for the report */
static const char *family_name[PLAN_NFAMILIES] = {"DP", "FSDP", "TP", "FSDP+TP", "DP+TP"};

/* ---- labels ---- */

const char *plan_family_name(plan_family f)
{
    return f >= 0 && f < PLAN_NFAMILIES ? family_name[f] : "?";
}

/* plan_row_label of a row whose layers are pipelined over its first axis. */
static const char *pp_label(const char *base)
{
    static const char *const names[][2] = {
        {"DP", "PP+DP"}, {"FSDP", "PP+FSDP"}, {"TP", "PP+TP"}, {"FSDP+TP", "PP+FSDP+TP"},
        {"DP+TP", "PP+DP+TP"}, {"TP-D", "PP+TP-D"}, {"2D-WS", "PP+2D-WS"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i][0], base) == 0)
            return names[i][1];
    return "PP";
}

/* plan_row_label, or with `as_planned` false the family whose storage
 * the row wrote (JSON "storage"). */
static const char *row_name(const plan_row *r, bool as_planned)
{
    if (r->pp) {
        if (r->naxes == 1)
            return "PP";
        plan_row inner = *r;
        inner.pp = false;
        return pp_label(row_name(&inner, as_planned));
    }
    /* With the weights in place (served, or trained where moving
     * activations is cheaper), FSDP's storage is model parallelism over
     * the model dim (TP-D) or over it and the heads or hidden dim, seed
     * 002's 2D weight-stationary sharding (question 7, appendix B).  A
     * row whose storage is an earlier row's (same_as: no param dim divides
     * its data axes) shards no weight and keeps its family's name. */
    if (as_planned && r->ok && !r->gathers_params && r->same_as < 0) {
        if (r->family == PLAN_FSDP)
            return "TP-D";
        if (r->family == PLAN_FSDP_TP)
            return "2D-WS";
    }
    return plan_family_name(r->family);
}

const char *plan_row_label(const plan_row *r)
{
    return row_name(r, true);
}

/* ---- the report ---- */

static void mesh_str(const plan_row *r, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < r->naxes && len < n; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s%c=%lld", k ? "," : "", "XYZ"[k], (long long)r->sizes[k]);
}

/* Seed 000's test ("Data Parallelism", "Combining FSDP and TP"): a step
 * is communication-bound when its collectives take longer than its
 * matmuls (T_comms > T_math; a memory-bound matmul counts its HBM time);
 * the elementwise ops and the optimizer update are not part of it.
 * T_comms is the busiest axis's: collectives over other axes run on other
 * links at once, the seed's T_comms = max(T_FSDP, T_TP) (it assumes "we
 * can fully overlap communication on the X and Y axes"); a collective over
 * every axis, DP's and FSDP's, loads them all. */
static const char *bound_name(const plan_row *r)
{
    return r->comm_axis > r->math ? "communication" : "compute";
}

/* The runner-up to the chosen row: the next fastest that fits (an
 * unpipelined one when the pipelined rows lost by their margin). */
static int runner_up(const plan_table *t)
{
    int best = -1;
    bool unpipelined = t->pipe_lost >= 0 && !t->rows[t->chosen].pp;
    for (int i = 0; i < t->n; i++) {
        const plan_row *r = &t->rows[i];
        if (i == t->chosen || !r->ok || !r->fits || r->estimated || (unpipelined && r->pp))
            continue;
        if (best < 0 || r->step < t->rows[best].step)
            best = i;
    }
    return best;
}

/* Why t's chosen row (which fits) was chosen: `head` "the fastest
 * that fits" (when a faster pipelined row lost by its margin, "the
 * fastest unpipelined plan that fits", or for a pipelined row chosen in
 * its place "the fastest that fits beyond its bubble's margin"), and
 * `tail` how the pipelined rows fared against the best unpipelined one
 * (plan_choose.c, PLAN_PIPE_MARGIN), "" when none was judged against it.
 * The text table's "chosen:" line and JSON "why" say both. */
static void choice_why(const plan_table *t, char *head, size_t nh, char *tail, size_t nt)
{
    const plan_row *c = &t->rows[t->chosen];
    snprintf(head, nh, "%s", t->pipe_lost < 0 ? "the fastest that fits"
                             : c->pp ? "the fastest that fits beyond its bubble's margin"
                                     : "the fastest unpipelined plan that fits");
    tail[0] = '\0';
    int other = c->pp ? t->pipe_rival : t->pipe_lost;
    if (other < 0)
        return;
    const plan_row *o = &t->rows[other], *p = c->pp ? c : o, *u = c->pp ? o : c;
    char mp[40], mu[40];
    mesh_str(p, mp, sizeof mp);
    mesh_str(u, mu, sizeof mu);
    double judged = plan_pipe_judged(p);
    if (c->pp)
        snprintf(tail, nt,
                 "pipelined, it beats the best unpipelined plan, %s on %s at %.4g ms, even with its bubble %.0f "
                 "points above the predicted %.1f%% (%.4g ms; PLAN_PIPE_MARGIN, the bubble's measured uncertainty)",
                 plan_row_label(u), mu, u->step * 1e3, PLAN_PIPE_MARGIN * 100, p->bubble * 100, judged * 1e3);
    else
        snprintf(tail, nt,
                 "%s on %s is %.2g%% faster (%.4g ms) but not with its bubble %.0f points above the predicted "
                 "%.1f%% (%.4g ms; PLAN_PIPE_MARGIN, the bubble's measured uncertainty): within that margin the "
                 "unpipelined plan wins (%sno schedule whose bubble the cost model can miss)",
                 plan_row_label(p), mp, 100 * (u->step - p->step) / u->step, p->step * 1e3,
                 PLAN_PIPE_MARGIN * 100, p->bubble * 100, judged * 1e3, u->memory < p->memory ? "less memory, " : "");
}

/* Why row r of t was not compiled in full (plan_cut.c), into buf. */
static void cut_why(const plan_table *t, const plan_row *r, char *buf, size_t n)
{
    snprintf(buf, n, "not compiled in full: estimated %.4g ms (--ilp=off) > best %.4g ms + %.0f%%", r->estimate * 1e3,
             t->cut_best * 1e3, PLAN_CUT_MARGIN * 100);
}

/* One candidate as the JSON interface fixes it (docs/propagation.md);
 * a pipelined row's "pipeline" also has its "makespan" (seconds) and
 * "judged_step" (plan_pipe_judged, seconds; cJSON prints an infinite one
 * as null); a row left at its estimate also has "estimated": true and
 * "skipped" (why), and a row compiled in full after an estimate
 * "estimate". */
static cJSON *row_json(const plan_table *t, const plan_row *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "family", plan_row_label(r));
    cJSON_AddStringToObject(o, "storage", row_name(r, false));
    cJSON *mesh = cJSON_AddObjectToObject(o, "mesh");
    for (int k = 0; k < r->naxes; k++) {
        char name[2] = {"XYZ"[k], '\0'};
        cJSON_AddNumberToObject(mesh, name, (double)r->sizes[k]);
    }
    if (!r->ok) {
        cJSON_AddStringToObject(o, "error", r->why);
        return o;
    }
    cJSON_AddNumberToObject(o, "step_time", r->step);
    cJSON_AddNumberToObject(o, "mfu", r->mfu);
    cJSON_AddNumberToObject(o, "memory_per_device", r->memory);
    cJSON_AddBoolToObject(o, "fits", r->fits);
    cJSON_AddNumberToObject(o, "exposed_comm_time", r->exposed);
    cJSON_AddNumberToObject(o, "comm_time", r->comm);
    cJSON_AddNumberToObject(o, "comm_axis_time", r->comm_axis);
    cJSON_AddNumberToObject(o, "math_time", r->math);
    cJSON_AddBoolToObject(o, "gathers_params", r->gathers_params);
    cJSON_AddStringToObject(o, "bound", bound_name(r));
    cJSON_AddStringToObject(o, "remat", r->remat == IR_REMAT_LAYER ? "layer"
                                        : r->remat == IR_REMAT_ELEMENTWISE ? "elementwise" : "none");
    cJSON_AddNumberToObject(o, "zero", r->zero);
    if (r->estimate > 0)
        cJSON_AddNumberToObject(o, "estimate", r->estimate);
    if (r->estimated) {
        char why[160];
        cut_why(t, r, why, sizeof why);
        cJSON_AddBoolToObject(o, "estimated", true);
        cJSON_AddStringToObject(o, "skipped", why);
    }
    if (r->pp) {
        cJSON *p = cJSON_AddObjectToObject(o, "pipeline");
        cJSON_AddNumberToObject(p, "stages", (double)r->sizes[0]);
        cJSON_AddNumberToObject(p, "microbatches", r->microbatches);
        cJSON_AddStringToObject(p, "schedule", r->schedule ? r->schedule : "");
        cJSON_AddNumberToObject(p, "bubble", r->bubble);
        cJSON_AddNumberToObject(p, "makespan", r->makespan);
        cJSON_AddNumberToObject(p, "judged_step", plan_pipe_judged(r));
    }
    return o;
}

static void print_json(FILE *out, const plan_table *t)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "chosen", t->chosen >= 0 ? row_json(t, &t->rows[t->chosen]) : cJSON_CreateNull());
    if (t->chosen >= 0 && t->rows[t->chosen].fits) {
        char head[64], tail[600], why[700];
        choice_why(t, head, sizeof head, tail, sizeof tail);
        snprintf(why, sizeof why, "%s%s%s", head, *tail ? "; " : "", tail);
        cJSON_AddStringToObject(root, "why", why);
    }
    if (t->fit.tried) {
        /* What would fit (plan_find_fit): null where nothing did. */
        cJSON *fit = cJSON_AddObjectToObject(root, "fit");
        if (t->fit.chips > 0) {
            cJSON *c = row_json(t, &t->fit.at_chips);
            cJSON_AddNumberToObject(c, "chips", (double)t->fit.chips);
            cJSON_AddItemToObject(fit, "more_chips", c);
        } else {
            cJSON_AddNullToObject(fit, "more_chips");
        }
        if (t->fit.batch > 0) {
            cJSON *b = row_json(t, &t->fit.at_batch);
            cJSON_AddStringToObject(b, "dim", t->fit.batch_name);
            cJSON_AddNumberToObject(b, "size", (double)t->fit.batch);
            cJSON_AddItemToObject(fit, "smaller_batch", b);
        } else {
            cJSON_AddNullToObject(fit, "smaller_batch");
        }
    }
    cJSON *cands = cJSON_AddArrayToObject(root, "candidates");
    for (int i = 0; i < t->n; i++)
        cJSON_AddItemToArray(cands, row_json(t, &t->rows[i]));
    char *text = cJSON_PrintUnformatted(root);
    if (text)
        fprintf(out, "%s\n", text);
    free(text);
    cJSON_Delete(root);
}

/* The changes plan_find_fit found, ending the "none fits" line. */
static void print_fit(FILE *out, const plan_table *t, bool remat)
{
    const plan_fit *f = &t->fit;
    if (!f->tried) {
        fprintf(out, ": more chips%s or a smaller batch would shrink it\n", remat ? ", --remat=layer" : "");
        return;
    }
    char mesh[40];
    if (f->chips > 0) {
        mesh_str(&f->at_chips, mesh, sizeof mesh);
        fprintf(out, "; it fits on %lld chips (%s on %s, %.4g GiB)", (long long)f->chips,
                plan_row_label(&f->at_chips), mesh, f->at_chips.memory / gib);
    } else {
        fprintf(out, "; not on up to %d chips", PLAN_FIT_MAX_CHIPS);
    }
    if (f->batch > 0)
        fprintf(out, ", or at %s = %lld (-D %s=%lld, %.4g GiB)", f->batch_name, (long long)f->batch,
                f->batch_name, (long long)f->batch, f->at_batch.memory / gib);
    else if (f->batch_dim >= 0)
        fprintf(out, ", nor at a smaller %s", f->batch_name);
    fprintf(out, "%s\n", remat ? ", or with --remat=layer" : "");
}

void plan_print(FILE *out, const plan_table *t, bool json)
{
    if (json) {
        print_json(out, t);
        return;
    }
    fprintf(out, "auto-sharding: %lld chips of %s (%.3g GiB of HBM each), %d candidates (seed 000's families "
            "on every mesh; activations planned by the whole-program ILP)\n",
            (long long)t->chips, t->hw->name, t->hw->hbm_bytes / gib, t->n);
    if (t->dropped)
        fprintf(out, "(%d more candidates not priced: at most %d)\n", t->dropped, PLAN_MAX_ROWS);
    if (t->cut)
        fprintf(out, "(every candidate estimated with --ilp=off, then compiled in full in that order while its "
                     "estimate is within %.0f%% of the best full step; %d rows not compiled in full show their "
                     "estimate's figures and are not chosen; a heuristic: --plan-search=all compiles them)\n",
                PLAN_CUT_MARGIN * 100, t->estimated);
    for (int i = 0; i < t->n; i++)
        if (strcmp(plan_row_label(&t->rows[i]), row_name(&t->rows[i], false)) != 0) {
            fprintf(out, "(a plan that keeps the weights in place is model parallel, so FSDP's storage shows "
                         "as TP-D or 2D-WS where no weight is gathered; seed 002, appendix B)\n");
            break;
        }
    int w = 8; /* the family column: wider only for the pipelined names */
    bool any_pp = false;
    for (int i = 0; i < t->n; i++) {
        int len = (int)strlen(plan_row_label(&t->rows[i]));
        w = len > w ? len : w;
        any_pp |= t->rows[i].pp;
    }
    if (any_pp)
        fprintf(out, "(PP: the repeated block's layers pipelined in |X| stages over X, the mesh's first axis; "
                     "the step is the schedule's, the memory the fullest stage's; docs/pipeline.md)\n");
    fprintf(out, "  %-*s %-18s %12s %7s %14s %5s %13s %13s  %s\n", w, "family", "mesh", "step", "MFU",
            "memory/device", "fits", "comm exposed", "comm total", "bound");
    for (int i = 0; i < t->n; i++) {
        const plan_row *r = &t->rows[i];
        char mesh[40];
        mesh_str(r, mesh, sizeof mesh);
        if (!r->ok) {
            fprintf(out, "  %-*s %-18s does not compile: %s\n", w, plan_row_label(r), mesh, r->why);
            continue;
        }
        char pipe[80] = "";
        if (r->pp)
            snprintf(pipe, sizeof pipe, ", %s M=%d bubble %.1f%%", r->schedule ? r->schedule : "?",
                     r->microbatches, 100 * r->bubble);
        /* A row the search rematerialised to fit says so. */
        bool chose_remat = r->remat == IR_REMAT_LAYER && t->choose_remat;
        char same[200] = "", why[160] = "";
        if (r->estimated)
            cut_why(t, r, why, sizeof why);
        if (r->same_as >= 0 && r->same_as < i)
            snprintf(same, sizeof same, ", the storage of %s%s%s", plan_row_label(&t->rows[r->same_as]),
                     *why ? ", " : "", why);
        else if (*why)
            snprintf(same, sizeof same, ", %s", why);
        fprintf(out, "%c %-*s %-18s %9.4g ms %6.1f%% %10.4g GiB %5s %10.4g ms %10.4g ms  %s%s%s%s%s\n",
                i == t->chosen ? '*' : ' ', w, plan_row_label(r), mesh, r->step * 1e3, r->mfu * 100,
                r->memory / gib, r->fits ? "yes" : "no", r->exposed * 1e3, r->comm * 1e3, bound_name(r), pipe,
                r->zero ? ", zero=2" : "", chose_remat ? ", remat=layer" : "", same);
    }
    if (t->chosen < 0) {
        fprintf(out, "chosen: none (no candidate compiles)\n");
        return;
    }
    const plan_row *c = &t->rows[t->chosen];
    char mesh[40];
    mesh_str(c, mesh, sizeof mesh);
    if (!c->fits) {
        /* Remat is named only where it was not already tried. */
        bool tried = t->choose_remat || t->remat == IR_REMAT_LAYER;
        fprintf(out, "chosen: none fits %s's HBM%s; the smallest is %s on %s at %.4g GiB per device", t->hw->name,
                tried && c->trains ? ", not even with --remat=layer" : "", plan_row_label(c), mesh,
                c->memory / gib);
        print_fit(out, t, !tried && c->trains);
        return;
    }
    int ru = runner_up(t);
    char head[64], tail[600];
    choice_why(t, head, sizeof head, tail, sizeof tail);
    fprintf(out, "chosen: %s on %s, %s (%.4g ms a step, %s-bound%s)%s%s", plan_row_label(c), mesh, head,
            c->step * 1e3, bound_name(c),
            c->remat == IR_REMAT_LAYER && t->choose_remat ? "; it fits only with --remat=layer, which -o compiles with"
            : c->zero ? "; it fits only with the optimizer state sharded (--zero=2), which -o compiles with" : "",
            *tail ? "; " : "", tail);
    if (ru >= 0 && ru != t->pipe_rival) { /* (the line named the rival already) */
        char m2[40];
        mesh_str(&t->rows[ru], m2, sizeof m2);
        fprintf(out, "; next %s on %s at %.4g ms", plan_row_label(&t->rows[ru]), m2, t->rows[ru].step * 1e3);
    }
    fputs("\n", out);
}
