/*
 * prop_fixture.c - builds test IR from the seeds' notation (see prop_fixture.h).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "costmodel.h"
#include "prop_fixture.h"

static void die(const char *what, const char *text)
{
    fprintf(stderr, "fixture: %s: '%s'\n", what, text);
    abort();
}

ir_module *fx_module(const char *mesh, const char *dims)
{
    ir_module *m = ir_module_new("test.ein");
    const char *s = mesh;
    while (s && *s) {
        char name;
        long long size;
        int n;
        if (sscanf(s, " %c = %lld%n", &name, &size, &n) != 2)
            die("bad mesh", mesh);
        ir_mesh_add_axis(m, name, size, 0);
        s += n;
        while (*s == ',' || *s == ' ')
            s++;
    }
    s = dims;
    while (*s) {
        char name[32];
        long long size;
        int n;
        if (sscanf(s, " %31[A-Za-z0-9] = %lld%n", name, &size, &n) != 2)
            die("bad dims", dims);
        ir_dim_add(m, name, size, 0);
        s += n;
        while (*s == ',' || *s == ' ')
            s++;
    }
    return m;
}

ir_type fx_type(ir_module *m, const char *text, char *name, int size, bool *has_sub)
{
    ir_type t;
    memset(&t, 0, sizeof t);
    t.dtype = IR_F32;
    *has_sub = false;
    const char *s = text;
    int n = 0;
    while (isalnum((unsigned char)*s) && n + 1 < size)
        name[n++] = *s++;
    name[n] = 0;
    if (*s != '[')
        die("expected [", text);
    s++;
    while (*s && *s != ']') {
        while (*s == ' ' || *s == ',')
            s++;
        const char *d0 = s;
        while (isalnum((unsigned char)*s))
            s++;
        int dim = ir_dim_find(m, d0, (size_t)(s - d0));
        if (dim < 0)
            die("unknown dim", text);
        int pos = t.rank++;
        t.dims[pos] = dim;
        if (*s == '_') {
            *has_sub = true;
            s++;
            while (isupper((unsigned char)*s)) {
                int a = ir_mesh_find_axis(&m->mesh, *s);
                if (a < 0)
                    die("unknown axis", text);
                ir_sharding_push(&t.sh, pos, a);
                s++;
            }
        }
        while (*s == ' ' || *s == ',')
            s++;
    }
    if (*s != ']')
        die("expected ]", text);
    s++;
    if (strncmp(s, "{U_", 3) == 0) {
        *has_sub = true;
        for (s += 3; *s && *s != '}'; s++) {
            int a = ir_mesh_find_axis(&m->mesh, *s);
            if (a < 0)
                die("unknown unreduced axis", text);
            t.sh.unreduced |= 1u << a;
        }
    }
    return t;
}

ir_value *fx_input(ir_module *m, const char *text)
{
    char name[32];
    bool sub;
    ir_type t = fx_type(m, text, name, sizeof name, &sub);
    return ir_value_new(m, name, IR_VAL_INPUT, &t, 0);
}

/* A result value: replicated, with a constraint if subscripts were written. */
static ir_value *result_value(ir_module *m, const char *text)
{
    char name[32];
    bool sub;
    ir_type t = fx_type(m, text, name, sizeof name, &sub);
    ir_sharding c = t.sh;
    t.sh = ir_sharding_replicated();
    ir_value *v = ir_value_new(m, name, IR_VAL_OP, &t, 0);
    v->has_constraint = sub;
    v->constraint = c;
    return v;
}

ir_value *fx_einsum(ir_module *m, const char *result, ir_value *a, ir_value *b)
{
    ir_value *r = result_value(m, result);
    ir_value *ops[2] = {a, b};
    ir_op *op = ir_op_new(m, IR_OP_EINSUM, b ? 2 : 1, ops, r, 0);
    for (int i = 0; i < op->noperands; i++)
        for (int j = 0; j < ops[i]->type.rank; j++)
            op->u.einsum.labels[i][j] = ops[i]->type.dims[j];
    for (int j = 0; j < r->type.rank; j++)
        op->u.einsum.result_labels[j] = r->type.dims[j];
    ir_op_append(m, op);
    return r;
}

/* An elementwise op over operands ops[0..n-1] with expression nodes. */
static ir_value *ew(ir_module *m, const char *result, ir_value **ops, int n, const ir_ew_node *nodes,
                    int nnodes)
{
    ir_value *r = result_value(m, result);
    ir_op *op = ir_op_new(m, IR_OP_ELEMENTWISE, n, ops, r, 0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < ops[i]->type.rank; j++)
            op->u.ew.labels[i][j] = ops[i]->type.dims[j];
    for (int j = 0; j < r->type.rank; j++)
        op->u.ew.result_labels[j] = r->type.dims[j];
    op->u.ew.nodes = ir_alloc(&m->arena, sizeof(ir_ew_node) * (size_t)nnodes);
    memcpy(op->u.ew.nodes, nodes, sizeof(ir_ew_node) * (size_t)nnodes);
    op->u.ew.nnodes = nnodes;
    op->u.ew.root = nnodes - 1;
    ir_op_append(m, op);
    return r;
}

