/* print_internal.h - pieces shared by the text and JSON printers. */
#ifndef EINC_PRINT_INTERNAL_H
#define EINC_PRINT_INTERNAL_H

#include <cJSON.h>

#include "ir.h"

/* The printer and JSON hooks of ir_op_traits, one per union arm of IR_OPS
 * (print.c, print_json.c; their contracts are ir_op_traits.print and .json). */
#define X(e, s, arm, lo, hi, tr)                                                   \
    void ir_print_##arm(FILE *out, const ir_module *m, const ir_op *op);           \
    void ir_json_##arm(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, \
                       const ir_op *const *order, int nops);
IR_OPS(X)
#undef X

/* "bd,df->bf": one letter per label, the lowercased dim name's first letter
 * when that is unique within the op, else the next free letter. */
const char *ir_einsum_spec(const ir_module *m, const ir_op *op, char *buf, size_t size);
/* The elementwise expression with operands written by name, e.g.
 * "gelu(Tmp[B_X, F_Y]) * 0.5". */
const char *ir_ew_str(const ir_module *m, const ir_op *op, char *buf, size_t size);
/* The collective's printed name, "AllGather_XY". */
const char *ir_coll_str(const ir_module *m, const ir_op *op, char *buf, size_t size);
/* One MeshSlice iteration in words: "for k in 0..3: AllGather_Y(In
 * sub-shard k, D 64 -> 128); ...; partial einsum(bd,df->bf); ...". */
const char *ir_ms_iter_str(const ir_module *m, const ir_op *op, char *buf, size_t size);

#endif
