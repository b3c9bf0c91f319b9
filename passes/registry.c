/*
 * registry.c - the table of known passes: built-ins, then plugins.
 *
 * Built-in passes are listed here by name, as QBE's main.c writes its pass
 * order out plainly.  A plugin (--load-pass=path.so) exports
 * einc_pass_plugin() returning its passes; a plugin pass whose name is
 * already known replaces the earlier one, so a pass can be developed out of
 * tree under its final name.
 */
#include <dlfcn.h>
#include <string.h>
#include <sys/stat.h>

#include "pass.h"

static const pass_info builtin[] = {
    {"optimize", "lower the training step's optimize lines: a Grad op per optimized param and the optimizer's update of it and its state (SGD, AdamW; schedules, clipping); --zero=0|1|2", pass_optimize, pass_optimize_options, 1},
    {"autodiff", "derive the backward pass: replace every Grad op (grad statements, optimize lines) by its backward ops; --remat= says what it computes again", pass_autodiff, NULL, 0},
    {"select-gather", "rewrite a masked sum that selects rows at computed positions, sum(where(S == e, X[S, ...], 0), S), into a gather of those rows (zero outside the table, as the sum)", pass_select_gather, NULL, 0},
    {"pipeline", "split a pipelined program's batch into microbatches and schedule each stage's forwards and backwards (seed 000); --microbatches=M --schedule=gpipe|1f1b|interleaved|zero-bubble|zb-h2 --chunks=v --grad-sync=auto|step|microbatch --w-fill=static|greedy", pass_pipeline, pass_pipeline_options, 5},
    {"propagate", "make every op locally computable: insert AllGather/ReduceScatter/AllReduce/AllToAll/Slice (seed 001); --ilp=on|off|SECONDS, --portfolio=on|off, --ilp-overlap=on|off", pass_propagate, pass_propagate_options, 3},
    {"regather", "keep a gathered weight for the backward pass, or gather it again when memory does not fit (seed 000)", pass_regather, NULL, 0},
    {"meshslice", "lower 2D GEMMs to MeshSlice loops of partial AllGather/ReduceScatter (seed 004); --meshslice=auto|off|K", pass_meshslice, pass_meshslice_options, 1},
    {"prefetch-params", "move resharding ops of params to the front, to overlap them (example pass, docs/passes.md)", pass_prefetch_params, NULL, 0},
    {"cost", "annotate every op with FLOPs, bytes and time on the --hw profile (seeds 001, 000)", pass_cost, NULL, 0},
};

void pass_registry_init(pass_registry *r)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
        r->passes[r->npasses] = &builtin[i];
        r->origin[r->npasses] = NULL;
        r->npasses++;
    }
}

void pass_registry_free(pass_registry *r)
{
    for (int i = 0; i < r->nplugins; i++)
        dlclose(r->plugins[i]);
    r->nplugins = 0;
    r->npasses = 0;
}

int pass_registry_load(pass_registry *r, const char *path, FILE *err)
{
    if (r->nplugins >= (int)(sizeof r->plugins / sizeof r->plugins[0])) {
        fprintf(err, "einc: error: too many pass plugins (at most %zu)\n", sizeof r->plugins / sizeof r->plugins[0]);
        return -1;
    }
    /* dlopen would block in open() on a FIFO no process writes to. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(err, "einc: error: cannot load pass plugin '%s': not a regular file\n", path);
        return -1;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(err, "einc: error: cannot load pass plugin '%s': %s\n", path, dlerror());
        return -1;
    }
    pass_plugin_fn entry;
    /* POSIX blesses this conversion for dlsym results. */
    *(void **)&entry = dlsym(h, PASS_PLUGIN_SYMBOL);
    if (!entry) {
        fprintf(err, "einc: error: pass plugin '%s' does not define %s()\n", path, PASS_PLUGIN_SYMBOL);
        dlclose(h);
        return -1;
    }
    int count = 0;
    const pass_info *passes = entry(&count);
    if (!passes || count <= 0) {
        fprintf(err, "einc: error: pass plugin '%s' registers no passes\n", path);
        dlclose(h);
        return -1;
    }
    for (int i = 0; i < count; i++) {
        const pass_info *p = &passes[i];
        if (!p->name || !p->run || p->noptions < 0 || (p->noptions > 0 && !p->options)) {
            fprintf(err, "einc: error: pass plugin '%s': pass %d has no name or run function, "
                    "or bad options\n", path, i);
            dlclose(h);
            return -1;
        }
    }
    r->plugins[r->nplugins++] = h;
    for (int i = 0; i < count; i++) {
        const pass_info *p = &passes[i];
        int slot = -1;
        for (int j = 0; j < r->npasses; j++)
            if (strcmp(r->passes[j]->name, p->name) == 0)
                slot = j;
        if (slot < 0) {
            if (r->npasses >= (int)(sizeof r->passes / sizeof r->passes[0])) {
                fprintf(err, "einc: error: too many passes\n");
                return -1;
            }
            slot = r->npasses++;
        }
        r->passes[slot] = p;
        r->origin[slot] = path;
    }
    return 0;
}

const pass_info *pass_registry_find(const pass_registry *r, const char *name)
{
    for (int i = 0; i < r->npasses; i++)
        if (strcmp(r->passes[i]->name, name) == 0)
            return r->passes[i];
    return NULL;
}

void pass_registry_list(const pass_registry *r, FILE *out)
{
    for (int i = 0; i < r->npasses; i++) {
        fprintf(out, "  %-18s %s", r->passes[i]->name, r->passes[i]->summary ? r->passes[i]->summary : "");
        if (r->origin[i])
            fprintf(out, " [plugin %s]", r->origin[i]);
        fputc('\n', out);
    }
}
