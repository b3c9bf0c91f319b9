/*
 * autotune.c - `einc autotune`: MeshSlice's LLM autotuner over a .ein model.
 *
 * The two stages of seed 004, 3.2: (1) each 2D GEMM gets the dataflow that
 * keeps its largest matrix stationary; (2) an exhaustive search over the
 * factor pairs rows x cols of the chip count, with each layer's slice count
 * K searched independently, picks the mesh shape with the least estimated
 * time (the cost model's cost_ms_* functions,
 * passes/costmodel/meshslice_model.c).  The model comes from the .ein
 * file: it is compiled by the frontend and every Einsum with two operands,
 * at least one contracting dim, a free dim on each side and no batch dim
 * is a 2D GEMM C[M,N] = A[M,K] * B[K,N], M, N and K being the products of
 * the global sizes of A's free dims, B's free dims and the contracting
 * dims.
 * The shardings written in the file are not used: the autotuner picks its
 * own 2D sharding (rows of each matrix over the first mesh axis, columns
 * over the second), and only the mesh axis names are taken for the -D
 * options it prints.
 */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
#include "autotune_block.h"
#include "meshslice_model.h"
#include "driver.h"
#include "frontend.h"

/* The chip of the MeshSlice paper's evaluation (seed 004), the autotuner's
 * default when --hw is not given. */
#define AUTOTUNE_DEFAULT_HW "tpu-v4"

#define MAX_LAYERS 256
#define MAX_CHIPS (INT64_C(1) << 20)

/* The command line. */
typedef struct at_options {
    const char *input;              /* the .ein path */
    int64_t chips;                  /* --chips */
    const char *hw;                 /* --hw */
    fe_define defines[DRV_MAX_DEFINES]; /* -D NAME=VALUE, names cut in argv */
    int ndefines;                   /* entries used in defines */
    int algo;                       /* --algorithm (default MeshSlice) */
    int df;                         /* --dataflow, -1 = the paper's heuristic */
    bool compare;                   /* --compare: every algorithm */
    bool json;                      /* --json */
    bool train;                     /* --train: forward + backward data + backward weight */
    bool no_overlap;                /* --no-overlap: nothing overlaps (seed 004 Table 3's TPUs) */
    bool fit_seed004;               /* --fit seed004: the authors' fitted TPU v4 figures */
    bool collective_overlap;        /* --collective-overlap: Collective hides one AllGather */
    bool non_gemm;                  /* --non-gemm: the block's other layers too (autotune_block.h) */
    double t_launch, l_sync, gemm_eff; /* overrides, < 0 = profile/defaults */
    int64_t block;                  /* --block, 0 = default */
    int64_t rows, cols;             /* --mesh RxC: fixed shape, 0 = search */
    int64_t slices;                 /* --slices K: one K for every layer, 0 = search */
} at_options;

/* One 2D GEMM found in the model. */
typedef struct at_layer {
    char name[64];      /* the result tensor's name */
    char formula[320];  /* the einsum in the source's dim names */
    ir_dtype dtype;     /* operand element type */
} at_layer;

static void usage(FILE *out)
{
    fputs("usage: einc autotune --chips N [options] FILE.ein\n"
          "\n"
          "MeshSlice's autotuner (docs/meshslice.md): picks the 2D mesh shape, each 2D\n"
          "GEMM's dataflow and slice count K by the analytical cost model, and prints\n"
          "the einc options for the best configuration.\n"
          "\n"
          "  --chips N             number of chips to arrange as rows x cols (required)\n"
          "  --hw NAME|PATH.json   hardware profile (default tpu-v4)\n"
          "  -D NAME=VALUE         override a dim size before the search (e.g. -D B=128)\n"
          "  --algorithm A         meshslice (default), collective, wang, summa, cannon\n"
          "  --dataflow D          os, ls, rs for every layer (default: keep the largest\n"
          "                        matrix stationary)\n"
          "  --mesh RxC            evaluate this mesh shape only (R * C = N)\n"
          "  --slices K            MeshSlice: use this K for every layer instead of searching\n"
          "  --train               model training: each layer's forward, backward-data and\n"
          "                        backward-weight GEMMs (seed 004 Table 1 dataflows)\n"
          "  --compare             also tune every other algorithm and print speedups\n"
          "  --non-gemm            add the block's non-GEMM layers (attention products,\n"
          "                        softmax, LayerNorm, GeLU, residual adds; dims B S H E D F)\n"
          "  --no-overlap          communication never overlaps computation: every\n"
          "                        algorithm runs its stages one after another\n"
          "  --json                machine-readable report\n"
          "  --fit seed004         communication and GEMM-rate figures seed 004's authors\n"
          "                        fitted on TPU v4 (docs/meshslice.md); --fit profile\n"
          "                        (default) derives them from the --hw profile\n"
          "  --collective-overlap  Collective hides one AllGather behind its GEMM, as seed\n"
          "                        004's authors price XLA's 2D GEMM on a real TPU\n"
          "  --t-launch SECONDS    collective launch cost T_launch (default 5e-6)\n"
          "  --l-sync SECONDS      per-step synchronization L_sync (default: profile's\n"
          "                        per-hop latency)\n"
          "  --gemm-eff F          fraction of peak FLOP/s a large GEMM reaches (default 0.9)\n"
          "  --block B             MeshSlice slicing block (default 8)\n",
          out);
}

