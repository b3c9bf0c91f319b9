/*
 * test_data.c - the pieces of the training loop below the executable:
 * the --seed permutation is a bijection for every size (data.c), the batch
 * order in order and shuffled (each epoch visits B * (N div B) distinct
 * rows), a device's block of a batch with its rest dims sharded (f32, and
 * bf16 rounded from the file's f32), each bad --data file refused with its
 * message, a file that shrinks during the run ending the job with a
 * message, the record of the data order a checkpoint keeps and --resume's
 * check of it, and the checkpoint files of --save / --resume (checkpoint.c):
 * a save that fails while staging or while applying leaves one whole step.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cunit_main.h"
#include "rt_internal.h"
#include "rt_test_util.h"

/* rt_shuffle_index over [0, n) is a permutation, for sizes around every
 * power of two the Feistel network's bit width changes at. */
static void test_shuffle_is_permutation(void)
{
    static const int64_t sizes[] = {1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 255, 256, 257,
                                    1000, 4095, 4096, 4097, 70000};
    static const uint64_t seeds[] = {0, 1, 0xdeadbeefcafef00dull};
    char *seen = malloc(70000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++)
            for (int64_t epoch = 0; epoch < 3; epoch++) {
                int64_t n = sizes[s], bad = 0;
                memset(seen, 0, (size_t)n);
                for (int64_t i = 0; i < n; i++) {
                    int64_t r = rt_shuffle_index(seeds[k], epoch, n, i);
                    if (r < 0 || r >= n || seen[r]++)
                        bad++;
                }
                CU_ASSERT_EQUAL(bad, 0);
            }
    /* Another epoch or seed is another order. */
    int64_t same_epoch = 0, same_seed = 0, fixed = 0;
    for (int64_t i = 0; i < 1000; i++) {
        int64_t r = rt_shuffle_index(7, 0, 1000, i);
        same_epoch += r == rt_shuffle_index(7, 1, 1000, i);
        same_seed += r == rt_shuffle_index(8, 0, 1000, i);
        fixed += r == i;
    }
    CU_ASSERT(same_epoch < 50 && same_seed < 50 && fixed < 50);
    free(seen);
}

static void test_rows_in_order(void)
{
    rt_dataset ds = {.rows = 20, .batch = 8, .batches = 2};
    CU_ASSERT_EQUAL(rt_data_row(&ds, 0, 0), 0);
    CU_ASSERT_EQUAL(rt_data_row(&ds, 0, 7), 7);
    CU_ASSERT_EQUAL(rt_data_row(&ds, 1, 0), 8);
    CU_ASSERT_EQUAL(rt_data_row(&ds, 1, 7), 15);
    /* Rows 16..19 are the remainder: step 2 starts epoch 1 at row 0. */
    CU_ASSERT_EQUAL(rt_data_row(&ds, 2, 0), 0);
    CU_ASSERT_EQUAL(rt_data_row(&ds, 5, 3), 11);
}

static void test_rows_shuffled(void)
{
    rt_dataset ds = {.rows = 20, .batch = 8, .batches = 2, .shuffle = 1, .seed = 42};
    int64_t first[16];
    for (int64_t epoch = 0; epoch < 4; epoch++) {
        char seen[20] = {0};
        int64_t distinct = 0, moved = 0;
        for (int64_t j = 0; j < 2; j++)
            for (int64_t i = 0; i < 8; i++) {
                int64_t r = rt_data_row(&ds, epoch * 2 + j, i);
                CU_ASSERT_EQUAL(r, rt_shuffle_index(42, epoch, 20, j * 8 + i));
                distinct += r >= 0 && r < 20 && !seen[r]++;
                if (epoch == 0)
                    first[j * 8 + i] = r;
                else
                    moved += r != first[j * 8 + i];
            }
        CU_ASSERT_EQUAL(distinct, 16);
        if (epoch > 0)
            CU_ASSERT(moved > 8);
    }
}

/* A 2x2 mesh whose only purpose is the devices' coordinates. */
static const rt_program mesh = {.abi_version = RT_ABI_VERSION, .naxes = 2,
                                .axis_names = {'X', 'Y'}, .axis_sizes = {2, 2},
                                .run = test_noop_run};

