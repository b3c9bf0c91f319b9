/*
 * machine.c - which machine einc runs on, where its calibrated profile is
 * cached, and which file `--hw host` means.
 *
 * A calibrated profile holds one machine's figures: another CPU, another
 * core count or another BLAS kernel set makes them wrong by tens of percent
 * (a GEMM rate measured on AVX-512 kernels is not the rate of AVX2 ones).
 * So `einc calibrate` records the machine (cost_machine) in the profile, and
 * `host` resolves per machine:
 *
 *   1. $XDG_CACHE_HOME/einc/host-KEY.json (else ~/.cache/einc/...), KEY =
 *      cost_machine_key of this machine: written by `einc calibrate` without
 *      -o (`einc calibrate --quick` takes well under a minute);
 *   2. else the profile named host (EINC_HW_DIR or the source tree's hw/),
 *      with one warning when it records another machine, or none at all.
 *
 * The identity comes from /proc/cpuinfo (model name, family and model
 * numbers, since a VM often shows only "AMD EPYC"), the online CPU count,
 * the compiler's CPU feature probe (__builtin_cpu_supports) and OpenBLAS,
 * the library every einc executable links (openblas_get_corename: the
 * kernel set its DYNAMIC_ARCH dispatch picked for this CPU, which is what
 * runs, e.g. "Haswell" kernels on a CPU newer than the library).
 *
 * einc runs no BLAS itself, so it loads OpenBLAS only to ask (dlopen, in
 * blas_identity): linked into einc, the library's constructor started its
 * thread pool at every compile, and the idle thread spun in sched_yield for
 * the first ~0.1 s, a tenth of the CPU time of compiling llama2_13b.ein and
 * the second core that codegen's reference thread runs on
 * (docs/performance.md, section 4).
 */
#include <cJSON.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calibrate.h"
#include "costmodel.h"

/* Value of "key : value" line `line` if it starts with key, else NULL;
 * the trailing newline is cut. */
static char *cpuinfo_value(char *line, const char *key)
{
    size_t k = strlen(key);
    if (strncmp(line, key, k) != 0)
        return NULL;
    char *p = line + k;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    p[strcspn(p, "\n")] = 0;
    return p;
}

/* The CPU's model name from /proc/cpuinfo (first processor), with its
 * family and model numbers when the file has them. */
static void detect_cpu(char *out, size_t n)
{
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[1024], name[COST_MACHINE_STR] = "", family[32] = "", model[32] = "";
    while (fgets(line, sizeof line, f)) {
        char *v;
        if (line[0] == '\n' && name[0]) /* end of the first processor's block */
            break;
        if (!name[0] && (v = cpuinfo_value(line, "model name")))
            snprintf(name, sizeof name, "%s", v);
        else if (!family[0] && (v = cpuinfo_value(line, "cpu family")))
            snprintf(family, sizeof family, "%s", v);
        else if (!model[0] && (v = cpuinfo_value(line, "model")))
            snprintf(model, sizeof model, "%s", v);
        else if (!name[0] && (v = cpuinfo_value(line, "CPU part"))) /* arm64 */
            snprintf(name, sizeof name, "CPU part %s", v);
    }
    fclose(f);
    if (!name[0])
        return;
    if (family[0] && model[0])
        snprintf(out, n, "%s (family %s, model %s)", name, family, model);
    else
        snprintf(out, n, "%s", name);
}

/* The widest vector ISA the CPU has (what a BLAS kernel could use). */
static const char *detect_isa(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return "avx512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "avx2";
    if (__builtin_cpu_supports("avx"))
        return "avx";
    return "sse2";
#elif defined(__aarch64__)
    return "neon";
#else
    return "unknown";
#endif
}

/* The soname every einc executable's -lopenblas resolves to. */
#define OPENBLAS_SONAME "libopenblas.so.0"

/* Fills m->blas_core (openblas_get_corename) and m->blas_config
 * (openblas_get_config) from OpenBLAS, loaded for the question with
 * OPENBLAS_NUM_THREADS=1 so that it starts no threads; the variable is
 * restored at once, since the programs `einc calibrate` runs inherit the
 * environment.  Both stay empty if the library cannot be loaded. */
