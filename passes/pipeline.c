/*
 * pipeline.c - the pipeline pass: microbatches and the schedule of a
 * pipelined program (docs/pipeline.md).
 *
 * The frontend marks a program pipelined when the stacked params of its
 * repeat block shard the layer dim over a mesh axis Z (`W[L_Z, D_X, F_Y]`,
 * seed 000's notation; ir_module.pipe).  Each stage of Z then holds and
 * runs |L|/Z layers, and to keep the stages busy the batch is split into M
 * microbatches that follow one another through the stages (GPipe, Huang et
 * al. 2019).  This pass runs after propagate (which plans the whole
 * batch: the stage axis shards nothing it plans, propagate.c), so that
 * regather, meshslice and cost see one microbatch:
 *
 *  - finds the batch dim: the first dim of the value the repeat block
 *    carries (the residual stream X[B, T, D]), which every input holding
 *    it is split along;
 *  - takes M from --microbatches and the schedule from --schedule; for a
 *    training step what is not given is the cost model's fastest that
 *    fits the HBM (M, and gpipe, 1f1b, interleaved with its v or
 *    zb-h1 or zb-h2: pipeline_choose.c), --schedule=zero-bubble being
 *    zb-h2 when that fits the HBM, else zb-h1; a forward's M is Z when
 *    it divides |B|; then it shrinks that dim to one microbatch, |B| / M (which must
 *    split over the devices that split |B|).  Scale factors the frontend
 *    folded from the whole batch (a mean's 1/|B|) stay, so a microbatch's
 *    loss and gradients are its share of the step's, and their sum over
 *    the microbatches is the step's (gradient accumulation), which holds
 *    when the loss is a sum over the batch's examples (check_batch_sum:
 *    an error for a given M, one microbatch and a warning for a chosen
 *    one);
 *  - builds each stage's order of forwards and backwards for --schedule
 *    (gpipe, 1f1b, interleaved, zb-h1 or zb-h2,
 *    passes/costmodel/pipeline_sched.c) into pipe.order, which codegen
 *    runs and --dump-ir prints; for the zero-bubble schedules it first splits the
 *    backward loop into a dL/dx loop and a dL/dW loop (pipeline_split.c),
 *    run as the items B m and W m; for interleaved (Narayanan et al.,
 *    SC'21) each item runs one of the stage's v chunks (--chunks, default
 *    2) of |L| / (Z v) layers, stage z holding model chunks z, z + Z, ...
 *    (pipe.chunks; the runtime deals the stacked layers block-cyclically),
 *    which needs |L| a multiple of Z v and M a multiple of Z;
 *  - moves the stacked params' gradient collectives (DP's AllReduce,
 *    FSDP's ReduceScatter) out of the backward loop, to run once per
 *    step on the gradient summed over the microbatches
 *    (pipeline_grad.c), but for --grad-sync=microbatch, or for the FSDP
 *    ones the choice keeps per microbatch because their unreduced sums
 *    would not fit the HBM (pipeline_choose.c);
 *  - puts a CollectivePermute at each stage boundary, after the forward
 *    loop (the activation to stage z+1) and the backward loop (its
 *    gradient to z-1), which the cost pass prices as one hop and codegen
 *    runs as the stages' sends and receives (pipeline_permute.c).
 *
 * What runs where (the first stage embeds, the last computes the loss,
 * every stage its layers) and the gradient accumulation are codegen's
 * (codegen/pipeline.c).  A program that is not pipelined passes through
 * unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "pass.h"
#include "pipe_work.h"
#include "pipeline.h"
#include "pipeline_choose.h"
#include "pipeline_grad.h"
#include "pipeline_permute.h"
#include "pipeline_split.h"

/* A count as the command line takes it: decimal digits, no sign, no
 * leading zero, at most 4096. */
static bool parse_count(const char *v, int *out)
{
    if (!v || !*v || *v == '0' || strlen(v) > 4)
        return false;
    int n = 0;
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9')
            return false;
        n = n * 10 + (*c - '0');
    }
    if (n > 4096)
        return false;
    *out = n;
    return true;
}

static bool check_microbatches(const char *v, char *why, size_t n)
{
    int m;
    if (parse_count(v, &m))
        return true;
    snprintf(why, n, "--microbatches wants a count from 1 to 4096 in decimal, not '%s'", v);
    return false;
}

