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
 * of escapes only, and for every byte 0..255.  JSON text is UTF-8 (RFC
 * 8259, section 8.1): bytes of the model's text that are no UTF-8
 * character become U+FFFD, each, and characters pass whole.  A streamed row's text is
 * sent only up to its last whole UTF-8 character (rt_utf8_partial): a
 * byte-level model makes a character a byte a step, and an event holding
 * half of one is not UTF-8, which JSON must be.
 */
#include <CUnit/CUnit.h>
#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
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

/* Every byte 0..255 (NUL included) in one event, within its room. */
static void test_event_every_byte(void)
{
    rt_request r = {.stream = 1, .number = 7};
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    check_event(&r, all, sizeof all, NULL);
}

/* Whether s[0..n) is UTF-8 (RFC 3629, section 4), written out apart from
 * the code under test. */
static int is_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        unsigned lo = 0x80, hi = 0xbf;
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + k > n)
            return 0;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
        else if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
        for (size_t j = 1; j < k; j++, lo = 0x80, hi = 0xbf)
            if (s[i + j] < lo || s[i + j] > hi)
                return 0;
        i += k;
    }
    return 1;
}

/* The chunk of text[0..len) is UTF-8 and its text decodes to `want`. */
static void check_utf8(const char *text, size_t len, const char *want)
{
    rt_request r = {.stream = 1, .number = 3};
    char *got = rt_request_json(&r, text, len, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT(is_utf8((const unsigned char *)got, strlen(got)));
    cJSON *o = cJSON_Parse(got);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(c, "text")), want);
    cJSON_Delete(o);
    free(got);
    r.stream = 0; /* a whole answer writes its text alike */
    got = rt_request_json(&r, text, len, "stop");
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT(is_utf8((const unsigned char *)got, strlen(got)));
    free(got);
}

#define FFFD "\xef\xbf\xbd"

static void test_not_utf8(void)
{
    check_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14,
               "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"); /* whole characters */
    check_utf8("a\x80" "b", 3, "a" FFFD "b");                 /* a stray continuation */
    check_utf8("\xff\xfe", 2, FFFD FFFD);                     /* never UTF-8 */
    check_utf8("\xc3", 1, FFFD);                               /* cut short: the end */
    check_utf8("\xc3x", 2, FFFD "x");                          /* cut short: a byte */
    check_utf8("\xc0\xaf", 2, FFFD FFFD);                     /* overlong '/' */
    check_utf8("\xe0\x80\xaf", 3, FFFD FFFD FFFD);            /* overlong, three bytes */
    check_utf8("\xed\xa0\x80", 3, FFFD FFFD FFFD);            /* a surrogate */
    check_utf8("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);   /* over U+10FFFF */
    check_utf8("\xf0\x9f\x98", 3, FFFD FFFD FFFD);            /* an emoji's first three */
    char all[256], want[1024], *w = want;
    for (int i = 0; i < 256; i++) {
        all[i] = (char)i;
        if (i > 0 && i < 128) /* NUL ends want: checked apart (test_nul_byte) */
            *w++ = (char)i;
        else if (i >= 128)
            w += sprintf(w, FFFD);
    }
    *w = 0;
    check_utf8(all + 1, 255, want);
}

/* rt_utf8_partial: the bytes of an unfinished character ending the text. */
static void test_utf8_partial(void)
{
    CU_ASSERT_EQUAL(rt_utf8_partial("", 0), 0);
    CU_ASSERT_EQUAL(rt_utf8_partial("abc", 3), 0);
    CU_ASSERT_EQUAL(rt_utf8_partial("a\xc3", 2), 1);         /* e-acute's first byte */
    CU_ASSERT_EQUAL(rt_utf8_partial("a\xc3\xa9", 3), 0);     /* whole */
    CU_ASSERT_EQUAL(rt_utf8_partial("\xe2\x82", 2), 2);      /* the euro sign's first two */
    CU_ASSERT_EQUAL(rt_utf8_partial("\xe2\x82\xac", 3), 0);
    CU_ASSERT_EQUAL(rt_utf8_partial("x\xf0\x9f\x98", 4), 3); /* an emoji's first three */
    CU_ASSERT_EQUAL(rt_utf8_partial("x\xf0\x9f\x98\x80", 5), 0);
    CU_ASSERT_EQUAL(rt_utf8_partial("\xf0", 1), 1);
    /* Not UTF-8: nothing to wait for, sent as it is */
    CU_ASSERT_EQUAL(rt_utf8_partial("a\x80", 2), 0);          /* a stray continuation */
    CU_ASSERT_EQUAL(rt_utf8_partial("\xc3\xa9\x80", 3), 0);  /* one too many */
    CU_ASSERT_EQUAL(rt_utf8_partial("\x80\x80\x80\x80", 4), 0);
    CU_ASSERT_EQUAL(rt_utf8_partial("a\xff", 2), 0);          /* never a first byte */
    CU_ASSERT_EQUAL(rt_utf8_partial("a\xf8\x80", 3), 0);
    /* Only the text's bytes are read: a first byte at 0 of a short text */
    CU_ASSERT_EQUAL(rt_utf8_partial("\xe2\x82\xac", 2), 2);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"a streamed chunk = cJSON's print of the same object", test_chunks},
        {"a NUL byte in a chunk's text is escaped", test_nul_byte},
        {"an event is data: + the chunk + a blank line, within its room", test_events},
        {"every byte 0..255 in an event, within its room", test_event_every_byte},
        {"bytes that are no UTF-8 character become U+FFFD", test_not_utf8},
        {"an unfinished UTF-8 character ending the text is found", test_utf8_partial},
    };
    einc_add_suite("rt_request_json, streamed chunks", tests, (int)(sizeof tests / sizeof tests[0]));
}
