/*
 * cost_report.c - what the cost model tells the user: --dump-cost's table
 * and --explain's regime analysis.
 *
 * --explain answers the two questions the seeds teach one to ask of a
 * sharded program:
 *   1. Is this contraction compute-bound against the communication it needs?
 *      Its FLOPs grow with each of its dims (free or contracting) while the
 *      bytes of a collective that does not carry that dim stay fixed, so
 *      there is a per-device size n* above which compute wins:
 *      n* = n * T_comm / T_compute.  For DP/FSDP (seed 000) this is
 *      B/X > C / W_ici = 2550 on TPU v5p; for Megatron TP it is F/Y > 2550.
 *   2. Is this collective latency- or bandwidth-bound?  The two terms of
 *      seed 001's max() are equal at V* = T_min * hops * W_eff.
 */
#include <math.h>
#include <string.h>

#include "cost.h"

/* The bound for the tables: ir_bound_name, "-" when not annotated. */
static const char *bound_name(ir_bound b)
{
    return b == IR_BOUND_NONE ? "-" : ir_bound_name(b);
}

/* "12.3 MB" style, decimal units as the seeds write them. */
static const char *human_bytes(double b, char *buf, size_t size)
{
    static const char *unit[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (fabs(b) >= 1000 && u < 4) {
        b /= 1000;
        u++;
    }
    snprintf(buf, size, u ? "%.3g %s" : "%.0f %s", b, unit[u]);
    return buf;
}

static void print_mesh(FILE *out, const ir_module *m)
{
    fputc('{', out);
    for (int i = 0; i < m->mesh.naxes; i++)
        fprintf(out, "%s%c: %lld", i ? ", " : "", m->mesh.axes[i].name,
                (long long)m->mesh.axes[i].size);
    fputc('}', out);
}

static void print_header(FILE *out, const ir_module *m, const cost_hw *hw, const char *what)
{
    fprintf(out, "%s: %s (%s%s), mesh ", what, hw->name, hw->path,
            hw->calibrated ? "" : ", UNCALIBRATED");
    print_mesh(out, m);
    fputc('\n', out);
}

#define GIB (1024.0 * 1024.0 * 1024.0)
#define GB 1e9

/* "plan 45.2 ms ..., proven optimal among ...; lower bound ...": how far
 * the plan can be from the best (ir_plan_cert_str), if the planner said. */
static void print_plan_line(FILE *out, const ir_module *m, const char *indent)
{
    char cert[IR_PLAN_CERT_MAX];
    ir_plan_cert_str(m, cert, sizeof cert);
    if (cert[0])
        fprintf(out, "%s%s\n", indent, cert);
}

/* "lower bound ... = max(compute, HBM) + communication": the parts of the
 * bound (cost_lower_bound), which no plan on this mesh beats. */
static void print_bound_line(FILE *out, const ir_module *m)
{
    const ir_totals *t = &m->totals;
    if (t->bound_serial <= 0)
        return;
    fprintf(out, "lower bound: %.4g us = max(compute %.4g us, HBM %.4g us) + communication %.4g us "
                 "(any plan on this mesh; HBM: %.4g bytes per device, the params, inputs and state "
                 "the step reads, each once)\n",
            t->bound_serial * 1e6, t->bound_compute * 1e6, t->bound_memory * 1e6, t->bound_comm * 1e6,
            t->bound_hbm_bytes);
}

/* The whole program's FLOPs: model FLOPs (global, and each device's share
 * of them, which MFU divides), the FLOPs a device executes for them (more
 * than its share when the plan computes some dims redundantly; seed 003,
 * question 2: "Z times extra FLOPs" when a dim is not sharded over Z), and
 * the elementwise FLOPs, which are not model FLOPs. */
static void print_flops_line(FILE *out, const ir_module *m)
{
    double devices = (double)ir_mesh_devices(&m->mesh), executed = 0, again = 0;
    if (devices < 1)
        devices = 1;
    for (const ir_op *op = m->first; op; op = op->next) {
        bool contraction = op->kind == IR_OP_MESHSLICE ||
                           (op->kind == IR_OP_EINSUM && !op->u.einsum.gather && !op->u.einsum.scatter);
        if (!op->cost.valid || !contraction)
            continue;
        double f = op->cost.flops * (double)ir_op_trips(m, op); /* a loop body: every run */
        executed += f;
        if (op->remat)
            again += f;
    }
    double share = m->totals.model_flops / devices;
    fprintf(out, "model FLOPs: %.4g global (einsums, each FLOP of the unsharded program once; "
                 "seed 003), %.4g per device; executed %.4g per device",
            m->totals.model_flops, share, executed);
    if (share > 0)
        fprintf(out, " (%.3gx the share%s)", executed / share,
                executed - again > share * (1 + 1e-9) ? ": some work is replicated" : "");
    if (again > 0)
        fprintf(out, ", of which %.4g computed again for the backward pass (--remat)", again);
    fprintf(out, "; elementwise %.4g global, not counted\n", m->totals.elementwise_flops);
}

/* A training step's time and FLOPs per phase (forward, backward, update),
 * each the sum of its ops' estimates (a loop body's once per iteration),
 * per device; nothing for a program without a backward pass.  The sums
 * add more than the step time when communication overlaps compute.
 * Seed 003: a training step's backward pass costs about twice its forward
 * pass (4 of the 6 * params * tokens FLOPs). */
static void print_phase_line(FILE *out, const ir_module *m)
{
    double t[3] = {0}, f[3] = {0};
    bool trains = false;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!op->cost.valid)
            continue;
        int p = (int)op->phase;
        trains |= p != IR_PHASE_FORWARD;
        double trips = (double)ir_op_trips(m, op);
        t[p] += op->cost.time * trips;
        f[p] += op->cost.flops * trips;
    }
    if (!trains)
        return;
    fprintf(out, "phases (op times summed, per device):");
    for (int p = IR_PHASE_FORWARD; p <= IR_PHASE_UPDATE; p++)
        fprintf(out, "%s %s %.4g us, %.4g FLOPs", p ? ";" : "", ir_phase_name((ir_phase)p),
                t[p] * 1e6, f[p]);
    if (f[IR_PHASE_FORWARD] > 0)
        fprintf(out, "; backward/forward FLOPs %.3g", f[IR_PHASE_BACKWARD] / f[IR_PHASE_FORWARD]);
    fputc('\n', out);
}