/* Parses a finite number in [lo, hi]. */
static bool parse_real(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* Takes the value of option `a` from "--opt=V" or the next argument. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] == 0 && *i + 1 < argc)
        return argv[++*i];
    return a[n] == 0 ? "" : NULL;
}

static int parse_args(int argc, char **argv, at_options *o)
{
    memset(o, 0, sizeof *o);
    o->algo = COST_MS_ALGO_MESHSLICE;
    o->df = -1;
    o->t_launch = o->l_sync = o->gemm_eff = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return -1;
        } else if ((v = opt_value(argc, argv, &i, "--chips"))) {
            if (drv_count("einc autotune", "--chips", v, 1, MAX_CHIPS, &o->chips))
                return 2;
        } else if ((v = opt_value(argc, argv, &i, "--hw"))) {
            if (!*v)
                return drv_bad_usage("einc autotune", "%s needs a profile name or path", "--hw");
            o->hw = v;
        } else if ((v = opt_value(argc, argv, &i, "--algorithm"))) {
            o->algo = cost_ms_algo_lookup(v);
            if (o->algo < 0)
                return drv_bad_usage("einc autotune", "unknown algorithm '%s' (meshslice, collective, wang, summa, cannon)", v);
        } else if ((v = opt_value(argc, argv, &i, "--dataflow"))) {
            o->df = strcmp(v, "auto") == 0 ? -1 : cost_ms_dataflow_lookup(v);
            if (o->df < 0 && strcmp(v, "auto") != 0)
                return drv_bad_usage("einc autotune", "unknown dataflow '%s' (os, ls, rs or auto)", v);
        } else if ((v = opt_value(argc, argv, &i, "--t-launch"))) {
            if (!parse_real(v, 0, 1, &o->t_launch))
                return drv_bad_usage("einc autotune", "--t-launch wants seconds in [0, 1], not '%s'", v);
        } else if ((v = opt_value(argc, argv, &i, "--l-sync"))) {
            if (!parse_real(v, 0, 1, &o->l_sync))
                return drv_bad_usage("einc autotune", "--l-sync wants seconds in [0, 1], not '%s'", v);
        } else if ((v = opt_value(argc, argv, &i, "--gemm-eff"))) {
            if (!parse_real(v, 1e-6, 1, &o->gemm_eff))
                return drv_bad_usage("einc autotune", "--gemm-eff wants a fraction in (0, 1], not '%s'", v);
        } else if ((v = opt_value(argc, argv, &i, "--block"))) {
            if (drv_count("einc autotune", "--block", v, 1, 1 << 20, &o->block))
                return 2;
        } else if ((v = opt_value(argc, argv, &i, "--mesh"))) {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            char *x = strchr(buf, 'x');
            if (x)
                *x = 0;
            if (!x || strlen(v) >= sizeof buf || !drv_parse_count(buf, 1, MAX_CHIPS, &o->rows) ||
                !drv_parse_count(x + 1, 1, MAX_CHIPS, &o->cols))
                return drv_bad_usage("einc autotune", "--mesh wants ROWSxCOLS, two decimal counts "
                                     "from 1 to 1048576 (e.g. 16x16), not '%s'", v);
        } else if ((v = opt_value(argc, argv, &i, "--slices"))) {
            if (drv_count("einc autotune", "--slices", v, 1, 1 << 20, &o->slices))
                return 2;
        } else if ((v = opt_value(argc, argv, &i, "--fit"))) {
            if (strcmp(v, "seed004") != 0 && strcmp(v, "profile") != 0)
                return drv_bad_usage("einc autotune", "--fit wants 'seed004' or 'profile', not '%s'", v);
            o->fit_seed004 = strcmp(v, "seed004") == 0;
        } else if (strcmp(a, "--collective-overlap") == 0) {
            o->collective_overlap = true;
        } else if (strcmp(a, "--compare") == 0) {
            o->compare = true;
        } else if (strcmp(a, "--train") == 0) {
            o->train = true;
        } else if (strcmp(a, "--non-gemm") == 0) {
            o->non_gemm = true;
        } else if (strcmp(a, "--no-overlap") == 0) {
            o->no_overlap = true;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strncmp(a, "-D", 2) == 0) {
            const char *def = a[2] ? a + 2 : (++i < argc ? argv[i] : NULL);
            if (!def)
                return drv_bad_usage("einc autotune", "%s needs NAME=VALUE", a);
            if (drv_define("einc autotune", (char *)def, o->defines, &o->ndefines))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            return drv_bad_usage("einc autotune", "unknown option '%s'", a);
        } else if (o->input) {
            return drv_bad_usage("einc autotune", "more than one input file ('%s')", a);
        } else {
            o->input = a;
        }
    }
    if (!o->chips)
        return drv_bad_usage("einc autotune", "%s", "--chips N is required");
    if (!o->input)
        return drv_bad_usage("einc autotune", "%s", "no input file");
    if (o->rows && o->rows * o->cols != o->chips) {
        char msg[96];
        snprintf(msg, sizeof msg, "%lldx%lld is not %lld chips", (long long)o->rows,
                 (long long)o->cols, (long long)o->chips);
        return drv_bad_usage("einc autotune", "--mesh %s", msg);
    }
    if (o->slices && o->algo != COST_MS_ALGO_MESHSLICE)
        return drv_bad_usage("einc autotune", "%s", "--slices applies to --algorithm meshslice only");
    return 0;
}

