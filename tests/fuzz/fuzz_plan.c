/*
 * fuzz_plan.c - the planner on random VALID programs: the fuzz bytes are
 * decoded into a .ein program (not fuzzed as text, so almost every input
 * reaches the passes), which goes through the frontend and the default
 * pass pipeline (fuzz_pipeline.h, as fuzz_compile runs it).
 *
 * The program: a mesh of 1-4 axes of sizes 1-4; 2-8 dims, each a multiple
 * of the mesh's device count so that any sharding divides; 2-4 inputs and
 * params of 1-3 dims with random shardings; a chain of 1-8 statements
 * (einsums contracting random dims, elementwise functions, reductions),
 * each reading the one before; sometimes a repeat block carrying a tensor
 * through a stacked param; sometimes a loss with `optimize` (SGD or AdamW)
 * or a `grad`.  Every choice reads one byte (0 once the input is used up).
 *
 * Findings (abort, so libFuzzer records the input): a crash; the frontend
 * refusing a program the generator meant to be valid (a generator bug or a
 * frontend bug, either is worth a look: the message and the program are
 * printed); the pipeline failing without an error or leaving IR that does
 * not verify (fuzz_run_pipeline); and the passes taking more than
 * PLAN_BUDGET_SECONDS of CPU time.  Errors the passes report are allowed
 * (a sharding constraint no op can produce is a user's error) but this
 * generator writes no constraints, so none is expected either: a failure
 * of the passes is also a finding.
 */
#include <stdbool.h>

#include "fuzz_pipeline.h"

/* CPU seconds the passes may take on one generated program.  The planner's
 * time is bounded by the routes it prices times PASS_RESHARD_EDGE_BUDGET
 * (docs/propagation.md, "Planner time"): an 8-dim program on a 4-axis mesh
 * plans in 0.3 s (CTest plan_budget), and issue 29 asks for under 1 s.
 * These programs are no larger, and the fuzzing build runs under ASan and
 * coverage (a few times slower): 2 s is a bound the planner must keep. */
#define PLAN_BUDGET_SECONDS 2.0

/* Most dims, leaves (inputs and params) and statements of a program. */
#define MAX_DIMS 8
#define MAX_LEAVES 4
#define MAX_STMTS 8
/* Dims of a tensor: at most 3 keeps each einsum a few loops deep. */
#define MAX_RANK 3

/* The bytes being decoded. */
typedef struct cursor {
    const uint8_t *p;
    size_t n, at;
} cursor;

/* A choice from 0 to k-1 from the next byte (0 past the end). */
static int pick(cursor *c, int k)
{
    return c->at < c->n ? c->p[c->at++] % k : 0;
}

/* A tensor of the program: its name and dims (indices into the dims). */
typedef struct tensor {
    char name[16]; /* "T7", "P0": room for any int, which -Wformat-truncation asks */
    int rank;
    int dims[MAX_RANK];
} tensor;

/* The program text, growing. */
typedef struct text {
    char *buf;
    size_t len;
    FILE *f;
} text;

/* Writes the dims of `t` as "[D0, D3]". */
static void put_dims(FILE *f, const tensor *t)
{
    fputc('[', f);
    for (int i = 0; i < t->rank; i++)
        fprintf(f, "%sD%d", i ? ", " : "", t->dims[i]);
    fputc(']', f);
}

/* `t` read in a statement: "T1[D0, D3]". */
static void put_ref(FILE *f, const tensor *t)
{
    fputs(t->name, f);
    put_dims(f, t);
}

/* A random set of 1..MAX_RANK distinct dims of the ndims. */
static void random_dims(cursor *c, int ndims, tensor *t)
{
    t->rank = 1 + pick(c, ndims < MAX_RANK ? ndims : MAX_RANK);
    bool used[MAX_DIMS] = {false};
    for (int i = 0; i < t->rank; i++) {
        int d = pick(c, ndims);
        while (used[d])
            d = (d + 1) % ndims;
        used[d] = true;
        t->dims[i] = d;
    }
}

/* Declares leaf `t` ("input" or "param") with random shardings: each dim
 * takes an axis that no other dim of `t` took, or none. */
