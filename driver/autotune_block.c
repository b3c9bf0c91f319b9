/*
 * autotune_block.c - the non-GEMM layers of a Transformer block in `einc
 * autotune`'s report (autotune_block.h).
 */
#include "autotune_block.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

int at_block_dims(const ir_module *m, cost_ms_block_dims *d, char *err, size_t errlen)
{
    static const char *const names[6] = {"B", "S", "H", "E", "D", "F"};
    int64_t *slot[6] = {&d->batch, &d->seq, &d->heads, &d->head_dim, &d->model, &d->ffn};
    size_t len = 0;
    err[0] = '\0';
    for (int k = 0; k < 6; k++) {
        *slot[k] = 0;
        for (int i = 0; i < m->ndims; i++)
            if (strcmp(m->dims[i].name, names[k]) == 0)
                *slot[k] = m->dims[i].size;
        if (*slot[k] == 0 && len < errlen)
            len += (size_t)snprintf(err + len, errlen - len, "%s%s", len ? ", " : "", names[k]);
    }
    return err[0] ? -1 : 0;
}

/* The GEMMs' FLOPs of t on all chips: its utilization undone. */
static double gemm_flops(const cost_ms_tune_result *t, int64_t chips, double peak)
{
    return t->utilization * t->time * (double)chips * peak;
}

static double block_util(const cost_ms_tune_result *t, const cost_ms_nongemm *ng, int64_t chips, double peak)
{
    double time = t->time + ng->time;
    return (gemm_flops(t, chips, peak) + ng->flops * (double)chips) / (time * (double)chips * peak);
}

void at_block_json_result(cJSON *o, const cost_ms_tune_result *t, const cost_ms_nongemm *ng, int64_t chips,
                          double peak)
{
    if (!t->found)
        return;
    cJSON_AddNumberToObject(o, "block_time", t->time + ng->time);
    cJSON_AddNumberToObject(o, "block_time_no_overlap", t->time_serial + ng->time);
    cJSON_AddNumberToObject(o, "block_utilization", block_util(t, ng, chips, peak));
}

void at_block_json(cJSON *root, const cost_ms_nongemm *ng)
{
    cJSON *o = cJSON_AddObjectToObject(root, "non_gemm");
    cJSON_AddNumberToObject(o, "time", ng->time);
    cJSON_AddNumberToObject(o, "flops", ng->flops);
    cJSON *ls = cJSON_AddArrayToObject(o, "layers");
    for (int i = 0; i < ng->n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", ng->layer[i].name);
        cJSON_AddNumberToObject(e, "flops", ng->layer[i].flops);
        cJSON_AddNumberToObject(e, "bytes", ng->layer[i].bytes);
        cJSON_AddNumberToObject(e, "time", ng->layer[i].time);
        cJSON_AddItemToArray(ls, e);
    }
}

void at_block_print(const cost_ms_nongemm *ng, const cost_ms_tune_result *best, const cost_ms_tune_result *per_algo,
                    int count, int64_t chips, double peak)
{
    printf("\nnon-GEMM layers of the block (per device, the same for every algorithm):\n");
    for (int i = 0; i < ng->n; i++)
        printf("  %-26s %10.4f ms %12.4g FLOP %12.4g B\n", ng->layer[i].name, 1e3 * ng->layer[i].time,
               ng->layer[i].flops, ng->layer[i].bytes);
    printf("  %-26s %10.4f ms\n", "total", 1e3 * ng->time);
    printf("whole block on the best mesh: %.4f ms, %.1f%% utilization\n", 1e3 * (best->time + ng->time),
           100 * block_util(best, ng, chips, peak));
    if (count == 0)
        return;
    const cost_ms_tune_result *ms = &per_algo[COST_MS_ALGO_MESHSLICE];
    printf("\nwhole block (FC GEMMs + non-GEMM layers), each algorithm on its own best mesh:\n  %-11s %12s %8s %18s\n", "algorithm", "time (ms)", "util",
           "MeshSlice speedup");
    for (int a = 0; a < count; a++) {
        const cost_ms_tune_result *t = &per_algo[a];
        if (!t->found)
            continue;
        char gain[32] = "-";
        if (ms->found)
            snprintf(gain, sizeof gain, "%.1f%%", 100 * ((t->time + ng->time) / (ms->time + ng->time) - 1));
        printf("  %-11s %12.4f %7.1f%% %18s\n", cost_ms_algo_name((cost_ms_algo)a), 1e3 * (t->time + ng->time),
               100 * block_util(t, ng, chips, peak), gain);
    }
}
