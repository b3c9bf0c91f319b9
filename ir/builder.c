/*
 * builder.c - creating modules, dims, values and ops, and editing the op list.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "ir.h"

static const char *const func_names[] = {
#define X(e, s) s,
    IR_FUNCS(X)
#undef X
};

const ir_value *ir_update_target(const ir_op *op)
{
    const ir_value *v = op->noperands > 0 ? op->operands[0] : NULL;
    while (v && v->def && v->def->kind == IR_OP_UPDATESLICE && v->def->noperands > 0)
        v = v->def->operands[0];
    if (v && v->def && v->def->kind == IR_OP_LAYERSLICE && v->def->noperands == 1)
        v = v->def->operands[0];
    return v && v->kind == IR_VAL_STATE ? v : NULL;
}

void ir_coll_set_dims(ir_coll *c, const int8_t *dims, const int8_t *dims2)
{
    /* naxes <= IR_MAX_AXES (the clamp also tells the compiler). */
    int n = c->naxes < IR_MAX_AXES ? c->naxes : IR_MAX_AXES;
    bool same = true;
    for (int k = 1; k < n; k++)
        same &= dims[k] == dims[0] && (!dims2 || dims2[k] == dims2[0]);
    memset(c->dims, 0, sizeof c->dims);
    memset(c->dims2, 0, sizeof c->dims2);
    if (n < 1 || same) {
        c->dim = n > 0 ? dims[0] : -1;
        c->dim2 = n > 0 && dims2 ? dims2[0] : -1;
        return;
    }
    c->dim = IR_COLL_PER_AXIS;
    c->dim2 = IR_COLL_PER_AXIS;
    for (int k = 0; k < n; k++) {
        c->dims[k] = dims[k];
        c->dims2[k] = dims2 ? dims2[k] : -1;
    }
}

const char *ir_func_name(ir_func f)
{
    return (unsigned)f < IR_FN_COUNT ? func_names[f] : "?";
}

int ir_func_lookup(const char *name, size_t len)
{
    for (int i = 0; i < IR_FN_COUNT; i++)
        if (strlen(func_names[i]) == len && memcmp(func_names[i], name, len) == 0)
            return i;
    return -1;
}

size_t ir_dtype_size(ir_dtype t)
{
    switch (t) {
    case IR_F32: return 4;
    case IR_F64: return 8;
    case IR_BF16: return 2;
    case IR_I32: return 4;
    case IR_I8: return 1;
    }
    return 0;
}

const char *ir_dtype_name(ir_dtype t)
{
    switch (t) {
    case IR_F32: return "f32";
    case IR_F64: return "f64";
    case IR_BF16: return "bf16";
    case IR_I32: return "i32";
    case IR_I8: return "i8";
    }
    return "?";
}

bool ir_dtype_integer(ir_dtype t)
{
    return t == IR_I32 || t == IR_I8;
}

ir_module *ir_module_new(const char *filename)
{
    ir_arena a = {0};
    ir_module *m = ir_alloc(&a, sizeof *m);
    m->arena = a;
    m->filename = ir_strdup(&m->arena, filename ? filename : "<input>");
    m->einsum_unroll_max = IR_EINSUM_UNROLL_MAX;
    m->stream_min_bytes = IR_STREAM_MIN_BYTES;
    m->pipe.axis = -1;
    m->pipe.dim = -1;
    m->pipe.batch_dim = -1;
    return m;
}

void ir_module_free(ir_module *m)
{
    if (!m)
        return;
    /* The module itself lives in its arena: copy the arena out first. */
    ir_arena a = m->arena;
    ir_arena_free(&a);
}

int ir_mesh_add_axis(ir_module *m, char name, int64_t size, uint32_t loc)
{
    if (m->mesh.naxes >= IR_MAX_AXES)
        return -1;
    ir_axis *ax = &m->mesh.axes[m->mesh.naxes];
    ax->name = name;
    ax->size = size;
    ax->loc = loc;
    ax->phys = 1;
    ax->dcn = false;
    return m->mesh.naxes++;
}

int ir_mesh_find_axis(const ir_mesh *mesh, char name)
{
    for (int i = 0; i < mesh->naxes; i++)
        if (mesh->axes[i].name == name)
            return i;
    return -1;
}

/* Saturates at IR_SIZE_HUGE (checked.h): a mesh too large to count is
 * still larger than any limit it is compared with. */
