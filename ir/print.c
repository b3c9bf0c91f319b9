/*
 * print.c - the --dump-ir text format (docs/ir.md).
 *
 *   Win.1[D, F_Y] = AllGather_X Win[D_X, F_Y]   # for Tmp = In * Win: ...; 0.50 MiB/device
 *
 * One line per op in the seeds' notation: the result's type, the op, its
 * operands' types; ops inserted by a pass carry their reason, and every op
 * its per-device result size and, after the cost pass, its time and bound.
 */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "print_internal.h"

const char *ir_bound_name(ir_bound b)
{
    switch (b) {
    case IR_BOUND_COMPUTE: return "compute";
    case IR_BOUND_MEMORY: return "memory";
    case IR_BOUND_BANDWIDTH: return "bandwidth";
    case IR_BOUND_LATENCY: return "latency";
    case IR_BOUND_NONE: break;
    }
    return "";
}

const char *ir_einsum_spec(const ir_module *m, const ir_op *op, char *buf, size_t size)
{
    char letter[IR_MAX_OPERANDS * IR_MAX_RANK + IR_MAX_RANK][2];
    int label_of[IR_MAX_OPERANDS * IR_MAX_RANK + IR_MAX_RANK];
    int n = 0;
    bool used[26] = {0};
    /* Collect distinct labels in order of appearance. */
    for (int i = 0; i <= op->noperands; i++) {
        int rank = i < op->noperands ? op->operands[i]->type.rank : op->result->type.rank;
        for (int j = 0; j < rank; j++) {
            int L = i < op->noperands ? op->u.einsum.labels[i][j] : op->u.einsum.result_labels[j];
            bool seen = false;
            for (int k = 0; k < n; k++)
                seen |= label_of[k] == L;
            if (!seen)
                label_of[n++] = L;
        }
    }
    for (int k = 0; k < n; k++) {
        int c = tolower((unsigned char)m->dims[label_of[k]].name[0]);
        if (c < 'a' || c > 'z' || used[c - 'a']) {
            c = 'a';
            while (c <= 'z' && used[c - 'a'])
                c++;
        }
        if (c > 'z')
            c = '?';
        else
            used[c - 'a'] = true;
        letter[k][0] = (char)c;
        letter[k][1] = 0;
    }
    size_t pos = 0;
    buf[0] = 0;
    for (int i = 0; i <= op->noperands; i++) {
        int rank = i < op->noperands ? op->operands[i]->type.rank : op->result->type.rank;
        if (i == op->noperands && pos + 3 < size) {
            memcpy(buf + pos, "->", 3);
            pos += 2;
        } else if (i > 0 && pos + 2 < size) {
            buf[pos++] = ',';
            buf[pos] = 0;
        }
        for (int j = 0; j < rank; j++) {
            int L = i < op->noperands ? op->u.einsum.labels[i][j] : op->u.einsum.result_labels[j];
            for (int k = 0; k < n; k++)
                if (label_of[k] == L && pos + 2 < size) {
                    buf[pos++] = letter[k][0];
                    buf[pos] = 0;
                }
        }
    }
    return buf;
}

