/*
 * verify_uses.c - the use-list invariant (docs/ir.md, "Use-lists"), checked
 * by ir_verify after every pass.
 *
 * Every value's use-list holds exactly the operand slots (op, i) of the ops
 * in the module's list whose operand i is that value, each once.  Checked
 * in O(U log U) for U uses: every entry must name a linked op whose operand
 * i is the value, no entry may repeat, and the entries must be as many as
 * the operand slots a scan of the op list finds; together these make the
 * lists and the scan the same set.
 */
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "verify_internal.h"

/* Orders uses by op address, then operand index. */
static int use_cmp(const void *a, const void *b)
{
    const ir_use *x = a, *y = b;
    if (x->op != y->op)
        return (uintptr_t)x->op < (uintptr_t)y->op ? -1 : 1;
    return x->operand - y->operand;
}

int ir_verify_uses(const ir_module *m, diag_ctx *d)
{
    int before = d->nerrors;
    char b1[256];
    long slots = 0, entries = 0;
    int maxuses = 0;
    for (const ir_op *op = m->first; op; op = op->next)
        for (int i = 0; i < op->noperands && i < IR_MAX_OPERANDS; i++)
            slots += op->operands[i] != NULL;
    for (int v = 0; v < m->nvalues; v++)
        maxuses = m->values[v]->nuses > maxuses ? m->values[v]->nuses : maxuses;
    ir_use *sorted = malloc(((size_t)maxuses + 1) * sizeof *sorted);
    if (!sorted) {
        diag_error(d, DIAG_NOLOC, "out of memory in the verifier");
        return 1;
    }
    for (int id = 0; id < m->nvalues; id++) {
        const ir_value *v = m->values[id];
        entries += v->nuses;
        bool bad = v->nuses < 0 || (v->nuses > 0 && !v->uses);
        for (int k = 0; !bad && k < v->nuses; k++) {
            const ir_op *op = v->uses[k].op;
            int i = v->uses[k].operand;
            bad = !op || i < 0 || i >= op->noperands || i >= IR_MAX_OPERANDS || op->operands[i] != v ||
                  !(op->prev || op->next || m->first == op);
        }
        if (!bad && v->nuses > 1) {
            memcpy(sorted, v->uses, (size_t)v->nuses * sizeof *sorted);
            qsort(sorted, (size_t)v->nuses, sizeof *sorted, use_cmp);
            for (int k = 1; !bad && k < v->nuses; k++)
                bad = use_cmp(&sorted[k - 1], &sorted[k]) == 0;
        }
        if (bad)
            diag_error(d, v->loc, "the use-list of %s is stale: it names an op or operand that does "
                       "not read it, or one twice", ir_value_name(v, b1, sizeof b1));
    }
    free(sorted);
    if (d->nerrors == before && entries != slots)
        diag_error(d, DIAG_NOLOC, "use-lists are stale: they hold %ld uses but the ops read %ld operands",
                   entries, slots);
    return d->nerrors - before;
}