/* The program's per-device peak memory against the profile's HBM, then
 * what the whole mesh holds, in the decimal GB of seed 002's LLaMA-2 13B
 * table ("KV cache memory", "total memory" for 8 TPU v5e).  The mesh
 * figures are the per-device ones times the devices: every device holds
 * its own shards (equal on every device) and its own copy of what is
 * replicated. */
static void print_memory_line(FILE *out, const ir_module *m, const cost_hw *hw,
                              const cost_memory *memp)
{
    cost_memory mem = *memp;
    char at[64] = "-";
    if (mem.at && mem.at->result)
        ir_value_name(mem.at->result, at, sizeof at);
    double inputs = mem.resident - mem.params - mem.state - mem.cache;
    double live = mem.peak - mem.resident;
    fprintf(out, "memory: peak %.0f bytes (%.3g GiB) per device at %s (params %.3g GiB, ",
            m->totals.peak_memory, m->totals.peak_memory / GIB, at, mem.params / GIB);
    if (mem.cache > 0)
        fprintf(out, "state %.3g GiB, ", mem.cache / GIB);
    /* A training step: seed 000's accounting of params, optimizer state,
     * gradients and activations. */
    if (mem.state > 0 || mem.gradients > 0)
        fprintf(out, "optimizer state %.3g GiB, inputs %.3g GiB, live values %.3g GiB: "
                     "activations %.3g GiB, gradients and cotangents %.3g GiB)",
                mem.state / GIB, inputs / GIB, live / GIB, (live - mem.gradients) / GIB,
                mem.gradients / GIB);
    else
        fprintf(out, "inputs %.3g GiB, live values %.3g GiB)", inputs / GIB, live / GIB);
    if (hw)
        fprintf(out, "; %s has %.3g GiB of HBM per device: %s", hw->name, hw->hbm_bytes / GIB,
                m->totals.peak_memory > hw->hbm_bytes ? "does not fit" : "fits");
    fputc('\n', out);
    double devices = (double)ir_mesh_devices(&m->mesh);
    if (devices <= 1)
        return;
    fprintf(out, "memory on the mesh: %.0f devices x %.4g GB = %.4g GB (params %.4g GB, ", devices,
            m->totals.peak_memory / GB, devices * m->totals.peak_memory / GB, devices * mem.params / GB);
    if (mem.state > 0)
        fprintf(out, "optimizer state %.4g GB, ", devices * mem.state / GB);
    if (mem.cache > 0)
        fprintf(out, "state %.4g GB, ", devices * mem.cache / GB);
    fprintf(out, "inputs %.4g GB, live values %.4g GB; GB = 1e9 bytes)", devices * inputs / GB,
            devices * live / GB);
    if (hw)
        fprintf(out, "; %.0f %s have %.4g GB: %s", devices, hw->name, devices * hw->hbm_bytes / GB,
                m->totals.peak_memory > hw->hbm_bytes ? "does not fit" : "fits");
    fputc('\n', out);
}

