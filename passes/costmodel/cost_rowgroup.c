/*
 * cost_rowgroup.c - the estimate of a row group as codegen runs it.
 *
 * Codegen runs a trailing-dim reduction and the elementwise ops around it
 * one row at a time (a softmax's max, exp, sum and scale; an RMSNorm's
 * square, mean and scale): the row stays in the first-level cache between
 * the members and an intermediate only the group reads has a buffer of
 * one row (codegen/rowgroup.c).  Priced op by op, every member would
 * stream its operands and its result through memory: a softmax moved its
 * array six times in the model and twice on the machine (10.8 ms
 * predicted, 4.3 ms measured for 2048 x 2048 f32 on `host`).
 *
 * The group is the set of ops ir_row_groups picks (the rule codegen
 * applies, ir/rowgroup.c), with the producers fused into its members
 * (ir/fusion.c).  Its memory traffic is one read of every value the set
 * reads and does not compute (its inputs, each once however many members
 * read it) and one write of every value it computes that is an output or
 * read by an op outside the set (its outputs); row-local values and fused
 * values never go to memory.  Its arithmetic is the sum of the members'
 * (their t_compute: FLOPs at the peak, or on a calibrated profile the
 * measured cost of their functions per element on arrays in cache: a
 * member's pass over a row in the first-level cache shows its arithmetic,
 * which a loop streaming from memory hides under the memory traffic, so
 * an exp that costs 0 beyond neg on arrays in memory does not in a
 * softmax's row group).  On a profile whose calibration timed it
 * ("row_pass_seconds_per_element", calibrate/rowpass.c) every member adds
 * its pass: that figure times the elements it walks (a reduction's
 * operand, an elementwise op's result), the loads, stores and plain
 * arithmetic of a loop over a row in cache, which is its own time and not
 * the memory's: a softmax and an RMSNorm of llama2_layer were
 * under-predicted by about half without it (docs/performance-history.md,
 * section 5).  The pass also stands for a reduction's arithmetic, which
 * is otherwise its FLOPs at the measured GEMM rate.  A member that masks
 * by the elements' positions (a causal `where(S <= T, x, -inf)`) pays
 * instead, on a profile that measured it, "row_mask_seconds_per_element"
 * (calibrate/maskpass.c): the difference between a softmax's row group
 * with such a mask and without, per element, which holds the mask's pass
 * and what it changes in the members after it.  Then, as for one op:
 * roofline max(t_compute, bytes / W_hbm) on a profile of the seeds, and
 * bytes at the measured elementwise bandwidth plus the arithmetic on a
 * calibrated one (cost_op.c, measured_elementwise).
 *
 * The group's estimate goes to its first op, which is the op codegen
 * marks for the whole group (`--profile` shows "row group to ..."); the
 * other members and their fused producers get a valid estimate of zero
 * seconds, so sums over ops count the group once.
 *
 * Every other loop that computes more than its own op is priced the same
 * way, as one pass: an elementwise op with the producers fused into it
 * (ir/fusion.c), whose intermediates never go to memory, and an unrolled
 * einsum (ir_einsum_unrolled_terms: a few products summed per element,
 * which codegen runs as a loop nest instead of a GEMM) in its own nest or
 * in the loop of the elementwise op it is fused into.  The rotary
 * embedding's contraction, its product with Sin and the sum with Q * Cos
 * are one read of Q, Cos and Sin and one write of the result, priced on
 * the loop's op.  Its
 * arithmetic is elementwise arithmetic, at the peak on a profile of the
 * seeds and free beside the memory traffic on a calibrated one (as an
 * elementwise op's is), not the GEMM rate the per-op estimate used.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"

/* Devices of m's mesh. */
static double devices(const ir_module *m)
{
    double n = 1;
    for (int i = 0; i < m->mesh.naxes; i++)
        n *= (double)m->mesh.axes[i].size;
    return n;
}

/* Bytes of `v` in memory: 0 for a value kept on chip (cost_onchip_values). */
static double bytes_of(const ir_module *m, const ir_value *v, const bool *onchip)
{
    if (onchip && onchip[v->id])
        return 0;
    return (double)ir_local_bytes(m, &v->type);
}

/* Index in `ops` of `op`, through its result's defining index, or -1. */
static int index_of(const ir_op *op, ir_op *const *ops, const int *def)
{
    int i = op && op->result ? def[op->result->id] : -1;
    return i >= 0 && ops[i] == op ? i : -1;
}

/* Seconds per device of row group member `op`'s pass over its rows on a
 * calibrated profile with "row_pass_seconds_per_element": the elements it
 * walks (a reduction's operand, an elementwise op's result) times the
 * figure, times the core-sharing factor as every loop of einc's. */
static double pass_seconds(const ir_module *m, const cost_hw *hw, const ir_op *op)
{
    const ir_value *walked = op->kind == IR_OP_EINSUM && op->noperands == 1 ? op->operands[0]
                                                                            : op->result;
    return cost_measured_contention(hw, devices(m)) * (double)ir_local_elems(m, &walked->type) *
           hw->row_pass_time;
}

