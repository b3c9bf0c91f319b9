/*
 * pipeline_plan.c - which stages run each op of a pipelined program, in
 * which work item, and which values live in a microbatch's frame
 * (pipeline.c's file comment: how the run function runs them).
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline_internal.h"

/* The op `i`'s emission point: the op it is fused into (followed to the
 * end), or its row group's first op. */
static int emit_at(const cg_plan *p, int i)
{
    for (int guard = 0; p->fused_into[i] >= 0 && guard < p->nops; guard++)
        i = p->fused_into[i];
    return p->row_group[i] >= 0 ? p->row_group[i] : i;
}

/* The plan index of the op making use `u`: every op has a result, whose
 * defining op it is. */
static int use_index(const cg_plan *p, const ir_use *u)
{
    return p->def_index[u->op->result->id];
}

static bool fail(diag_ctx *d, const char *what)
{
    diag_error(d, DIAG_NOLOC, "codegen: pipelined program: %s", what);
    return false;
}

/* How many devices' row blocks of the inputs an output `v` with the batch
 * dim first holds in its own block: microbatch m is rows [m b/M, (m+1)
 * b/M) of each device's b rows of the inputs (the pipeline pass checked
 * that they all split the batch alike), so an output gathered over G of
 * the axes that split them holds a microbatch as G blocks of such rows,
 * in the order of those devices, each going to its own part of the
 * whole batch's block.  1 when v splits the batch as the inputs do; 0
 * when its axes on the batch are not the first of theirs (its block is
 * then not made of whole device blocks of theirs). */
static int row_groups(const ir_module *m, const cg_plan *p, const ir_value *v)
{
    const ir_sharding *in = NULL;
    int d = -1;
    for (int i = 0; i < m->nvalues && !in; i++) {
        const ir_type *t = &m->values[i]->type;
        for (int k = 0; k < t->rank && p->input_index[i] >= 0 && !in; k++)
            if (t->dims[k] == m->pipe.batch_dim) {
                in = &t->sh;
                d = k;
            }
    }
    const ir_sharding *out = &v->type.sh;
    int64_t parts = 1;
    for (int k = 0; in && k < in->naxes[d]; k++) {
        if (k < out->naxes[0] ? out->axes[0][k] != in->axes[d][k] : false)
            return 0;
        if (k >= out->naxes[0])
            parts *= m->mesh.axes[in->axes[d][k]].size;
    }
    if (out->naxes[0] > (in ? in->naxes[d] : 0))
        return 0;
    return (int)parts;
}

