/*
 * ir_sharding.h - shardings and per-device sizes (sharding.c): building
 * and comparing shardings, local shapes and bytes, and their notation.
 *
 * A sharding (ir_sharding, ir.h) says how a value is split over the mesh;
 * these are the functions every layer uses to reason about one.  Part of
 * ir.h, which includes it after the types it needs: include ir.h.
 */
#ifndef EINC_IR_SHARDING_H
#define EINC_IR_SHARDING_H

#ifndef EINC_IR_H
#error "ir_sharding.h is part of ir.h: include ir.h"
#endif

/* The replicated sharding (no axes, nothing unreduced). */
ir_sharding ir_sharding_replicated(void);
/* The dim shardings of `s` (over `rank` dims) without its first dim, or
 * with a new unsharded first dim in front: one layer of a stacked tensor
 * (LayerSlice), and the stack of a layer (LayerStack).  Nothing unreduced. */
ir_sharding ir_sharding_without_first(const ir_sharding *s, int rank);
ir_sharding ir_sharding_with_first(const ir_sharding *s, int rank);
/* The sharding of a LayerStack of a value sharded `layer` (`rank` dims)
 * in a loop over `dim`: ir_sharding_with_first, whose new first dim is
 * split over the pipeline's axis when `dim` is the pipelined layer dim
 * (ir_module.pipe: each stage keeps its own layers). */
ir_sharding ir_stack_sharding(const ir_module *m, const ir_sharding *layer, int rank, int dim);
bool ir_sharding_equal(const ir_sharding *a, const ir_sharding *b, int rank);
/* Set of all axes used by dims of `s` (not counting unreduced). */
ir_axes ir_sharding_used_axes(const ir_sharding *s, int rank);
/* Set of the axes that split dim `d` of `s`. */
ir_axes ir_sharding_dim_axes(const ir_sharding *s, int d);
/* Appends axis `axis` as the minor-most axis of dim `d`. */
void ir_sharding_push(ir_sharding *s, int d, int axis);
/* Number of blocks dim `d` is split into: product of its axes' sizes. */
int64_t ir_sharding_dim_parts(const ir_sharding *s, const ir_mesh *mesh, int d);
/* Per-device size of position `d` of `t` (global size / parts). */
int64_t ir_local_size(const ir_module *m, const ir_type *t, int d);
/* Per-device element count and bytes of a value of type `t`. */
int64_t ir_local_elems(const ir_module *m, const ir_type *t);
int64_t ir_local_bytes(const ir_module *m, const ir_type *t);
/* Global bytes of a value of type `t` (unsharded). */
int64_t ir_global_bytes(const ir_module *m, const ir_type *t);

/* Writes `t` in the seeds' notation ("Out[B_X, D]{U_Y}", with `name` in
 * front) into buf; returns buf. */
const char *ir_type_str(const ir_module *m, const char *name, const ir_type *t,
                        char *buf, size_t size);
/* Writes "X", "XY" for an ordered axis list. */
const char *ir_axes_str(const ir_mesh *mesh, const int8_t *axes, int naxes,
                        char *buf, size_t size);

#endif