/* Whether dim id `d` is among the first `rank` labels. */
static bool has_label(const int *labels, int rank, int d)
{
    for (int i = 0; i < rank; i++)
        if (labels[i] == d)
            return true;
    return false;
}

/* Appends "name" or "*name" to the formula text. */
static void put_dim(char *buf, size_t size, bool *first, const char *name)
{
    size_t len = strlen(buf);
    if (len + 1 < size)
        snprintf(buf + len, size - len, "%s%s", *first ? "" : "*", name);
    *first = false;
}

/* Products of `labels`' sizes over the dims of class `want` (0 M, 1 N, 2 K);
 * returns false on overflow.  Also writes the dim names into `txt`. */
static bool dim_product(const ir_module *m, const int *cls, const int *ids, int nids, int want,
                        int64_t *out, char *txt, size_t txtsize)
{
    int64_t p = 1;
    bool first = true;
    txt[0] = 0;
    for (int i = 0; i < nids; i++) {
        if (cls[i] != want)
            continue;
        int64_t s = m->dims[ids[i]].size;
        if (p > (INT64_C(1) << 62) / s)
            return false;
        p *= s;
        put_dim(txt, txtsize, &first, m->dims[ids[i]].name);
    }
    *out = p;
    return true;
}

/*
 * Finds the 2D GEMMs of `m` (module comment).  Fills layers/info (up to
 * MAX_LAYERS) and returns their count; other einsums are listed on stderr
 * with the reason they are not 2D GEMMs, so a user sees what was skipped.
 */
static int find_gemms(const ir_module *m, cost_ms_layer *layers, at_layer *info, bool quiet)
{
    int n = 0;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (op->kind != IR_OP_EINSUM)
            continue;
        const char *name = op->result->tensor;
        if (op->noperands != 2) {
            if (!quiet)
                fprintf(stderr, "einc autotune: note: '%s' has %d operands: not a 2D GEMM\n", name,
                        op->noperands);
            continue;
        }
        const int *la = op->u.einsum.labels[0], *lb = op->u.einsum.labels[1];
        const int *lr = op->u.einsum.result_labels;
        int ra = op->operands[0]->type.rank, rb = op->operands[1]->type.rank;
        int rr = op->result->type.rank;
        /* Every distinct dim and its class: 0 M (A and C), 1 N (B and C),
         * 2 K (A and B), 3 batch (all three), 4 summed in one operand only. */
        int ids[3 * IR_MAX_RANK], cls[3 * IR_MAX_RANK], nids = 0;
        const int *all[2] = {la, lb};
        int ranks[2] = {ra, rb};
        for (int o = 0; o < 2; o++)
            for (int i = 0; i < ranks[o]; i++) {
                int d = all[o][i];
                if (has_label(ids, nids, d))
                    continue;
                bool in_a = has_label(la, ra, d), in_b = has_label(lb, rb, d);
                bool in_c = has_label(lr, rr, d);
                ids[nids] = d;
                cls[nids++] = in_a && in_b ? (in_c ? 3 : 2) : (in_c ? (in_a ? 0 : 1) : 4);
            }
        const char *why = NULL;
        bool seen[5] = {false};
        for (int i = 0; i < nids; i++)
            seen[cls[i]] = true;
        if (seen[3])
            why = "a batch dim (in both operands and the result)";
        else if (seen[4])
            why = "a dim summed within one operand";
        else if (!seen[2])
            why = "no contracting dim";
        else if (!seen[0] || !seen[1])
            why = "an operand without free dims";
        else if (op->operands[0]->type.dtype != op->operands[1]->type.dtype)
            why = "operands of different dtypes";
        if (why) {
            if (!quiet)
                fprintf(stderr, "einc autotune: note: '%s' has %s: not a 2D GEMM\n", name, why);
            continue;
        }
        if (n >= MAX_LAYERS) {
            fprintf(stderr, "einc autotune: note: more than %d 2D GEMMs; the rest are ignored\n",
                    MAX_LAYERS);
            break;
        }
        char tm[48], tn[48], tk[48];
        cost_ms_gemm g;
        if (!dim_product(m, cls, ids, nids, 0, &g.m, tm, sizeof tm) ||
            !dim_product(m, cls, ids, nids, 1, &g.n, tn, sizeof tn) ||
            !dim_product(m, cls, ids, nids, 2, &g.k, tk, sizeof tk)) {
            fprintf(stderr, "einc autotune: note: '%s' is too large to model\n", name);
            continue;
        }
        snprintf(info[n].name, sizeof info[n].name, "%s", name);
        snprintf(info[n].formula, sizeof info[n].formula, "[%s,%s] = [%s,%s] * [%s,%s]", tm, tn, tm,
                 tk, tk, tn);
        info[n].dtype = op->operands[0]->type.dtype;
        layers[n].name = info[n].name;
        layers[n].gemm = g;
        layers[n].repeat = 1;
        n++;
    }
    return n;
}