static bool check_schedule(const char *v, char *why, size_t n)
{
    if (pp_schedule_lookup(v) >= 0)
        return true;
    snprintf(why, n, "--schedule wants gpipe, 1f1b, interleaved, zero-bubble, zb-h1 or zb-h2, not '%s'", v);
    return false;
}

static bool check_chunks(const char *v, char *why, size_t n)
{
    int c;
    if (parse_count(v, &c) && c >= 2 && c <= 64)
        return true;
    snprintf(why, n, "--chunks wants the chunks (virtual stages) per stage of the interleaved schedule, "
             "from 2 to 64 in decimal, not '%s'", v);
    return false;
}

/* The value in [0, count) that `name` spells v (ir_grad_sync_name,
 * ir_w_fill_name), or -1 when v names none. */
static int name_lookup(const char *v, int count, const char *(*name)(int))
{
    for (int i = 0; v && i < count; i++)
        if (strcmp(v, name(i)) == 0)
            return i;
    return -1;
}

static int grad_sync_lookup(const char *v)
{
    return name_lookup(v, IR_GRAD_SYNC_COUNT, ir_grad_sync_name);
}

static bool check_grad_sync(const char *v, char *why, size_t n)
{
    if (grad_sync_lookup(v) >= 0)
        return true;
    snprintf(why, n, "--grad-sync wants auto, step or microbatch, not '%s'", v);
    return false;
}

static int w_fill_lookup(const char *v)
{
    return name_lookup(v, IR_W_FILL_COUNT, ir_w_fill_name);
}

static bool check_w_fill(const char *v, char *why, size_t n)
{
    if (w_fill_lookup(v) >= 0)
        return true;
    snprintf(why, n, "--w-fill wants static or greedy, not '%s'", v);
    return false;
}

const pass_option pass_pipeline_options[5] = {
    {"microbatches", "M: split a pipelined program's batch into M microbatches (default: the "
                     "M the cost model rates fastest for a training step, Z for a forward)", check_microbatches},
    {"schedule", "gpipe|1f1b|interleaved|zero-bubble|zb-h1|zb-h2: the order of each stage's forwards and "
                 "backwards (default: the fastest of gpipe, 1f1b, zb-h1, zb-h2 and interleaved that fits "
                 "the device's HBM as the cost model rates them, 1f1b on a tie; zb-h1's and zb-h2's "
                 "backward is split into dL/dx and dL/dW items (Qi et al.'s ZB-H1: 1F1B's memory; ZB-H2: "
                 "twice the warm-up forwards, about twice the activations, near-zero bubble); zero-bubble "
                 "is zb-h2 when its stages fit the HBM, else zb-h1; interleaved runs v chunks of layers per "
                 "stage)", check_schedule},
    {"chunks", "v: the chunks (virtual stages) per stage of --schedule=interleaved (default 2): stage z "
               "runs model chunks z, z+Z, ..., z+(v-1)Z of |L|/(Z v) layers each", check_chunks},
    {"grad-sync", "auto|step|microbatch: where a pipelined training step reduces its stacked params' DP or "
                  "FSDP gradients: once per step on their sum over the microbatches (step), in every "
                  "microbatch's backward (microbatch), or (auto, the default) once per step unless the stage "
                  "then does not fit the device's HBM, an FSDP gradient's unreduced sum being |X| times its "
                  "block (docs/pipeline.md)", check_grad_sync},
    {"w-fill", "static|greedy: when a stage of zb-h1 or zb-h2 runs its W (dL/dW) items: where the "
               "table puts them (static, the default), or also earlier, the next one whose B has run, while "
               "the stage's next item waits for its input (greedy; the results are bitwise the same); other "
               "schedules have no W items and ignore it (docs/pipeline.md)", check_w_fill},
};

/* The forward LoopBegin over the pipelined layer dim, or NULL. */
static ir_op *forward_loop(const ir_module *m)
{
    for (ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_LOOPBEGIN && !op->u.loop.reverse && op->u.loop.dim == m->pipe.dim)
            return op;
    return NULL;
}

