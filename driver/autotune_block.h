/*
 * autotune_block.h - `einc autotune --non-gemm`: the whole Transformer
 * block, the four FC GEMMs the autotuner tunes plus the layers that are no
 * GEMM (attention products, softmax, LayerNorm, GeLU, residual adds), the
 * latter the same for every 2D GEMM algorithm (autotune_block.c; the
 * model is cost_ms_nongemm_time, passes/costmodel/meshslice_block.c).
 */
#ifndef EINC_AUTOTUNE_BLOCK_H
#define EINC_AUTOTUNE_BLOCK_H

#include <stddef.h>

#include "ir.h"
#include "meshslice_model.h"

struct cJSON;

/* The block's dims read by name from the compiled model `m` (global sizes,
 * after -D): B, S, H, E, D, F (batch, sequence, heads, head width, model,
 * feed-forward).  Returns 0, or -1 with the missing names in err. */
int at_block_dims(const ir_module *m, cost_ms_block_dims *d, char *err, size_t errlen);

/* Adds the whole block's figures to `o`, the JSON of tune result t on
 * `chips` chips of peak `peak` FLOP/s: "block_time" (t's GEMM time plus
 * the non-GEMM time, seconds per device), "block_time_no_overlap" and
 * "block_utilization" (the GEMMs' and the attention products' FLOPs over
 * block_time * chips * peak).  Nothing when t was not found. */
void at_block_json_result(struct cJSON *o, const cost_ms_tune_result *t, const cost_ms_nongemm *ng,
                          int64_t chips, double peak);

/* The "non_gemm" member of the report: each layer's name, FLOPs, bytes
 * and time, and their sums. */
void at_block_json(struct cJSON *root, const cost_ms_nongemm *ng);

/* The text report's section: the layers, the block with `best` (the
 * chosen algorithm's best mesh), then each algorithm of `per_algo` (count
 * entries, 0 for none; names by cost_ms_algo_name; not found: skipped)
 * with the whole block's time, utilization and MeshSlice's speedup. */
void at_block_print(const cost_ms_nongemm *ng, const cost_ms_tune_result *best, const cost_ms_tune_result *per_algo,
                    int count, int64_t chips, double peak);

#endif