/*
 * Replaces each of the `n` forward layers by its three training GEMMs
 * (cost_ms_training_gemms), the forward one keeping the heuristic's dataflow or
 * `df`; the arrays have room for 3n.  Returns 3n.
 */
static int expand_training(cost_ms_layer *layers, at_layer *info, int n, int df)
{
    static const char *const suffix[3] = {"", ".bwd_data", ".bwd_weight"};
    static const char *const what[3] = {"", "backward data A' = C' B^T of ", "backward weight B' = A^T C' of "};
    for (int i = n - 1; i >= 0; i--) {
        cost_ms_layer fwd = layers[i];
        at_layer fi = info[i];
        cost_ms_layer out[3];
        cost_ms_training_gemms(&fwd, df >= 0 ? (cost_ms_dataflow)df : cost_ms_choose_dataflow(&fwd.gemm), out);
        for (int j = 0; j < 3; j++) {
            at_layer *t = &info[3 * i + j];
            *t = fi;
            snprintf(t->name, sizeof t->name, "%.50s%s", fi.name, suffix[j]);
            if (j > 0)
                snprintf(t->formula, sizeof t->formula, "%s%.50s", what[j], fi.name);
            layers[3 * i + j] = out[j];
            layers[3 * i + j].name = t->name;
            layers[3 * i + j].k_group = i + 1; /* one K per FC layer (seed 004 3.2.2) */
        }
    }
    return 3 * n;
}

/* The shared state of one report. */
typedef struct report {
    const at_options *o;          /* the command line (df = -1 after --train's expansion) */
    const cost_hw *hw;            /* the hardware profile */
    const cost_ms_params *p;      /* the model's figures, profile plus overrides */
    const ir_module *m;           /* the compiled model (mesh axis names) */
    const cost_ms_layer *layers;  /* the 2D GEMMs, n entries */
    const at_layer *info;         /* their names, formulas and dtypes */
    int n;                        /* number of GEMMs */
    cost_ms_tune_result best;     /* the chosen algorithm's best mesh */
    cost_ms_layer_choice *choices; /* per layer, on best.mesh */
    int64_t common_k;             /* single K for --meshslice=K (MeshSlice), else 0 */
    cost_ms_tune_result common;   /* the layers on best.mesh with common_k */
    cost_ms_tune_result per_algo[COST_MS_ALGO_COUNT]; /* --compare */
    char command[256];            /* the einc options to print */
    bool command_ok;              /* the .ein compiles with those options */
    const cost_ms_nongemm *ng;    /* --non-gemm: the block's other layers, else NULL */
} report;

static void build_command(report *r)
{
    const ir_mesh *mesh = &r->m->mesh;
    int len = snprintf(r->command, sizeof r->command, "einc -D %c=%lld -D %c=%lld",
                       mesh->axes[0].name, (long long)r->best.mesh.rows, mesh->axes[1].name,
                       (long long)r->best.mesh.cols);
    for (int i = 0; i < r->o->ndefines && len > 0 && (size_t)len < sizeof r->command; i++) {
        const char *nm = r->o->defines[i].name;
        if (nm[0] && !nm[1] && ir_mesh_find_axis(mesh, nm[0]) >= 0)
            continue; /* the mesh axes are set above */
        len += snprintf(r->command + len, sizeof r->command - (size_t)len, " -D %s=%lld", nm,
                        (long long)r->o->defines[i].value);
    }
    if (len > 0 && (size_t)len < sizeof r->command) {
        if (r->o->algo == COST_MS_ALGO_MESHSLICE && r->common_k > 0)
            len += snprintf(r->command + len, sizeof r->command - (size_t)len, " --meshslice=%lld",
                            (long long)r->common_k);
        else
            len += snprintf(r->command + len, sizeof r->command - (size_t)len, " --meshslice=off");
    }
    /* The profile the autotuner used, so the compile's costs match the table. */
    if (len > 0 && (size_t)len < sizeof r->command)
        len += snprintf(r->command + len, sizeof r->command - (size_t)len, " --hw %s",
                        r->o->hw ? r->o->hw : AUTOTUNE_DEFAULT_HW);
    /* More chips than an executable runs: the command prices the plan only. */
    bool priced = r->best.mesh.rows * r->best.mesh.cols > FE_MAX_DEVICES_EXE;
    if (len > 0 && (size_t)len < sizeof r->command)
        snprintf(r->command + len, sizeof r->command - (size_t)len, "%s %s", priced ? " --dump-cost" : "",
                 r->o->input);
}