/* An input [4, 6] split over X (batch) and Y (columns). */
static rt_tensor_desc input(int32_t dtype)
{
    rt_tensor_desc t = {.name = "x", .dtype = dtype, .rank = 2, .global_shape = {4, 6},
                        .local_shape = {2, 3}, .dim_naxes = {1, 1}, .dim_axes = {{0}, {1}}};
    return t;
}

/* Saves a [rows, cols] f32 .npy of row*10 + col + 0.5 (exact in bf16) as dir/name. */
static void save_rows(const char *dir, const char *name, int64_t rows, int64_t cols, char *path,
                      size_t len)
{
    rt_tensor_desc t = {.name = "rows", .dtype = RT_F32, .rank = 2, .global_shape = {rows, cols}};
    float *v = malloc((size_t)(rows * cols) * sizeof *v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            v[r * cols + c] = (float)(r * 10 + c) + 0.5f;
    snprintf(path, len, "%s/%s", dir, name);
    char err[512];
    CU_ASSERT_EQUAL(rt_npy_write(path, &t, v, err, sizeof err), 0);
    free(v);
}

static void test_fill_block(void)
{
    char dir[64], path[128], err[1024];
    test_make_dir(dir, sizeof dir);
    save_rows(dir, "x.npy", 10, 6, path, sizeof path);
    for (int32_t dtype = RT_F32; dtype <= RT_BF16; dtype += RT_BF16 - RT_F32) {
        rt_tensor_desc t = input(dtype);
        rt_dataset ds = {0};
        CU_ASSERT_EQUAL_FATAL(rt_data_add(&ds, &t, path, err, sizeof err), 0);
        CU_ASSERT_EQUAL(ds.rows, 10);
        CU_ASSERT_EQUAL(ds.batch, 4);
        CU_ASSERT_EQUAL(ds.batches, 2);
        /* Device 3 (X=1, Y=1), step 1: batch rows 4..7, its rows 6..7, columns 3..5. */
        rt_device dev;
        rt_device_init(&dev, &mesh, &rt_solo_ops, NULL, 3);
        uint32_t buf[6];
        rt_data_fill(&dev, &ds, 0, &t, 1, buf);
        for (int64_t r = 0; r < 2; r++)
            for (int64_t c = 0; c < 3; c++)
                CU_ASSERT_EQUAL(test_load(dtype, buf, r * 3 + c),
                                (double)((6 + r) * 10 + 3 + c) + 0.5);
        /* Step 2 is epoch 1: back to rows 0..3 (rows 8..9 are the remainder). */
        rt_device_init(&dev, &mesh, &rt_solo_ops, NULL, 0);
        rt_data_fill(&dev, &ds, 0, &t, 2, buf);
        CU_ASSERT_EQUAL(test_load(dtype, buf, 0), 0.5);
        CU_ASSERT_EQUAL(test_load(dtype, buf, 5), 12.5);
        rt_data_close(&ds);
    }
    test_remove_dir(dir);
}

/* rt_data_add on a bad file: -1 and `needle` in the message. */
static void expect_bad(rt_dataset *ds, const rt_tensor_desc *t, const char *path,
                       const char *needle)
{
    char err[1024] = "";
    CU_ASSERT_EQUAL(rt_data_add(ds, t, path, err, sizeof err), -1);
    if (!strstr(err, needle)) {
        CU_FAIL("message lacks the expected text");
        fprintf(stderr, "\nmessage: %s\nexpected: %s\n", err, needle);
    }
}

static void test_bad_files(void)
{
    char dir[64], rows10[128], cols5[128], rows3[128], rows12[128], missing[128];
    test_make_dir(dir, sizeof dir);
    save_rows(dir, "rows10.npy", 10, 6, rows10, sizeof rows10);
    save_rows(dir, "cols5.npy", 10, 5, cols5, sizeof cols5);
    save_rows(dir, "rows3.npy", 3, 6, rows3, sizeof rows3);
    save_rows(dir, "rows12.npy", 12, 6, rows12, sizeof rows12);
    snprintf(missing, sizeof missing, "%s/none.npy", dir);
    rt_tensor_desc t = input(RT_F32), scalar = {.name = "s", .dtype = RT_F32};
    rt_dataset ds = {0};
    expect_bad(&ds, &scalar, rows10, "--data s: 's' is a scalar");
    expect_bad(&ds, &t, cols5, "has shape (10, 5), expected (N, 6): N >= 4 rows");
    expect_bad(&ds, &t, rows3, "has 3 rows, fewer than the batch of 4 rows");
    expect_bad(&ds, &t, missing, "--data x: cannot open");
    rt_tensor_desc f64 = input(RT_F64);
    expect_bad(&ds, &f64, rows10, "has dtype '<f4', expected '<f8'");
    rt_data_close(&ds);
    char err[1024];
    CU_ASSERT_EQUAL(rt_data_add(&ds, &t, rows10, err, sizeof err), 0);
    rt_tensor_desc y = {.name = "y", .dtype = RT_F32, .rank = 2, .global_shape = {4, 6},
                        .local_shape = {4, 6}};
    expect_bad(&ds, &y, rows12, "has 12 rows but");
    y.global_shape[0] = y.local_shape[0] = 2;
    expect_bad(&ds, &y, rows10, "'y' takes batches of 2 rows but 'x' of 4");
    rt_data_close(&ds);
    test_remove_dir(dir);
}

/* What the child of test_shrunk runs: a fill after the file lost its rows. */
static void fill_shrunk(void *arg)
{
    const rt_dataset *ds = arg;
    rt_tensor_desc t = input(RT_F32);
    rt_device dev;
    rt_device_init(&dev, &mesh, &rt_solo_ops, NULL, 0);
    float buf[6];
    rt_data_fill(&dev, ds, 0, &t, 0, buf);
}

static void test_shrunk(void)
{
    char dir[64], path[128], err[1024];
    test_make_dir(dir, sizeof dir);
    save_rows(dir, "x.npy", 10, 6, path, sizeof path);
    rt_tensor_desc t = input(RT_F32);
    rt_dataset ds = {0};
    CU_ASSERT_EQUAL_FATAL(rt_data_add(&ds, &t, path, err, sizeof err), 0);
    CU_ASSERT_EQUAL(truncate(path, 100), 0);
    CU_ASSERT_EQUAL(test_in_child(fill_shrunk, &ds, err, sizeof err), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "has shrunk to 100 bytes since it was checked"));
    /* The hash a checkpoint records reads the whole file: refused, too. */
    err[0] = 0;
    CU_ASSERT_EQUAL(rt_data_hash(&ds, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "has shrunk to 100 bytes since it was checked"));
    rt_data_close(&ds);
    test_remove_dir(dir);
}

