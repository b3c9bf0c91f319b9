/*
 * program.c - the constant rt_program (runtime/einrt.h) that makes an einc
 * executable self-describing: mesh, input/param and output descriptors with
 * global and per-device shapes and per-dim mesh axes, the run function, the
 * unsharded reference program, and the --info text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_internal.h"
#include "einrt.h"

LLVMValueRef cg_const_global(cg_ctx *c, LLVMValueRef init, const char *prefix)
{
    char name[64];
    snprintf(name, sizeof name, "%s.%d", prefix, c->nglobals++);
    LLVMValueRef g = LLVMAddGlobal(c->mod, LLVMTypeOf(init), name);
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
    return g;
}

void cg_call_with_desc(cg_ctx *c, const char *fname, LLVMValueRef *fields, unsigned nfields,
                       LLVMValueRef *args, unsigned nargs)
{
    LLVMValueRef init = LLVMConstStructInContext(c->llctx, fields, nfields, 0);
    args[1] = cg_const_global(c, init, fname);
    LLVMTypeRef params[8];
    for (unsigned i = 0; i < nargs && i < 8; i++)
        params[i] = c->t.ptr;
    LLVMTypeRef fty = LLVMFunctionType(c->t.voidt, params, nargs, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, fname);
    if (!fn)
        fn = LLVMAddFunction(c->mod, fname, fty);
    LLVMBuildCall2(c->b, fty, fn, args, nargs, "");
}

LLVMValueRef cg_const_string(cg_ctx *c, const char *s)
{
    if (!s)
        return LLVMConstNull(c->t.ptr);
    LLVMValueRef str = LLVMConstStringInContext2(c->llctx, s, strlen(s), 0);
    return cg_const_global(c, str, "str");
}

/* The range of the indices in tensor `name`: the fewest rows any gather
 * looks up with it (its values, or one resharded from them, are operand 0
 * of those gathers) or positions any state write has (it is operand 2 of
 * those UpdateSlices); 0 if it indexes nothing. */
static int32_t index_bound(const ir_module *m, const char *name)
{
    int64_t bound = 0;
    for (const ir_op *op = m->first; op; op = op->next) {
        int64_t rows = 0;
        if (op->kind == IR_OP_EINSUM && (op->u.einsum.gather || op->u.einsum.scatter) &&
            strcmp(op->operands[0]->tensor, name) == 0)
            rows = m->dims[op->u.einsum.gather_label].size;
        else if (op->kind == IR_OP_UPDATESLICE && strcmp(op->operands[2]->tensor, name) == 0)
            rows = m->dims[op->operands[0]->type.dims[op->u.update.dim]].size;
        if (rows > 0)
            bound = bound == 0 || rows < bound ? rows : bound;
    }
    return bound > INT32_MAX ? INT32_MAX : (int32_t)bound;
}

/* Whether tensor `name` gives some state write one position per row
 * (operand 2 of a per-row UpdateSlice): rt_tensor_desc.row_positions. */
static int32_t row_positions(const ir_module *m, const char *name)
{
    for (const ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_UPDATESLICE && op->u.update.row >= 0 &&
            strcmp(op->operands[2]->tensor, name) == 0)
            return 1;
    return 0;
}