static void print_text(const report *r)
{
    const cost_ms_params *p = r->p;
    printf("einc autotune: %s on %lld chips of %s, %s (peak %.3g FLOP/s)\n", r->o->input,
           (long long)r->o->chips, r->hw->name, ir_dtype_name(r->info[0].dtype), p->peak_flops);
    printf("model: collective = T_launch + (P-1)*(L_sync + shard/BW), T_launch %.3g s, "
           "L_sync %.3g s,\n       BW %.3g B/s (ring) / %.3g B/s (no wraparound); GEMM at %.0f%% "
           "of peak, dims padded to %lld, HBM %.3g B/s; block %lld%s\n",
           p->t_launch, p->l_sync, p->bw_ring, p->bw_line, 100 * p->gemm_eff,
           (long long)p->mxu_tile, p->hbm_bw, (long long)p->block,
           p->no_overlap ? "; no overlap" : "");
    if (r->o->fit_seed004)
        printf("       fitted figures of seed 004's authors: ReduceScatter T_launch %.3g s, BW %.3g B/s; "
               "SendRecv T_launch %.3g s, L_sync %.3g s, %.3g B/s per link\n",
               p->t_launch_rds, p->bw_ring_rds, p->t_launch_sr, p->l_sync_sr, p->bw_link);
    printf("\nmesh shapes (%s):\n  %-11s %12s %8s\n", cost_ms_algo_name((cost_ms_algo)r->o->algo), "rows x cols",
           "time (ms)", "util");
    for (int64_t rows = 1; rows <= r->o->chips; rows++) {
        if (r->o->chips % rows)
            continue;
        cost_ms_mesh mesh = {rows, r->o->chips / rows};
        if (r->o->rows && mesh.rows != r->o->rows)
            continue;
        cost_ms_tune_result t = cost_ms_tune_mesh(p, r->layers, r->n, mesh, (cost_ms_algo)r->o->algo, r->o->df,
                                                  r->o->slices, NULL);
        char shape[48];
        snprintf(shape, sizeof shape, "%lld x %lld", (long long)mesh.rows, (long long)mesh.cols);
        if (t.found)
            printf("  %-11s %12.4f %7.1f%%%s\n", shape, 1e3 * t.time, 100 * t.utilization,
                   mesh.rows == r->best.mesh.rows ? "  <- best" : "");
        else
            printf("  %-11s %12s %8s\n", shape, "-", "-");
    }
    printf("\nbest mesh %lld x %lld (%c x %c):\n", (long long)r->best.mesh.rows,
           (long long)r->best.mesh.cols, r->m->mesh.axes[0].name, r->m->mesh.axes[1].name);
    printf("  %-16s %-40s %-11s %6s %12s %8s %8s\n", "layer", "C[M,N] = A[M,K] * B[K,N]", "dataflow",
           "K", "time (ms)", "exposed", "util");
    for (int i = 0; i < r->n; i++) {
        const cost_ms_layer_choice *c = &r->choices[i];
        const cost_ms_gemm *g = &r->layers[i].gemm;
        char shape[96];
        snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld", (long long)g->m, (long long)g->n,
                 (long long)g->k);
        printf("  %-16s %-40s %-11s %6lld %12.4f %7.1f%% %7.1f%%\n", r->info[i].name, shape,
               cost_ms_dataflow_name(c->df), (long long)c->est.slices, 1e3 * c->est.time,
               100 * c->est.t_exposed / c->est.time, 100 * c->est.utilization);
        printf("  %-16s %s\n", "", r->info[i].formula);
    }
    printf("  %-16s %-40s %-11s %6s %12.4f %8s %7.1f%%\n", "total", "", "", "", 1e3 * r->best.time, "",
           100 * r->best.utilization);
    if (r->o->algo == COST_MS_ALGO_MESHSLICE && r->common_k > 0 && !r->o->slices)
        printf("\none K for every layer: K=%lld, %.4f ms (%.1f%%), %.2f%% slower than per-layer K\n",
               (long long)r->common_k, 1e3 * r->common.time, 100 * r->common.utilization,
               100 * (r->common.time / r->best.time - 1));
    if (r->o->compare) {
        fputs(r->o->rows ? "\nalgorithms (on the given mesh):" : "\nalgorithms (each on its own best mesh shape):",
              stdout);
        printf("\n  %-11s %-12s %12s %8s %18s %16s\n",
               "algorithm", "mesh", "time (ms)", "util", "MeshSlice speedup", "no overlap (ms)");
        const cost_ms_tune_result *ms = &r->per_algo[COST_MS_ALGO_MESHSLICE];
        for (int a = 0; a < COST_MS_ALGO_COUNT; a++) {
            const cost_ms_tune_result *t = &r->per_algo[a];
            if (!t->found) {
                printf("  %-11s %-12s %12s %8s %18s %16s\n", cost_ms_algo_name((cost_ms_algo)a), "none fits", "-",
                       "-", "-", "-");
                continue;
            }
            char shape[48];
            snprintf(shape, sizeof shape, "%lld x %lld", (long long)t->mesh.rows,
                     (long long)t->mesh.cols);
            if (ms->found)
                printf("  %-11s %-12s %12.4f %7.1f%% %17.1f%% %16.4f\n", cost_ms_algo_name((cost_ms_algo)a), shape,
                       1e3 * t->time, 100 * t->utilization, 100 * (t->time / ms->time - 1), 1e3 * t->time_serial);
            else
                printf("  %-11s %-12s %12.4f %7.1f%% %18s %16.4f\n", cost_ms_algo_name((cost_ms_algo)a), shape,
                       1e3 * t->time, 100 * t->utilization, "-", 1e3 * t->time_serial);
        }
    }
    if (r->ng)
        at_block_print(r->ng, &r->best, r->per_algo, r->o->compare ? COST_MS_ALGO_COUNT : 0, r->o->chips, p->peak_flops);
    printf("\nrun: %s\n", r->command);
}