/* Copies the per-stage orders of `plan` into the module's arena. */
static void keep_order(ir_module *m, const pp_plan *plan)
{
    ir_pipeline *pp = &m->pipe;
    pp->nitems = plan->stage[0].n_items;
    pp->order = ir_alloc(&m->arena, (size_t)plan->stages * (size_t)pp->nitems * sizeof *pp->order);
    for (int z = 0; z < plan->stages; z++)
        for (int k = 0; k < pp->nitems; k++) {
            const pp_item *it = &plan->stage[z].items[k];
            ir_pipe_item *o = &pp->order[z * pp->nitems + k];
            o->kind = it->kind == PP_F ? 'F' : it->kind == PP_B ? 'B' : 'W';
            o->microbatch = it->microbatch;
            o->chunk = it->chunk;
        }
}

/* The table of `plan` (pp_print_table) without its title line, into the
 * module's arena, for --dump-ir. */
static void keep_table(ir_module *m, const pp_plan *plan)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return;
    pp_print_table(f, plan);
    fclose(f);
    const char *rows = buf ? strchr(buf, '\n') : NULL;
    if (rows) {
        /* The stage rows only: the last line (step and bubble of unit
         * times) says nothing about this program. */
        const char *end = rows + 1;
        for (int z = 0; z < plan->stages && end && *end; z++) {
            const char *nl = strchr(end, '\n');
            end = nl ? nl + 1 : end + strlen(end);
        }
        size_t n = (size_t)(end - rows - 1);
        char *t = ir_alloc(&m->arena, n + 1);
        memcpy(t, rows + 1, n);
        t[n] = 0;
        m->pipe.table = t;
    }
    free(buf);
}

static bool has_dim(const ir_value *v, int d)
{
    for (int k = 0; k < v->type.rank; k++)
        if (v->type.dims[k] == d)
            return true;
    return false;
}

/* Whether the loss splits over the microbatches as a sum, which is what
 * summing the microbatches' losses and gradients computes: the loss must
 * be a sum over the batch of per-example terms.  From the loss back to the
 * values that still have the batch dim B, every op must be linear in its
 * batch-dependent operands (a sum, a scale, an addition of such terms, a
 * linear collective), and no other op may reduce B away (that would mix a
 * microbatch's examples, as a batch norm does).  A term that does not
 * depend on the batch (a weight penalty added to the loss) would count
 * once per microbatch.  Reports and returns false otherwise. */
static bool check_batch_sum(pass_ctx *ctx, ir_module *m, int B, int M, bool report)
{
    const ir_value *loss = NULL;
    for (int j = 0; j < m->noutputs; j++)
        if (m->loss && !m->outputs[j].update && strcmp(m->outputs[j].name, m->loss) == 0)
            loss = m->outputs[j].value;
    bool *dep = calloc((size_t)m->nvalues + 1, sizeof *dep);   /* depends on the batch */
    bool *sum = calloc((size_t)m->nvalues + 1, sizeof *sum);   /* on the loss's sum */
    if (!dep || !sum) {
        free(dep);
        free(sum);
        diag_error(ctx->diag, DIAG_NOLOC, "out of memory in the pipeline pass");
        return false;
    }
    for (int i = 0; i < m->nvalues; i++)
        dep[i] = m->values[i]->kind == IR_VAL_INPUT && has_dim(m->values[i], B);
    for (const ir_op *op = m->first; op; op = op->next)
        for (int k = 0; k < op->noperands; k++)
            dep[op->result->id] |= dep[op->operands[k]->id];
    bool ok = true;
    const ir_op *bad = NULL;
    const char *why = NULL;
    if (loss && !has_dim(loss, B))
        sum[loss->id] = true;
    for (const ir_op *op = m->last; op && ok; op = op->prev) {
        const ir_value *v = op->result;
        if (op->phase != IR_PHASE_FORWARD || !sum[v->id])
            continue;
        int ndep = 0;
        for (int k = 0; k < op->noperands; k++)
            ndep += dep[op->operands[k]->id];
        bool linear;
        if (op->kind == IR_OP_EINSUM)
            linear = op->u.einsum.reduce == IR_RED_SUM && !op->u.einsum.gather && ndep == 1;
        else if (op->kind == IR_OP_ELEMENTWISE)
            linear = ndep == op->noperands &&
                     ir_ew_classify(op->u.ew.nodes, op->u.ew.nnodes, op->u.ew.root) == IR_EW_CLASS_LINEAR;
        else
            linear = ir_op_is_linear_reshard(op);
        if (!linear) {
            ok = false;
            bad = op;
            why = op->kind == IR_OP_ELEMENTWISE
                      ? "is not a sum of sums over the batch: a term that does not depend on the batch "
                        "would count once per microbatch, and a function of a sum over the batch is "
                        "not the sum of its values on the microbatches"
                      : "is not a sum over the batch's examples: the microbatches' losses would not "
                        "add up to it";
            break;
        }
        for (int k = 0; k < op->noperands; k++) {
            const ir_value *a = op->operands[k];
            if (dep[a->id] && !has_dim(a, B))
                sum[a->id] = true;
        }
    }
    for (const ir_op *op = m->first; op && ok; op = op->next) {
        if (op->phase != IR_PHASE_FORWARD || has_dim(op->result, B) || sum[op->result->id])
            continue;
        for (int k = 0; k < op->noperands; k++)
            if (has_dim(op->operands[k], B)) {
                ok = false;
                bad = op;
                why = loss ? "reduces the batch dim away outside the loss's sum, mixing the examples "
                             "that microbatches keep apart"
                           : "reduces the batch dim away, mixing the examples that microbatches keep "
                             "apart: a forward's microbatch sees only its own rows of the inputs and "
                             "states";
                break;
            }
    }
    if (!ok && report)
        diag_error(ctx->diag, bad->loc, "'%s' %s (%d microbatches of '%s'; docs/pipeline.md)",
                   bad->result->tensor ? bad->result->tensor : "?", why, M, m->dims[B].name);
    else if (!ok)
        diag_warning(ctx->diag, bad->loc, "'%s' %s: the batch runs as one microbatch, so the pipeline's "
                     "stages take turns (docs/pipeline.md)", bad->result->tensor ? bad->result->tensor : "?",
                     why);
    free(dep);
    free(sum);
    return ok;
}