int64_t ir_mesh_axes_size(const ir_mesh *mesh, ir_axes set)
{
    int64_t n = 1;
    for (int i = 0; i < mesh->naxes; i++)
        if (set & (1u << i))
            n = ir_size_mul(n, mesh->axes[i].size, NULL);
    return n;
}

int64_t ir_mesh_devices(const ir_mesh *mesh)
{
    return ir_mesh_axes_size(mesh, (1u << mesh->naxes) - 1);
}

int ir_dim_add(ir_module *m, const char *name, int64_t size, uint32_t loc)
{
    if (m->ndims == m->dims_cap) {
        int cap = m->dims_cap ? 2 * m->dims_cap : 16;
        m->dims = ir_grow(&m->arena, m->dims, (size_t)m->ndims, (size_t)cap, sizeof *m->dims);
        m->dims_cap = cap;
    }
    ir_dimdef *d = &m->dims[m->ndims];
    d->name = ir_strdup(&m->arena, name);
    d->size = size;
    d->loc = loc;
    return m->ndims++;
}

int ir_dim_find(const ir_module *m, const char *name, size_t len)
{
    for (int i = 0; i < m->ndims; i++)
        if (strlen(m->dims[i].name) == len && memcmp(m->dims[i].name, name, len) == 0)
            return i;
    return -1;
}

ir_value *ir_value_new(ir_module *m, const char *tensor, ir_value_kind kind,
                       const ir_type *type, uint32_t loc)
{
    if (m->nvalues == m->values_cap) {
        int cap = m->values_cap ? 2 * m->values_cap : 32;
        m->values = ir_grow(&m->arena, m->values, (size_t)m->nvalues, (size_t)cap, sizeof *m->values);
        m->values_cap = cap;
    }
    ir_value *v = ir_alloc(&m->arena, sizeof *v);
    v->id = m->nvalues;
    v->tensor = ir_strdup(&m->arena, tensor);
    v->kind = kind;
    v->type = *type;
    v->loc = loc;
    m->values[m->nvalues++] = v;
    return v;
}

ir_op *ir_op_new(ir_module *m, ir_op_kind kind, int noperands,
                 ir_value *const *operands, ir_value *result, uint32_t loc)
{
    ir_op *op = ir_alloc(&m->arena, sizeof *op);
    op->kind = kind;
    op->noperands = noperands;
    for (int i = 0; i < noperands && i < IR_MAX_OPERANDS; i++)
        op->operands[i] = operands[i];
    op->result = result;
    op->loc = loc;
    op->for_operand = -1;
    if (kind == IR_OP_EINSUM)
        op->u.einsum.scale = 1.0;
    if (ir_op_is_reshard(kind))
        op->u.coll.dim = op->u.coll.dim2 = -1;
    if (ir_op_is_loop(kind))
        op->u.loop.dim = -1;
    if (kind == IR_OP_UPDATESLICE)
        op->u.update.row = -1; /* a scalar position unless the builder says otherwise */
    return op;
}

/* The loop an op placed right after `prev` (NULL: at the front) is in. */
static ir_op *loop_after(const ir_op *op, const ir_op *prev)
{
    if (op->kind == IR_OP_LOOPBEGIN || op->kind == IR_OP_LOOPEND || !prev ||
        prev->kind == IR_OP_LOOPEND)
        return NULL;
    return prev->kind == IR_OP_LOOPBEGIN ? (ir_op *)prev : prev->loop;
}

/* The loop an op placed right before `next` is in. */
static ir_op *loop_before(const ir_op *op, const ir_op *next)
{
    if (op->kind == IR_OP_LOOPBEGIN || op->kind == IR_OP_LOOPEND || next->kind == IR_OP_LOOPBEGIN)
        return NULL;
    return next->kind == IR_OP_LOOPEND ? next->u.loop.begin : next->loop;
}

int64_t ir_op_trips(const ir_module *m, const ir_op *op)
{
    if (!op->loop || op->loop->u.loop.dim < 0 || op->loop->u.loop.dim >= m->ndims)
        return 1;
    return ir_loop_trips(m, op->loop);
}

/* Adds the use (op, i) to v's use-list. */
static void add_use(ir_module *m, ir_value *v, ir_op *op, int i)
{
    if (!v)
        return;
    if (v->nuses == v->uses_cap) {
        int cap = v->uses_cap ? 2 * v->uses_cap : 4;
        v->uses = ir_grow(&m->arena, v->uses, (size_t)v->nuses, (size_t)cap, sizeof *v->uses);
        v->uses_cap = cap;
    }
    op->use_index[i] = v->nuses;
    v->uses[v->nuses++] = (ir_use){op, i};
}

