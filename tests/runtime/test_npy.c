/*
 * test_npy.c - .npy reading and writing: round trips of whole arrays and of
 * every device's block (f32, f64, bf16 as <f4), headers of versions 1.0 and
 * 2.0 written by hand as NumPy does, and a clear error for each bad file:
 * wrong shape, wrong dtype, bad magic, truncated data or header, Fortran
 * order; a failed write leaves no file behind.
 */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cunit_main.h"
#include "rt_internal.h"
#include "rt_test_util.h"

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* A tensor [6, 4, 10] with dim 0 sharded over X (2) and dim 2 over Y then Z (2 * 5). */
static rt_tensor_desc tensor(int32_t dtype)
{
    rt_tensor_desc t;
    memset(&t, 0, sizeof t);
    t.name = "a";
    t.dtype = dtype;
    t.rank = 3;
    t.global_shape[0] = 6;
    t.global_shape[1] = 4;
    t.global_shape[2] = 10;
    t.local_shape[0] = 3;
    t.local_shape[1] = 4;
    t.local_shape[2] = 1;
    t.dim_naxes[0] = 1;
    t.dim_axes[0][0] = 0;
    t.dim_naxes[2] = 2;
    t.dim_axes[2][0] = 1;
    t.dim_axes[2][1] = 2;
    return t;
}

/* Writes the array, reads each device's block back and compares. */
static void round_trip(int32_t dtype)
{
    char dir[64], path[128], err[512];
    test_make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/a.npy", dir);
    rt_tensor_desc t = tensor(dtype);
    size_t es = rt_dtype_size(dtype);
    int64_t n = rt_numel(3, t.global_shape);
    char *g = malloc((size_t)n * es);
    for (int64_t i = 0; i < n; i++) {
        double v = (double)i * 0.5 - 7.25;
        if (dtype == RT_F64)
            ((double *)g)[i] = v;
        else if (dtype == RT_F32)
            ((float *)g)[i] = (float)v;
        else if (dtype == RT_I8) /* every value from -128 to 127 */
            ((int8_t *)g)[i] = (int8_t)(i % 256 - 128);
        else
            ((uint16_t *)g)[i] = rt_f32_to_bf16((float)v);
    }
    CU_ASSERT_EQUAL_FATAL(rt_npy_write(path, &t, g, err, sizeof err), 0);
    CU_ASSERT_EQUAL(count_files(dir), 1); /* no temp file left */
    rt_npy_header h;
    CU_ASSERT_EQUAL_FATAL(rt_npy_read_header(path, &h, err, sizeof err), 0);
    CU_ASSERT_EQUAL(h.data_offset % 64, 0);
    CU_ASSERT_EQUAL(rt_npy_check(&h, path, &t, err, sizeof err), 0);
    /* NumPy's descr: i8 one byte per element, bf16 as f32. */
    CU_ASSERT_STRING_EQUAL(h.descr, dtype == RT_F64 ? "<f8" : dtype == RT_I8 ? "|i1" : "<f4");
    CU_ASSERT_EQUAL(h.file_bytes, h.data_offset + n * (int64_t)rt_file_elem_size(dtype));
    rt_program p = {.abi_version = RT_ABI_VERSION, .naxes = 3, .axis_names = {'X', 'Y', 'Z'},
                    .axis_sizes = {2, 2, 5}, .run = test_noop_run};
    int64_t nl = rt_numel(3, t.local_shape);
    char *blk = malloc((size_t)nl * es);
    int64_t bad = 0;
    for (int64_t id = 0; id < 20; id++) {
        int64_t coord[RT_MAX_AXES], start[RT_MAX_RANK];
        rt_mesh_coord(&p, id, coord);
        rt_block_start(&t, p.axis_sizes, coord, start);
        CU_ASSERT_EQUAL(rt_npy_read_block(path, &h, &t, start, t.local_shape, blk, err,
                                          sizeof err), 0);
        /* Compare with the block cut out of the global array by hand. */
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 4; j++) {
                int64_t gi = ((start[0] + i) * 4 + j) * 10 + start[2];
                bad += memcmp(blk + (size_t)((i * 4 + j) * 1) * es, g + (size_t)gi * es, es) != 0;
            }
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(blk);
    free(g);
    test_remove_dir(dir);
}

static void test_round_trip_f32(void) { round_trip(RT_F32); }
static void test_round_trip_f64(void) { round_trip(RT_F64); }
static void test_round_trip_bf16(void) { round_trip(RT_BF16); }
static void test_round_trip_i8(void) { round_trip(RT_I8); }

/* The header dict of a valid file for tensor(RT_F32). */
#define GOOD_DICT "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4, 10), }"

