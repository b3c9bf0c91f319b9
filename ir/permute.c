/*
 * permute.c - the CollectivePermute op's pairs and its verifier hook
 * (ir.h, the perm arm; docs/ir.md, "CollectivePermute").
 */
#include <stdio.h>

#include "verify_internal.h"

#define WHY(...) (why ? (void)snprintf(why, why_size, __VA_ARGS__) : (void)0)

int ir_perm_target(const ir_module *m, const ir_op *op, int z)
{
    int a = op->u.perm.axis;
    if (a < 0 || a >= m->mesh.naxes)
        return -1;
    int n = (int)m->mesh.axes[a].size;
    if (z < 0 || z >= n)
        return -1;
    int t = z + op->u.perm.delta;
    if (op->u.perm.cyclic)
        t = ((t % n) + n) % n;
    return t >= 0 && t < n ? t : -1;
}

bool ir_verify_perm(const ir_module *m, const ir_op *op, ir_sharding *out, char *why, size_t why_size)
{
    const ir_value *v = op->operands[0];
    const ir_type *t = &v->type, *r = &op->result->type;
    bool same = t->rank == r->rank && t->dtype == r->dtype;
    for (int d = 0; d < t->rank && same; d++)
        same = t->dims[d] == r->dims[d];
    if (!same) {
        WHY("CollectivePermute's result must have its operand's dtype and dims");
        return false;
    }
    int a = op->u.perm.axis;
    if (a < 0 || a >= m->mesh.naxes) {
        WHY("CollectivePermute along mesh axis %d, which the mesh (%d axes) does not have", a, m->mesh.naxes);
        return false;
    }
    const ir_axis *ax = &m->mesh.axes[a];
    int delta = op->u.perm.delta;
    if (delta == 0 || delta <= -ax->size || delta >= ax->size) {
        WHY("CollectivePermute_%c shifts by %d, but along %c (%lld devices) a shift is 1 to %lld "
            "positions either way", ax->name, delta, ax->name, (long long)ax->size, (long long)ax->size - 1);
        return false;
    }
    if ((ir_sharding_used_axes(&t->sh, t->rank) | t->sh.unreduced) & (1u << a)) {
        WHY("CollectivePermute_%c moves blocks along %c, which splits its operand or holds its partial "
            "results: every device of %c must hold the same block", ax->name, ax->name, ax->name);
        return false;
    }
    *out = t->sh;
    return true;
}