static void blas_identity(cost_machine *m)
{
    const char *old = getenv("OPENBLAS_NUM_THREADS");
    char *saved = old ? strdup(old) : NULL;
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    void *lib = dlopen(OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (saved)
        setenv("OPENBLAS_NUM_THREADS", saved, 1);
    else
        unsetenv("OPENBLAS_NUM_THREADS");
    free(saved);
    if (!lib)
        return;
    typedef char *(*text_fn)(void);
    text_fn corename = (text_fn)dlsym(lib, "openblas_get_corename");
    text_fn config = (text_fn)dlsym(lib, "openblas_get_config");
    const char *core_s = corename ? corename() : NULL;
    const char *config_s = config ? config() : NULL;
    snprintf(m->blas_core, sizeof m->blas_core, "%s", core_s ? core_s : "");
    snprintf(m->blas_config, sizeof m->blas_config, "%s", config_s ? config_s : "");
    dlclose(lib);
}

void calibrate_machine_detect(cost_machine *m)
{
    memset(m, 0, sizeof *m);
    detect_cpu(m->cpu_model, sizeof m->cpu_model);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    m->cores = cores > 0 ? (int)cores : 0;
    snprintf(m->isa, sizeof m->isa, "%s", detect_isa());
    blas_identity(m);
}

int calibrate_cache_dir(char *buf, size_t n)
{
    /* XDG Base Directory: a relative $XDG_CACHE_HOME is invalid and ignored. */
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int w;
    if (xdg && xdg[0] == '/')
        w = snprintf(buf, n, "%s/einc", xdg);
    else if (home && home[0] == '/')
        w = snprintf(buf, n, "%s/.cache/einc", home);
    else
        return -1;
    return w > 0 && (size_t)w < n ? 0 : -1;
}

int calibrate_cache_path(const cost_machine *m, char *buf, size_t n)
{
    char dir[COST_HW_PATH_MAX - 128], key[128];
    if (calibrate_cache_dir(dir, sizeof dir) != 0)
        return -1;
    cost_machine_key(m, key, sizeof key);
    int w = snprintf(buf, n, "%s/host-%s.json", dir, key);
    return w > 0 && (size_t)w < n ? 0 : -1;
}

int calibrate_load_host(cost_hw *hw, FILE *warn, char *err, size_t errsize)
{
    cost_machine here;
    calibrate_machine_detect(&here);
    char desc[3 * COST_MACHINE_STR];
    cost_machine_describe(&here, desc, sizeof desc);
    char cached[COST_HW_PATH_MAX];
    if (calibrate_cache_path(&here, cached, sizeof cached) == 0 && access(cached, F_OK) == 0) {
        char cerr[512];
        if (cost_hw_load(cached, hw, cerr, sizeof cerr) == 0)
            return 0;
        /* A broken cache must not stop a compile: the committed profile
         * still gives a plan, and the fix is one command. */
        if (warn)
            fprintf(warn, "einc: warning: ignoring the cached profile of this machine: %s; "
                          "re-run `einc calibrate --quick` to replace it\n", cerr);
    }
    if (cost_hw_load("host", hw, err, errsize) != 0)
        return -1;
    if (!warn)
        return 0;
    char fix[COST_HW_PATH_MAX + 128];
    if (calibrate_cache_path(&here, cached, sizeof cached) == 0)
        snprintf(fix, sizeof fix, "`einc calibrate --quick` (under a minute) measures this "
                 "machine into %s, which `--hw host` then uses", cached);
    else
        snprintf(fix, sizeof fix, "`einc calibrate --quick -o host.json` (under a minute) "
                 "measures this machine; pass --hw host.json");
    if (!hw->has_machine) {
        fprintf(warn, "einc: warning: %s does not say which machine it was measured on; "
                      "this machine is %s; %s\n", hw->path, desc, fix);
    } else if (!cost_machine_same(&hw->machine, &here)) {
        char theirs[3 * COST_MACHINE_STR];
        cost_machine_describe(&hw->machine, theirs, sizeof theirs);
        fprintf(warn, "einc: warning: %s was measured on %s, but this machine is %s: its "
                      "estimates may be off; %s\n", hw->path, theirs, desc, fix);
    }
    return 0;
}

int calibrate_print_machine(void)
{
    cost_machine m;
    calibrate_machine_detect(&m);
    char key[128], path[COST_HW_PATH_MAX], desc[3 * COST_MACHINE_STR];
    cost_machine_key(&m, key, sizeof key);
    cost_machine_describe(&m, desc, sizeof desc);
    cJSON *root = cJSON_CreateObject();
    cJSON *mj = cost_machine_to_json(&m);
    if (!root || !mj) {
        cJSON_Delete(root);
        cJSON_Delete(mj);
        fprintf(stderr, "einc calibrate: error: out of memory\n");
        return 1;
    }
    cJSON_AddItemToObject(root, "machine", mj);
    cJSON_AddStringToObject(root, "description", desc);
    cJSON_AddStringToObject(root, "key", key);
    if (calibrate_cache_path(&m, path, sizeof path) == 0) {
        cJSON_AddStringToObject(root, "cache", path);
        cJSON_AddBoolToObject(root, "cached", access(path, F_OK) == 0);
    } else {
        cJSON_AddNullToObject(root, "cache");
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "einc calibrate: error: out of memory\n");
        return 1;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}