ir_value *fx_call(ir_module *m, const char *result, ir_func fn, ir_value *a)
{
    ir_ew_node nodes[2];
    memset(nodes, 0, sizeof nodes);
    nodes[0].kind = IR_EW_OPERAND;
    nodes[0].operand = 0;
    nodes[1].kind = IR_EW_CALL;
    nodes[1].a = 0;
    nodes[1].fn = fn;
    return ew(m, result, &a, 1, nodes, 2);
}

ir_value *fx_add(ir_module *m, const char *result, ir_value *a, ir_value *b)
{
    ir_ew_node nodes[3];
    memset(nodes, 0, sizeof nodes);
    nodes[0].kind = IR_EW_OPERAND;
    nodes[0].operand = 0;
    nodes[1].kind = IR_EW_OPERAND;
    nodes[1].operand = 1;
    nodes[2].kind = IR_EW_ADD;
    nodes[2].a = 0;
    nodes[2].b = 1;
    ir_value *ops[2] = {a, b};
    return ew(m, result, ops, 2, nodes, 3);
}

void fx_output(ir_module *m, const char *text, ir_value *v)
{
    if (!strchr(text, '[')) {
        ir_output_add(m, text, v, 0);
        return;
    }
    char name[32];
    bool sub;
    ir_type t = fx_type(m, text, name, sizeof name, &sub);
    ir_output *o = ir_output_add(m, name, v, 0);
    o->has_constraint = true;
    o->constraint = t.sh;
}

int fx_run(ir_module *m, int *verify_errors)
{
    return fx_run_hw(m, NULL, verify_errors);
}

int fx_run_hw(ir_module *m, const struct cost_hw *hw, int *verify_errors)
{
    return fx_run_hw_to(m, hw, stderr, verify_errors);
}

int fx_run_hw_to(ir_module *m, const struct cost_hw *hw, FILE *diag_out, int *verify_errors)
{
    return fx_run_hw_opts(m, hw, diag_out, NULL, verify_errors);
}

int fx_run_hw_opts(ir_module *m, const struct cost_hw *hw, FILE *diag_out,
                   const pass_options *options, int *verify_errors)
{
    diag_ctx d;
    diag_init(&d, "test.ein", "", 0);
    d.out = diag_out;
    pass_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.diag = &d;
    ctx.hw = hw;
    ctx.options = options;
    ctx.log = getenv("PROP_LOG") ? stderr : NULL;
    int e = pass_propagate(&ctx, m);
    *verify_errors = e ? -1 : ir_verify(m, &d);
    return e;
}

double fx_serial_time(const ir_module *m, const struct cost_hw *hw)
{
    double t = 0;
    for (const ir_op *op = m->first; op; op = op->next) {
        ir_cost c;
        cost_op_estimate(m, hw, op, &c);
        t += c.time;
    }
    return t;
}

const char *fx_collectives(const ir_module *m, char *buf, int size)
{
    int n = 0;
    buf[0] = 0;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!ir_op_is_reshard(op->kind))
            continue;
        char ax[IR_MAX_AXES + 1];
        ir_axes_str(&m->mesh, op->u.coll.axes, op->u.coll.naxes, ax, sizeof ax);
        n += snprintf(buf + n, (size_t)(size - n), "%s%s_%s(%s)", n ? " " : "", ir_op_name(op->kind), ax,
                      op->operands[0]->tensor);
        if (n >= size)
            break;
    }
    return buf;
}

ir_op *fx_find(const ir_module *m, ir_op_kind k)
{
    for (ir_op *op = m->first; op; op = op->next)
        if (op->kind == k)
            return op;
    return NULL;
}

double fx_bytes_moved(const ir_module *m)
{
    double total = 0;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!ir_op_is_reshard(op->kind))
            continue;
        double g = 1;
        for (int k = 0; k < op->u.coll.naxes; k++)
            g *= (double)m->mesh.axes[op->u.coll.axes[k]].size;
        double in = (double)ir_local_bytes(m, &op->operands[0]->type);
        double out = (double)ir_local_bytes(m, &op->result->type);
        double f = (g - 1) / g;
        switch (op->kind) {
        case IR_OP_ALLGATHER: total += out * f; break;
        case IR_OP_REDUCESCATTER: total += in * f; break;
        case IR_OP_ALLREDUCE: total += 2 * in * f; break;
        case IR_OP_ALLTOALL: total += in * f / 4; break;
        default: break;
        }
    }
    return total;
}

const char *fx_output_type(const ir_module *m, int i, char *buf, int size)
{
    const ir_output *o = &m->outputs[i];
    return ir_type_str(m, o->name, &o->value->type, buf, (size_t)size);
}
