/*
 * plan_declared.c - memory as a choice on a declared mesh (plan.h,
 * plan_fit_declared): when a training program compiled for its own
 * `mesh` needs more HBM per device than the profile has, the moves
 * `einc plan` makes for its candidates (plan.c, plan_price_row) are
 * made here too, and when none of them fits, the smallest change that
 * would, as plan_fit.c finds it for auto-sharding.
 *
 * Seed 000 ("Training", the memory per chip) shrinks a step that does
 * not fit by sharding the optimizer state over the data axes (ZeRO-2:
 * no FLOP added) before recomputing (seed 003, "Gradient checkpointing":
 * a third more forward FLOPs), so that is the order: --zero=2, then
 * --remat=layer with it, each compiled and priced by the cost pass; the
 * first that fits is chosen.  When neither fits, a mesh axis doubled
 * (more chips, up to the 4096 devices an executable runs) and the batch
 * halved (the first input's batch dim) are each compiled until one fits,
 * so every figure reported is the cost pass's peak, not an
 * extrapolation.
 */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DECLARED_MAX_DEVICES 4096 /* the most an einc executable runs (docs/language.md, `mesh`) */
#define DECLARED_MAX_HALVINGS 20  /* a batch of 2^20 halved to 1 */

/* plan_compile_quiet's closure: the program as declared, with `remat`. */
typedef struct declared_call {
    plan_compile_fn compile;
    void *ctx;
    ir_remat remat;
} declared_call;

static ir_module *call_declared(void *ctx, diag_ctx *d)
{
    const declared_call *c = ctx;
    return c->compile(c->ctx, NULL, c->remat, d);
}

/* Peak bytes per device of the program compiled with `remat` and
 * --zero=2 when `zero` (the cost pass's figure, as cost_warn_memory
 * compares it), or -1 when it does not compile. */
static double peak_with(plan_compile_fn compile, plan_option_fn option, void *ctx, ir_remat remat, int zero)
{
    declared_call c = {compile, ctx, remat};
    char why[256];
    if (zero)
        option(ctx, "zero", "2");
    ir_module *m = plan_compile_quiet(call_declared, &c, why, sizeof why);
    if (zero)
        option(ctx, "zero", NULL);
    double peak = m ? m->totals.peak_memory : -1.0;
    ir_module_free(m);
    return peak;
}

/* The first mesh axis of size > 1 doubled until the chosen compile fits
 * (r->axis_size; 0 when none up to DECLARED_MAX_DEVICES does). */
static void more_devices(plan_declared *r, const ir_module *m, double hbm, plan_compile_fn compile,
                         plan_option_fn option, plan_define_fn define, void *ctx)
{
    int a = 0;
    while (a < m->mesh.naxes - 1 && m->mesh.axes[a].size < 2)
        a++;
    int64_t devices = ir_mesh_devices(&m->mesh), size = m->mesh.axes[a].size;
    r->axis_name[0] = m->mesh.axes[a].name;
    r->axis_name[1] = 0;
    for (int64_t k = 2; devices * k <= DECLARED_MAX_DEVICES; k *= 2) {
        fe_define def = {r->axis_name, size * k};
        define(ctx, &def);
        double peak = peak_with(compile, option, ctx, r->remat, r->zero);
        if (peak >= 0 && peak <= hbm) {
            r->axis_size = size * k;
            r->devices = devices * k;
            r->at_axis = peak;
            break;
        }
    }
    define(ctx, NULL);
}

/* The largest batch, the program's halved, at which the chosen compile
 * fits (r->batch; 0 when none does before the batch stops dividing). */