static void declare(FILE *f, cursor *c, const char *kind, const tensor *t, int naxes,
                    const char *axes, const char *stacked)
{
    fprintf(f, "%s %s[%s", kind, t->name, stacked ? stacked : "");
    bool used[4] = {false};
    for (int i = 0; i < t->rank; i++) {
        fprintf(f, "%sD%d", i || stacked ? ", " : "", t->dims[i]);
        int a = pick(c, naxes + 1) - 1;
        if (a >= 0 && !used[a]) {
            used[a] = true;
            fprintf(f, "_%c", axes[a]);
        }
    }
    fputs("] : f32\n", f);
}

/* The union of the dims of a and b into out (at most MAX_RANK kept, a's
 * first), then some dropped at random (contracted), at least one kept. */
static void einsum_dims(cursor *c, const tensor *a, const tensor *b, tensor *out)
{
    int all[2 * MAX_RANK], n = 0;
    for (int i = 0; i < a->rank; i++)
        all[n++] = a->dims[i];
    for (int i = 0; i < b->rank; i++) {
        bool seen = false;
        for (int j = 0; j < a->rank; j++)
            seen = seen || a->dims[j] == b->dims[i];
        if (!seen)
            all[n++] = b->dims[i];
    }
    out->rank = 0;
    for (int i = 0; i < n && out->rank < MAX_RANK; i++)
        if (pick(c, 3) != 0) /* keep two in three */
            out->dims[out->rank++] = all[i];
    if (out->rank == 0)
        out->dims[out->rank++] = all[pick(c, n)];
}

