/*
 * plan_same.c - candidates that write the same program (plan.h,
 * plan_same_storage).
 *
 * A family writes the storage of each input, param and state, and a dim
 * that does not divide by the family's axes is left whole (plan.c, pick).
 * On a large mesh several families then write the same storage: on 4096
 * chips LLaMA-2 13B's model dim D = 5120 = 2^10 x 5 shards over at most
 * 1024 chips, so FSDP over all 4096 stores the params whole, as DP does,
 * and FSDP+TP with a data share above 1024 stores them as DP+TP.  The
 * frontend lowers a program from its source, the -D overrides, the mesh
 * and these storages alone (fe_autoshard.assign is called for the
 * declarations only, frontend/check_decl.c), so two such candidates are
 * one compile, and plan_run prices the second by the first's figures
 * instead of compiling it again: the same figures, the same choice.
 */

#include "ir.h"
#include "plan.h"

/* Whether value v is a declaration, the values assign shards. */
static bool declared(const ir_value *v)
{
    return v->kind == IR_VAL_INPUT || v->kind == IR_VAL_PARAM || v->kind == IR_VAL_STATE;
}

int plan_storage_count(const ir_module *proto)
{
    int n = 0;
    for (int i = 0; i < proto->nvalues; i++)
        n += declared(proto->values[i]);
    return n;
}

void plan_storage_of(const ir_module *proto, const plan_row *row, ir_sharding *out)
{
    /* assign reads the mesh and the dims' sizes of the module it is given:
     * the prototype's dims on the row's mesh (a shallow copy, read only). */
    ir_module m = *proto;
    m.mesh.naxes = row->naxes;
    int nsizes = (int)(sizeof row->sizes / sizeof row->sizes[0]);
    for (int k = 0; k < row->naxes && k < nsizes && k < IR_MAX_AXES; k++) {
        m.mesh.axes[k].name = "XYZ"[k];
        m.mesh.axes[k].size = row->sizes[k];
    }
    fe_autoshard a;
    plan_row_mesh_autoshard(row, &a);
    int n = 0;
    for (int i = 0; i < proto->nvalues; i++) {
        const ir_value *v = proto->values[i];
        if (!declared(v))
            continue;
        out[n] = ir_sharding_replicated();
        a.assign(a.ctx, &m, v->kind, v->tensor, v->type.rank, v->type.dims, &out[n]);
        n++;
    }
}

bool plan_same_storage(const ir_module *proto, const plan_row *a, const ir_sharding *sa, const plan_row *b,
                       const ir_sharding *sb)
{
    if (a->naxes != b->naxes || a->pp != b->pp)
        return false;
    for (int k = 0; k < a->naxes; k++)
        if (a->sizes[k] != b->sizes[k])
            return false;
    int n = 0;
    for (int i = 0; i < proto->nvalues; i++) {
        const ir_value *v = proto->values[i];
        if (!declared(v))
            continue;
        if (!ir_sharding_equal(&sa[n], &sb[n], v->type.rank))
            return false;
        n++;
    }
    return true;
}