/* A forward's state (a KV cache; the frontend allows one stacked on the
 * pipelined L in a program that does not train) holds rows of every
 * example: its dim after L must be the batch dim B, so that microbatch m
 * writes and reads rows [m |B|/M, (m+1) |B|/M) of each layer's block (its view,
 * codegen/pipeline.c) and sees no other microbatch's rows, as the
 * unpipelined program's row b sees only its own.  Returns 0, or 1 after
 * reporting. */
static int check_states(pass_ctx *ctx, const ir_module *m, int B, const ir_value *carried)
{
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v->kind != IR_VAL_STATE || v->type.rank < 1 || v->type.dims[0] != m->pipe.dim)
            continue;
        if (v->type.rank >= 2 && v->type.dims[1] == B)
            continue;
        const char *ln = m->dims[m->pipe.dim].name, *bn = m->dims[B].name;
        diag_error(ctx->diag, v->loc, "state '%s' is written by every microbatch of the pipeline: its dim "
                   "after '%s' must be '%s', the batch that the microbatches split (the first dim of '%s', "
                   "which the 'repeat' block carries), so that each microbatch writes and reads its own "
                   "rows; declare it %s[%s_%c, %s, ...]", v->tensor, ln, bn, carried->tensor, v->tensor, ln,
                   m->mesh.axes[m->pipe.axis].name, bn);
        return 1;
    }
    return 0;
}

/* The position of dim `d` in `t`, or -1. */
static int dim_at(const ir_type *t, int d)
{
    for (int k = 0; k < t->rank; k++)
        if (t->dims[k] == d)
            return k;
    return -1;
}

/* Microbatch m is rows [m b/M, (m+1) b/M) of each device's block of b
 * rows of every input and state (codegen/pipeline.c), which are the same
 * examples in all of them only if they split the batch dim B over the
 * same mesh axes: an error at the first that does not split it as the
 * first does (`In[B_X, ...]` with `At[B]`: declare `At[B_X]`).  Returns
 * 0, or 1 after reporting. */