/* "N bytes (G GiB)", with `sep` in front, for the breakdown line. */
static void print_bytes(FILE *out, const char *sep, const char *what, double bytes)
{
    fprintf(out, "%s%s %.0f bytes (%.3g GiB)", sep, what, bytes, bytes / GIB);
}

/* A program with state: its memory per device by class; for a training
 * step also the bytes per param and what they make, as seed 000 counts
 * them: params plus optimizer state (plus master weights), gradients and
 * activations apart ("Adam stores the params and the first and second
 * moments; bf16 params and f32 optimizer state make 2 + 8 = 10 bytes per
 * parameter", so a 96 GB TPU v5p holds about 9e9 params under pure data
 * parallelism; question 2: (2 + 4 + 4) x 13e9 ~ 130 GB for LLaMA-2 13B).
 * The fit against the HBM here is that criterion; the memory: line's peak
 * adds the gradients and activations. */
static void print_memory_breakdown(FILE *out, const cost_memory *memp, const cost_hw *hw)
{
    cost_memory mem = *memp;
    if (mem.state <= 0 && mem.cache <= 0)
        return;
    print_bytes(out, "", "memory breakdown per device: params", mem.params);
    print_bytes(out, ", ", "gradients", mem.grads);
    print_bytes(out, ", ", "optimizer state (moments)", mem.moments);
    print_bytes(out, ", ", "master weights", mem.master);
    print_bytes(out, ", ", "activations kept for the backward pass", mem.kept);
    print_bytes(out, ", ", "KV cache and state", mem.cache);
    fputc('\n', out);
    if (mem.state <= 0 || mem.param_count <= 0)
        return;
    double held = mem.params + mem.state;
    fprintf(out, "bytes per param %.4g = params %.4g + optimizer state %.4g + master weights %.4g; "
                 "params + optimizer state + master weights %.4g GB per device (seed 000's count: "
                 "gradients and activations not included; GB = 1e9 bytes)",
            held / mem.param_count, mem.params / mem.param_count, mem.moments / mem.param_count,
            mem.master / mem.param_count, held / GB);
    if (hw)
        fprintf(out, "; %s has %.4g GB per device: %s", hw->name, hw->hbm_bytes / GB,
                held > hw->hbm_bytes ? "does not fit" : "fits");
    fputc('\n', out);
}