/* The loops, the items and the stages of every op and value. */
bool cg_pp_classify(pp_ctx *x, diag_ctx *d)
{
    const ir_module *m = x->m;
    const cg_plan *p = x->p;
    int n = p->nops;
    x->fb = x->fe = x->bb = x->be = x->wb = x->we = -1;
    for (int i = 0; i < n; i++) {
        const ir_op *op = p->ops[i];
        if ((op->kind != IR_OP_LOOPBEGIN && op->kind != IR_OP_LOOPEND) || op->u.loop.dim != m->pipe.dim)
            continue;
        bool rev = op->u.loop.begin->u.loop.reverse;
        /* A second reverse loop is zero-bubble's dL/dW half. */
        bool w = rev && (op->kind == IR_OP_LOOPBEGIN ? x->be >= 0 : x->wb >= 0);
        int *slot = op->kind == IR_OP_LOOPBEGIN ? (w ? &x->wb : rev ? &x->bb : &x->fb)
                                                : (w ? &x->we : rev ? &x->be : &x->fe);
        if (*slot >= 0)
            return fail(d, "more than one forward loop, or more than two backward loops, over the layers");
        *slot = i;
    }
    x->fp = x->bp = -1;
    for (int i = 0; i < n; i++)
        if (p->ops[i]->kind == IR_OP_PERMUTE) {
            int def = p->def_index[p->ops[i]->operands[0]->id];
            *(def == x->fe ? &x->fp : &x->bp) = i;
        }
    bool w_items = false;
    int Z = m->pipe.axis >= 0 ? (int)m->mesh.axes[m->pipe.axis].size : 0;
    if (Z > 1 && (x->fp != x->fe + 1 || (x->be >= 0 && x->bp != x->be + 1)))
        return fail(d, "each loop over the layers hands its result to the neighbouring stage through the "
                       "CollectivePermute right after it (the pipeline pass puts them there)");
    for (int k = 0; m->pipe.order && k < Z * m->pipe.nitems; k++)
        w_items |= m->pipe.order[k].kind == 'W';
    if ((x->wb >= 0) != w_items)
        return fail(d, "the schedule has dL/dW items (W) exactly when the backward is split into a "
                       "dL/dx loop and a dL/dW loop (zero-bubble, passes/pipeline_split.c)");
    /* Inference runs forwards only: no backward loop, which the
     * conditions below see as one past the last op. */
    x->trains = x->bb >= 0;
    if (!x->trains && x->be < 0)
        x->bb = x->be = n;
    if (x->fb < 0 || x->fe < x->fb || x->bb < x->fe || x->be < x->bb)
        return fail(d, "it needs a forward loop over the layers and, after it, their backward loop");
    for (int i = 0; i < n; i++) {
        const ir_op *op = p->ops[i];
        if (op->phase == IR_PHASE_UPDATE) {
            if (i < x->be)
                return fail(d, "an update op comes before the backward loop ends");
            x->item[i] = 'E';
        } else if (i > x->fe && i < x->bb) {
            x->item[i] = op->phase == IR_PHASE_FORWARD ? 'F' : 'B';
        } else {
            x->item[i] = i <= x->fe ? 'F' : x->wb >= 0 && i >= x->wb ? 'W' : 'B';
        }
    }
    /* Between the two backward loops, what only the dL/dW item reads (the
     * scalar its loop carries) is its own. */
    for (int i = x->wb - 1; i > x->be && x->wb >= 0; i--) {
        const ir_value *v = p->ops[i]->result;
        bool w = x->item[i] == 'B' && v->nuses > 0;
        for (int u = 0; u < v->nuses && w; u++)
            w = x->item[use_index(p, &v->uses[u])] == 'W';
        if (w)
            x->item[i] = 'W';
    }
    /* A linear collective after the backward loop that only the update
     * reads (a gradient's DP AllReduce or FSDP ReduceScatter, seed 000)
     * commutes with the sum over the microbatches: it runs once, on the
     * sum, rather than once per microbatch. */
    for (int i = n - 1; i > x->be; i--) {
        const ir_op *op = p->ops[i];
        const ir_value *v = op->result;
        bool linear = ir_op_is_linear_reshard(op);
        bool update_only = (x->item[i] == 'B' || x->item[i] == 'W') && v->nuses > 0;
        for (int u = 0; u < v->nuses && update_only; u++)
            update_only = x->item[use_index(p, &v->uses[u])] == 'E';
        for (int j = 0; j < m->noutputs && update_only; j++)
            update_only = m->outputs[j].value != v;
        if (linear && update_only)
            x->item[i] = 'E';
    }
    x->first_end = n;
    for (int i = 0; i < n && x->first_end == n; i++)
        if (x->item[i] == 'E')
            x->first_end = i;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < p->ops[i]->noperands && x->item[i] != 'E'; k++) {
            int def = p->def_index[p->ops[i]->operands[k]->id];
            if (def >= 0 && x->item[def] == 'E')
                return fail(d, "a forward or backward op reads a value of the update");
        }
    for (int i = 0; i < n; i++)
        x->at[i] = emit_at(p, i);
    /* Availability, in program order. */
    for (int v = 0; v < m->nvalues; v++)
        x->avail[v] = ST_ALL;
    for (int i = 0; i < n; i++) {
        const ir_op *op = p->ops[i];
        uint8_t a = ST_ALL;
        if (i == x->fe)
            a = ST_LAST;
        else if (i == x->be)
            a = ST_FIRST;
        else if (!op->loop && op->kind != IR_OP_LOOPBEGIN && x->item[i] != 'E')
            for (int k = 0; k < op->noperands; k++)
                a &= x->avail[op->operands[k]->id];
        if (!a)
            return fail(d, "an op reads values of both the first and the last stage");
        x->avail[op->result->id] = a;
    }
    /* Accumulated values: read by the update, or a returned output. */
    for (int i = x->first_end; i < n; i++)
        for (int k = 0; k < p->ops[i]->noperands && x->item[i] == 'E'; k++) {
            const ir_value *v = p->ops[i]->operands[k];
            if (p->def_index[v->id] >= 0 && x->item[p->def_index[v->id]] != 'E')
                x->acc[v->id] = true;
        }
    for (int j = 0; j < m->noutputs; j++) {
        const ir_value *v = m->outputs[j].value;
        int def = p->def_index[v->id];
        bool batched = v->type.rank > 0 && v->type.dims[0] == m->pipe.batch_dim;
        if (m->outputs[j].update ? def >= 0 && x->item[def] != 'E'
                                 : def < 0 || (x->trains ? v->type.rank > 0 : !batched))
            return fail(d, x->trains ? "its outputs are its loss (a scalar) and its updates"
                                     : "every output of a pipelined forward has the batch dim first");
        if (!m->outputs[j].update) {
            x->acc[v->id] = true;
            x->rows[v->id] = batched;
            x->groups[v->id] = batched ? row_groups(m, p, v) : 1;
            if (!x->groups[v->id])
                return fail(d, "an output of a pipelined forward splits the batch over mesh axes that "
                               "are not the first of those that split it in the inputs");
        }
    }
    /* The stages each op runs on, from its readers (reverse order). */
    for (int i = n - 1; i >= 0; i--) {
        const ir_op *op = p->ops[i];
        if (x->item[i] == 'E' || op->loop || (i >= x->fb && i <= x->fe) || (i >= x->bb && i <= x->be) ||
            (x->wb >= 0 && i >= x->wb && i <= x->we)) {
            x->run[i] = ST_ALL;
            continue;
        }
        const ir_value *v = op->result;
        uint8_t need = x->acc[v->id] ? x->avail[v->id] : 0;
        for (int u = 0; u < v->nuses; u++) {
            int ui = use_index(p, &v->uses[u]);
            if (x->item[ui] == 'E')
                continue;
            need |= ui == x->fb ? ST_FIRST : ui == x->bb ? ST_LAST : x->run[ui];
        }
        if (need & ~x->avail[v->id])
            return fail(d, "a value is needed on a stage that cannot compute it (a value of the loss "
                           "read in the layers?)");
        x->run[i] = need & x->avail[v->id];
    }
    /* A row group runs as its first op does: its members' results must be
     * wanted where it runs (a fused producer has no result of its own). */
    for (int i = 0; i < n; i++) {
        int g = p->row_group[i];
        if (g >= 0 && g != i && p->fused_into[i] < 0 &&
            (x->item[g] != x->item[i] || (x->run[i] & ~x->run[g])))
            return fail(d, "the ops of a row group run on different stages");
    }
    return true;
}