/* The rt_tensor_desc of a value of type `t` named `name`. */
static LLVMValueRef tensor_desc(cg_ctx *c, const ir_module *m, const char *name,
                                const ir_type *t, int role, int32_t update_check)
{
    int64_t global[RT_MAX_RANK] = {0}, local[RT_MAX_RANK] = {0};
    int32_t naxes[RT_MAX_RANK] = {0};
    LLVMValueRef axes[RT_MAX_RANK];
    for (int d = 0; d < RT_MAX_RANK; d++) {
        int32_t a[RT_MAX_AXES] = {0};
        int n = 0;
        if (d < t->rank) {
            global[d] = m->dims[t->dims[d]].size;
            local[d] = ir_local_size(m, t, d);
            if (t->dims[d] == m->pipe.batch_dim) {
                /* A pipelined program's ops see one microbatch; its
                 * inputs hold the whole batch (codegen/pipeline.c). */
                global[d] *= m->pipe.microbatches;
                local[d] *= m->pipe.microbatches;
            }
            n = naxes[d] = t->sh.naxes[d];
            for (int k = 0; k < n && k < RT_MAX_AXES; k++)
                a[k] = t->sh.axes[d][k];
        }
        axes[d] = cg_const_i32s(c, a, n, RT_MAX_AXES, 0);
    }
    LLVMValueRef f[] = {
        cg_const_string(c, name),
        cg_i32(c, (int)t->dtype),
        cg_i32(c, t->rank),
        cg_const_i64s(c, global, t->rank, RT_MAX_RANK, 0),
        cg_const_i64s(c, local, t->rank, RT_MAX_RANK, 0),
        cg_const_i32s(c, naxes, t->rank, RT_MAX_RANK, 0),
        LLVMConstArray2(LLVMArrayType2(c->t.i32, RT_MAX_AXES), axes, RT_MAX_RANK),
        cg_i32(c, role),
        cg_i32(c, t->dtype == IR_I32 ? index_bound(m, name) : 0),
        cg_i32(c, t->dtype == IR_I32 ? row_positions(m, name) : 0),
        cg_i32(c, update_check),
        /* The interleaved schedule deals a stacked tensor's layers to the
         * stages in blocks of |L| / (Z v), round-robin (docs/pipeline.md). */
        cg_i32(c, m->pipe.chunks > 1 && t->rank > 0 && t->dims[0] == m->pipe.dim && t->sh.naxes[0] > 0
                      ? m->pipe.chunks : 0),
    };
    return LLVMConstNamedStruct(c->t.tensor_desc, f, sizeof f / sizeof f[0]);
}

/* A constant array of descriptors, or a null pointer when there are none. */
static LLVMValueRef desc_array(cg_ctx *c, LLVMValueRef *descs, int n, const char *prefix)
{
    if (n == 0)
        return LLVMConstNull(c->t.ptr);
    return cg_const_global(c, LLVMConstArray2(c->t.tensor_desc, descs, (uint64_t)n), prefix);
}

/* "In.1 = AllGather_Y In": the op as --profile and --trace name it, the
 * result and operands by their --dump-ir names, the mesh axes of a
 * resharding op as the subscript of its kind. */
static void op_label(const ir_module *m, const ir_op *op, char *buf, size_t size)
{
    char name[64];
    size_t n = 0;
#define PUT(...)                                                              \
    do {                                                                      \
        int k_ = snprintf(buf + n, n < size ? size - n : 0, __VA_ARGS__);   \
        if (k_ > 0)                                                           \
            n += (size_t)k_;                                                  \
    } while (0)
    buf[0] = 0;
    if (op->result)
        PUT("%s = ", ir_value_name(op->result, name, sizeof name));
    PUT("%s", ir_op_name(op->kind));
    if (ir_op_is_reshard(op->kind) && op->u.coll.naxes > 0) {
        PUT("_");
        for (int a = 0; a < op->u.coll.naxes; a++) {
            int ax = op->u.coll.axes[a];
            PUT("%c", ax >= 0 && ax < m->mesh.naxes ? m->mesh.axes[ax].name : '?');
        }
    }
    for (int i = 0; i < op->noperands; i++)
        if (op->operands[i])
            PUT("%s%s", i ? ", " : " ", ir_value_name(op->operands[i], name, sizeof name));
#undef PUT
}

/* Sets *names and *predicted to constant arrays over the plan's ops (the op
 * ids of rt_op_begin): the label of each op and its predicted time, which
 * for an op that absorbs fused producers includes theirs (they run inside
 * its loop and have no marker of their own). */