/* Writes a .npy file with the given header dict and `data_bytes` bytes of data. */
static void write_raw(const char *path, int major, const char *magic, const char *dict,
                      size_t data_bytes)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    size_t pre = major == 1 ? 10 : 12, n = strlen(dict);
    size_t total = (pre + n + 1 + 63) / 64 * 64, hlen = total - pre;
    fwrite(magic, 1, 6, f);
    fputc(major, f);
    fputc(0, f);
    for (size_t k = 0; k < pre - 8; k++)
        fputc((int)((hlen >> (8 * k)) & 0xff), f);
    fputs(dict, f);
    for (size_t k = n; k + 1 < hlen; k++)
        fputc(' ', f);
    fputc('\n', f);
    for (size_t k = 0; k < data_bytes; k++)
        fputc(0, f);
    fclose(f);
}

/* Checks that `path` fails to load as tensor(f32) with a message containing `needle`. */
static void expect_bad_as(const char *path, int32_t dtype, const char *needle)
{
    char err[512] = "";
    rt_npy_header h;
    rt_tensor_desc t = tensor(dtype);
    int rc = rt_npy_read_header(path, &h, err, sizeof err);
    if (rc == 0)
        rc = rt_npy_check(&h, path, &t, err, sizeof err);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
    if (!strstr(err, needle))
        fprintf(stderr, "\n  message '%s' lacks '%s'\n", err, needle);
}

static void expect_bad(const char *path, const char *needle)
{
    expect_bad_as(path, RT_F32, needle);
}

static void test_versions(void)
{
    char dir[64], path[128], err[512];
    test_make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/v2.npy", dir);
    write_raw(path, 2, "\x93NUMPY", GOOD_DICT,
              240 * 4);
    rt_npy_header h;
    rt_tensor_desc t = tensor(RT_F32);
    CU_ASSERT_EQUAL(rt_npy_read_header(path, &h, err, sizeof err), 0);
    CU_ASSERT_EQUAL(rt_npy_check(&h, path, &t, err, sizeof err), 0);
    CU_ASSERT_EQUAL(h.rank, 3);
    CU_ASSERT_EQUAL(h.shape[2], 10);
    /* 3.0 has the layout of 2.0 (a UTF-8 header). */
    write_raw(path, 3, "\x93NUMPY", GOOD_DICT, 240 * 4);
    CU_ASSERT_EQUAL(rt_npy_read_header(path, &h, err, sizeof err), 0);
    CU_ASSERT_EQUAL(rt_npy_check(&h, path, &t, err, sizeof err), 0);
    /* An unknown major version is refused. */
    write_raw(path, 4, "\x93NUMPY", GOOD_DICT, 240 * 4);
    CU_ASSERT_EQUAL(rt_npy_read_header(path, &h, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unsupported .npy version 4.0"));
    test_remove_dir(dir);
}

static void test_bad_files(void)
{
    char dir[64], path[128];
    test_make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad.npy", dir);
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4, 9), }",
              216 * 4);
    expect_bad(path, "has shape (6, 4, 9), expected (6, 4, 10)");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<f4', 'fortran_order': False, 'shape': (240,), }",
              240 * 4);
    expect_bad(path, "has shape (240,), expected (6, 4, 10)");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<f8', 'fortran_order': False, 'shape': (6, 4, 10), }",
              240 * 8);
    expect_bad(path, "has dtype '<f8', expected '<f4'");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<i4', 'fortran_order': False, 'shape': (6, 4, 10), }",
              240 * 4);
    expect_bad(path, "has dtype '<i4'");
    /* An i8 tensor's file is '|i1', one byte per element: f32 values are
     * not quantized silently, and a short file is truncated. */
    write_raw(path, 1, "\x93NUMPY", GOOD_DICT, 240 * 4);
    expect_bad_as(path, RT_I8, "has dtype '<f4', expected '|i1' (i8)");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '|i1', 'fortran_order': False, 'shape': (6, 4, 10), }",
              239);
    expect_bad_as(path, RT_I8, "is truncated: 367 bytes, expected 368");
    write_raw(path, 1, "\x93NUMPZ", GOOD_DICT,
              240 * 4);
    expect_bad(path, "bad magic");
    write_raw(path, 1, "\x93NUMPY", GOOD_DICT,
              240 * 4 - 1);
    expect_bad(path, "is truncated");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<f4', 'fortran_order': True, 'shape': (6, 4, 10), }",
              240 * 4);
    expect_bad(path, "Fortran order");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<f4', 'fortran_order': False, 'shape': (6, x), }",
              240 * 4);
    expect_bad(path, "malformed 'shape'");
    /* As numpy.lib.format reads the dict (ast.literal_eval, then exactly
     * three keys): a key given twice (Python keeps the last: NumPy would
     * read (2, 120) where a first-match reader reads (6, 4, 10)), an extra
     * key, a shape that is an int, not a tuple. */
    write_raw(path, 1, "\x93NUMPY",
              "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4, 10), 'shape': (2, 120), }", 240 * 4);
    expect_bad(path, "gives 'shape' twice");
    write_raw(path, 1, "\x93NUMPY",
              "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4, 10), 'order': 'C', }", 240 * 4);
    expect_bad(path, "has the key 'order'");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<f4', 'fortran_order': False, 'shape': (240), }", 240 * 4);
    expect_bad(path, "malformed 'shape'");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<f4', 'shape': (6, 4, 10), }", 240 * 4);
    expect_bad(path, "has no 'fortran_order'");
    write_raw(path, 1, "\x93NUMPY", "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4, 10) } x", 240 * 4);
    expect_bad(path, "text after its dict");
    /* A header cut short. */
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00\x76\x00{'descr'", 1, 18, f);
    fclose(f);
    expect_bad(path, "truncated .npy header");
    snprintf(path, sizeof path, "%s/missing.npy", dir);
    expect_bad(path, "cannot open");
    test_remove_dir(dir);
}