bool cost_warn_memory(FILE *out, const ir_module *m, const cost_hw *hw)
{
    if (!hw || !m->totals.valid || m->totals.peak_memory <= hw->hbm_bytes)
        return false;
    /* Both figures are per device: each device holds its own shards. */
    fprintf(out, "einc: warning: needs %.1f GiB per device (params, state, inputs and live values at "
                 "their peak, program order), %s has %.1f GiB (%.3g bytes) of HBM per device\n",
            m->totals.peak_memory / GIB, hw->name, hw->hbm_bytes / GIB, hw->hbm_bytes);
    /* The same for the whole mesh, as seed 002 sizes a model's serving
     * memory against a slice ("8 TPU v5e give us 128GiB"; its figures are
     * decimal GB, so both units are given). */
    double devices = (double)ir_mesh_devices(&m->mesh);
    if (devices > 1)
        fprintf(out, "einc: note: needs %.1f GB (%.1f GiB) per %.0f devices, %.0f %s have %.4g GB "
                     "(%.1f GiB)\n",
                devices * m->totals.peak_memory / GB, devices * m->totals.peak_memory / GIB, devices,
                devices, hw->name, devices * hw->hbm_bytes / GB, devices * hw->hbm_bytes / GIB);
    return true;
}

void cost_print_table(FILE *out, const ir_module *m, const struct cost_hw *hw)
{
    if (hw)
        print_header(out, m, hw, "cost");
    fprintf(out, "%-16s %-13s %11s %11s %11s %11s %11s %11s %11s  %s\n", "value", "op", "FLOPs",
            "HBM bytes", "comm bytes", "compute us", "memory us", "comm us", "time us", "bound");
    for (const ir_op *op = m->first; op; op = op->next) {
        char name[64] = "-";
        if (op->result)
            ir_value_name(op->result, name, sizeof name);
        if (op->kind == IR_OP_LOOPBEGIN && op->u.loop.dim >= 0 && op->u.loop.dim < m->ndims)
            fprintf(out, "# repeat %s = %lld: the rows from LoopBegin to LoopEnd are one iteration "
                    "(the body indented); the totals count the body %lld times\n",
                    m->dims[op->u.loop.dim].name, (long long)m->dims[op->u.loop.dim].size,
                    (long long)m->dims[op->u.loop.dim].size);
        if (op->loop) { /* a repeated block's body, indented as in --dump-ir */
            char indented[66];
            snprintf(indented, sizeof indented, "  %s", name);
            fprintf(out, "%-16s %-13s ", indented, ir_op_name(op->kind));
        } else {
            fprintf(out, "%-16s %-13s ", name, ir_op_name(op->kind));
        }
        const ir_cost *c = &op->cost;
        if (!c->valid) {
            fprintf(out, "%11s %11s %11s %11s %11s %11s %11s  -\n", "-", "-", "-", "-", "-", "-", "-");
            continue;
        }
        fprintf(out, "%11.4g %11.4g %11.4g %11.4g %11.4g %11.4g %11.4g  %s\n", c->flops,
                c->hbm_bytes, c->comm_bytes, c->t_compute * 1e6, c->t_memory * 1e6,
                c->t_comm * 1e6, c->time * 1e6, bound_name(c->bound));
    }
    if (m->totals.valid) {
        fprintf(out,
                "totals: step %.4g us, exposed communication %.4g us, MFU %.1f%% "
                "(per device; param gathers overlapped with earlier compute)\n",
                m->totals.step_time * 1e6, m->totals.exposed_comm_time * 1e6,
                m->totals.mfu * 100);
        print_plan_line(out, m, "");
        print_bound_line(out, m);
        print_flops_line(out, m);
        print_phase_line(out, m);
        cost_memory mem = cost_memory_peak(m);
        print_memory_line(out, m, hw, &mem);
        print_memory_breakdown(out, &mem, hw);
        cost_pipe_print(out, m);
    } else {
        fprintf(out, "totals: - (the cost pass has not run)\n");
    }
}

static bool is_collective(const ir_op *op)
{
    return ir_op_is_reshard(op->kind) && op->kind != IR_OP_SLICE;
}

static bool type_has_dim(const ir_type *t, int dim)
{
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d] == dim)
            return true;
    return false;
}

/* The collectives einsum `op` needs: those inserted for it (provenance) and
 * the resharding chains producing its operands.  Returns how many. */