static void smaller_batch(plan_declared *r, const ir_module *m, double hbm, plan_compile_fn compile,
                          plan_option_fn option, plan_define_fn define, void *ctx)
{
    plan_roles roles;
    int d = plan_roles_of(m, &roles) == 0 ? plan_batch_dim(m, &roles) : -1;
    if (d < 0)
        return;
    snprintf(r->batch_name, sizeof r->batch_name, "%s", m->dims[d].name);
    int64_t b = m->dims[d].size;
    for (int i = 0; i < DECLARED_MAX_HALVINGS && b % 2 == 0; i++) {
        b /= 2;
        fe_define def = {r->batch_name, b};
        define(ctx, &def);
        double peak = peak_with(compile, option, ctx, r->remat, r->zero);
        if (peak < 0)
            break;
        if (peak <= hbm) {
            r->batch = b;
            r->at_batch = peak;
            break;
        }
    }
    define(ctx, NULL);
}

bool plan_fit_declared(plan_declared *r, const ir_module *m, const cost_hw *hw, bool choose_remat, bool choose_zero,
                       plan_compile_fn compile, plan_option_fn option, plan_define_fn define, void *ctx)
{
    memset(r, 0, sizeof *r);
    r->hbm = hw->hbm_bytes;
    r->memory = r->chosen = m->totals.peak_memory;
    if (!m->totals.valid || r->memory <= r->hbm || !plan_trains(m))
        return false;
    if (choose_zero) {
        double z = peak_with(compile, option, ctx, m->remat, 2);
        if (z >= 0 && z < r->chosen) {
            r->zero = 2;
            r->zero_memory = r->chosen = z;
        }
    }
    r->remat = m->remat;
    if (r->chosen > r->hbm && choose_remat && m->remat == IR_REMAT_NONE) {
        double l = peak_with(compile, option, ctx, IR_REMAT_LAYER, r->zero);
        r->remat_memory = l;
        if (l >= 0 && l < r->chosen) {
            r->remat = IR_REMAT_LAYER;
            r->chosen = l;
        }
    }
    r->fits = r->chosen <= r->hbm;
    if (!r->fits) {
        more_devices(r, m, r->hbm, compile, option, define, ctx);
        smaller_batch(r, m, r->hbm, compile, option, define, ctx);
    }
    return r->zero || r->remat != m->remat;
}

void plan_declared_print(FILE *out, const plan_declared *r, const char *hw_name)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (!(r->memory > r->hbm))
        return;
    char with[128];
    snprintf(with, sizeof with, "%s%s%s", r->zero ? "--zero=2 (the optimizer state sharded over the data axes)" : "",
             r->zero && r->remat == IR_REMAT_LAYER ? " and " : "",
             r->remat == IR_REMAT_LAYER ? "--remat=layer" : "");
    if (r->fits) {
        fprintf(out, "einc: note: the plan needs %.3g GiB per device, above %s's %.3g GiB of HBM; it fits only with "
                "%s, %.3g GiB per device: compiled so (an explicit --zero or --remat keeps yours)\n",
                r->memory / gib, hw_name, r->hbm / gib, with, r->chosen / gib);
        return;
    }
    fprintf(out, "einc: note: nothing tried fits %s's %.3g GiB of HBM per device (as compiled %.3g GiB", hw_name,
            r->hbm / gib, r->memory / gib);
    if (r->zero_memory > 0)
        fprintf(out, ", with --zero=2 %.3g GiB", r->zero_memory / gib);
    if (r->remat_memory > 0)
        fprintf(out, ", with --remat=layer%s %.3g GiB", r->zero ? " and --zero=2" : "", r->remat_memory / gib);
    fputc(')', out);
    const char *sep = "; the smallest change that fits: ";
    if (r->axis_size > 0) {
        fprintf(out, "%s-D %s=%lld (%lld devices, %.3g GiB%s%s)", sep, r->axis_name, (long long)r->axis_size,
                (long long)r->devices, r->at_axis / gib, *with ? ", with " : "", with);
        sep = ", or ";
    }
    if (r->batch > 0)
        fprintf(out, "%s-D %s=%lld (%.3g GiB%s%s)", sep, r->batch_name, (long long)r->batch, r->at_batch / gib,
                *with ? ", with " : "", with);
    else if (r->axis_size <= 0)
        fprintf(out, "; neither more devices (up to %d) nor a smaller batch fits", DECLARED_MAX_DEVICES);
    fputc('\n', out);
}