/* Drops the use (op, i) from v's use-list: the last entry takes its place
 * (order is not kept), so it costs O(1) with op->use_index. */
static void drop_use(ir_value *v, const ir_op *op, int i)
{
    if (!v)
        return;
    int k = op->use_index[i];
    if (k < 0 || k >= v->nuses || v->uses[k].op != op || v->uses[k].operand != i)
        for (k = v->nuses - 1; k >= 0; k--) /* not where it was put: find it */
            if (v->uses[k].op == op && v->uses[k].operand == i)
                break;
    if (k < 0)
        return;
    ir_use last = v->uses[--v->nuses];
    v->uses[k] = last;
    if (k < v->nuses)
        last.op->use_index[last.operand] = k;
}

/* Whether `op` is in m's op list (ir_op_remove clears the links of an
 * op it unlinks; ir_op_new starts with none). */
static bool linked(const ir_module *m, const ir_op *op)
{
    return op->prev || op->next || m->first == op;
}

/* Links the op's result to it and adds its operands' uses. */
static void set_def(ir_module *m, ir_op *op)
{
    if (op->result) {
        op->result->def = op;
        op->result->kind = IR_VAL_OP;
    }
    for (int i = 0; i < op->noperands && i < IR_MAX_OPERANDS; i++)
        add_use(m, op->operands[i], op, i);
}

void ir_op_set_operand(ir_module *m, ir_op *op, int i, ir_value *v)
{
    if (i < 0 || i >= op->noperands || i >= IR_MAX_OPERANDS || op->operands[i] == v)
        return;
    if (linked(m, op)) {
        drop_use(op->operands[i], op, i);
        add_use(m, v, op, i);
    }
    op->operands[i] = v;
}

void ir_op_append(ir_module *m, ir_op *op)
{
    op->loop = loop_after(op, m->last);
    op->prev = m->last;
    op->next = NULL;
    if (m->last)
        m->last->next = op;
    else
        m->first = op;
    m->last = op;
    set_def(m, op);
}

void ir_op_insert_before(ir_module *m, ir_op *before, ir_op *op)
{
    if (!before) {
        ir_op_append(m, op);
        return;
    }
    op->loop = loop_before(op, before);
    op->phase = before->phase;
    op->next = before;
    op->prev = before->prev;
    if (before->prev)
        before->prev->next = op;
    else
        m->first = op;
    before->prev = op;
    set_def(m, op);
}

void ir_op_insert_after(ir_module *m, ir_op *after, ir_op *op)
{
    if (!after) {
        /* At the front. */
        op->loop = NULL;
        op->prev = NULL;
        op->next = m->first;
        if (m->first)
            m->first->prev = op;
        else
            m->last = op;
        m->first = op;
        set_def(m, op);
        return;
    }
    op->loop = loop_after(op, after);
    op->phase = after->phase;
    op->prev = after;
    op->next = after->next;
    if (after->next)
        after->next->prev = op;
    else
        m->last = op;
    after->next = op;
    set_def(m, op);
}

void ir_op_remove(ir_module *m, ir_op *op)
{
    if (!linked(m, op))
        return;
    for (int i = 0; i < op->noperands && i < IR_MAX_OPERANDS; i++)
        drop_use(op->operands[i], op, i);
    if (op->prev)
        op->prev->next = op->next;
    else
        m->first = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        m->last = op->prev;
    op->prev = op->next = NULL;
}

ir_op *ir_grad_append(ir_module *m, const char *tensor, ir_value *loss, ir_value *w, uint32_t loc)
{
    ir_type t = w->type;
    t.sh = ir_sharding_replicated();
    ir_value *ops[2] = {loss, w};
    ir_op *g = ir_op_new(m, IR_OP_GRAD, 2, ops, ir_value_new(m, tensor, IR_VAL_OP, &t, loc), loc);
    ir_op_append(m, g);
    return g;
}

void ir_replace_uses(ir_module *m, ir_value *from, ir_value *to, ir_op *after)
{
    ir_op *op = after ? after->next : m->first;
    for (; op; op = op->next)
        for (int i = 0; i < op->noperands; i++)
            if (op->operands[i] == from)
                ir_op_set_operand(m, op, i, to);
    for (int i = 0; i < m->noutputs; i++)
        if (m->outputs[i].value == from)
            m->outputs[i].value = to;
}