static int needed_collectives(const ir_module *m, const ir_op *op, const ir_op **out, int max)
{
    int n = 0;
#define ADD(c)                                      \
    do {                                            \
        bool seen_ = false;                         \
        for (int k_ = 0; k_ < n; k_++)              \
            seen_ |= out[k_] == (c);                \
        if (!seen_ && n < max)                      \
            out[n++] = (c);                         \
    } while (0)
    for (const ir_op *o = m->first; o; o = o->next)
        if (o->for_op == op && is_collective(o))
            ADD(o);
    for (int i = 0; i < op->noperands; i++) {
        const ir_value *v = op->operands[i];
        while (v && v->kind == IR_VAL_OP && v->def && ir_op_is_reshard(v->def->kind)) {
            if (is_collective(v->def))
                ADD(v->def);
            v = v->def->noperands > 0 ? v->def->operands[0] : NULL;
        }
    }
#undef ADD
    return n;
}

double cost_critical_dim_size(const ir_module *m, const ir_op *op, int dim,
                              const ir_op **colls, int max, int *ncolls)
{
    const ir_op *buf[64];
    int n = needed_collectives(m, op, buf, 64);
    if (colls)
        for (int i = 0; i < n && i < max; i++)
            colls[i] = buf[i];
    if (ncolls)
        *ncolls = n;
    if (op->kind != IR_OP_EINSUM || !op->cost.valid || op->cost.t_compute <= 0)
        return -1;
    int64_t local = cost_einsum_label_size(m, op, dim);
    if (local < 0)
        return -1;
    if (n == 0)
        return 0;
    double t_comm = 0;
    for (int i = 0; i < n; i++) {
        const ir_op *c = buf[i];
        if ((c->result && type_has_dim(&c->result->type, dim)) ||
            (c->noperands > 0 && c->operands[0] && type_has_dim(&c->operands[0]->type, dim)))
            return -1;
        if (c->cost.valid)
            t_comm += c->cost.t_comm;
    }
    return (double)local * t_comm / op->cost.t_compute;
}

/* "Name = Einsum(A[..], B[..]) -> R[..]" with shardings. */
static void print_op_line(FILE *out, const ir_module *m, const ir_op *op)
{
    char name[64], buf[256];
    if (op->result) {
        ir_value_name(op->result, name, sizeof name);
        fprintf(out, "%s = ", ir_type_str(m, name, &op->result->type, buf, sizeof buf));
    }
    fprintf(out, "%s", ir_op_name(op->kind));
    if (ir_op_is_reshard(op->kind)) {
        char axes[16];
        fprintf(out, "_%s", ir_axes_str(&m->mesh, op->u.coll.axes, op->u.coll.naxes, axes, sizeof axes));
    }
    fputc('(', out);
    for (int i = 0; i < op->noperands; i++) {
        if (!op->operands[i])
            continue;
        ir_value_name(op->operands[i], name, sizeof name);
        fprintf(out, "%s%s", i ? ", " : "", ir_type_str(m, name, &op->operands[i]->type, buf, sizeof buf));
    }
    fprintf(out, ")\n");
}

/* One line of --explain for label `dim` of einsum `op`. */
/* One line of --explain for label `dim` of einsum `op`. */
static void explain_dim(FILE *out, const ir_module *m, const cost_hw *hw, const ir_op *op, int dim,
                        const char *role)
{
    const char *dn = m->dims[dim].name;
    double now = (double)cost_einsum_label_size(m, op, dim);
    double crit = cost_critical_dim_size(m, op, dim, NULL, 0, NULL);
    fprintf(out, "  %s dim %s (per device %.0f): ", role, dn, now);
    if (crit < 0)
        fprintf(out, "collectives grow with %s too, no threshold", dn);
    else if (crit > 0)
        fprintf(out, "compute-bound when per-device %s > %.4g (%s)", dn, crit,
                now > crit ? "compute" : "communication");
    double hbm = cost_hbm_critical_dim_size(m, hw, op, dim);
    if (hbm > 0)
        fprintf(out, "%sHBM: compute-bound when %s > %.4g (%s)\n", crit != 0 ? "; " : "", dn, hbm,
                now > hbm ? "compute" : "memory");
    else
        fprintf(out, "%sHBM: %s-bound at any %s\n", crit != 0 ? "; " : "",
                hbm == 0 ? "compute" : "memory", dn);
}