/* Appends the expression under node `n` to buf. */
static void ew_put(const ir_module *m, const ir_op *op, int n, char *buf, size_t size, size_t *pos, int prec)
{
    const ir_ew_node *e = &op->u.ew.nodes[n];
    char tmp[64];
    size_t len = strlen(buf);
    *pos = len;
#define PUT(s) do { const char *s_ = (s); size_t l_ = strlen(s_); \
        if (*pos + l_ + 1 < size) { memcpy(buf + *pos, s_, l_ + 1); *pos += l_; } } while (0)
    switch (e->kind) {
    case IR_EW_OPERAND: {
        char name[96], type[512];
        const ir_value *v = op->operands[e->operand];
        /* An operand of another float dtype is converted as it is read:
         * printed as the cast the source would write. */
        ir_dtype to = op->result ? op->result->type.dtype : v->type.dtype;
        bool cast = v->type.dtype != to && v->type.dtype != IR_I32;
        if (cast) {
            PUT(ir_dtype_name(to));
            PUT("(");
        }
        PUT(ir_type_str(m, ir_value_name(v, name, sizeof name), &v->type, type, sizeof type));
        if (cast)
            PUT(")");
        break;
    }
    case IR_EW_CONST:
        if (isinf(e->value))
            snprintf(tmp, sizeof tmp, "%sinf", e->value < 0 ? "-" : "");
        else
            snprintf(tmp, sizeof tmp, "%.17g", e->value);
        PUT(tmp);
        break;
    case IR_EW_INDEX:
        PUT(m->dims[e->dim].name);
        break;
    case IR_EW_ADD:
    case IR_EW_SUB:
        if (prec > 1) PUT("(");
        ew_put(m, op, e->a, buf, size, pos, 1);
        PUT(e->kind == IR_EW_ADD ? " + " : " - ");
        ew_put(m, op, e->b, buf, size, pos, 2);
        if (prec > 1) PUT(")");
        break;
    case IR_EW_MUL:
    case IR_EW_DIV:
        if (prec > 2) PUT("(");
        ew_put(m, op, e->a, buf, size, pos, 2);
        PUT(e->kind == IR_EW_MUL ? " * " : " / ");
        ew_put(m, op, e->b, buf, size, pos, 3);
        if (prec > 2) PUT(")");
        break;
    case IR_EW_MAX:
    case IR_EW_MIN:
    case IR_EW_SELECT:
    case IR_EW_CALL:
        PUT(e->kind == IR_EW_CALL ? ir_func_name(e->fn) : ir_ew_spelling(e->kind));
        PUT("(");
        ew_put(m, op, e->a, buf, size, pos, 0);
        if (ir_ew_arity(e->kind) >= 2) {
            PUT(", ");
            ew_put(m, op, e->b, buf, size, pos, 0);
        }
        if (ir_ew_arity(e->kind) >= 3) {
            PUT(", ");
            ew_put(m, op, e->c, buf, size, pos, 0);
        }
        PUT(")");
        break;
    default:
        if (!ir_ew_is_compare(e->kind)) {
            PUT("?");
            break;
        }
        ew_put(m, op, e->a, buf, size, pos, 1);
        PUT(" ");
        PUT(ir_ew_spelling(e->kind));
        PUT(" ");
        ew_put(m, op, e->b, buf, size, pos, 1);
        break;
    }
#undef PUT
}

const char *ir_ew_str(const ir_module *m, const ir_op *op, char *buf, size_t size)
{
    size_t pos = 0;
    buf[0] = 0;
    if (op->u.ew.nnodes > 0)
        ew_put(m, op, op->u.ew.root, buf, size, &pos, 0);
    return buf;
}

const char *ir_coll_str(const ir_module *m, const ir_op *op, char *buf, size_t size)
{
    char ax[IR_MAX_AXES + 1];
    bool red = (op->kind == IR_OP_ALLREDUCE || op->kind == IR_OP_REDUCESCATTER) &&
               op->u.coll.reduce != IR_RED_SUM;
    snprintf(buf, size, "%s_%s%s%s%s", ir_op_name(op->kind),
             ir_axes_str(&m->mesh, op->u.coll.axes, op->u.coll.naxes, ax, sizeof ax),
             red ? "(" : "", red ? ir_reduce_name(op->u.coll.reduce) : "", red ? ")" : "");
    return buf;
}

const char *ir_ms_dataflow_name(ir_ms_dataflow df)
{
    switch (df) {
    case IR_MS_OS: return "OS";
    case IR_MS_LS: return "LS";
    case IR_MS_RS: return "RS";
    }
    return "?";
}

/* Per-device size of the split dim at position `dim` of `t`, before and after
 * the move, and one sub-shard's share. */
static int64_t move_local(const ir_module *m, const ir_op *op, const ir_ms_move *mv)
{
    const ir_value *v = mv->operand >= 0 ? op->operands[mv->operand] : op->result;
    return ir_local_size(m, &v->type, mv->dim);
}

const char *ir_ms_iter_str(const ir_module *m, const ir_op *op, char *buf, size_t size)
{
    char spec[256], ax[4], name[96];
    size_t pos = 0;
    int K = op->u.ms.k;
    const char *split = m->dims[op->u.ms.split_label].name;
    buf[0] = 0;
#define PUTF(...) do { if (pos < size) { int n_ = snprintf(buf + pos, size - pos, __VA_ARGS__); \
        if (n_ > 0) pos += (size_t)n_; } } while (0)
    PUTF("for k in 0..%d:", K - 1);
    for (int i = 0; i < op->u.ms.nmoves; i++) {
        const ir_ms_move *mv = &op->u.ms.moves[i];
        if (mv->kind != IR_OP_ALLGATHER)
            continue;
        int8_t a = (int8_t)mv->axis;
        int64_t l = move_local(m, op, mv);
        PUTF(" AllGather_%s(%s sub-shard k, %s %lld -> %lld);",
             ir_axes_str(&m->mesh, &a, 1, ax, sizeof ax),
             ir_value_name(op->operands[mv->operand], name, sizeof name), split, (long long)(l / K),
             (long long)(l / K * m->mesh.axes[mv->axis].size));
    }
    PUTF(" partial einsum(%s)", ir_einsum_spec(m, op, spec, sizeof spec));
    for (int i = 0; i < op->u.ms.nmoves; i++) {
        const ir_ms_move *mv = &op->u.ms.moves[i];
        if (mv->kind != IR_OP_REDUCESCATTER)
            continue;
        int8_t a = (int8_t)mv->axis;
        int64_t l = move_local(m, op, mv);
        PUTF("; ReduceScatter_%s(into %s sub-shard k, %s %lld -> %lld)",
             ir_axes_str(&m->mesh, &a, 1, ax, sizeof ax), ir_value_name(op->result, name, sizeof name),
             split, (long long)(l / K * m->mesh.axes[mv->axis].size), (long long)(l / K));
    }
    PUTF("; blocked slicing, block %d", op->u.ms.block);
