/*
 * analyze.h - `einc analyze model.ein --hw H [--json]`: the whole-step
 * limits seed 000 reasons with, for the program's own plan and for each of
 * seed 000's strategies on the program's mesh (analyze.c).
 *
 * For every strategy: the step's compute time, its communication per mesh
 * axis (all of it, and the part on the critical path as the runtime
 * overlaps it), the batch per chip at which the step turns compute-bound
 * (the critical batch) and the largest batch that fits the profile's HBM,
 * with and without rematerialising each layer.
 */
#ifndef EINC_DRIVER_ANALYZE_H
#define EINC_DRIVER_ANALYZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "costmodel.h"
#include "frontend.h"
#include "plan.h"

#define ANALYZE_MAX_ROWS 8
#define ANALYZE_MAX_GROUPS 8 /* distinct mesh-axis groups that collectives run over */

/* One strategy and its limits.  Times are seconds per step per device;
 * batches count the program's batch dim globally (sequences, for a
 * [B, T] token input); the critical batch counts tokens per chip. */
typedef struct analyze_row {
    const char *family;         /* "plan" (the program as written) or a plan_family_name */
    plan_row fam;               /* the family, when not "plan" */
    bool ok;                    /* compiled */
    char why[200];              /* when not: the first error */
    double step;                /* cost pass step (overlap as the runtime does it) */
    double compute;             /* compute ops (MeshSlice loops: their GEMMs) */
    double exposed;             /* communication on the critical path */
    double memory;              /* peak bytes per device */
    int ngroups;
    char group[ANALYZE_MAX_GROUPS][IR_MAX_AXES + 1]; /* axis names, e.g. "X" or "XY" */
    double comm[ANALYZE_MAX_GROUPS];                 /* all collectives over that group */
    /* Tokens per chip at which every phase's compute covers its
     * communication on every group and its contractions' HBM traffic
     * (T_math >= T_comm and T_math >= T_mem); 0: compute-bound at any batch; < 0:
     * never (the communication grows with the batch as fast as the
     * compute, as for activations under tensor parallelism). */
    double critical;
    double critical_tokens;     /* the same in tokens of the whole batch (seed 002's B_crit) */
    char critical_by[IR_MAX_AXES + 1]; /* the group that sets it ("X", "XY", "HBM"), or "" */
    /* On a 2D ICI mesh, the same at seed 000's optimal split of the chips
     * between the two axes (real sizes with the same product; analyze.c,
     * optimal_split): opt_ok when computed. */
    bool opt_ok;
    double opt_critical;        /* tokens per chip; 0 any batch, -1 never */
    double opt_size[2];         /* the two axes' sizes at the optimum */
    char opt_by[IR_MAX_AXES + 1];
    /* Largest batch (a multiple of the batch dim's sharding) whose peak
     * memory fits the HBM; -1: any batch fits (memory does not grow with
     * it); 0: none.  _remat: compiled with --remat=layer. */
    double max_fits, max_fits_remat;
    bool remat_ok;              /* the --remat=layer compile succeeded */
} analyze_row;

typedef struct analyze_table {
    int n;
    analyze_row rows[ANALYZE_MAX_ROWS];
    plan_roles roles;
    const cost_hw *hw;
    ir_mesh mesh;               /* the program's (names and sizes) */
    int batch;                  /* dim id of the batch, or -1 (no critical batch, no fit) */
    char batch_name[64];
    int64_t batch_size;         /* as declared (after -D) */
    double tokens_per_batch;    /* tokens in one unit of the batch (its input's other
                                   dims that no param has, e.g. T) */
} analyze_table;

/* Compiles the program through the pipeline with auto-sharding `a` (NULL:
 * the shardings it writes) and `remat`, errors to `d`; NULL on failure.
 * The caller owns the module. */
typedef ir_module *(*analyze_compile_fn)(void *ctx, const fe_autoshard *a, ir_remat remat, diag_ctx *d);

/* Fills t for `proto` (the program compiled as written, with its mesh) on
 * `hw`, compiling each strategy with `compile`.  Returns 0, or -1 with a
 * message in err when the program declares no mesh or has too many dims. */
int analyze_run(analyze_table *t, const ir_module *proto, const cost_hw *hw, analyze_compile_fn compile,
                void *ctx, char *err, size_t errlen);

/* Devices the batch dim of m is split over: the product of the mesh axes
 * sharding it in the first input or state that holds it (1 if none). */
int64_t analyze_batch_parts(const ir_module *m, int batch);

/* The table, or with `json` the interface of docs/cost-model.md ("Whole-step
 * limits"): {"hw", "batch_dim", "strategies": [{"family", "mesh",
 * "compute_time", "comm_time": {group: s}, "exposed_comm_time",
 * "critical_batch_per_chip", "max_batch_fits", "max_batch_fits_remat",
 * ...}]} with null for "never" / "any" (on a 2D ICI mesh also
 * "critical_batch_per_chip_opt_mesh", "opt_mesh" and
 * "critical_batch_opt_mesh_bound": seed 000's optimal split), and `pipeline` (NULL, or an object
 * this takes ownership of: analyze_pipe_json) as its "pipeline" member. */
struct cJSON;
void analyze_print(FILE *out, const analyze_table *t, bool json, struct cJSON *pipeline);

#endif