/* The propagate pass's decision for `op`, if it wrote one: the text after
 * "; planner: " in the reason of a collective inserted for op (the runner-up
 * layout and the step times of both, passes/propagate_reason.c). */
static const char *planner_decision(const ir_module *m, const ir_op *op)
{
    static const char tag[] = "; planner: ";
    for (const ir_op *o = m->first; o; o = o->next) {
        const char *at = o->for_op == op && o->reason ? strstr(o->reason, tag) : NULL;
        if (at)
            return at + sizeof tag - 1;
    }
    return NULL;
}

static void explain_einsum(FILE *out, const ir_module *m, const cost_hw *hw, const ir_op *op)
{
    print_op_line(out, m, op);
    const char *dec = planner_decision(m, op);
    if (dec)
        fprintf(out, "  planner: %s\n", dec);
    const ir_cost *c = &op->cost;
    ir_dtype t = hw->measured ? op->result->type.dtype : cost_einsum_dtype(m, op);
    fprintf(out, "  compute %.4g us (%.4g FLOP at %.4g FLOP/s %s), memory %.4g us: %s-bound on its own\n",
            c->t_compute * 1e6, c->flops, cost_peak_flops(hw, t), ir_dtype_name(t), c->t_memory * 1e6,
            bound_name(c->bound));
    const ir_op *colls[64];
    int n = 0;
    cost_critical_dim_size(m, op, -1, colls, 64, &n);
    if (n == 0) {
        fprintf(out, "  needs no collective under this sharding\n");
        return;
    }
    double t_comm = 0;
    fprintf(out, "  needs");
    for (int i = 0; i < n && i < 64; i++) {
        char name[64] = "-";
        if (colls[i]->result)
            ir_value_name(colls[i]->result, name, sizeof name);
        fprintf(out, "%s %s (%s, %.4g us)", i ? "," : "", name, ir_op_name(colls[i]->kind),
                colls[i]->cost.t_comm * 1e6);
        t_comm += colls[i]->cost.t_comm;
    }
    fprintf(out, ": %.4g us of communication against %.4g us of compute -> %s-bound\n",
            t_comm * 1e6, c->t_compute * 1e6, t_comm > c->t_compute ? "communication" : "compute");
    /* Each distinct label once, result (free) dims first. */
    int seen[IR_MAX_OPERANDS * IR_MAX_RANK + IR_MAX_RANK], nseen = 0;
    for (int i = -1; i < op->noperands; i++) {
        const ir_value *v = i < 0 ? op->result : op->operands[i];
        const int *labels = i < 0 ? op->u.einsum.result_labels : op->u.einsum.labels[i];
        for (int j = 0; v && j < v->type.rank; j++) {
            int dim = labels[j], k = 0;
            while (k < nseen && seen[k] != dim)
                k++;
            if (k < nseen || dim < 0 || dim >= m->ndims)
                continue;
            seen[nseen++] = dim;
            explain_dim(out, m, hw, op, dim, i < 0 ? "free" : "contracting");
        }
    }
}