void ir_op_set_reason(ir_module *m, ir_op *op, ir_op *for_op, int operand, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    op->reason = ir_vsprintf(&m->arena, fmt, ap);
    va_end(ap);
    op->for_op = for_op;
    op->for_operand = operand;
}

ir_output *ir_output_add(ir_module *m, const char *name, ir_value *v, uint32_t loc)
{
    if (m->noutputs == m->outputs_cap) {
        int cap = m->outputs_cap ? 2 * m->outputs_cap : 8;
        m->outputs = ir_grow(&m->arena, m->outputs, (size_t)m->noutputs, (size_t)cap, sizeof *m->outputs);
        m->outputs_cap = cap;
    }
    ir_output *o = &m->outputs[m->noutputs++];
    memset(o, 0, sizeof *o);
    o->name = ir_strdup(&m->arena, name);
    o->value = v;
    o->loc = loc;
    return o;
}

ir_output *ir_update_add(ir_module *m, ir_value *target, ir_value *v, uint32_t loc)
{
    ir_output *o = ir_output_add(m, target->tensor, v, loc);
    o->update = target;
    o->has_constraint = true;
    o->constraint = target->type.sh;
    return o;
}

const char *ir_phase_name(ir_phase p)
{
    return p == IR_PHASE_BACKWARD ? "backward" : p == IR_PHASE_UPDATE ? "update" : "forward";
}

void ir_set_phase_after(ir_module *m, ir_op *after, ir_phase p)
{
    for (ir_op *op = after ? after->next : m->first; op; op = op->next)
        op->phase = p;
}

const char *ir_value_kind_name(ir_value_kind k)
{
    switch (k) {
    case IR_VAL_INPUT: return "input";
    case IR_VAL_PARAM: return "param";
    case IR_VAL_STATE: return "state";
    case IR_VAL_OP: break;
    }
    return "value";
}

/* Counts versions per tensor name with a small open-addressing table. */
void ir_module_renumber(ir_module *m)
{
    int cap = 16;
    while (cap < 2 * m->nvalues + 2)
        cap *= 2;
    const char **keys = calloc((size_t)cap, sizeof *keys);
    int *counts = calloc((size_t)cap, sizeof *counts);
    if (!keys || !counts) {
        free(keys);
        free(counts);
        return;
    }
    /* Inputs and params first, then op results in program order. */
    for (int pass = 0; pass < 2; pass++) {
        ir_op *op = m->first;
        for (int i = 0;; i++) {
            ir_value *v;
            if (pass == 0) {
                if (i >= m->nvalues)
                    break;
                v = m->values[i];
                if (v->kind == IR_VAL_OP)
                    continue;
            } else {
                if (!op)
                    break;
                v = op->result;
                op = op->next;
                if (!v)
                    continue;
            }
            unsigned h = 2166136261u;
            for (const char *p = v->tensor; *p; p++)
                h = (h ^ (unsigned char)*p) * 16777619u;
            int slot = (int)(h & (unsigned)(cap - 1));
            while (keys[slot] && strcmp(keys[slot], v->tensor) != 0)
                slot = (slot + 1) & (cap - 1);
            keys[slot] = v->tensor;
            v->version = counts[slot]++;
        }
    }
    free(keys);
    free(counts);
}

const char *ir_value_name(const ir_value *v, char *buf, size_t size)
{
    if (v->version == 0)
        snprintf(buf, size, "%s", v->tensor);
    else
        snprintf(buf, size, "%s.%d", v->tensor, v->version);
    return buf;
}

int64_t ir_loop_trips(const ir_module *m, const ir_op *begin)
{
    int64_t n = m->dims[begin->u.loop.dim].size;
    if (m->pipe.axis >= 0 && begin->u.loop.dim == m->pipe.dim)
        n /= m->mesh.axes[m->pipe.axis].size;
    return n;
}

bool ir_stack_split_ok(const ir_module *m, const ir_type *t, int dim)
{
    if (t->rank < 1 || t->sh.naxes[0] == 0)
        return true;
    return m->pipe.axis >= 0 && dim == m->pipe.dim && t->sh.naxes[0] == 1 &&
           t->sh.axes[0][0] == m->pipe.axis;
}