/* Writes the program the bytes decode to into t (a NUL-terminated string). */
static void generate(cursor *c, text *t)
{
    static const char axes[] = "XYZU";
    static const char *const unary[] = {"gelu", "silu", "exp", "tanh"};
    FILE *f = t->f;
    int naxes = 1 + pick(c, 4), devices = 1;
    fputs("mesh ", f);
    for (int a = 0; a < naxes; a++) {
        int size = 1 + pick(c, 4);
        devices *= size;
        fprintf(f, "%s%c = %d", a ? ", " : "", axes[a], size);
    }
    int ndims = 2 + pick(c, MAX_DIMS - 1);
    fputs("\ndim ", f);
    for (int d = 0; d < ndims; d++)
        fprintf(f, "%sD%d = %d", d ? ", " : "", d, devices * (1 + pick(c, 2)));
    bool train = pick(c, 3) == 0, want_grad = !train && pick(c, 4) == 0;
    bool block = pick(c, 3) == 0;
    if (block)
        fprintf(f, ", R = %d", 1 + pick(c, 4));
    fputc('\n', f);

    tensor leaves[MAX_LEAVES];
    int nleaves = 2 + pick(c, MAX_LEAVES - 1);
    for (int i = 0; i < nleaves; i++) {
        /* Leaf 0 is a param when the program trains or takes a grad. */
        bool param = i == 0 ? train || want_grad : pick(c, 2) == 0;
        snprintf(leaves[i].name, sizeof leaves[i].name, "%s%d", param ? "P" : "I", i);
        random_dims(c, ndims, &leaves[i]);
        declare(f, c, param ? "param" : "input", &leaves[i], naxes, axes, NULL);
    }
    tensor stacked = {.name = "Ws"};
    if (block) {
        stacked.rank = 1;
        declare(f, c, "param", &stacked, 0, axes, "R"); /* dims filled below */
    }

    int nstmts = nleaves - 1 + pick(c, MAX_STMTS - nleaves + 2);
    tensor prev = leaves[0];
    for (int s = 0; s < nstmts; s++) {
        tensor out;
        snprintf(out.name, sizeof out.name, "T%d", s);
        /* The first statements read every leaf once, so all are used. */
        int kind = s + 1 < nleaves ? 0 : pick(c, 3);
        if (kind == 2 && prev.rank < 2)
            kind = 1;
        if (kind == 0) {
            const tensor *b = &leaves[s + 1 < nleaves ? s + 1 : pick(c, nleaves)];
            einsum_dims(c, &prev, b, &out);
            put_ref(f, &out);
            fputs(" = ", f);
            put_ref(f, &prev);
            fputs(" * ", f);
            put_ref(f, b);
        } else if (kind == 1) {
            out.rank = prev.rank;
            memcpy(out.dims, prev.dims, sizeof out.dims);
            put_ref(f, &out);
            fprintf(f, " = %s(", unary[pick(c, 4)]);
            put_ref(f, &prev);
            fputs(") * 0.5", f);
        } else {
            int drop = pick(c, prev.rank);
            out.rank = 0;
            for (int i = 0; i < prev.rank; i++)
                if (i != drop)
                    out.dims[out.rank++] = prev.dims[i];
            put_ref(f, &out);
            fprintf(f, " = %s(", pick(c, 2) ? "sum" : "mean");
            put_ref(f, &prev);
            fputc(')', f);
        }
        fputc('\n', f);
        prev = out;
    }

    if (block) {
        /* The carried tensor is the last result; the stacked param has its
         * last dim (declared above as Ws[R, D?]: patched in the text). */
        fprintf(f, "repeat R {\n  Tb");
        put_dims(f, &prev);
        fprintf(f, " = gelu(");
        put_ref(f, &prev);
        fprintf(f, ") * Ws[D%d]\n  ", prev.dims[prev.rank - 1]);
        put_ref(f, &prev);
        fputs(" = ", f);
        put_ref(f, &prev);
        fputs(" + Tb", f);
        put_dims(f, &prev);
        fputs("\n}\n", f);
    }
    fputs("output ", f);
    fputs(prev.name, f);
    fputc('\n', f);
    if (train || want_grad) {
        fputs("L[] = mean(", f);
        put_ref(f, &prev);
        fputs(" * ", f);
        put_ref(f, &prev);
        fputs(")\n", f);
    }
    if (train) {
        fputs("loss L\n", f);
        if (pick(c, 2))
            fputs("optimize P0 with sgd(lr=0.01, momentum=0.9)\n", f);
        else
            fputs("optimize P0 with adamw(lr=0.001)\n", f);
    } else if (want_grad) {
        fputs("dP", f);
        put_dims(f, &leaves[0]);
        fputs(" = grad(L, P0)\noutput dP\n", f);
    }
    fflush(f);
    if (block) {
        /* Ws was declared before its dim was known: "Ws[R, D0] : f32"
         * with D0 a placeholder, replaced now by the carried tensor's last
         * dim (one digit either way). */
        char *decl = strstr(t->buf, "param Ws[R, D0");
        FUZZ_CHECK(decl != NULL, "the stacked param's declaration is missing:\n%s", t->buf);
        decl[strlen("param Ws[R, D")] = (char)('0' + prev.dims[prev.rank - 1]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cursor c = {.p = data, .n = size};
    text t = {0};
    t.f = open_memstream(&t.buf, &t.len);
    FUZZ_CHECK(t.f != NULL, "open_memstream failed");
    generate(&c, &t);
    fclose(t.f);

    fe_options o;
    memset(&o, 0, sizeof o);
    fuzz_diag fd;
    fuzz_diag_open(&fd, (const uint8_t *)t.buf, t.len);
    ir_module *m = fe_compile(t.buf, t.len, &o, &fd.d);
    if (!m) {
        fuzz_diag_close(&fd);
        FUZZ_CHECK(0, "the frontend refused a generated program:\n%s\n%s", t.buf, fd.text);
    }
    double seconds;
    int rc = fuzz_run_pipeline(m, &fd, &seconds);
    FUZZ_CHECK(rc == 0, "the passes refused a generated program:\n%s\n%s", t.buf, fd.text);
    FUZZ_CHECK(seconds <= PLAN_BUDGET_SECONDS,
               "planning took %.2f s of CPU, over the budget of %.1f s:\n%s", seconds,
               PLAN_BUDGET_SECONDS, t.buf);
    fuzz_diag_free(&fd);
    ir_module_free(m);
    free(t.buf);
    return 0;
}