/* Reading a block past the end of a file that shrank after the check fails cleanly. */
static void test_truncated_block(void)
{
    char dir[64], path[128], err[512];
    test_make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.npy", dir);
    write_raw(path, 1, "\x93NUMPY", GOOD_DICT,
              240 * 4);
    rt_npy_header h;
    rt_tensor_desc t = tensor(RT_F32);
    CU_ASSERT_EQUAL_FATAL(rt_npy_read_header(path, &h, err, sizeof err), 0);
    CU_ASSERT_EQUAL(truncate(path, h.data_offset + 100), 0);
    float blk[12];
    int64_t start[3] = {3, 0, 9};
    CU_ASSERT_EQUAL(rt_npy_read_block(path, &h, &t, start, t.local_shape, blk, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "truncated"));
    test_remove_dir(dir);
}

static void test_failed_write_leaves_nothing(void)
{
    char dir[64], path[160], err[512];
    test_make_dir(dir, sizeof dir);
    rt_tensor_desc t = tensor(RT_F32);
    float data[240] = {0};
    snprintf(path, sizeof path, "%s/no/such/dir/a.npy", dir);
    CU_ASSERT_EQUAL(rt_npy_write(path, &t, data, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot create"));
    /* Rename onto a directory fails after the data was written: the temp goes. */
    snprintf(path, sizeof path, "%s/adir", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0700), 0);
    CU_ASSERT_EQUAL(rt_npy_write(path, &t, data, err, sizeof err), -1);
    CU_ASSERT_EQUAL(count_files(dir), 1); /* only adir */
    rmdir(path);
    test_remove_dir(dir);
}

/* An existing output is replaced whole. */
static void test_overwrite(void)
{
    char dir[64], path[128], err[512];
    test_make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/o.npy", dir);
    rt_tensor_desc t = tensor(RT_F64);
    double data[240];
    for (int i = 0; i < 240; i++)
        data[i] = i;
    CU_ASSERT_EQUAL(rt_npy_write(path, &t, data, err, sizeof err), 0);
    data[239] = -1;
    CU_ASSERT_EQUAL(rt_npy_write(path, &t, data, err, sizeof err), 0);
    rt_npy_header h;
    CU_ASSERT_EQUAL(rt_npy_read_header(path, &h, err, sizeof err), 0);
    CU_ASSERT_EQUAL(h.file_bytes, h.data_offset + 240 * 8);
    double last;
    FILE *f = fopen(path, "rb");
    fseek(f, (long)h.data_offset + 239 * 8, SEEK_SET);
    CU_ASSERT_EQUAL(fread(&last, 8, 1, f), 1);
    fclose(f);
    CU_ASSERT_EQUAL(last, -1.0);
    test_remove_dir(dir);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"round trip f32 blocks", test_round_trip_f32},
        {"round trip f64 blocks", test_round_trip_f64},
        {"round trip bf16 as <f4", test_round_trip_bf16},
        {"round trip i8 as |i1", test_round_trip_i8},
        {"version 2.0, 3.0 and 4.0 headers", test_versions},
        {"bad files give clear errors", test_bad_files},
        {"truncated data while reading a block", test_truncated_block},
        {"failed write leaves nothing", test_failed_write_leaves_nothing},
        {"overwrite replaces the file", test_overwrite},
    };
    einc_add_suite("runtime .npy I/O", tests, (int)(sizeof tests / sizeof tests[0]));
}
