/*
 * fuzz_cli.c - the executable's command line and the files it names, in
 * process: rt_prepare (job.c), the very checks rt_main runs before any
 * device starts (the flags' syntax, the mode, the names, the paths against
 * each other, the --data, --eval-data, --resume, --params, --prompt-ids
 * and --input files), against a fixed small program built here.
 *
 * The input is text with binary parts:
 *
 *     P                 first line: the program, 0 trains, 1 does not, 2 decodes
 *     --steps           then one argv word per line, up to the first "@@ " line
 *     010
 *     --data
 *     x=x.npy
 *     @@ x.npy          then files: "@@ NAME" and its bytes up to the next
 *     <bytes>           "\n@@ " (NAME may hold one '/': a checkpoint's file)
 *
 * Each input runs in a fresh directory of its own (mkdtemp, chdir) that
 * also holds a FIFO "fifo", a link "null" to /dev/null and a dangling link
 * "dangling", and is removed after.  Paths stay inside it: an input with a
 * word naming an absolute path or "..", or a file name that does, is
 * skipped.  rt_prepare never runs a step, starts a server or exits: the
 * launcher here aborts if it is called.
 *
 * Invariants checked on every input (a failure aborts, so libFuzzer
 * records it): a refusal has a message; an accepted command line has every
 * count flag's value parsed as decimal (the options hold the value of the
 * digits; of the last value, for a flag given twice: the last one wins,
 * as in most command lines); an accepted one names no file twice among
 * the files it writes
 * (--output, --trace, --metrics, --generated) and no file it reads
 * (--input, --data, --eval-data, --prompt-ids) among them, except --output
 * NAME onto --input NAME's file (a state updated in place).
 */
#define _GNU_SOURCE /* mkdtemp, nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "rt_generate.h"

/* Most argv words and files an input may carry. */
#define MAX_WORDS 48
#define MAX_FILES 8

/* ---- the programs: descriptors only, never run ---- */

static void never_run(rt_device *dev, void *const *in, void *const *out)
{
    (void)dev, (void)in, (void)out;
    FUZZ_CHECK(0, "rt_prepare ran the program");
}

static const rt_tensor_desc train_inputs[] = {
    {.name = "x", .dtype = RT_F32, .rank = 2, .global_shape = {8, 4}, .local_shape = {4, 4},
     .dim_naxes = {1, 0}, .dim_axes = {{0}}},
    {.name = "W", .dtype = RT_F32, .rank = 2, .global_shape = {4, 4}, .local_shape = {4, 2},
     .dim_naxes = {0, 1}, .dim_axes = {{0}, {1}}, .role = RT_ROLE_PARAM},
    {.name = "G", .dtype = RT_BF16, .rank = 1, .global_shape = {4}, .local_shape = {4},
     .role = RT_ROLE_PARAM},
    {.name = "W.m", .dtype = RT_F32, .rank = 2, .global_shape = {4, 4}, .local_shape = {4, 2},
     .dim_naxes = {0, 1}, .dim_axes = {{0}, {1}}, .role = RT_ROLE_STATE},
};
static const rt_tensor_desc train_outputs[] = {
    {.name = "loss", .dtype = RT_F32, .rank = 0},
    {.name = "y", .dtype = RT_F32, .rank = 2, .global_shape = {8, 4}, .local_shape = {4, 4},
     .dim_naxes = {1, 0}, .dim_axes = {{0}}},
};
static const rt_tensor_desc plain_inputs[] = {
    {.name = "x", .dtype = RT_F32, .rank = 2, .global_shape = {8, 4}, .local_shape = {4, 4},
     .dim_naxes = {1, 0}, .dim_axes = {{0}}},
    {.name = "W", .dtype = RT_F64, .rank = 1, .global_shape = {4}, .local_shape = {4},
     .role = RT_ROLE_PARAM},
    {.name = "idx", .dtype = RT_I32, .rank = 1, .global_shape = {8}, .local_shape = {8},
     .index_bound = 4},
};
static const rt_tensor_desc plain_outputs[] = {
    {.name = "y", .dtype = RT_F32, .rank = 1, .global_shape = {8}, .local_shape = {4},
     .dim_naxes = {1}, .dim_axes = {{0}}},
};
static const rt_tensor_desc decode_inputs[] = {
    {.name = "tok", .dtype = RT_I32, .rank = 1, .global_shape = {2}, .local_shape = {2}},
    {.name = "pos", .dtype = RT_I32, .rank = 0},
    {.name = "Emb", .dtype = RT_F32, .rank = 2, .global_shape = {16, 4}, .local_shape = {16, 4},
     .role = RT_ROLE_PARAM},
    {.name = "cache", .dtype = RT_F32, .rank = 3, .global_shape = {2, 8, 4},
     .local_shape = {2, 8, 4}, .role = RT_ROLE_STATE},
};
static const rt_tensor_desc decode_outputs[] = {
    {.name = "Logits", .dtype = RT_F32, .rank = 2, .global_shape = {2, 16},
     .local_shape = {2, 16}},
};