static int check_batch_split(pass_ctx *ctx, const ir_module *m, int B)
{
    const ir_value *first = NULL;
    int fd = -1;
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        int d = dim_at(&v->type, B);
        if ((v->kind != IR_VAL_INPUT && v->kind != IR_VAL_STATE) || d < 0)
            continue;
        if (!first) {
            first = v;
            fd = d;
            continue;
        }
        const ir_sharding *a = &first->type.sh, *b = &v->type.sh;
        bool same = a->naxes[fd] == b->naxes[d];
        for (int k = 0; same && k < a->naxes[fd]; k++)
            same = a->axes[fd][k] == b->axes[d][k];
        if (same)
            continue;
        char b1[256], b2[256];
        diag_error(ctx->diag, v->loc, "%s splits the batch '%s' otherwise than %s: a microbatch is a "
                   "block of each device's rows of every input and state, the same examples only when "
                   "they split '%s' over the same mesh axes; declare them alike",
                   ir_type_str(m, v->tensor, &v->type, b2, sizeof b2), m->dims[B].name,
                   ir_type_str(m, first->tensor, &first->type, b1, sizeof b1), m->dims[B].name);
        return 1;
    }
    return 0;
}

/* Whether the program trains: a backward loop over the layers. */
static bool trains(const ir_module *m)
{
    for (const ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_LOOPBEGIN && op->u.loop.reverse && op->u.loop.dim == m->pipe.dim)
            return true;
    return false;
}

/* A forward's order: stage z runs F0 .. F(M-1), and its table (stage z
 * starts z slots late, as the first activation reaches it). */
static void keep_forward_order(ir_module *m, int Z, int M)
{
    ir_pipeline *pp = &m->pipe;
    pp->nitems = M;
    pp->order = ir_alloc(&m->arena, (size_t)Z * (size_t)M * sizeof *pp->order);
    int width = M > 10 ? 3 : 2;
    size_t cap = (size_t)Z * ((size_t)(Z + M) * (size_t)(width + 1) + 16) + 1, n = 0;
    char *t = ir_alloc(&m->arena, cap);
    for (int z = 0; z < Z; z++) {
        n += (size_t)snprintf(t + n, cap - n, "stage %d |", z);
        for (int s = 0; s < Z - 1 + M; s++) {
            char cell[16];
            int mb = s - z;
            snprintf(cell, sizeof cell, mb >= 0 && mb < M ? "F%d" : ".", mb);
            n += (size_t)snprintf(t + n, cap - n, " %-*s", s + 1 < Z - 1 + M ? width : 0, cell);
        }
        n += (size_t)snprintf(t + n, cap - n, "\n");
        for (int k = 0; k < M; k++)
            pp->order[z * M + k] = (ir_pipe_item){'F', k, 0};
    }
    pp->table = t;
}

static int keep_schedule(pass_ctx *ctx, ir_module *m, int Z, int M, int v, int schedule, const double *costed);

/* The chunks per stage v into *v: 1 except for the interleaved schedule,
 * whose v is --chunks (default 2); --chunks with another schedule is an
 * error.  Returns 0, or 1 after reporting. */
static int chunks_of(pass_ctx *ctx, int schedule, int *v)
{
    const char *cv = pass_option_value(ctx, "chunks");
    *v = 1;
    if (schedule != PP_INTERLEAVED) {
        if (!cv)
            return 0;
        diag_error(ctx->diag, DIAG_NOLOC, "--chunks=%s applies to --schedule=interleaved, and the schedule "
                   "is %s", cv, pp_schedule_name((pp_schedule)schedule));
        return 1;
    }
    *v = 2;
    if (cv && !parse_count(cv, v))
        return 1; /* refused by check_chunks already */
    return 0;
}

/* Interleaved (v > 1) needs M a multiple of Z (Megatron-LM's order runs
 * the microbatches in groups of Z; pp_build) and |L| a multiple of Z v
 * (blocks of |L| / (Z v) layers dealt round-robin to the stages); errors
 * located at the stacked param and at the block.  Returns 0, or 1 after
 * reporting. */
static int check_interleaved(pass_ctx *ctx, const ir_module *m, const ir_op *loop, int Z, int M, int v)
{
    const ir_dimdef *L = &m->dims[m->pipe.dim];
    if (v > 1 && L->size % ((int64_t)Z * v) != 0) {
        diag_error(ctx->diag, m->pipe.loc, "the %lld layers of '%s' do not split into %d stages x %d "
                   "chunks of equal size (--schedule=interleaved deals blocks of |%s| / (Z v) layers "
                   "round-robin to the stages; use a --chunks=v with %d v dividing %lld)",
                   (long long)L->size, L->name, Z, v, L->name, Z, (long long)L->size);
        return 1;
    }
    if (v > 1 && M % Z != 0) {
        diag_error(ctx->diag, loop->loc, "--schedule=interleaved runs the microbatches in groups of the %d "
                   "stages, and %d microbatches are not a multiple of %d (give --microbatches=%d or %d)",
                   Z, M, Z, Z, 2 * Z);
        return 1;
    }
    return 0;
}