#undef PUTF
    return buf;
}

/* Prints "Name[dims]" of value v. */
static const char *vstr(const ir_module *m, const ir_value *v, char *buf, size_t size)
{
    char name[96];
    return ir_type_str(m, ir_value_name(v, name, sizeof name), &v->type, buf, size);
}

static void print_cost(FILE *out, const ir_cost *c)
{
    if (!c->valid)
        return;
    fprintf(out, "; %.3g us %s-bound", c->time * 1e6, ir_bound_name(c->bound));
}

/* Writes " A, B" for the operands of `op`. */
static void print_operands(FILE *out, const ir_module *m, const ir_op *op)
{
    char b[4096];
    for (int i = 0; i < op->noperands; i++)
        fprintf(out, "%s %s", i ? "," : "", vstr(m, op->operands[i], b, sizeof b));
}

/* The printer hooks of ir_op_traits: each op's right-hand side. */

void ir_print_loop(FILE *out, const ir_module *m, const ir_op *op)
{
    const ir_dimdef *dd = op->u.loop.dim >= 0 && op->u.loop.dim < m->ndims ? &m->dims[op->u.loop.dim] : NULL;
    if (op->kind == IR_OP_LOOPBEGIN)
        fprintf(out, "LoopBegin(%s = %lld%s)", dd ? dd->name : "?", dd ? (long long)dd->size : 0LL,
                op->u.loop.reverse ? ", reverse" : "");
    else
        fprintf(out, "%s(%s)", ir_op_name(op->kind), dd ? dd->name : "?");
    print_operands(out, m, op);
}

void ir_print_einsum(FILE *out, const ir_module *m, const ir_op *op)
{
    char b2[512];
    if (op->u.einsum.reduce != IR_RED_SUM)
        fprintf(out, "%s ", ir_reduce_name(op->u.einsum.reduce));
    /* A gather: rows of operand 1 looked up by the indices in operand 0. */
    fprintf(out, "%s(%s)", op->u.einsum.gather    ? "gather"
                           : op->u.einsum.scatter ? "scatter_add"
                                                  : "einsum",
            ir_einsum_spec(m, op, b2, sizeof b2));
    if (op->u.einsum.scale != 1.0)
        fprintf(out, " * %.17g", op->u.einsum.scale);
    if (op->u.einsum.gather_zero_outside)
        fprintf(out, " zero-outside");
    print_operands(out, m, op);
}

void ir_print_ew(FILE *out, const ir_module *m, const ir_op *op)
{
    char b3[4096];
    fprintf(out, "%s", ir_ew_str(m, op, b3, sizeof b3));
}

void ir_print_ms(FILE *out, const ir_module *m, const ir_op *op)
{
    char ax[2][4], b2[512];
    int8_t ra = (int8_t)op->u.ms.row_axis, ca = (int8_t)op->u.ms.col_axis;
    fprintf(out, "MeshSlice(%s, K=%d, rows %s, cols %s, split %s) einsum(%s)",
            ir_ms_dataflow_name(op->u.ms.dataflow), op->u.ms.k,
            ir_axes_str(&m->mesh, &ra, 1, ax[0], sizeof ax[0]),
            ir_axes_str(&m->mesh, &ca, 1, ax[1], sizeof ax[1]),
            m->dims[op->u.ms.split_label].name, ir_einsum_spec(m, op, b2, sizeof b2));
    if (op->u.ms.scale != 1.0)
        fprintf(out, " * %.17g", op->u.ms.scale);
    print_operands(out, m, op);
}

