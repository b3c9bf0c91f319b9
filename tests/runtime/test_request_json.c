/*
 * test_request_json.c - a streamed completion chunk (rt_request_json with
 * r->stream, runtime/request.c), which request.c writes directly rather
 * than through cJSON: it parses as OpenAI's chunk (id, object, created,
 * model, choices[0] with text, index, logprobs and finish_reason), its
 * text decodes to the bytes given (quotes, backslashes, control bytes,
 * DEL, UTF-8), and it is byte for byte what cJSON_PrintUnformatted prints
 * for the same object, so clients see the answers they saw before.  The
 * server-sent event the HTTP thread writes without allocating
 * (rt_request_event) is `data: ` + that chunk + a blank line, within the
 * room rt_request_event_room promises, also for the longest id and text
 * of escapes only.
 */
#include <CUnit/CUnit.h>
#include <cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cunit_main.h"
#include "rt_serve.h"

/* One chunk of `text` (NUL-free) with `finish`, checked as above. */
static void check_chunk(const char *text, const char *finish)
{
    rt_request r = {.stream = 1, .number = 42};
    long long t0 = (long long)time(NULL);
    char *got = rt_request_json(&r, text, strlen(text), finish);
    long long t1 = (long long)time(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    cJSON *o = cJSON_Parse(got);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")), "cmpl-42");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(o, "object")),
                           "text_completion");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(o, "model")), "einc");
    double created = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "created"));
    CU_ASSERT(created >= (double)t0 && created <= (double)t1);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(c, "text")), text);
    CU_ASSERT_EQUAL(cJSON_GetNumberValue(cJSON_GetObjectItem(c, "index")), 0);
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(c, "logprobs")));
    cJSON *f = cJSON_GetObjectItem(c, "finish_reason");
    if (finish) {
        CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(f), finish);
    } else {
        CU_ASSERT(cJSON_IsNull(f));
    }
    /* cJSON's own print of the object, in the same key order, with the
     * text as the raw literal request.c made (cJSON escapes control bytes
     * its own way, so the literal is copied from the chunk). */
    const char *lit = strstr(got, "\"text\":") + 7;
    const char *end = strstr(lit, ",\"index\":0,");
    char *raw = strndup(lit, (size_t)(end - lit));
    cJSON *want = cJSON_CreateObject();
    cJSON_AddStringToObject(want, "id", "cmpl-42");
    cJSON_AddStringToObject(want, "object", "text_completion");
    cJSON_AddNumberToObject(want, "created", created);
    cJSON_AddStringToObject(want, "model", "einc");
    cJSON *wc = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(want, "choices"), wc);
    cJSON_AddRawToObject(wc, "text", raw);
    cJSON_AddNumberToObject(wc, "index", 0);
    cJSON_AddNullToObject(wc, "logprobs");
    if (finish)
        cJSON_AddStringToObject(wc, "finish_reason", finish);
    else
        cJSON_AddNullToObject(wc, "finish_reason");
    char *printed = cJSON_PrintUnformatted(want);
    CU_ASSERT_STRING_EQUAL(got, printed);
    free(printed);
    cJSON_Delete(want);
    free(raw);
    cJSON_Delete(o);
    free(got);
}

static void test_chunks(void)
{
    static const char *const texts[] = {"", "a", "hello world", "say \"hi\"", "back\\slash",
                                        "line\nbreak\ttab\r", "\x01\x1f\x7f", "caf\xc3\xa9",
                                        "{\"json\": [1, 2]}"};
    static const char *const finishes[] = {NULL, "stop", "length"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (size_t j = 0; j < 3; j++)
            check_chunk(texts[i], finishes[j]);
}

/* Token 0 is a byte too: the text's NUL is escaped, not an end. */
static void test_nul_byte(void)
{
    rt_request r = {.stream = 1, .number = 1};
    char *got = rt_request_json(&r, "a\0b", 3, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_PTR_NOT_NULL(strstr(got, "\"text\":\"a\\u0000b\""));
    free(got);
}

/* rt_request_event: the chunk framed as an event, in its promised room
 * (filled with a canary beyond what it may write). */
static void check_event(const rt_request *r, const char *text, size_t len, const char *finish)
{
    size_t room = rt_request_event_room(len);
    char *out = malloc(room + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    memset(out, 0x5a, room + 16);
    char *json = rt_request_json(r, text, len, finish);
    size_t n = rt_request_event(r, text, len, finish, out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    CU_ASSERT(n <= room);
    CU_ASSERT_EQUAL(n, strlen(json) + 8);
    CU_ASSERT_NSTRING_EQUAL(out, "data: ", 6);
    CU_ASSERT_NSTRING_EQUAL(out + 6, json, strlen(json)); /* created may tick between: rare */
    CU_ASSERT_NSTRING_EQUAL(out + n - 2, "\n\n", 2);
    for (size_t i = n; i < room + 16; i++)
        CU_ASSERT_EQUAL_FATAL((unsigned char)out[i], 0x5a);
    free(json);
    free(out);
}

static void test_events(void)
{
    rt_request r = {.stream = 1, .number = 42};
    check_event(&r, "hello", 5, NULL);
    check_event(&r, "say \"hi\"\n", 9, "stop");
    check_event(&r, "", 0, "length");
    rt_request big = {.stream = 1, .number = UINT64_MAX};
    char ctl[64];
    memset(ctl, 0x01, sizeof ctl); /* every byte escaped to 6 */
    check_event(&big, ctl, sizeof ctl, "length");
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"a streamed chunk = cJSON's print of the same object", test_chunks},
        {"a NUL byte in a chunk's text is escaped", test_nul_byte},
        {"an event is data: + the chunk + a blank line, within its room", test_events},
    };
    einc_add_suite("rt_request_json, streamed chunks", tests, (int)(sizeof tests / sizeof tests[0]));
}