/* Segments (consecutive emission points of one item with the same stages;
 * each loop one segment) and the frame slots of the values that cross
 * them. */
void cg_pp_segment(pp_ctx *x)
{
    const cg_plan *p = x->p;
    int n = p->nops, s = -1;
    char item = 0;
    uint8_t run = 0;
    for (int i = 0; i < n; i++) {
        if (x->at[i] != i)
            continue;
        bool in_loop = (i > x->fb && i <= x->fe) || (i > x->bb && i <= x->be) ||
                       (x->wb >= 0 && i > x->wb && i <= x->we);
        if (!in_loop && (x->item[i] != item || x->run[i] != run || i == x->fb || i == x->bb ||
                         i == x->fe + 1 || i == x->be + 1 || (x->wb >= 0 && (i == x->wb || i == x->we + 1))))
            s++;
        item = x->item[i];
        run = x->run[i];
        x->seg[i] = s;
    }
    for (int i = 0; i < n; i++)
        x->seg[i] = x->seg[x->at[i]];
    for (int v = 0; v < x->m->nvalues; v++)
        x->slot[v] = -1;
    for (int i = 0; i < n; i++) {
        const ir_op *op = p->ops[i];
        for (int k = 0; k < op->noperands; k++) {
            int v = op->operands[k]->id, def = p->def_index[v];
            if (def >= 0 && x->item[i] != 'E' && x->seg[def] != x->seg[i] && x->slot[v] < 0)
                x->slot[v] = x->nslots++;
        }
    }
    /* What crosses between stages: the loops' carried values. */
    const int ends[4] = {x->fb, x->fe, x->bb, x->be};
    for (int k = 0; k < (x->trains ? 4 : 2); k++) {
        const ir_op *op = p->ops[ends[k]];
        int v = (k % 2 == 0 ? op->operands[0] : op->result)->id;
        if (x->slot[v] < 0)
            x->slot[v] = x->nslots++;
    }
}