static void explain_collective(FILE *out, const ir_module *m, const cost_hw *hw, const ir_op *op)
{
    print_op_line(out, m, op);
    cost_coll_time ct;
    double v;
    if (!cost_op_coll_time(m, hw, op, &ct, &v))
        return;
    /* Physical axes, as the formulas count them: a folded mesh axis is
     * its sub-axes, a DCN axis a ring over pods. */
    int rings = 0, lines = 0, pods = 0;
    for (int i = 0; i < op->u.coll.naxes; i++) {
        int a = op->u.coll.axes[i];
        if (a < 0 || a >= m->mesh.naxes || m->mesh.axes[a].size <= 1)
            continue;
        const ir_axis *ax = &m->mesh.axes[a];
        if (ax->dcn && hw->dcn_bw > 0) {
            pods++;
            continue;
        }
        int64_t sub[IR_MAX_PHYS];
        int k = cost_axis_split(ax->size, ax->phys, sub);
        for (int j = 0; j < k; j++) {
            if (sub[j] <= 1)
                continue;
            if (cost_hw_axis_wraps(hw, sub[j]))
                rings++;
            else
                lines++;
        }
    }
    char vb[32], xb[32];
    fprintf(out, "  %s-bound: %.4g us (latency term %.4g us, bandwidth term %.4g us), V = %s",
            bound_name(ct.bound), ct.time * 1e6, ct.t_latency * 1e6, ct.t_bandwidth * 1e6,
            human_bytes(v, vb, sizeof vb));
    if (rings)
        fprintf(out, ", %d %s with wraparound (bidirectional ring)", rings, rings > 1 ? "axes" : "axis");
    if (lines)
        fprintf(out, "%s %d %s without wraparound (one-way ring, seed 001 pop quiz 2)",
                rings ? " and" : ",", lines, lines > 1 ? "axes" : "axis");
    if (pods)
        fprintf(out, "%s %d %s across pods (DCN ring, seed 000)", rings || lines ? " and" : ",", pods,
                pods > 1 ? "axes" : "axis");
    fputc('\n', out);
    if (op->u.coll.dim == IR_COLL_PER_AXIS) {
        /* One group over all the axes, each along its own dim, timed as a
         * collective over all of them (seed 001's multi-axis formulas). */
        const ir_coll *c = &op->u.coll;
        const int *dims = op->operands[0]->type.dims;
        fprintf(out, "  one collective over the group of all its axes:");
        for (int i = 0; i < c->naxes; i++) {
            fprintf(out, "%s %c %s %s", i ? "," : "", m->mesh.axes[c->axes[i]].name,
                    op->kind == IR_OP_ALLTOALL ? "from" : "along", m->dims[dims[ir_coll_dim(c, i)]].name);
            if (op->kind == IR_OP_ALLTOALL)
                fprintf(out, " to %s", m->dims[dims[ir_coll_dim2(c, i)]].name);
        }
        fprintf(out, "; %s\n", op->kind == IR_OP_ALLTOALL
                                   ? "the largest axis sets the time (seed 001, V max|X_i| / (4 N W_ici))"
                                   : "the bandwidth of every axis counts (seed 001, W_ici N_axes)");
    }
    if (ct.crossover > 0)
        fprintf(out, "  switches to %s-bound %s V = %s\n",
                ct.bound == IR_BOUND_BANDWIDTH ? "latency" : "bandwidth",
                ct.bound == IR_BOUND_BANDWIDTH ? "below" : "above",
                human_bytes(ct.crossover, xb, sizeof xb));
    if (op->reason)
        fprintf(out, "  inserted because: %s\n", op->reason);
}

/* --explain for a MeshSlice op: its loop's estimate against K = 1 (the
 * Collective 2D GEMM), seed 004 3.2.2 (passes/costmodel/meshslice_cost.c). */
static void explain_meshslice(FILE *out, const ir_module *m, const cost_hw *hw, const ir_op *op)
{
    ir_cost one;
    cost_meshslice_op(m, hw, op, 1, &one);
    print_op_line(out, m, op);
    fprintf(out, "  MeshSlice %s, K=%d: prologue + (K-1) * max(partial collectives, partial einsum) + "
                 "epilogue = %.4g us; einsum %.4g us, collectives %.4g us in all; hides %.4g us of "
                 "communication; K=1 (Collective 2D GEMM) %.4g us\n",
            ir_ms_dataflow_name(op->u.ms.dataflow), op->u.ms.k, op->cost.time * 1e6,
            op->cost.t_compute * 1e6, op->cost.t_comm * 1e6,
            fmax(0, op->cost.t_compute + op->cost.t_comm - op->cost.time) * 1e6, one.time * 1e6);
    if (op->reason)
        fprintf(out, "  inserted because: %s\n", op->reason);
}