static cJSON *tune_json(const report *r, const cost_ms_tune_result *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "found", t->found);
    if (t->found) {
        cJSON_AddNumberToObject(o, "rows", (double)t->mesh.rows);
        cJSON_AddNumberToObject(o, "cols", (double)t->mesh.cols);
        cJSON_AddNumberToObject(o, "time", t->time);
        cJSON_AddNumberToObject(o, "utilization", t->utilization);
        cJSON_AddNumberToObject(o, "time_no_overlap", t->time_serial); /* same choices, no overlap */
        cJSON_AddNumberToObject(o, "time_slicing", t->time_slicing);   /* MeshSlice's copies, 3.1.2 */
        if (r->ng)
            at_block_json_result(o, t, r->ng, r->o->chips, r->p->peak_flops);
    }
    return o;
}

static int print_json(const report *r)
{
    const cost_ms_params *p = r->p;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "input", r->o->input);
    cJSON_AddNumberToObject(root, "chips", (double)r->o->chips);
    cJSON_AddStringToObject(root, "hw", r->hw->name);
    cJSON_AddStringToObject(root, "dtype", ir_dtype_name(r->info[0].dtype));
    cJSON_AddStringToObject(root, "algorithm", cost_ms_algo_key((cost_ms_algo)r->o->algo));
    cJSON *par = cJSON_AddObjectToObject(root, "params");
    cJSON_AddNumberToObject(par, "t_launch", p->t_launch);
    cJSON_AddNumberToObject(par, "l_sync", p->l_sync);
    cJSON_AddNumberToObject(par, "bw_ring", p->bw_ring);
    cJSON_AddNumberToObject(par, "bw_line", p->bw_line);
    cJSON_AddNumberToObject(par, "bw_link", p->bw_link);
    cJSON_AddNumberToObject(par, "t_launch_rds", p->t_launch_rds);
    cJSON_AddNumberToObject(par, "bw_ring_rds", p->bw_ring_rds);
    cJSON_AddNumberToObject(par, "t_launch_sr", p->t_launch_sr);
    cJSON_AddNumberToObject(par, "l_sync_sr", p->l_sync_sr);
    cJSON_AddNumberToObject(par, "bw_sr", p->bw_sr);
    cJSON_AddNumberToObject(par, "t_gemm_launch", p->t_gemm_launch);
    cJSON_AddStringToObject(par, "fit", r->o->fit_seed004 ? "seed004" : "profile");
    cJSON_AddNumberToObject(par, "peak_flops", p->peak_flops);
    cJSON_AddNumberToObject(par, "gemm_eff", p->gemm_eff);
    cJSON_AddNumberToObject(par, "hbm_bw", p->hbm_bw);
    cJSON_AddBoolToObject(par, "no_overlap", p->no_overlap);
    cJSON_AddBoolToObject(par, "collective_overlap", p->collective_overlap);
    cJSON_AddNumberToObject(par, "block", (double)p->block);
    cJSON *meshes = cJSON_AddArrayToObject(root, "meshes");
    for (int64_t rows = 1; rows <= r->o->chips; rows++) {
        if (r->o->chips % rows)
            continue;
        cost_ms_mesh mesh = {rows, r->o->chips / rows};
        if (r->o->rows && mesh.rows != r->o->rows)
            continue;
        cost_ms_tune_result t = cost_ms_tune_mesh(p, r->layers, r->n, mesh, (cost_ms_algo)r->o->algo, r->o->df,
                                                  r->o->slices, NULL);
        t.mesh = mesh; /* also when no layer fits, so the entry names its shape */
        cJSON *e = tune_json(r, &t);
        if (!t.found) {
            cJSON_AddNumberToObject(e, "rows", (double)rows);
            cJSON_AddNumberToObject(e, "cols", (double)mesh.cols);
        }
        cJSON_AddItemToArray(meshes, e);
    }
    cJSON *best = tune_json(r, &r->best);
    cJSON_AddItemToObject(root, "best", best);
    cJSON *ls = cJSON_AddArrayToObject(best, "layers");
    for (int i = 0; i < r->n; i++) {
        const cost_ms_layer_choice *c = &r->choices[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", r->info[i].name);
        cJSON_AddNumberToObject(e, "m", (double)r->layers[i].gemm.m);
        cJSON_AddNumberToObject(e, "n", (double)r->layers[i].gemm.n);
        cJSON_AddNumberToObject(e, "k", (double)r->layers[i].gemm.k);
        cJSON_AddStringToObject(e, "dataflow", cost_ms_dataflow_key(c->df));
        cJSON_AddNumberToObject(e, "slices", (double)c->est.slices);
        cJSON_AddNumberToObject(e, "time", c->est.time);
        cJSON_AddNumberToObject(e, "t_compute", c->est.t_compute);
        cJSON_AddNumberToObject(e, "t_comm", c->est.t_comm);
        cJSON_AddNumberToObject(e, "time_no_overlap", c->est.t_serial);
        cJSON_AddNumberToObject(e, "utilization", c->est.utilization);
        cJSON_AddItemToArray(ls, e);
    }
    if (r->common_k > 0) {
        cJSON *c = tune_json(r, &r->common);
        cJSON_AddNumberToObject(c, "k", (double)r->common_k);
        cJSON_AddItemToObject(root, "common_k", c);
    }
    if (r->o->compare) {
        cJSON *algos = cJSON_AddObjectToObject(root, "algorithms");
        for (int a = 0; a < COST_MS_ALGO_COUNT; a++)
            cJSON_AddItemToObject(algos, cost_ms_algo_key((cost_ms_algo)a), tune_json(r, &r->per_algo[a]));
    }
    if (r->ng)
        at_block_json(root, r->ng);
    cJSON_AddStringToObject(root, "command", r->command);
    cJSON_AddBoolToObject(root, "command_compiles", r->command_ok);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "einc autotune: error: out of memory writing JSON\n");
        return 1;
    }
    puts(text);
    cJSON_free(text);
    return 0;
}