void ir_print_update(FILE *out, const ir_module *m, const ir_op *op)
{
    const ir_value *a = op->noperands > 0 ? op->operands[0] : NULL;
    int dd = op->u.update.dim;
    int rr = op->u.update.row;
    fprintf(out, "UpdateSlice(%s", a && dd >= 0 && dd < a->type.rank ? m->dims[a->type.dims[dd]].name : "?");
    if (a && rr >= 0 && rr < a->type.rank) /* per row: each row of this dim at its own position */
        fprintf(out, " per %s", m->dims[a->type.dims[rr]].name);
    fputc(')', out);
    print_operands(out, m, op);
}

void ir_print_grad(FILE *out, const ir_module *m, const ir_op *op)
{
    fputs("Grad", out);
    print_operands(out, m, op);
}

void ir_print_coll(FILE *out, const ir_module *m, const ir_op *op)
{
    char b2[512], b3[4096];
    fprintf(out, "%s %s", ir_coll_str(m, op, b2, sizeof b2), vstr(m, op->operands[0], b3, sizeof b3));
}

/* "CollectivePermute_Z(+1: 0->1, 1->2) H.5[B, E]": the axis, the shift
 * ("+1 cyclic" for a ring) and its source->target pairs (the first three
 * and the last when there are more than eight), then the operand. */
void ir_print_perm(FILE *out, const ir_module *m, const ir_op *op)
{
    int a = op->u.perm.axis;
    bool ok = a >= 0 && a < m->mesh.naxes;
    int n = ok ? (int)m->mesh.axes[a].size : 0, npairs = 0;
    for (int z = 0; z < n; z++)
        npairs += ir_perm_target(m, op, z) >= 0;
    fprintf(out, "CollectivePermute_%c(%+d%s:", ok ? m->mesh.axes[a].name : '?', op->u.perm.delta,
            op->u.perm.cyclic ? " cyclic" : "");
    for (int z = 0, k = 0; z < n; z++) {
        int t = ir_perm_target(m, op, z);
        if (t < 0)
            continue;
        if (npairs <= 8 || k < 3 || k == npairs - 1)
            fprintf(out, "%s %d->%d", k ? "," : "", z, t);
        else if (k == 3)
            fputs(", ...", out);
        k++;
    }
    fputc(')', out);
    print_operands(out, m, op);
}

/* A pipelined program's stages and schedule, as comment lines. */
static void print_pipeline(FILE *out, const ir_module *m)
{
    const ir_pipeline *pp = &m->pipe;
    if (pp->axis < 0 || pp->microbatches < 1)
        return;
    const ir_axis *z = &m->mesh.axes[pp->axis];
    const ir_dimdef *L = &m->dims[pp->dim], *B = &m->dims[pp->batch_dim];
    bool split = false; /* zb-h1's and zb-h2's backward: B m (dL/dx) and W m (dL/dW) */
    for (int k = 0; pp->order && k < (int)z->size * pp->nitems; k++)
        split |= pp->order[k].kind == 'W';
    int v = pp->chunks > 1 ? pp->chunks : 1;
    if (v > 1) /* interleaved: stage z holds model chunks z, z + Z, ... */
        fprintf(out, "# pipeline over %c: %lld stages of %d chunks of %lld layers each (%s = %lld; stage z "
                "holds model chunks z, z+%lld, ..., its layers dealt block-cyclically)", z->name,
                (long long)z->size, v, (long long)(L->size / z->size / v), L->name, (long long)L->size,
                (long long)z->size);
    else
        fprintf(out, "# pipeline over %c: %lld stages of %lld layers each (%s = %lld)", z->name,
                (long long)z->size, (long long)(L->size / z->size), L->name, (long long)L->size);
    fprintf(out, "; %s split into %d microbatch%s of %lld (the batch is %lld); schedule %s, one slot per "
            "item (F m: forward of microbatch m, B m: its backward%s%s):\n", B->name, pp->microbatches,
            pp->microbatches == 1 ? "" : "es",
            (long long)B->size, (long long)pp->batch_size, pp->schedule_name ? pp->schedule_name : "?",
            split ? "'s dL/dx, W m: its dL/dW" : "", v > 1 ? "; F m.c: through the stage's chunk c" : "");
    if (pp->resolved) /* --schedule=zero-bubble: which one, and why */
        fprintf(out, "#   (%s)\n", pp->resolved);
    for (const char *t = pp->table; t && *t;) {
        const char *nl = strchr(t, '\n');
        int n = nl ? (int)(nl - t) : (int)strlen(t);
        fprintf(out, "#   %.*s\n", n, t);
        t += n + (nl ? 1 : 0);
    }
}

