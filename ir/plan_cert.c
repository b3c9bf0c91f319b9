/*
 * plan_cert.c - the sentence that states how far a plan can be from the
 * best: the planner's proof (ir_plan_cert, filled by the propagate pass),
 * the seed 000 strategy kept when the strategy portfolio's plan beat the
 * ILP's, and the cost pass's lower bound (ir_totals.bound_serial).
 */
#include <stdio.h>

#include "ir.h"

/* "45.2 ms", "812 us", "1.91 s": seconds with a unit a reader expects. */
static void seconds_str(double s, char *buf, size_t size)
{
    if (s >= 1.0)
        snprintf(buf, size, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, size, "%.3g ms", s * 1e3);
    else
        snprintf(buf, size, "%.3g us", s * 1e6);
}

/* "1,769": a count with thousands separators. */
static void count_str(long n, char *buf, size_t size)
{
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%ld", n < 0 ? 0 : n);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < size; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o < size ? o : size - 1] = 0;
}

/* "; memory-bound: ...": what the planner's memory row decided, or nothing. */
static void memory_str(const ir_plan_cert *c, char *buf, size_t size)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (c->memory == IR_PLAN_MEM_BOUND)
        snprintf(buf, size, "; memory-bound: the fastest plan needs %.3g GiB per device, HBM is %.3g GiB; "
                 "chose a plan of %.3g GiB, %.1f%% slower", c->mem_fastest / gib, c->mem_hbm / gib,
                 c->mem_plan / gib, c->fastest > 0 ? 100.0 * (c->objective - c->fastest) / c->fastest : 0.0);
    else if (c->memory == IR_PLAN_MEM_NONE_FITS)
        snprintf(buf, size, "; no plan among the candidates fits the HBM (%.3g GiB per device): the smallest "
                 "needs %.3g GiB (params, optimizer state, inputs, gradients, kept activations); the fastest is "
                 "kept", c->mem_hbm / gib, c->mem_least / gib);
}

/* The proof when the strategy portfolio's plan was kept over the ILP's
 * (c->strategy): the strategy named, and the plan placed against the
 * ILP's optimum (or its bound at the time limit), which need not be the
 * better of the two by this objective: the portfolio scores the step
 * with parameter gathers overlapped (passes/propagate_portfolio.c). */
static int strategy_str(const ir_plan_cert *c, const char *t, const char *n, const char *merged, char *buf,
                        size_t size)
{
    char b[32];
    int w = snprintf(buf, size, "plan %s (compute and reshards in sequence), seed 000's %s from the strategy "
                     "portfolio, kept for its shorter step with parameter gathers overlapped; ", t, c->strategy);
    if (w < 0 || (size_t)w >= size)
        return w;
    size -= (size_t)w;
    buf += w;
    if (c->proof == IR_PLAN_UNPROVEN)
        return w + snprintf(buf, size, "not proven against the candidates (%s)",
                            c->why ? c->why : "no whole-program ILP");
    seconds_str(c->best, b, sizeof b);
    double gap = c->best > 0 ? 100.0 * (c->objective - c->best) / c->best : 0.0;
    const char *ilp = c->proof == IR_PLAN_OPTIMAL ? "proven optimum" : "bound at its time limit";
    if (gap > -1e-4 && gap < 1e-4)
        return w + snprintf(buf, size, "equal to the ILP's %s among %s candidate layouts%s", ilp, n, merged);
    return w + snprintf(buf, size, "%.1f%% %s the ILP's %s of %s among %s candidate layouts%s",
                        gap < 0 ? -gap : gap, gap < 0 ? "below" : "above", ilp, b, n, merged);
}

void ir_plan_cert_str(const ir_module *m, char *buf, size_t size)
{
    const ir_plan_cert *c = &m->plan;
    if (size == 0)
        return;
    buf[0] = 0;
    if (!c->valid)
        return;
    char t[32], b[32], n[32];
    seconds_str(c->objective, t, sizeof t);
    count_str(c->candidates, n, sizeof n);
    int w = 0;
    const char *merged = c->merged ? ", simple ops following an operand" : "";
    /* Within a millionth of the best counts as the best (the solver's tolerance). */
    bool at_best = c->objective <= c->best * (1.0 + 1e-6);
    if (c->strategy)
        w = strategy_str(c, t, n, merged, buf, size);
    else if (c->proof == IR_PLAN_UNPROVEN)
        w = snprintf(buf, size, "plan %s (compute and reshards in sequence), not proven (%s)", t,
                     c->why ? c->why : "no whole-program ILP");
    else if (c->proof == IR_PLAN_OPTIMAL && at_best && c->objective < c->best * (1.0 - 1e-6))
        /* Local moves after the solve left the candidates for a better plan. */
        w = snprintf(buf, size, "plan %s (compute and reshards in sequence), better than the proven optimum of %s "
                     "candidate layouts%s", t, n, merged);
    else if (c->proof == IR_PLAN_OPTIMAL && at_best)
        w = snprintf(buf, size, "plan %s (compute and reshards in sequence), proven optimal among %s candidate "
                     "layouts%s", t, n, merged);
    else {
        seconds_str(c->best, b, sizeof b);
        w = snprintf(buf, size, "plan %s (compute and reshards in sequence), within %.1f%% of the best among %s "
                     "candidate layouts%s (%s %s)%s%s", t,
                     c->objective > 0 ? 100.0 * (c->objective - c->best) / c->objective : 0.0, n, merged,
                     c->proof == IR_PLAN_OPTIMAL ? "best" : "bound at the time limit", b, c->why ? ": " : "",
                     c->why ? c->why : "");
    }
    if (w < 0 || (size_t)w >= size)
        return;
    if (m->totals.bound_serial > 0.0) {
        seconds_str(m->totals.bound_serial, b, sizeof b);
        int n2 = snprintf(buf + w, size - (size_t)w, "; lower bound %s (plan/bound %.2f)", b,
                          c->objective / m->totals.bound_serial);
        if (n2 < 0 || (size_t)(w + n2) >= size)
            return;
        w += n2;
    }
    memory_str(c, buf + w, size - (size_t)w);
}