/* rt_data_check_record of `ds` after `steps` steps against `rec`: -1 and
 * `needle` in the message (or 0 when needle is NULL). */
static void expect_record(const rt_dataset *ds, int64_t steps, const char *rec,
                          const char *needle)
{
    char err[1024] = "";
    CU_ASSERT_EQUAL(rt_data_check_record(ds, steps, rec, "ck/data.txt", err, sizeof err),
                    needle ? -1 : 0);
    if (needle && !strstr(err, needle)) {
        CU_FAIL("message lacks the expected text");
        fprintf(stderr, "\nmessage: %s\nexpected: %s\n", err, needle);
    }
}

static void test_record(void)
{
    char dir[64], x[128], y[128], x2[128], err[1024];
    test_make_dir(dir, sizeof dir);
    save_rows(dir, "x.npy", 10, 6, x, sizeof x);
    save_rows(dir, "y.npy", 10, 6, y, sizeof y);
    save_rows(dir, "x2.npy", 10, 6, x2, sizeof x2);
    /* x2: the same shape as x, one value changed. */
    rt_tensor_desc t = input(RT_F32), u = t;
    u.name = "y";
    rt_dataset ds = {.shuffle = 1, .seed = 5};
    CU_ASSERT_EQUAL_FATAL(rt_data_add(&ds, &u, y, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(rt_data_add(&ds, &t, x, err, sizeof err), 0);
    CU_ASSERT_EQUAL(rt_data_hash(&ds, err, sizeof err), 0);
    char *rec = rt_data_record(&ds, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rec);
    /* Step 4 is batch 1 of epoch 1 (2 batches an epoch); files by name. */
    CU_ASSERT_PTR_NOT_NULL(strstr(rec, "\nseed 5\nrows 10\nbatch 4\nnext step 4 epoch 1 batch 1\n"
                                       "data x dtype <f4 shape (10, 6) hash "));
    CU_ASSERT_PTR_NOT_NULL(strstr(rec, "\ndata y dtype <f4 shape (10, 6) hash "));
    CU_ASSERT(strstr(rec, "data x ") < strstr(rec, "data y "));
    /* x and y hold the same values, so the same hash. */
    CU_ASSERT_EQUAL(ds.files[0].hash, ds.files[1].hash);
    expect_record(&ds, 3, rec, NULL);
    expect_record(&ds, 4, rec, "ck/data.txt records the order of another step than steps.txt");
    ds.seed = 6;
    expect_record(&ds, 3, rec, "the checkpoint was trained with --seed 5 (ck/data.txt), and "
                               "this run has --seed 6; a resumed run must see the batches the "
                               "uninterrupted run would have: give --seed 5");
    ds.shuffle = 0;
    expect_record(&ds, 3, rec, "was trained with --seed 5 (ck/data.txt), and this run has no "
                               "--seed (rows in order)");
    char *unshuffled = rt_data_record(&ds, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(unshuffled);
    ds.shuffle = 1;
    expect_record(&ds, 3, unshuffled, "the checkpoint was trained with no --seed (rows in order) "
                                      "(ck/data.txt), and this run has --seed 6; a resumed run "
                                      "must see the batches the uninterrupted run would have: "
                                      "leave out --seed");
    free(unshuffled);
    ds.seed = 5;
    /* A file moved elsewhere is the same data; one with other values is not. */
    float other = 99.5f;
    FILE *f = fopen(x2, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fseek(f, -4, SEEK_END), 0);
    CU_ASSERT_EQUAL(fwrite(&other, sizeof other, 1, f), 1);
    fclose(f);
    rt_dataset ds2 = {.shuffle = 1, .seed = 5};
    CU_ASSERT_EQUAL_FATAL(rt_data_add(&ds2, &t, x2, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(rt_data_add(&ds2, &u, x, err, sizeof err), 0);
    CU_ASSERT_EQUAL(rt_data_hash(&ds2, err, sizeof err), 0);
    expect_record(&ds2, 3, rec, "--data x is not the data set the checkpoint was trained on: "
                                "this run's file has dtype <f4 shape (10, 6) hash ");
    rt_data_close(&ds2);
    /* y from x's file: same contents, another path. */
    rt_dataset ds3 = {.shuffle = 1, .seed = 5};
    CU_ASSERT_EQUAL_FATAL(rt_data_add(&ds3, &t, y, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(rt_data_add(&ds3, &u, x, err, sizeof err), 0);
    CU_ASSERT_EQUAL(rt_data_hash(&ds3, err, sizeof err), 0);
    expect_record(&ds3, 3, rec, NULL);
    rt_data_close(&ds3);
    rt_dataset only_x = {.shuffle = 1, .seed = 5};
    CU_ASSERT_EQUAL_FATAL(rt_data_add(&only_x, &t, x, err, sizeof err), 0);
    CU_ASSERT_EQUAL(rt_data_hash(&only_x, err, sizeof err), 0);
    expect_record(&only_x, 3, rec, "the checkpoint's run had --data y (ck/data.txt: y dtype <f4 "
                                   "shape (10, 6) hash ");
    char *rec_x = rt_data_record(&only_x, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rec_x);
    expect_record(&ds, 3, rec_x, "this run gives --data y, and the checkpoint's run had no "
                                 "--data y (ck/data.txt)");
    /* Another batch size over the same files. */
    rt_dataset b8 = only_x;
    b8.batch = 8;
    b8.batches = 1;
    expect_record(&b8, 3, rec_x, "ck/data.txt has batch 4, and this run batch 8");
    expect_record(&ds, 3, "# nothing\n", "ck/data.txt is not a record of a data order");
    free(rec_x);
    free(rec);
    rt_data_close(&only_x);
    rt_data_close(&ds);
    test_remove_dir(dir);
}

/* The first element of the .npy file `path` as f64 (its dtype `f64` or f32). */
static double first_value(const char *path, int f64)
{
    char err[512];
    rt_npy_header h;
    CU_ASSERT_EQUAL_FATAL(rt_npy_read_header(path, &h, err, sizeof err), 0);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    double d = 0;
    float x = 0;
    CU_ASSERT_EQUAL(fseek(f, (long)h.data_offset, SEEK_SET), 0);
    CU_ASSERT_EQUAL(f64 ? fread(&d, sizeof d, 1, f) : fread(&x, sizeof x, 1, f), 1);
    fclose(f);
    return f64 ? d : x;
}

/* Checkpoint `ck` reads as step `steps`: W (f32) from file `wfile` with
 * first value `w0`, W.m (f64) from `mfile` holding `m`, the record `rec`. */
static void expect_step(const char *ck, int64_t steps, const char *wfile, const char *mfile,
                        double w0, double m, const char *rec)
{
    char err[1024];
    int64_t got = -1;
    CU_ASSERT_EQUAL(rt_checkpoint_read_steps(ck, &got, err, sizeof err), 0);
    CU_ASSERT_EQUAL(got, steps);
    const char *names[2] = {"W", "W.m"}, *files[2] = {wfile, mfile};
    const double want[2] = {w0, m};
    for (int i = 0; i < 2; i++) {
        char *path = rt_checkpoint_file(ck, names[i]);
        const char *slash = path ? strrchr(path, '/') : NULL;
        CU_ASSERT_PTR_NOT_NULL_FATAL(slash);
        CU_ASSERT_STRING_EQUAL(slash + 1, files[i]);
        CU_ASSERT_EQUAL(first_value(path, i), want[i]);
        free(path);
    }
    char *text = NULL, *where = NULL;
    CU_ASSERT_EQUAL(rt_checkpoint_read_record(ck, &text, &where, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(text ? text : "", rec);
    free(text);
    free(where);
}

static void test_checkpoint(void)
{
    static const rt_tensor_desc ins[] = {
        {.name = "x", .dtype = RT_F32, .rank = 1, .global_shape = {2}},
        {.name = "W", .dtype = RT_F32, .rank = 1, .global_shape = {2}, .role = RT_ROLE_PARAM},
        {.name = "W.m", .dtype = RT_F64, .rank = 0, .role = RT_ROLE_STATE},
    };
    const rt_program p = {.ninputs = 3, .inputs = ins};
    char dir[64], ck[128], path[192], err[1024];
    test_make_dir(dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/a/b", dir);
    CU_ASSERT_EQUAL(rt_checkpoint_prepare(ck, &p, err, sizeof err), 0); /* mkdir -p */
    float w[2] = {1.5f, -2};
    double m = 0.25;
    void *values[3] = {NULL, w, &m};
    CU_ASSERT_EQUAL(rt_checkpoint_write(ck, &p, values, "seed none\n", 12, err, sizeof err), 0);
    int64_t steps = -1;
    CU_ASSERT_EQUAL(rt_checkpoint_read_steps(ck, &steps, err, sizeof err), 0);
    CU_ASSERT_EQUAL(steps, 12);
    char *text = NULL, *where = NULL;
    CU_ASSERT_EQUAL(rt_checkpoint_read_record(ck, &text, &where, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(text ? text : "", "seed none\n");
    CU_ASSERT_PTR_NOT_NULL(where && strstr(where, "/a/b/data.txt"));
    free(text);
    free(where);
    rt_npy_header h;
    snprintf(path, sizeof path, "%s/W.m.npy", ck);
    CU_ASSERT_EQUAL(rt_npy_read_header(path, &h, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(h.descr, "<f8");
    snprintf(path, sizeof path, "%s/x.npy", ck);
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0); /* inputs are not state */
    /* A save that fails while staging (W.npy.next cannot be written)
     * leaves step 12 whole. */
    char next[192], mpath[192];
    snprintf(next, sizeof next, "%s/W.npy.next", ck);
    CU_ASSERT_EQUAL(mkdir(next, 0777), 0);
    w[0] = 7;
    m = 0.5;
    CU_ASSERT_EQUAL(rt_checkpoint_write(ck, &p, values, "seed 1\n", 13, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is a directory"));
    expect_step(ck, 12, "W.npy", "W.m.npy", 1.5, 0.25, "seed none\n");
    CU_ASSERT_EQUAL(rmdir(next), 0);
    /* One that stops while applying (W.m.npy is a directory, so the
     * rename of W.m.npy.next fails after W's): step 13 from the renamed
     * W.npy and the staged W.m.npy.next. */
    snprintf(mpath, sizeof mpath, "%s/W.m.npy", ck);
    CU_ASSERT_EQUAL(unlink(mpath), 0);
    CU_ASSERT_EQUAL(mkdir(mpath, 0777), 0);
    CU_ASSERT_EQUAL(rt_checkpoint_write(ck, &p, values, "seed 1\n", 13, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot rename"));
    expect_step(ck, 13, "W.npy", "W.m.npy.next", 7, 0.5, "seed 1\n");
    CU_ASSERT_EQUAL(rmdir(mpath), 0);
    /* The next save applies step 13 before it stages, so its own staging
     * failing (a state "a/b" whose directory is missing) leaves step 13
     * whole, not step 13's marker beside its staged files. */
    static const rt_tensor_desc ins2[] = {
        {.name = "x", .dtype = RT_F32, .rank = 1, .global_shape = {2}},
        {.name = "W", .dtype = RT_F32, .rank = 1, .global_shape = {2}, .role = RT_ROLE_PARAM},
        {.name = "W.m", .dtype = RT_F64, .rank = 0, .role = RT_ROLE_STATE},
        {.name = "a/b", .dtype = RT_F64, .rank = 0, .role = RT_ROLE_STATE},
    };
    const rt_program p2 = {.ninputs = 4, .inputs = ins2};
    w[0] = 9;
    m = 0.75;
    void *values2[4] = {NULL, w, &m, &m};
    CU_ASSERT_EQUAL(rt_checkpoint_write(ck, &p2, values2, "seed 2\n", 14, err, sizeof err), -1);
    expect_step(ck, 13, "W.npy", "W.m.npy", 7, 0.5, "seed 1\n");
    /* Then a whole save, leaving nothing staged. */
    CU_ASSERT_EQUAL(rt_checkpoint_write(ck, &p, values, "seed 2\n", 14, err, sizeof err), 0);
    expect_step(ck, 14, "W.npy", "W.m.npy", 9, 0.75, "seed 2\n");
    static const char *const staged[] = {"W.npy.next", "W.m.npy.next", "data.txt.next",
                                         "steps.txt.next"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", ck, staged[i]);
        CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    }
    /* A checkpoint without its record of the data order. */
    snprintf(path, sizeof path, "%s/data.txt", ck);
    CU_ASSERT_EQUAL(unlink(path), 0);
    CU_ASSERT_EQUAL(rt_checkpoint_read_record(ck, &text, &where, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "data.txt: No such file or directory; a checkpoint "
                                       "records its data order"));
    free(text);
    free(where);
    /* A bad step file, and a path that is a file. */
    snprintf(path, sizeof path, "%s/steps.txt", ck);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("12 steps\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(rt_checkpoint_read_steps(ck, &steps, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "does not hold a step count"));
    CU_ASSERT_EQUAL(rt_checkpoint_prepare(path, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "exists and is not a directory"));
    CU_ASSERT_EQUAL(rt_checkpoint_read_steps(path, &steps, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is not a directory"));
    test_remove_dir(ck);
    snprintf(path, sizeof path, "%s/a", dir);
    rmdir(path);
    test_remove_dir(dir);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"shuffle is a permutation", test_shuffle_is_permutation},
        {"batch rows in order", test_rows_in_order},
        {"batch rows shuffled", test_rows_shuffled},
        {"a device's block of a batch", test_fill_block},
        {"bad --data files", test_bad_files},
        {"a file shrinking during the run", test_shrunk},
        {"the record of the data order", test_record},
        {"checkpoint files", test_checkpoint},
    };
    einc_add_suite("training data and checkpoints", tests, (int)(sizeof tests / sizeof tests[0]));
}