/* True if node n of `nodes` (nnodes entries) or a node below it reads an
 * element's position (IR_EW_INDEX); depth-limited as ir_ew_classify. */
static bool reads_position(const ir_ew_node *nodes, int nnodes, int n, int depth)
{
    if (n < 0 || n >= nnodes || depth > 64)
        return false;
    const ir_ew_node *e = &nodes[n];
    if (e->kind == IR_EW_INDEX)
        return true;
    int ar = ir_ew_arity(e->kind);
    return (ar > 0 && reads_position(nodes, nnodes, e->a, depth + 1)) ||
           (ar > 1 && reads_position(nodes, nnodes, e->b, depth + 1)) ||
           (ar > 2 && reads_position(nodes, nnodes, e->c, depth + 1));
}

/* True if elementwise op `op` masks by the elements' positions: some
 * `where` of its expression has a condition that compares positions and
 * constants only (a causal mask `where(S <= T, x, -inf)`; not `where(S <=
 * Pos[], ...)`, which reads a tensor, nor a select on values).  Such a
 * member costs its row group what calibrate/maskpass.c times. */
static bool masks_positions(const ir_op *op)
{
    if (op->kind != IR_OP_ELEMENTWISE)
        return false;
    const ir_ew_node *nodes = op->u.ew.nodes;
    int nn = op->u.ew.nnodes;
    for (int i = 0; nodes && i < nn; i++) {
        if (nodes[i].kind != IR_EW_SELECT || nodes[i].a < 0 || nodes[i].a >= nn)
            continue;
        int cond = nodes[i].a;
        if (ir_ew_is_compare(nodes[cond].kind) &&
            ir_ew_classify(nodes, nn, cond) == IR_EW_CLASS_FREE &&
            reads_position(nodes, nn, cond, 0))
            return true;
    }
    return false;
}

/* Seconds per device of row group member `op`, a mask by positions
 * (masks_positions), on a profile with "row_mask_seconds_per_element": its
 * result's elements times the figure, which holds its pass, times the
 * core-sharing factor as pass_seconds. */
static double mask_seconds(const ir_module *m, const cost_hw *hw, const ir_op *op)
{
    return cost_measured_contention(hw, devices(m)) *
           (double)ir_local_elems(m, &op->result->type) * hw->row_mask_time;
}

/* Arithmetic seconds of op ops[i] in a row group on a calibrated profile:
 * an elementwise op's functions on a row in cache
 * (cost_op_ew_arith_in_cache), and, when the profile measured it, the
 * member's pass over the rows (pass_seconds: a producer fused into a member
 * runs in that member's pass, so `member` is false for it), which then
 * also stands for a reduction's arithmetic; without it a reduction keeps
 * its own estimate's (its FLOPs at the measured rate).  A member that
 * masks by positions pays, when the profile measured it, what such a
 * mask costs a softmax's row group (mask_seconds) in place of its pass:
 * llama2_layer's causal softmax was under-predicted by 39% with the pass
 * alone (docs/performance-history.md, section 5). */
static double row_arith(const ir_module *m, const cost_hw *hw, const ir_op *op,
                        const ir_cost *own, bool member)
{
    double t = op->kind == IR_OP_ELEMENTWISE ? cost_op_ew_arith_in_cache(m, hw, op)
               : hw->has_row_pass           ? 0
                                            : own->t_compute;
    if (member && hw->has_row_mask && masks_positions(op))
        return t + mask_seconds(m, hw, op);
    return t + (hw->has_row_pass && member ? pass_seconds(m, hw, op) : 0);
}

/* Prices the group whose estimate goes on op `first`: the ops mem[0..n)
 * (its members and the producers fused into them, fused[i] >= 0 for
 * those), in_set[i] true for each; `rows` when it is a row group, whose
 * members run passes over a row in cache (row_arith).  def[v]: index of
 * v's defining op in `ops`, or -1.  counted[] is all false on entry and on
 * return.  Linear in the group's ops and their operands and uses, so
 * pricing every group of a program is linear in the program (a chain of
 * 10^6 fused statements has 10^4 loops). */