#define PROGRAM(in, out, trains_, hp)                                                        \
    {.abi_version = RT_ABI_VERSION, .naxes = 2, .axis_names = {'X', 'Y'},                   \
     .axis_sizes = {2, 2}, .ninputs = (int32_t)(sizeof in / sizeof in[0]), .inputs = in,    \
     .noutputs = (int32_t)(sizeof out / sizeof out[0]), .outputs = out, .run = never_run,   \
     .info = "(fuzz)\n", .source_name = "fuzz.ein", .loss_output = 0, .trains = trains_,    \
     .hparams = hp}

static const rt_program programs[3] = {
    PROGRAM(train_inputs, train_outputs, 1, "W adamw lr=0.001\nG sgd lr=0.1\n"),
    PROGRAM(plain_inputs, plain_outputs, 0, NULL),
    PROGRAM(decode_inputs, decode_outputs, 0, NULL),
};

/* ---- a launcher that must not be used ---- */

static void no_init(int *argc, char ***argv, int *rank, int *nranks)
{
    (void)argc, (void)argv, (void)rank, (void)nranks;
    FUZZ_CHECK(0, "rt_prepare started the launcher");
}
static void no_run(rt_job *job)
{
    (void)job;
    FUZZ_CHECK(0, "rt_prepare ran the job");
}
static int no_all_ok(int ok)
{
    (void)ok;
    FUZZ_CHECK(0, "rt_prepare waited for other ranks");
    return 0;
}
RT_NORETURN static void no_finish(int status)
{
    FUZZ_CHECK(0, "rt_prepare ended the process (status %d)", status);
    abort();
}
RT_NORETURN static void no_abort(void)
{
    FUZZ_CHECK(0, "rt_prepare aborted the job");
    abort();
}
static const rt_launcher launcher = {.name = "fuzz", .init = no_init, .run = no_run,
                                     .all_ok = no_all_ok, .finish = no_finish,
                                     .abort = no_abort};

/* ---- decoding an input ---- */

/* The words and files of one input; strings are malloc'd. */
typedef struct cli_input {
    int program;             /* index into programs */
    int nwords;
    char *words[MAX_WORDS];  /* argv[1..] */
    int nfiles;
    char *names[MAX_FILES];
    const uint8_t *bytes[MAX_FILES];
    size_t sizes[MAX_FILES];
} cli_input;