static void op_tables(cg_ctx *c, const ir_module *m, const cg_plan *p, LLVMValueRef *names,
                      LLVMValueRef *offsets, LLVMValueRef *predicted)
{
    if (p->nops == 0) {
        *names = *offsets = *predicted = LLVMConstNull(c->t.ptr);
        return;
    }
    LLVMValueRef *ov = cg_calloc((size_t)p->nops, sizeof *ov);
    LLVMValueRef *tv = cg_calloc((size_t)p->nops, sizeof *tv);
    double *t = cg_calloc((size_t)p->nops, sizeof *t);
    for (int i = 0; i < p->nops; i++)
        t[i] = p->ops[i]->cost.valid ? p->ops[i]->cost.time : -1;
    /* A producer fused into a consumer that is itself fused adds to the
     * final consumer: follow the chain. */
    for (int i = 0; i < p->nops; i++) {
        if (p->fused_into[i] < 0 || t[i] < 0)
            continue;
        int j = p->fused_into[i];
        for (int guard = 0; j >= 0 && p->fused_into[j] >= 0 && guard < p->nops; guard++)
            j = p->fused_into[j];
        if (j >= 0 && t[j] >= 0)
            t[j] += t[i];
    }
    /* A row group is marked as its first op (run.c): the others' times
     * are its. */
    for (int i = 0; i < p->nops; i++) {
        int g = p->row_group[i];
        if (g >= 0 && g != i && t[i] >= 0 && t[g] >= 0)
            t[g] += t[i];
    }
    /* The names as one string of NUL-terminated labels and their offsets
     * (rt_program.op_names): constant data, not an array of pointers. */
    size_t len = 0, cap = 4096;
    char *blob = cg_calloc(cap, 1);
    for (int i = 0; i < p->nops; i++) {
        char label[256];
        op_label(m, p->ops[i], label, sizeof label);
        if (p->row_group[i] == i) {
            /* "P = Einsum A, row group to P.3": what the group's row times */
            char last[64];
            size_t l = strlen(label);
            snprintf(label + l, sizeof label - l, ", row group to %s",
                     ir_value_name(p->ops[cg_row_group_end(p, i)]->result, last, sizeof last));
        }
        size_t n = strlen(label) + 1;
        if (len + n > cap) {
            while (len + n > cap)
                cap *= 2;
            blob = cg_realloc(blob, cap);
        }
        memcpy(blob + len, label, n);
        ov[i] = LLVMConstInt(c->t.i64, (unsigned long long)len, 0);
        len += n;
        bool marked = p->fused_into[i] < 0 && (p->row_group[i] < 0 || p->row_group[i] == i);
        tv[i] = LLVMConstReal(c->t.f64, marked ? t[i] : -1);
    }
    /* DontNullTerminate: the last label's NUL is already in the blob. */
    *names = cg_const_global(c, LLVMConstStringInContext2(c->llctx, blob, len, 1), "opnames");
    *offsets = cg_const_global(c, LLVMConstArray2(c->t.i64, ov, (uint64_t)p->nops), "opnameoffs");
    *predicted = cg_const_global(c, LLVMConstArray2(c->t.f64, tv, (uint64_t)p->nops), "optimes");
    free(blob);
    free(ov);
    free(tv);
    free(t);
}

/* rt_op_begin/rt_op_end calls of one run: every op emitted with marks (a
 * row group's first op only), an op in a repeated block's body once per
 * iteration (run.c).  A pipelined program's device runs each op at most
 * once per microbatch (the update once per step: a bound, not exact) and
 * also records its 2M items and at most one receive's wait per item
 * (runtime/pipe_items.c), spans of the same buffer. */
static int64_t calls_per_run(const ir_module *m, const cg_plan *p)
{
    int64_t n = 0;
    for (int i = 0; i < p->nops; i++)
        if (p->fused_into[i] < 0 && p->ops[i]->kind != IR_OP_LAYERSLICE &&
            (p->row_group[i] < 0 || p->row_group[i] == i))
            /* a LoopEnd's copy is the last op of each iteration */
            n += p->ops[i]->kind == IR_OP_LOOPEND ? ir_loop_trips(m, p->ops[i]->u.loop.begin)
                                                   : ir_op_trips(m, p->ops[i]);
    /* Interleaved: 2 M v items, and each chunk's two loops begin again. */
    int64_t v = m->pipe.chunks > 1 ? m->pipe.chunks : 1;
    if (m->pipe.axis >= 0 && m->pipe.microbatches > 0)
        n = (n + 2 * (v - 1)) * m->pipe.microbatches + 4 * v * (int64_t)m->pipe.microbatches;
    return n;
}