/*
 * Whether the .ein compiles on the chosen mesh (its own shardings must
 * divide there too); if not, a note with the frontend's first message, so
 * the printed command is never silently one that einc rejects.
 */
static bool command_compiles(const report *r, const char *src, size_t len)
{
    fe_define defs[DRV_MAX_DEFINES + 2];
    int n = 0;
    for (int i = 0; i < r->o->ndefines; i++)
        defs[n++] = r->o->defines[i];
    char names[2][2] = {{r->m->mesh.axes[0].name, 0}, {r->m->mesh.axes[1].name, 0}};
    defs[n++] = (fe_define){names[0], r->best.mesh.rows};
    defs[n++] = (fe_define){names[1], r->best.mesh.cols};
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return true; /* cannot check: say nothing rather than something wrong */
    diag_ctx d;
    diag_init(&d, r->o->input, src, len);
    d.out = f;
    d.max_errors = 1;
    fe_options fo = {.defines = defs, .ndefines = n, .cost_only = true};
    ir_module *m = fe_compile(src, len, &fo, &d);
    fclose(f);
    bool ok = m != NULL;
    if (m)
        ir_module_free(m);
    if (!ok)
        fprintf(stderr, "einc autotune: note: %s's own shardings do not fit the %lld x %lld mesh, "
                        "so the command below is rejected until they are changed:\n%s",
                r->o->input, (long long)r->best.mesh.rows, (long long)r->best.mesh.cols,
                text ? text : "");
    free(text);
    return ok;
}

/* cost_ms_tune, or cost_ms_tune_mesh when --mesh fixes the shape. */
static cost_ms_tune_result tune(const at_options *o, const cost_ms_params *p, const cost_ms_layer *layers, int n,
                                cost_ms_algo algo, int64_t k, cost_ms_layer_choice *choices)
{
    if (o->rows) {
        cost_ms_mesh mesh = {o->rows, o->cols};
        return cost_ms_tune_mesh(p, layers, n, mesh, algo, o->df, k, choices);
    }
    return cost_ms_tune(p, layers, n, o->chips, algo, o->df, k, choices);
}

