/*
 * test_random.c - propagation on many random small programs.
 *
 * A fixed-seed generator builds meshes of 1-3 axes, inputs with random
 * shardings, and chains of einsums, elementwise calls and adds with random
 * sharding constraints and outputs.  Every program must propagate without
 * error and pass ir_verify (every op locally computable, every constraint
 * and output met), and the bytes its inserted ops move must be a finite,
 * non-negative number.  A failing program is printed with its seed.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cunit_main.h"
#include "pass.h"
#include "prop_fixture.h"

#define NDIMS 5

/* xorshift64*: deterministic across platforms. */
static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static int pick(uint64_t *s, int n)
{
    return (int)(next(s) % (uint64_t)n);
}

/* Writes "Name[I_X, K]" for dims dims[0..rank-1] with a random sharding
 * (each mesh axis on a random position or none) when `shard`. */
static void decl(uint64_t *s, const ir_module *m, const char *name, const int *dims, int rank, bool shard,
                 char *buf, size_t size)
{
    char ax[IR_MAX_RANK][IR_MAX_AXES + 1];
    memset(ax, 0, sizeof ax);
    for (int a = 0; shard && a < m->mesh.naxes; a++) {
        int d = pick(s, rank + 1);
        if (d < rank) {
            size_t n = strlen(ax[d]);
            ax[d][n] = m->mesh.axes[a].name;
        }
    }
    size_t n = (size_t)snprintf(buf, size, "%s[", name);
    for (int d = 0; d < rank; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s%s%s", d ? ", " : "", m->dims[dims[d]].name,
                              ax[d][0] ? "_" : "", ax[d]);
    snprintf(buf + n, size - n, "]");
}

/* A random subset (random order) of {0..NDIMS-1} of size 1..3. */
static int random_dims(uint64_t *s, int *dims)
{
    int rank = 1 + pick(s, 3), n = 0;
    while (n < rank) {
        int d = pick(s, NDIMS), dup = 0;
        for (int i = 0; i < n; i++)
            dup |= dims[i] == d;
        if (!dup)
            dims[n++] = d;
    }
    return rank;
}

/* Builds and propagates one random program; returns false on a failure. */
static bool one_program(uint64_t seed)
{
    uint64_t s = seed;
    static const char *axis_names[] = {"X", "Y", "Z"};
    char mesh[64] = "";
    int naxes = 1 + pick(&s, 3);
    for (int a = 0; a < naxes; a++) {
        size_t n = strlen(mesh);
        snprintf(mesh + n, sizeof mesh - n, "%s%s=%d", a ? "," : "", axis_names[a], 2 << pick(&s, 2));
    }
    ir_module *m = fx_module(mesh, "I=64,J=128,K=64,L=256,M=128");
    ir_value *vals[16];
    int nvals = 0;
    char buf[128], name[16];
    for (int i = 0; i < 3; i++) {
        int dims[3] = {0};
        int rank = random_dims(&s, dims);
        snprintf(name, sizeof name, "In%d", i);
        decl(&s, m, name, dims, rank, true, buf, sizeof buf);
        vals[nvals++] = fx_input(m, buf);
    }
    int nops = 3 + pick(&s, 4);
    for (int k = 0; k < nops; k++) {
        ir_value *a = vals[pick(&s, nvals)];
        ir_value *r = NULL;
        bool constrain = pick(&s, 3) == 0;
        snprintf(name, sizeof name, "T%d", k);
        int kind = pick(&s, 3);
        if (kind == 0) {
            /* einsum with another value; result keeps a random subset of
             * the union of their dims */
            ir_value *b = vals[pick(&s, nvals)];
            int uni[6], nu = 0, dims[6], rank = 0;
            for (int i = 0; i < a->type.rank; i++)
                uni[nu++] = a->type.dims[i];
            for (int i = 0; i < b->type.rank; i++) {
                int dup = 0;
                for (int j = 0; j < nu; j++)
                    dup |= uni[j] == b->type.dims[i];
                if (!dup)
                    uni[nu++] = b->type.dims[i];
            }
            for (int i = 0; i < nu && rank < 3; i++)
                if (pick(&s, 2))
                    dims[rank++] = uni[i];
            decl(&s, m, name, dims, rank, constrain, buf, sizeof buf);
            r = fx_einsum(m, buf, a, b);
        } else if (kind == 1) {
            decl(&s, m, name, a->type.dims, a->type.rank, constrain, buf, sizeof buf);
            r = fx_call(m, buf, pick(&s, 2) ? IR_FN_EXP : IR_FN_NEG, a);
        } else {
            /* a + a-shaped value (the same value when none other fits) */
            ir_value *b = a;
            for (int t = 0; t < 4; t++) {
                ir_value *c = vals[pick(&s, nvals)];
                if (c->type.rank == a->type.rank &&
                    memcmp(c->type.dims, a->type.dims, sizeof(int) * (size_t)a->type.rank) == 0)
                    b = c;
            }
            decl(&s, m, name, a->type.dims, a->type.rank, constrain, buf, sizeof buf);
            r = fx_add(m, buf, a, b);
        }
        if (nvals < 16)
            vals[nvals++] = r;
    }
    ir_value *last = vals[nvals - 1];
    if (pick(&s, 2)) {
        decl(&s, m, last->tensor, last->type.dims, last->type.rank, true, buf, sizeof buf);
        fx_output(m, buf, last);
    } else {
        fx_output(m, last->tensor, last);
    }
    int verr = 0;
    int e = fx_run(m, &verr);
    double bytes = fx_bytes_moved(m);
    bool ok = e == 0 && verr == 0 && isfinite(bytes) && bytes >= 0;
    if (!ok) {
        fprintf(stderr, "random program %llu failed (propagate %d, verify %d):\n", (unsigned long long)seed, e,
                verr);
        ir_print(stderr, m);
    }
    ir_module_free(m);
    return ok;
}

static void test_random_programs(void)
{
    int failed = 0;
    for (uint64_t seed = 1; seed <= 300; seed++)
        failed += !one_program(seed * 0x9E3779B97F4A7C15ull);
    CU_ASSERT_EQUAL(failed, 0);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"300 random programs propagate and verify", test_random_programs},
    };
    einc_add_suite("propagate: random programs", tests, 1);
}