LLVMValueRef cg_emit_program(cg_ctx *c, ir_module *m, const cg_plan *p, LLVMValueRef run,
                             LLVMValueRef reference, const char *name, bool exported,
                             const cg_options *opts)
{
    LLVMValueRef *ins = cg_calloc((size_t)p->ninputs, sizeof *ins);
    LLVMValueRef *outs = cg_calloc((size_t)p->noutputs, sizeof *outs);
    for (int v = 0; v < m->nvalues; v++) {
        int k = p->input_index[v];
        ir_value_kind kind = m->values[v]->kind;
        if (k >= 0)
            ins[k] = tensor_desc(c, m, m->values[v]->tensor, &m->values[v]->type,
                                 kind == IR_VAL_PARAM   ? RT_ROLE_PARAM
                                 : kind == IR_VAL_STATE ? RT_ROLE_STATE
                                                        : RT_ROLE_INPUT,
                                 m->values[v]->update_check);
    }
    /* A training step: its updates overwrite params and states in place,
     * and the runtime prints the loss output after each step. */
    int trains = 0, loss_output = -1;
    for (int j = 0; j < m->noutputs; j++) {
        int k = p->rt_output[j];
        trains |= k < 0;
        if (k < 0)
            continue;
        outs[k] = tensor_desc(c, m, m->outputs[j].name, &m->outputs[j].value->type, RT_ROLE_INPUT, 0);
        if (m->loss && !strcmp(m->loss, m->outputs[j].name))
            loss_output = k;
    }

    LLVMValueRef names[RT_MAX_AXES], sizes[RT_MAX_AXES];
    for (int a = 0; a < RT_MAX_AXES; a++) {
        bool has = a < m->mesh.naxes;
        names[a] = LLVMConstInt(c->t.i8, has ? (unsigned char)m->mesh.axes[a].name : 0, 0);
        sizes[a] = LLVMConstInt(c->t.i64, has ? (unsigned long long)m->mesh.axes[a].size : 0, 0);
    }
    const char *src = opts->source_name ? opts->source_name : m->filename;
    LLVMValueRef op_names, op_offsets, op_times;
    op_tables(c, m, p, &op_names, &op_offsets, &op_times);
    LLVMValueRef f[] = {
        cg_i32(c, RT_ABI_VERSION),
        cg_i32(c, m->mesh.naxes),
        LLVMConstArray2(c->t.i8, names, RT_MAX_AXES),
        LLVMConstArray2(c->t.i64, sizes, RT_MAX_AXES),
        cg_i32(c, p->ninputs),
        desc_array(c, ins, p->ninputs, "inputs"),
        cg_i32(c, p->noutputs),
        desc_array(c, outs, p->noutputs, "outputs"),
        run,
        reference ? reference : LLVMConstNull(c->t.ptr),
        cg_const_string(c, opts->info ? opts->info : ""),
        cg_const_string(c, src ? src : ""),
        cg_i32(c, p->nops),
        op_names,
        op_times,
        cg_const_string(c, opts->hw_name ? opts->hw_name : ""),
        cg_i64(c, calls_per_run(m, p)),
        cg_i32(c, loss_output),
        cg_i32(c, trains),
        op_offsets,
        cg_const_string(c, m->hparams ? m->hparams : ""),
        cg_i32(c, m->pipe.axis >= 0 ? 1 << m->pipe.axis : 0),
        /* --profile prints the cost pass's simulated bubble beside the
         * measured one (-1: not priced, e.g. a forward). */
        LLVMConstReal(c->t.f64, m->totals.pipe.valid ? m->totals.pipe.bubble : -1),
    };
    free(ins);
    free(outs);
    LLVMValueRef g = LLVMAddGlobal(c->mod, c->t.program, name);
    LLVMSetInitializer(g, LLVMConstNamedStruct(c->t.program, f, sizeof f / sizeof f[0]));
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, exported ? LLVMExternalLinkage : LLVMPrivateLinkage);
    return g;
}