static bool costed_times(pass_ctx *ctx, ir_module *m, int B, int64_t batch, int M, int schedule, double *t);

static bool splits(const ir_module *m, int B, int64_t batch, int M)
{
    int64_t parts;
    return !pass_pipeline_unsplit(m, B, batch, M, &parts);
}

int pass_pipeline(pass_ctx *ctx, ir_module *m)
{
    ir_pipeline *pp = &m->pipe;
    const char *mv = pass_option_value(ctx, "microbatches");
    const char *sv = pass_option_value(ctx, "schedule");
    const char *gv = pass_option_value(ctx, "grad-sync");
    const char *wv = pass_option_value(ctx, "w-fill");
    if (pp->axis < 0) {
        /* The one-device reference of --check runs unpipelined, whatever
         * was asked; a program with devices to pipeline over was asked
         * for something it cannot do. */
        if ((mv || sv || gv || wv) && ir_mesh_devices(&m->mesh) > 1) {
            diag_error(ctx->diag, DIAG_NOLOC, "--%s applies to a pipelined program (a 'repeat' block "
                       "whose stacked params split their layer dim over a mesh axis, like "
                       "'W[L_Z, D]'), and this one is not",
                       mv ? "microbatches" : sv ? "schedule" : gv ? "grad-sync" : "w-fill");
            return 1;
        }
        return 0;
    }
    if (pp->microbatches > 0)
        return 0; /* set up already (the pass given twice) */
    const ir_axis *z = &m->mesh.axes[pp->axis];
    int Z = (int)z->size;
    const ir_op *loop = forward_loop(m);
    if (!loop || loop->operands[0]->type.rank < 1) {
        diag_error(ctx->diag, pp->loc, "'%s' is pipelined, but no 'repeat' block carries a tensor "
                   "through its layers", pp->stacked);
        return 1;
    }
    const ir_value *carried = loop->operands[0];
    int B = carried->type.dims[0];
    int64_t batch = m->dims[B].size;
    int schedule = sv ? pp_schedule_lookup(sv) : PP_1F1B;
    int M = 0, v;
    if (chunks_of(ctx, schedule, &v) != 0)
        return 1;
    if (mv && !parse_count(mv, &M))
        return 1; /* refused by check_microbatches already */
    bool chosen = false;
    /* Before pricing: the choice prices the variant it compiles. */
    pp->grad_sync = gv ? grad_sync_lookup(gv) : IR_GRAD_SYNC_AUTO;
    pp->w_fill = wv ? w_fill_lookup(wv) : IR_W_FILL_STATIC;
    if (schedule == PP_ZB_AUTO) {
        /* zero-bubble is zb-h2 when the HBM holds it, else zb-h1
         * (pipeline_choose.c).  A forward runs every schedule's forward
         * half, and a backward with no dL/dW to split is refused by the
         * split, as zb-h1. */
        char note[320];
        if (trains(m) && pass_pipeline_split_applies(m)) {
            schedule = pass_pipeline_resolve_zb(ctx, m, B, batch, mv ? M : 0, note, sizeof note);
            pp->resolved = ir_strdup(&m->arena, note);
        } else {
            schedule = PP_ZB_H1;
        }
    }
    if (trains(m) && (!sv || !mv)) {
        /* Not given: the schedule among gpipe, 1f1b, interleaved (when
         * |L| / Z allows v >= 2 chunks) and (when the backward splits)
         * zb-h1 and zb-h2, M and v, the fastest that fits the HBM as the cost
         * model rates them (pipeline_choose.c). */
        int scheds[PP_SCHEDULE_COUNT] = {PP_1F1B, PP_GPIPE}, n = 2;
        if (sv) { /* given, or zero-bubble resolved */
            scheds[0] = schedule;
            n = 1;
        } else {
            if (pass_pipeline_split_applies(m)) { /* the concrete ones, never the alias */
                scheds[n++] = PP_ZB_H1;
                scheds[n++] = PP_ZB_H2;
            }
            scheds[n++] = PP_INTERLEAVED;
        }
        pipe_choice pc;
        pass_pipeline_choose(ctx, m, B, batch, scheds, n, mv ? M : 0, sv ? v : 0, &pc);
        if (pc.microbatches) {
            schedule = pc.schedule;
            v = pc.chunks;
            M = pc.microbatches;
            chosen = !sv;
        }
    }
    if (!M) /* a forward, or nothing priced: as many as there are stages */
        M = batch % Z == 0 && splits(m, B, batch, Z) ? Z : 1;
    if (batch % M != 0) {
        diag_error(ctx->diag, loop->loc, "%d microbatches do not divide the batch: '%s', the first dim of "
                   "'%s' that this 'repeat' block carries, has %lld", M, m->dims[B].name,
                   carried->tensor, (long long)batch);
        return 1;
    }
    /* Every value split along B must split a microbatch as it split the
     * batch; the stage axis splits stacked layer dims only (propagate
     * keeps it so: a stage runs whole ops of its own layers). */
    for (int i = 0; i < m->nvalues; i++) {
        const ir_type *t = &m->values[i]->type;
        for (int d = 0; d < t->rank; d++)
            for (int k = 0; k < t->sh.naxes[d]; k++)
                if (t->sh.axes[d][k] == pp->axis && !(d == 0 && t->dims[0] == pp->dim)) {
                    char b[256];
                    diag_error(ctx->diag, pp->loc, "internal error: %s is split over the pipeline's axis %c",
                               ir_type_str(m, m->values[i]->tensor, t, b, sizeof b), z->name);
                    return 1;
                }
    }
    /* A training step's states are its optimizer's (the frontend refuses
     * declared ones there). */
    if ((!trains(m) && check_states(ctx, m, B, carried) != 0) || check_batch_split(ctx, m, B) != 0)
        return 1;
    int64_t parts;
    const ir_value *bad = pass_pipeline_unsplit(m, B, batch, M, &parts);
    if (bad) {
        char b[256];
        diag_error(ctx->diag, loop->loc, "a microbatch of %lld of the %lld '%s' cannot be split "
                   "over the %lld devices that split '%s' in %s: use fewer microbatches",
                   (long long)(batch / M), (long long)batch, m->dims[B].name, (long long)parts,
                   m->dims[B].name, ir_type_str(m, bad->tensor, &bad->type, b, sizeof b));
        return 1;
    }
    /* Given, M must be right; chosen, one microbatch is the safe fallback. */
    if (M > 1 && !check_batch_sum(ctx, m, B, M, mv != NULL)) {
        if (mv)
            return 1;
        M = 1;
        if (chosen && schedule == PP_INTERLEAVED) { /* interleaved needs M a multiple of Z */
            schedule = PP_1F1B;
            v = 1;
        }
    }
    if (check_interleaved(ctx, m, loop, Z, M, v) != 0)
        return 1;
    /* Both given: nothing to choose, but a stage over the HBM is worth a
     * warning (pipeline_choose.c). */
    if (trains(m) && sv && mv)
        pass_pipeline_check_forced(ctx, m, B, batch, schedule, M, v);
    /* Zero-bubble (and zb-h2) runs a training step's dL/dW apart from its dL/dx: the
     * backward loop becomes two (pipeline_split.c).  A forward has no
     * backward to split and runs as every schedule's forward half. */
    if (pp_schedule_splits((pp_schedule)schedule) && trains(m) && pass_pipeline_split_backward(ctx, m) != 0)
        return 1;
    /* The stacked params' DP AllReduce or FSDP ReduceScatter, linear and
     * read by the update only, runs once per step on the sum over the
     * microbatches rather than in every microbatch's backward
     * (pipeline_grad.c), but those the choice or --grad-sync keeps per
     * microbatch (pp->grad_mb, pp->grad_sync). */
    if (trains(m))
        (void)pass_pipeline_defer_grads(ctx, m);
    if (!trains(m) && v == 1) {
        /* Forwards only: every schedule is GPipe's forward half, each
         * stage running F0 .. F(M-1) as the activations arrive. */
        keep_forward_order(m, Z, M);
        pp->schedule_name = "forward";
    } else {
        /* Zero-bubble's order depends on the stages' F, B and W times:
         * the costed ones when the cost model prices this module.  An
         * interleaved forward runs the forwards of the interleaved order
         * (keep_schedule drops its backwards). */
        double *t = calloc((size_t)Z * 3, sizeof *t);
        bool costed = t && pp_schedule_splits((pp_schedule)schedule) && costed_times(ctx, m, B, batch, M, schedule, t);
        int rc = keep_schedule(ctx, m, Z, M, v, schedule, costed ? t : NULL);
        free(t);
        if (rc != 0)
            return 1;
    }
    pp->chunks = v;
    pp->microbatches = M;
    pp->schedule = schedule;
    pp->batch_dim = B;
    pp->batch_size = batch;
    m->dims[B].size = batch / M;
    return pass_pipeline_permutes(ctx, m);
}