static void price_group(const ir_module *m, const cost_hw *hw, ir_op *const *ops, const int *mem,
                        int n, const bool *in_set, const int *def, const int *fused,
                        const bool *onchip, ir_cost *costs, int first, bool *counted, bool rows)
{
    double read = 0, write = 0, t_compute = 0, flops = 0;
    for (int q = 0; q < n; q++) {
        int i = mem[q];
        const ir_op *op = ops[i];
        bool unrolled = ir_einsum_unrolled_terms(m, op) > 0;
        if (rows && hw->measured)
            t_compute += row_arith(m, hw, op, &costs[i], fused[i] < 0);
        else
            t_compute += unrolled && hw->measured ? 0 : costs[i].t_compute;
        flops += costs[i].flops;
        for (int k = 0; k < op->noperands; k++) {
            const ir_value *v = op->operands[k];
            if ((def[v->id] < 0 || !in_set[def[v->id]]) && !counted[v->id]) {
                counted[v->id] = true; /* an input of the group: read once */
                read += bytes_of(m, v, onchip);
            }
        }
        /* Its result goes to memory once if an op outside the group reads
         * it or it is an output. */
        const ir_value *r = op->result;
        bool out = ir_value_is_output(m, r);
        for (int u = 0; u < r->nuses && !out; u++) {
            int j = index_of(r->uses[u].op, ops, def);
            out = j < 0 || !in_set[j];
        }
        if (out)
            write += bytes_of(m, r, onchip);
    }
    for (int q = 0; q < n; q++)
        for (int k = 0; k < ops[mem[q]]->noperands; k++)
            counted[ops[mem[q]]->operands[k]->id] = false;
    ir_cost c;
    memset(&c, 0, sizeof c);
    c.valid = true;
    c.flops = flops;
    c.hbm_bytes = read + write;
    c.t_compute = t_compute;
    if (hw->measured) {
        double k = cost_measured_contention(hw, devices(m));
        /* A fused loop's result is streamed as codegen streams it; a row
         * group's members have their own rule (codegen/rowgroup.c) and
         * are priced with ordinary stores. */
        const ir_value *res = ops[first]->result;
        bool streamed = !rows && ir_ew_streams(m, ir_local_bytes(m, &res->type));
        c.t_memory = k * cost_measured_ew_seconds(hw, read, write, streamed);
        c.time = c.t_memory + c.t_compute;
    } else {
        c.t_memory = c.hbm_bytes / hw->hbm_bw;
        c.time = fmax(c.t_compute, c.t_memory);
    }
    c.bound = c.t_compute > c.t_memory ? IR_BOUND_COMPUTE : IR_BOUND_MEMORY;
    for (int q = 0; q < n; q++) {
        memset(&costs[mem[q]], 0, sizeof costs[mem[q]]);
        costs[mem[q]].valid = true;
        costs[mem[q]].bound = c.bound;
    }
    costs[first] = c;
}

int cost_row_groups(const ir_module *m, const cost_hw *hw, ir_op *const *ops, int nops,
                    const bool *onchip, ir_cost *costs)
{
    int n = nops > 0 ? nops : 1, nv = m->nvalues > 0 ? m->nvalues : 1;
    int *fused = malloc((size_t)n * sizeof *fused), *group = malloc((size_t)n * sizeof *group);
    int *def = malloc((size_t)nv * sizeof *def);
    int *head = malloc((size_t)n * sizeof *head), *next = malloc((size_t)n * sizeof *next);
    int *mem = malloc((size_t)n * sizeof *mem);
    bool *local = calloc((size_t)nv, sizeof *local), *in_set = calloc((size_t)n, sizeof *in_set);
    bool *counted = calloc((size_t)nv, sizeof *counted);
    int rc = -1;
    if (!fused || !group || !def || !head || !next || !mem || !local || !in_set || !counted)
        goto done;
    for (int i = 0; i < nops; i++)
        if (!ops[i]->result || ops[i]->result->id < 0 || ops[i]->result->id >= m->nvalues)
            goto done; /* malformed (the verifier reports it): priced op by op */
    if (ir_fuse_elementwise(m, ops, nops, fused) < 0 ||
        ir_row_groups(m, ops, nops, fused, group, local) < 0)
        goto done;
    for (int v = 0; v < m->nvalues; v++)
        def[v] = -1;
    for (int i = 0; i < nops; i++)
        def[ops[i]->result->id] = i;
    /* The ops of each loop, listed on the op that owns it: a row group's
     * first op (its members and the producers fused into them), or the op
     * that emits a fused loop (itself and its producers). */
    for (int i = 0; i < nops; i++)
        head[i] = -1;
    for (int i = nops - 1; i >= 0; i--) {
        int e = fused[i] >= 0 ? fused[i] : i;
        int owner = group[e] >= 0 ? group[e] : e;
        next[i] = head[owner];
        head[owner] = i;
    }
    for (int o = 0; o < nops; o++) {
        int cnt = 0;
        for (int i = head[o]; i >= 0; i = next[i])
            mem[cnt++] = i;
        /* A row group; else a loop that computes more than its own op
         * (producers fused into it) or an unrolled einsum. */
        if (group[o] != o && cnt < 2 && !(cnt == 1 && ir_einsum_unrolled_terms(m, ops[o]) > 0))
            continue;
        if (cnt == 0)
            continue;
        for (int q = 0; q < cnt; q++)
            in_set[mem[q]] = true;
        price_group(m, hw, ops, mem, cnt, in_set, def, fused, onchip, costs, o, counted,
                    group[o] == o);
        for (int q = 0; q < cnt; q++)
            in_set[mem[q]] = false;
    }
    rc = 0;
done:
    free(fused);
    free(group);
    free(def);
    free(head);
    free(next);
    free(mem);
    free(local);
    free(in_set);
    free(counted);
    return rc;
}
