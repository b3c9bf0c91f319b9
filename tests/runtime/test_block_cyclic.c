/*
 * test_block_cyclic.c - a dim dealt block-cyclically over its devices
 * (rt_tensor_desc.cyclic_blocks, runtime/layout.c): the parts each device
 * holds, against the interleaved pipeline's layer assignment worked out
 * here (stage z holds model chunks z, z + Z, ...), and the round trip of
 * every device's block through rt_place_block back to the global array.
 */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"

enum { L = 8, W = 6 }; /* global [L, W] */

/* Mesh Z = 2, X = 2 (Z major); W[L_Z, W_X] with L dealt in `v` chunks per stage. */
static void setup(rt_program *p, rt_tensor_desc *t, int32_t v)
{
    memset(p, 0, sizeof *p);
    p->abi_version = RT_ABI_VERSION;
    p->naxes = 2;
    p->axis_names[0] = 'Z';
    p->axis_names[1] = 'X';
    p->axis_sizes[0] = 2;
    p->axis_sizes[1] = 2;
    memset(t, 0, sizeof *t);
    t->name = "W";
    t->dtype = RT_F64;
    t->rank = 2;
    t->global_shape[0] = L;
    t->global_shape[1] = W;
    t->local_shape[0] = L / 2;
    t->local_shape[1] = W / 2;
    t->dim_naxes[0] = t->dim_naxes[1] = 1;
    t->dim_axes[0][0] = 0;
    t->dim_axes[1][0] = 1;
    t->cyclic_blocks = v;
}

/* Part j of stage z for Z = 2, v = 2, L = 8: model chunk j Z + z of 2 layers. */
static void test_parts(void)
{
    rt_program p;
    rt_tensor_desc t;
    setup(&p, &t, 2);
    CU_ASSERT_EQUAL(rt_block_nparts(&t), 2);
    for (int64_t z = 0; z < 2; z++)
        for (int32_t j = 0; j < 2; j++) {
            int64_t coord[RT_MAX_AXES] = {z, 1}, start[RT_MAX_RANK], ext[RT_MAX_RANK], off;
            rt_block_part(&t, p.axis_sizes, coord, j, start, ext, &off);
            CU_ASSERT_EQUAL(start[0], (j * 2 + z) * 2); /* chunk j Z + z, 2 layers each */
            CU_ASSERT_EQUAL(start[1], 3);               /* X = 1's columns, as ever */
            CU_ASSERT_EQUAL(ext[0], 2);
            CU_ASSERT_EQUAL(ext[1], 3);
            CU_ASSERT_EQUAL(off, j * 2 * 3); /* local rows 2j, 2j+1 */
        }
    /* Without cyclic blocks: the one block of rt_block_start. */
    setup(&p, &t, 0);
    CU_ASSERT_EQUAL(rt_block_nparts(&t), 1);
    int64_t coord[RT_MAX_AXES] = {1, 0}, start[RT_MAX_RANK], ext[RT_MAX_RANK], off;
    rt_block_part(&t, p.axis_sizes, coord, 0, start, ext, &off);
    CU_ASSERT(start[0] == 4 && start[1] == 0 && ext[0] == 4 && ext[1] == 3 && off == 0);
}

/* Each device's block cut from the global array by the assignment above,
 * placed back by rt_place_block: the global array again. */
static void round_trip(int32_t v)
{
    rt_program p;
    rt_tensor_desc t;
    setup(&p, &t, v);
    double g[L * W], back[L * W], local[L / 2 * W / 2];
    for (int i = 0; i < L * W; i++) {
        g[i] = i;
        back[i] = -1;
    }
    int64_t r = L / 2 / (v > 1 ? v : 1); /* layers per chunk */
    for (int64_t id = 0; id < 4; id++) {
        int64_t coord[RT_MAX_AXES];
        rt_mesh_coord(&p, id, coord);
        for (int64_t i = 0; i < L / 2; i++) { /* local layer i: chunk i / r, global block (i/r) Z + z */
            int64_t gl = v > 1 ? ((i / r) * 2 + coord[0]) * r + i % r : coord[0] * (L / 2) + i;
            for (int64_t c = 0; c < W / 2; c++)
                local[i * (W / 2) + c] = g[gl * W + coord[1] * (W / 2) + c];
        }
        rt_place_block(&p, &t, coord, local, back);
    }
    CU_ASSERT_EQUAL(memcmp(g, back, sizeof g), 0);
}

static void test_round_trip_cyclic(void) { round_trip(2); }
static void test_round_trip_cyclic4(void) { round_trip(4); }
static void test_round_trip_block(void) { round_trip(0); }

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"each stage's parts are its model chunks", test_parts},
        {"v = 2: every device's block placed back in global order", test_round_trip_cyclic},
        {"v = 4: every device's block placed back in global order", test_round_trip_cyclic4},
        {"plain blocks: placed back in global order", test_round_trip_block},
    };
    einc_add_suite("block_cyclic", tests, (int)(sizeof tests / sizeof tests[0]));
}