/* The split schedule's (zb-h1, zb-h2) per-stage times of the (split) module at M microbatches
 * into t ([3][Z]: t_f, t_b, t_w, seconds), as the cost pass prices them
 * (cost_annotate_ops, pipe_work_of, pipe_price's stage times); false, t
 * untouched, when they cannot be priced.  Leaves the dims as it found
 * them. */
static bool costed_times(pass_ctx *ctx, ir_module *m, int B, int64_t batch, int M, int schedule, double *t)
{
    cost_hw local;
    const cost_hw *hw = pass_pipeline_pricing_hw(ctx, &local);
    int Z = (int)m->mesh.axes[m->pipe.axis].size;
    double *arr = malloc((size_t)Z * 3 * sizeof *arr);
    char err[512];
    pipe_work w;
    pipe_priced priced;
    pp_params used;
    bool ok = false;
    if (hw && arr) {
        m->dims[B].size = batch / M;
        cost_annotate_ops(m, hw);
        ok = pipe_work_of(m, true, &w, err, sizeof err) == 0 && w.layers % Z == 0 &&
             pipe_price(&w, hw, Z, w.layers / Z, M, (pp_schedule)schedule, m->mesh.axes[m->pipe.axis].dcn, arr,
                        &used, &priced, err, sizeof err) == 0;
        m->dims[B].size = batch;
    }
    if (ok)
        memcpy(t, arr, (size_t)Z * 3 * sizeof *t);
    free(arr);
    return ok;
}