void ir_print(FILE *out, ir_module *m)
{
    char b1[512], b3[4096];
    ir_module_renumber(m);
    fprintf(out, "# einc IR: %s\n", m->filename);
    if (m->mesh.naxes) {
        fprintf(out, "mesh");
        for (int a = 0; a < m->mesh.naxes; a++) {
            const ir_axis *ax = &m->mesh.axes[a];
            fprintf(out, "%s %c = %lld", a ? "," : "", ax->name, (long long)ax->size);
            /* The placement prints as written, so the dump reads back as source. */
            if (ax->dcn)
                fprintf(out, " over dcn");
            else if (ax->phys > 1)
                fprintf(out, " over %d", ax->phys);
        }
        fputc('\n', out);
    }
    if (m->ndims) {
        fprintf(out, "dim");
        for (int d = 0; d < m->ndims; d++)
            fprintf(out, "%s %s = %lld", d ? "," : "", m->dims[d].name, (long long)m->dims[d].size);
        fputc('\n', out);
    }
    print_pipeline(out, m);
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v->kind == IR_VAL_OP)
            continue;
        fprintf(out, "%s %s : %s   # %.2f MiB/device\n", ir_value_kind_name(v->kind),
                vstr(m, v, b1, sizeof b1), ir_dtype_name(v->type.dtype),
                (double)ir_local_bytes(m, &v->type) / (1 << 20));
    }
    ir_phase phase = IR_PHASE_FORWARD;
    for (const ir_op *op = m->first; op; op = op->next) {
        const ir_value *r = op->result;
        if (op->phase != phase) /* a training step's backward pass and update */
            fprintf(out, "# %s\n", op->phase == IR_PHASE_BACKWARD ? "backward pass"
                                   : op->phase == IR_PHASE_UPDATE ? "optimizer update"
                                                                  : "forward");
        phase = op->phase;
        /* A repeated block's body is indented under its LoopBegin. */
        fprintf(out, "%s%s = ", op->loop ? "  " : "", vstr(m, r, b1, sizeof b1));
        ir_op_traits_of(op->kind)->print(out, m, op);
        fprintf(out, "   #");
        if (op->reason)
            fprintf(out, " %s;", op->reason);
        if (op->remat)
            fprintf(out, " computed again for the backward pass (--remat);");
        if (op->kind == IR_OP_LOOPBEGIN)
            fprintf(out, " the carried value at the top of each iteration;");
        else if (op->kind == IR_OP_LOOPEND)
            fprintf(out, " the carried value after the loop;");
        if (op->kind == IR_OP_LAYERSLICE)
            fprintf(out, " a view of one layer, no copy");
        else if (op->kind == IR_OP_LAYERSTACK)
            fprintf(out, " each iteration's value, kept for after the loop: %.2f MiB/device",
                    (double)ir_local_bytes(m, &r->type) / (1 << 20));
        else if (ir_folded_cast_source(m, r))
            fprintf(out, " folded into its einsum's GEMM, which converts %s blocks as it reads "
                    "them: no copy", ir_dtype_name(op->operands[0]->type.dtype));
        else if (op->kind == IR_OP_UPDATESLICE && op->noperands > 1)
            fprintf(out, " written in place: %.2f MiB/device",
                    (double)ir_local_bytes(m, &op->operands[1]->type) / (1 << 20));
        else
            fprintf(out, " %.2f MiB/device", (double)ir_local_bytes(m, &r->type) / (1 << 20));
        print_cost(out, &op->cost);
        fputc('\n', out);
        if (op->kind == IR_OP_MESHSLICE)
            fprintf(out, "#   %s\n", ir_ms_iter_str(m, op, b3, sizeof b3));
    }
    for (int i = 0; i < m->noutputs; i++) {
        const ir_output *o = &m->outputs[i];
        char name[96];
        fprintf(out, "%s %s = %s\n", o->update ? "update" : "output",
                ir_type_str(m, o->name, &o->value->type, b1, sizeof b1),
                ir_value_name(o->value, name, sizeof name));
    }
    if (m->loss)
        fprintf(out, "loss %s\n", m->loss);
    if (m->totals.valid)
        fprintf(out, "# totals: step %.3g us, exposed communication %.3g us, MFU %.1f%%, "
                "model FLOPs %.4g (global), peak memory %.4g GiB per device\n",
                m->totals.step_time * 1e6, m->totals.exposed_comm_time * 1e6, m->totals.mfu * 100,
                m->totals.model_flops, m->totals.peak_memory / (1024.0 * 1024.0 * 1024.0));
    char cert[IR_PLAN_CERT_MAX];
    ir_plan_cert_str(m, cert, sizeof cert);
    if (cert[0])
        fprintf(out, "# %s\n", cert);
}