/* Tunes and reports; `m` is the compiled model.  Returns the exit status. */
static int tune_and_report(const at_options *o, const cost_hw *hw, const ir_module *m,
                           const char *src, size_t len)
{
    if (m->mesh.naxes != 2) {
        fprintf(stderr,
                "einc autotune: error: %s declares a %d-axis mesh; MeshSlice tunes a 2D mesh "
                "(write `mesh X = .., Y = ..`)\n",
                o->input, m->mesh.naxes);
        return 1;
    }
    /* Room for three GEMMs per layer with --train. */
    cost_ms_layer *layers = calloc(3 * MAX_LAYERS, sizeof *layers);
    at_layer *info = calloc(3 * MAX_LAYERS, sizeof *info);
    cost_ms_layer_choice *choices = calloc(3 * MAX_LAYERS, sizeof *choices);
    int rc = 1;
    if (!layers || !info || !choices) {
        fprintf(stderr, "einc autotune: error: out of memory\n");
        goto done;
    }
    int n = find_gemms(m, layers, info, o->json);
    if (n == 0) {
        fprintf(stderr, "einc autotune: error: %s has no 2D GEMM (an einsum of two operands with "
                        "a contracting dim, free dims on both sides and no batch dim)\n",
                o->input);
        goto done;
    }
    for (int i = 1; i < n; i++)
        if (info[i].dtype != info[0].dtype) {
            fprintf(stderr, "einc autotune: error: the 2D GEMMs mix dtypes (%s in '%s', %s in "
                            "'%s'); the model takes one\n",
                    ir_dtype_name(info[0].dtype), info[0].name, ir_dtype_name(info[i].dtype),
                    info[i].name);
            goto done;
        }
    at_options eff = *o;
    if (o->train) {
        n = expand_training(layers, info, n, o->df);
        eff.df = -1; /* every GEMM now carries its own dataflow */
    }
    o = &eff;
    cost_ms_params p;
    cost_ms_params_from_hw(hw, info[0].dtype, &p);
    if (o->fit_seed004)
        cost_ms_params_fit_seed004(&p);
    if (o->t_launch >= 0)
        p.t_launch = o->t_launch;
    if (o->l_sync >= 0)
        p.l_sync = o->l_sync;
    if (o->gemm_eff > 0)
        p.gemm_eff = o->gemm_eff;
    if (o->block > 0)
        p.block = o->block;
    p.no_overlap = o->no_overlap;
    p.collective_overlap = o->collective_overlap;

    report r;
    memset(&r, 0, sizeof r);
    r.o = o, r.hw = hw, r.p = &p, r.m = m, r.layers = layers, r.info = info, r.n = n;
    r.choices = choices;
    r.best = tune(o, &p, layers, n, (cost_ms_algo)o->algo, o->slices, choices);
    if (!r.best.found) {
        fprintf(stderr,
                "einc autotune: error: no mesh shape rows x cols = %lld%s fits every 2D GEMM with %s "
                "(each sharded dim must divide by its mesh axis%s%s)\n",
                (long long)o->chips, o->rows ? " (of --mesh)" : "", cost_ms_algo_name((cost_ms_algo)o->algo),
                o->algo == COST_MS_ALGO_CANNON ? "; Cannon needs a square torus" : "",
                o->slices ? "; K must split each sliced dim into blocks" : "");
        goto done;
    }
    if (o->algo == COST_MS_ALGO_MESHSLICE && o->slices) {
        r.common_k = o->slices;
        r.common = r.best;
    } else if (o->algo == COST_MS_ALGO_MESHSLICE) {
        r.common_k = cost_ms_best_common_k(&p, layers, n, r.best.mesh, o->df);
        if (r.common_k > 0)
            r.common = cost_ms_tune_mesh(&p, layers, n, r.best.mesh, COST_MS_ALGO_MESHSLICE, o->df, r.common_k,
                                         NULL);
    }
    if (o->compare)
        for (int a = 0; a < COST_MS_ALGO_COUNT; a++)
            r.per_algo[a] = tune(o, &p, layers, n, (cost_ms_algo)a, a == COST_MS_ALGO_MESHSLICE ? o->slices : 0, NULL);
    cost_ms_nongemm ng;
    if (o->non_gemm) {
        cost_ms_block_dims bd;
        char missing[64];
        if (at_block_dims(m, &bd, missing, sizeof missing) != 0) {
            fprintf(stderr, "einc autotune: error: --non-gemm reads the block's dims B, S, H, E, D, F by "
                            "name; %s has no %s\n", o->input, missing);
            goto done;
        }
        cost_ms_nongemm_time(&p, &bd, o->chips, o->train, &ng);
        r.ng = &ng;
    }
    build_command(&r);
    r.command_ok = command_compiles(&r, src, len);
    if (o->json)
        rc = print_json(&r);
    else {
        print_text(&r);
        rc = 0;
    }
done:
    free(layers);
    free(info);
    free(choices);
    return rc;
}

int autotune_main(int argc, char **argv)
{
    at_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    cost_hw hw;
    char err[512];
    if (cost_hw_load(o.hw ? o.hw : AUTOTUNE_DEFAULT_HW, &hw, err, sizeof err) != 0) {
        fprintf(stderr, "einc autotune: error: %s\n", err);
        return 1;
    }
    size_t len = 0;
    char *src = drv_read_source(o.input, "einc autotune", &len);
    if (!src)
        return 1;
    diag_ctx diag;
    diag_init(&diag, o.input, src, len);
    fe_options fo = {.defines = o.defines, .ndefines = o.ndefines, .cost_only = true};
    ir_module *m = fe_compile(src, len, &fo, &diag);
    rc = m ? tune_and_report(&o, &hw, m, src, len) : 1;
    if (m)
        ir_module_free(m);
    free(src);
    return rc;
}