/* Stage z's items of `schedule` for Z stages, M microbatches and v chunks
 * per stage (1 except interleaved), and its table: pp_build with unit
 * times (gpipe's, 1f1b's and interleaved's orders depend on nothing else),
 * or for zb-h1 and zb-h2 with the `costed` times ([3][Z]) when given.  A
 * forward (no backward loop) keeps the order's forwards only. */
static int keep_schedule(pass_ctx *ctx, ir_module *m, int Z, int M, int v, int schedule, const double *costed)
{
    ir_pipeline *pp = &m->pipe;
    double *t = malloc((size_t)Z * 3 * sizeof *t);
    if (!t) {
        diag_error(ctx->diag, DIAG_NOLOC, "out of memory in the pipeline pass");
        return 1;
    }
    /* Zero-bubble's B is the backward's dL/dx half, its W the other. */
    bool zb = pp_schedule_splits((pp_schedule)schedule);
    for (int s = 0; s < Z; s++) {
        t[s] = 1;
        t[Z + s] = zb ? 1 : 2;
        t[2 * Z + s] = 1;
    }
    if (zb && costed)
        memcpy(t, costed, (size_t)Z * 3 * sizeof *t);
    pp_params par = {.stages = Z, .microbatches = M, .chunks = v, .t_f = t, .t_b = t + Z,
                     .t_w = zb ? t + 2 * Z : NULL};
    pp_plan plan;
    char err[256];
    int rc = pp_build(&par, (pp_schedule)schedule, &plan, err, sizeof err);
    free(t);
    if (rc != 0) {
        diag_error(ctx->diag, pp->loc, "%s", err);
        return 1;
    }
    bool forward = !trains(m);
    if (forward) /* the forwards of the order: they wait for forwards only */
        for (int z = 0; z < Z; z++) {
            pp_stage_plan *st = &plan.stage[z];
            int n = 0;
            for (int k = 0; k < st->n_items; k++)
                if (st->items[k].kind == PP_F)
                    st->items[n++] = st->items[k];
            st->n_items = n;
        }
    keep_order(m, &plan);
    keep_table(m, &plan);
    pp_plan_free(&plan);
    pp->schedule_name = forward ? "forward-interleaved" : pp_schedule_name((pp_schedule)schedule);
    return 0;
}