void cg_pp_init(pp_ctx *x, const ir_module *m, const cg_plan *p)
{
    memset(x, 0, sizeof *x);
    x->m = m;
    x->p = p;
    size_t n = (size_t)p->nops + 1, nv = (size_t)m->nvalues + 1;
    x->item = cg_calloc(n, 1);
    x->run = cg_calloc(n, 1);
    x->at = cg_calloc(n, sizeof(int));
    x->seg = cg_calloc(n, sizeof(int));
    x->avail = cg_calloc(nv, 1);
    x->acc = cg_calloc(nv, sizeof(bool));
    x->slot = cg_calloc(nv, sizeof(int));
    x->rows = cg_calloc(nv, sizeof(bool));
    x->groups = cg_calloc(nv, sizeof(int));
}

void cg_pp_free(pp_ctx *x)
{
    free(x->item);
    free(x->run);
    free(x->at);
    free(x->seg);
    free(x->avail);
    free(x->acc);
    free(x->slot);
    free(x->rows);
    free(x->groups);
}

bool cg_pipeline_check(const ir_module *m, const cg_plan *p, diag_ctx *d)
{
    if (m->pipe.microbatches < 1)
        return fail(d, "the pipeline pass did not run (--passes= must include it after propagate)");
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = m->values[v];
        if (p->input_index[v] < 0 || val->type.rank < 1)
            continue;
        /* A state stacked on the layers holds each layer's rows of the
         * whole batch, the batch dim second (the pipeline pass checked):
         * a microbatch's rows of a layer are a block of them. */
        bool state = val->kind == IR_VAL_STATE && val->type.dims[0] == m->pipe.dim;
        for (int k = state ? 2 : 1; k < val->type.rank; k++)
            if (val->type.dims[k] == m->pipe.batch_dim) {
                char b[256];
                snprintf(b, sizeof b, "input '%s' holds the batch dim '%s' at position %d: put it "
                         "first, so that a microbatch is a block of its rows", val->tensor,
                         m->dims[m->pipe.batch_dim].name, k + 1);
                return fail(d, b);
            }
    }
    pp_ctx x;
    cg_pp_init(&x, m, p);
    bool ok = cg_pp_classify(&x, d);
    if (ok && m->pipe.chunks > 1) {
        /* Interleaved: a chunk's loop adds its layers' gradients into a
         * stacked sum (cg_fn.stack_sum); a stacked sum another item also
         * reads would be added whole after every chunk. */
        cg_pp_segment(&x);
        for (int i = 0; i < p->nops && ok; i++) {
            int v = p->ops[i]->result->id;
            if (p->ops[i]->kind == IR_OP_LAYERSTACK && x.acc[v] && x.slot[v] >= 0)
                ok = fail(d, "with --schedule=interleaved, a gradient stacked over the layers may be read "
                             "by the update only");
        }
    }
    cg_pp_free(&x);
    return ok;
}