static char *dup_bytes(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    FUZZ_CHECK(s != NULL, "out of memory");
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* Whether path `p` (a word, or the part after '=' or ',') stays in the
 * input's directory: not absolute and no "..". */
static bool stays_inside(const char *w)
{
    if (strstr(w, ".."))
        return false;
    for (const char *s = strchr(w, '/'); s; s = strchr(s + 1, '/'))
        if (s == w || s[-1] == '=' || s[-1] == ',' || s[-1] == '/')
            return false;
    return true;
}

/* Position of the next "\n@@ " at or after `at`, or `size`. */
static size_t next_file(const uint8_t *d, size_t size, size_t at)
{
    for (size_t i = at; i + 4 <= size; i++)
        if (!memcmp(d + i, "\n@@ ", 4))
            return i;
    return size;
}

/* Splits data into *in; false if the input is to be skipped. */
static bool decode(const uint8_t *d, size_t size, cli_input *in)
{
    memset(in, 0, sizeof *in);
    if (size < 1)
        return false;
    in->program = d[0] % 3;
    size_t args_end = next_file(d, size, 0);
    size_t at = 0;
    while (at < args_end && d[at] != '\n')
        at++; /* the program's line */
    for (at++; at < args_end;) {
        size_t e = at;
        while (e < args_end && d[e] != '\n')
            e++;
        if (in->nwords == MAX_WORDS || memchr(d + at, 0, e - at))
            return false;
        in->words[in->nwords++] = dup_bytes(d + at, e - at);
        at = e + 1;
    }
    for (int i = 0; i < in->nwords; i++)
        if (!stays_inside(in->words[i]))
            return false;
    for (at = args_end; at < size && in->nfiles < MAX_FILES;) {
        size_t name_at = at + 4, e = name_at;
        while (e < size && d[e] != '\n')
            e++;
        size_t body = e < size ? e + 1 : size, end = next_file(d, size, body);
        char *name = dup_bytes(d + name_at, e - name_at);
        int slashes = 0;
        for (char *c = name; *c; c++)
            slashes += *c == '/';
        int k = in->nfiles++;
        in->names[k] = name;
        in->bytes[k] = d + body;
        in->sizes[k] = end - body;
        if (!*name || strlen(name) > 64 || slashes > 1 || name[0] == '/' || strstr(name, "..") ||
            memchr(d + name_at, 0, e - name_at) || strchr(name, '\n'))
            return false;
        at = end;
    }
    return true;
}

static void free_input(cli_input *in)
{
    for (int i = 0; i < in->nwords; i++)
        free(in->words[i]);
    for (int i = 0; i < in->nfiles; i++)
        free(in->names[i]);
}

/* Writes the input's files (and the fixed FIFO and links) into the current
 * directory. */
static void write_files(const cli_input *in)
{
    FUZZ_CHECK(mkfifo("fifo", 0600) == 0, "mkfifo: %s", strerror(errno));
    FUZZ_CHECK(symlink("/dev/null", "null") == 0, "symlink: %s", strerror(errno));
    FUZZ_CHECK(symlink("nowhere", "dangling") == 0, "symlink: %s", strerror(errno));
    for (int i = 0; i < in->nfiles; i++) {
        char *slash = strchr(in->names[i], '/');
        if (slash) {
            *slash = 0;
            mkdir(in->names[i], 0700); /* may exist: a second file of the directory */
            *slash = '/';
        }
        int fd = open(in->names[i], O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK, 0600);
        if (fd < 0)
            continue; /* a name like "fifo" or "x/" or one given twice: the fixed file stays */
        size_t done = 0;
        while (done < in->sizes[i]) {
            ssize_t w = write(fd, in->bytes[i] + done, in->sizes[i] - done);
            FUZZ_CHECK(w > 0, "write: %s", strerror(errno));
            done += (size_t)w;
        }
        close(fd);
    }
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    return remove(path);
}

/* ---- the invariants of an accepted command line ---- */

/* The value of count flag `flag` in `o` (as parsed), or -1 if `flag` is
 * not a count flag. */
static int64_t parsed_count(const rt_options *o, const char *flag)
{
    static const struct { const char *flag; size_t offset; } counts[] = {
        {"--steps", offsetof(rt_options, steps)},
        {"--log-every", offsetof(rt_options, log_every)},
        {"--save-every", offsetof(rt_options, save_every)},
        {"--eval-every", offsetof(rt_options, eval_every)},
        {"--repeat", offsetof(rt_options, repeat)},
        {"--generate", offsetof(rt_options, generate)},
        {"--top-k", offsetof(rt_options, top_k)},
        {"--prompt-cached", offsetof(rt_options, prompt_cached)},
        {"--port", offsetof(rt_options, port)},
        {"--max-queue", offsetof(rt_options, max_queue)},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (!strcmp(flag, counts[i].flag)) {
            int64_t v;
            memcpy(&v, (const char *)o + counts[i].offset, sizeof v);
            return v;
        }
    return -1;
}

/* A path a flag names, for the clobber check. */
typedef struct named_file {
    const char *flag;
    const char *name; /* the tensor of --input/--output, else NULL */
    const char *path;
    bool written;
} named_file;

/* Whether two paths name one file: the same string, or the same inode. */
static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (!strcmp(a, b))
        return true;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Adds the path(s) of one flag's value to `files`: NAME=path when
 * `pairs`, and several of them, comma-separated, for --eval-data alone
 * (cli.c's add_pairs; a comma in --output's path is part of the path). */
static int add_files(named_file *files, int n, const char *flag, char *val, bool written,
                     bool pairs)
{
    bool list = !strcmp(flag, "--eval-data");
    for (char *p = val; p && n < 2 * MAX_WORDS;) {
        char *comma = list ? strchr(p, ',') : NULL;
        if (comma)
            *comma = 0;
        char *eq = pairs ? strchr(p, '=') : NULL;
        files[n++] = (named_file){.flag = flag, .name = eq ? p : NULL,
                                  .path = eq ? eq + 1 : p, .written = written};
        if (eq)
            *eq = 0;
        p = comma ? comma + 1 : NULL;
    }
    return n;
}

/* Checks the invariants of an accepted command line: the words are
 * copied again (rt_parse_options split the originals in place). */
static void check_accepted(const cli_input *in, const rt_options *o)
{
    char *w[MAX_WORDS];
    for (int i = 0; i < in->nwords; i++)
        w[i] = strdup(in->words[i]);
    named_file files[2 * MAX_WORDS], counts[MAX_WORDS];
    int n = 0, ncounts = 0;
    for (int i = 0; i < in->nwords; i++) {
        char *eq = strncmp(w[i], "--", 2) == 0 ? strchr(w[i], '=') : NULL;
        char *val = eq ? eq + 1 : i + 1 < in->nwords ? w[i + 1] : NULL;
        if (eq)
            *eq = 0;
        const char *flag = w[i];
        /* A flag given again overrides its earlier value (a count, or the
         * one file of --trace, --metrics, --generated, --prompt-ids): only
         * its last value is checked. */
        if (parsed_count(o, flag) >= 0 && val) {
            int k = 0;
            while (k < ncounts && strcmp(counts[k].flag, flag))
                k++;
            counts[k] = (named_file){.flag = flag, .path = val};
            ncounts += k == ncounts;
        }
        bool w_pair = !strcmp(flag, "--output");
        bool r_pair = !strcmp(flag, "--input") || !strcmp(flag, "--data") ||
                      !strcmp(flag, "--eval-data");
        bool w_one = !strcmp(flag, "--trace") || !strcmp(flag, "--metrics") ||
                     !strcmp(flag, "--generated");
        bool r_one = !strcmp(flag, "--prompt-ids");
        for (int k = 0; (w_one || r_one) && k < n; k++)
            if (!strcmp(files[k].flag, flag))
                files[k--] = files[--n]; /* overridden: not written or read */
        if (val && (w_pair || r_pair || w_one || r_one))
            n = add_files(files, n, flag, val, w_pair || w_one, w_pair || r_pair);
        if (val && !eq && rt_flag_takes_value(flag))
            i++; /* the value was the next word */
    }
    for (int k = 0; k < ncounts; k++) {
        const char *val = counts[k].path;
        int64_t count = parsed_count(o, counts[k].flag);
        uint64_t digits = 0;
        bool decimal = *val != 0;
        for (const char *c = val; *c; c++) {
            decimal = decimal && *c >= '0' && *c <= '9';
            digits = digits * 10 + (uint64_t)(*c - '0');
        }
        FUZZ_CHECK(decimal && digits == (uint64_t)count, "%s accepted '%s' and read it as %lld",
                   counts[k].flag, val, (long long)count);
    }
    for (int a = 0; a < n; a++)
        for (int b = 0; b < a; b++) {
            if (!files[a].written && !files[b].written)
                continue;
            bool in_place = files[a].name && files[b].name &&
                            !strcmp(files[a].name, files[b].name) &&
                            files[a].written != files[b].written;
            FUZZ_CHECK(in_place || !same_file(files[a].path, files[b].path),
                       "accepted %s %s and %s %s, one file", files[b].flag, files[b].path,
                       files[a].flag, files[a].path);
        }
    for (int i = 0; i < in->nwords; i++)
        free(w[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_input in;
    if (!decode(data, size, &in)) {
        free_input(&in);
        return 0;
    }
    char home[4096], dir[] = "/tmp/fuzz_cli.XXXXXX";
    FUZZ_CHECK(getcwd(home, sizeof home) != NULL, "getcwd: %s", strerror(errno));
    FUZZ_CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    FUZZ_CHECK(chdir(dir) == 0, "chdir: %s", strerror(errno));
    write_files(&in);

    /* argv as main gets it: writable copies, NULL-terminated. */
    char *argv[MAX_WORDS + 2];
    argv[0] = strdup("fuzz_prog");
    for (int i = 0; i < in.nwords; i++)
        argv[i + 1] = strdup(in.words[i]);
    argv[in.nwords + 1] = NULL;
    char *copies[MAX_WORDS + 1];
    memcpy(copies, argv, sizeof copies);

    rt_prepared *pr = malloc(sizeof *pr);
    FUZZ_CHECK(pr != NULL, "out of memory");
    char err[1024] = "";
    int what = rt_prepare(pr, in.nwords + 1, argv, &programs[in.program], NULL, NULL, &launcher,
                          0, 1, err, sizeof err);
    if (what == RT_PREP_ERROR || what == RT_PREP_FILES)
        FUZZ_CHECK(err[0] != 0, "refused without a message");
    else if (what == RT_PREP_RUN)
        check_accepted(&in, &pr->opt);
    char why[1024];
    rt_prepared_release(pr, why, sizeof why);
    free(pr);
    for (int i = 0; i <= in.nwords; i++)
        free(copies[i]);

    FUZZ_CHECK(chdir(home) == 0, "chdir back: %s", strerror(errno));
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free_input(&in);
    return 0;
}