/* Seed 002 ("Distributing inference over multiple accelerators": FSDP in
 * generation "is a common mistake"): a decode step, a program that writes
 * a KV cache, which gathers params moves every weight once per token, where
 * Megatron sharding (over heads and F) moves only [B, D] activations. */
static void explain_decode_gathers(FILE *out, const ir_module *m)
{
    bool decode = false;
    for (const ir_op *op = m->first; op && !decode; op = op->next)
        decode = op->kind == IR_OP_UPDATESLICE;
    if (!decode)
        return;
    double bytes = 0, time = 0;
    int n = 0;
    const ir_op *first = NULL;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (op->kind != IR_OP_ALLGATHER || !op->cost.valid ||
            !cost_value_is_param_derived(op->operands[0]))
            continue;
        double trips = (double)ir_op_trips(m, op);
        bytes += op->cost.comm_bytes * trips;
        time += op->cost.time * trips;
        n++;
        first = first ? first : op;
    }
    if (!n)
        return;
    char b1[64], b2[256];
    fprintf(out, "  seed 002's common mistake: this is a decode step (it writes a KV cache), and %d "
                 "AllGather%s of params move %s per device per token (%.4g us; first %s): FSDP "
                 "moves the weights for every token, where sharding them Megatron-style (over the "
                 "heads and F) moves only the [B, D] activations\n",
            n, n == 1 ? "" : "s", human_bytes(bytes, b1, sizeof b1), time * 1e6,
            ir_value_name(first->operands[0], b2, sizeof b2));
}

void cost_explain(FILE *out, const ir_module *m, const struct cost_hw *hw)
{
    if (!hw) {
        fprintf(out, "explain: no hardware profile\n");
        return;
    }
    print_header(out, m, hw, "explain");
    fprintf(out, "  C(bf16) = %.4g FLOP/s, W_hbm = %.4g B/s, W_ici = %.4g B/s bidirectional "
                 "(%.4g one-way), T_min = %.4g us; ICI intensity C/W_ici = %.4g\n",
            hw->peak_flops[IR_BF16], hw->hbm_bw, hw->ici_bidi_bw, hw->ici_oneway_bw,
            hw->ici_latency * 1e6, hw->peak_flops[IR_BF16] / hw->ici_bidi_bw);
    /* The narrow rates, where the profile has them: seed 000 and 002 reason
     * with their intensities (C_int8 / W_ici = 5100 on v5p; int8 weights
     * halve the bytes a decode step reads). */
    if (hw->peak_int8 > 0)
        fprintf(out, "  C(int8) = %.4g OP/s: ICI intensity C_int8/W_ici = %.4g, HBM intensity "
                     "C_int8/W_hbm = %.4g\n",
                hw->peak_int8, hw->peak_int8 / hw->ici_bidi_bw, hw->peak_int8 / hw->hbm_bw);
    if (hw->peak_fp8 > 0)
        fprintf(out, "  C(fp8) = %.4g FLOP/s: ICI intensity C_fp8/W_ici = %.4g, HBM intensity "
                     "C_fp8/W_hbm = %.4g\n",
                hw->peak_fp8, hw->peak_fp8 / hw->ici_bidi_bw, hw->peak_fp8 / hw->hbm_bw);
    print_plan_line(out, m, "  ");
    int shown = 0;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!op->cost.valid)
            continue;
        if (op->kind == IR_OP_EINSUM && op->result) {
            explain_einsum(out, m, hw, op);
            shown++;
        } else if (is_collective(op)) {
            explain_collective(out, m, hw, op);
            shown++;
        } else if (op->kind == IR_OP_MESHSLICE) {
            explain_meshslice(out, m, hw, op);
            shown++;
        }
    }
    if (!shown)
        fprintf(out, "  nothing to explain (no einsum or collective with a cost; run the cost pass first)\n");
    explain_decode_gathers(out, m);
}
