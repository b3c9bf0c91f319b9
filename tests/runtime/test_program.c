/*
 * test_program.c - rt_check_program (runtime/program.c) on the fields of a
 * training program: `trains` is 0 or 1, `loss_output` names a floating
 * scalar output (or is -1) and is ignored when the program does not train,
 * inputs have a known role and outputs the role of an input.
 */
#include <CUnit/CUnit.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"
#include "rt_test_util.h"

static const rt_tensor_desc inputs[] = {
    {.name = "x", .dtype = RT_F32, .rank = 1, .global_shape = {4}, .local_shape = {4}},
    {.name = "W", .dtype = RT_F32, .rank = 1, .global_shape = {4}, .local_shape = {4},
     .role = RT_ROLE_PARAM},
    {.name = "W.mom", .dtype = RT_F32, .rank = 1, .global_shape = {4}, .local_shape = {4},
     .role = RT_ROLE_STATE},
};
static const rt_tensor_desc outputs[] = {
    {.name = "pred", .dtype = RT_F32, .rank = 1, .global_shape = {4}, .local_shape = {4}},
    {.name = "loss", .dtype = RT_F32, .rank = 0},
};

/* A valid training program over one device; tests change one field. */
static rt_program training(void)
{
    rt_program p = {.abi_version = RT_ABI_VERSION, .ninputs = 3, .inputs = inputs,
                    .noutputs = 2, .outputs = outputs, .run = test_noop_run,
                    .loss_output = 1, .trains = 1};
    return p;
}

/* rt_check_program's verdict on `p`: 0, or -1 with `needle` in the message. */
static void expect(const rt_program *p, int rc, const char *needle)
{
    char err[512] = "";
    CU_ASSERT_EQUAL(rt_check_program(p, err, sizeof err), rc);
    if (needle && !strstr(err, needle)) {
        CU_FAIL("message lacks the expected text");
        fprintf(stderr, "\nmessage: %s\nexpected: %s\n", err, needle);
    }
}

static void test_valid(void)
{
    rt_program p = training();
    expect(&p, 0, NULL);
    p.loss_output = -1; /* a training program may name no loss */
    expect(&p, 0, NULL);
    /* Not training: loss_output is ignored, whatever it holds. */
    p.trains = 0;
    p.loss_output = 0;
    expect(&p, 0, NULL);
    p.loss_output = 99;
    expect(&p, 0, NULL);
}

static void test_trains_flag(void)
{
    rt_program p = training();
    p.trains = 2;
    expect(&p, -1, "program has trains = 2 (0 or 1)");
    p.trains = -1;
    expect(&p, -1, "trains = -1");
}

static void test_loss_output(void)
{
    rt_program p = training();
    p.loss_output = 2;
    expect(&p, -1, "loss_output 2 is not an output of the program (it has 2; -1 for none)");
    p.loss_output = -2;
    expect(&p, -1, "loss_output -2 is not an output");
    p.loss_output = 0; /* pred has rank 1 */
    expect(&p, -1, "the loss output 'pred' is f32 of rank 1; a loss is a floating-point "
                   "scalar (rank 0)");
    rt_tensor_desc outs[2];
    memcpy(outs, outputs, sizeof outs);
    outs[1].dtype = RT_I32;
    p.outputs = outs;
    p.loss_output = 1;
    expect(&p, -1, "the loss output 'loss' is i32 of rank 0");
}

static void test_roles(void)
{
    rt_program p = training();
    rt_tensor_desc ins[3], outs[2];
    memcpy(ins, inputs, sizeof ins);
    memcpy(outs, outputs, sizeof outs);
    p.inputs = ins;
    p.outputs = outs;
    ins[2].role = 3;
    expect(&p, -1, "input 'W.mom': role 3, expected 0 (input), 1 (param) or 2 (state)");
    ins[2].role = -1;
    expect(&p, -1, "input 'W.mom': role -1");
    ins[2].role = RT_ROLE_STATE;
    outs[0].role = RT_ROLE_PARAM;
    expect(&p, -1, "output 'pred': role 1, expected 0 (an output has the role of an input)");
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"valid training fields", test_valid},
        {"trains is 0 or 1", test_trains_flag},
        {"loss_output is a scalar output", test_loss_output},
        {"roles", test_roles},
    };
    einc_add_suite("rt_check_program", tests, (int)(sizeof tests / sizeof tests[0]));
}
