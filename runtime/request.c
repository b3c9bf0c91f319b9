/*
 * request.c - a POST /v1/completions request and the JSON of the answers,
 * in OpenAI's shapes (the "Completions" API, which vLLM, llama.cpp's
 * server and JetStream also speak).
 *
 * Fields taken: prompt (a string), max_tokens, temperature, top_p, stop (a
 * string or up to 4), stream, and two extensions, top_k and seed; `model`
 * is accepted and ignored (the executable serves one model).  Any other
 * field is refused with HTTP 400 naming it, rather than ignored: a client
 * asking for `n` or `logprobs` would otherwise get an answer that silently
 * lacks them.  A number field must be a JSON number (an integer where a
 * count is meant); a wrong type is refused the same way.
 */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_serve.h"

static const char *const known[] = {"model", "prompt", "max_tokens", "temperature", "top_p",
                                    "top_k", "stop", "stream", "seed"};

/* *v = the integer field j if it is a whole number in [lo, hi]; -1 if not. */
static int get_int(const cJSON *j, double lo, double hi, int64_t *v)
{
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < lo ||
        j->valuedouble > hi)
        return -1;
    *v = (int64_t)j->valuedouble;
    return 0;
}

/* Reads `stop`: a string or an array of 1..RT_MAX_STOP non-empty strings. */
static int get_stop(const cJSON *j, rt_request *r)
{
    if (cJSON_IsNull(j))
        return 0;
    const cJSON *one = cJSON_IsString(j) ? j : NULL;
    int n = one ? 1 : cJSON_IsArray(j) ? cJSON_GetArraySize(j) : -1;
    if (n < 0 || n > RT_MAX_STOP)
        return -1;
    for (int i = 0; i < n; i++) {
        const cJSON *s = one ? one : cJSON_GetArrayItem(j, i);
        if (!cJSON_IsString(s) || !s->valuestring[0] || !(r->stop[i] = strdup(s->valuestring)))
            return -1;
        r->nstop = i + 1;
    }
    return 0;
}

/* Checks the fields of the object j and fills r (but for the prompt).
 * -1 with *param the field at fault and a message. */
static int read_fields(const cJSON *j, rt_request *r, const rt_tokenizer *tok, const char **param,
                       char *err, size_t errlen)
{
    for (const cJSON *f = j->child; f; f = f->next) {
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(f->string, known[k]))
            k++;
        *param = f->string;
        if (k == sizeof known / sizeof known[0]) {
            /* At most 80 bytes of the name, and no character cut in two:
             * the message goes out as JSON, which must be UTF-8 */
            size_t n = strnlen(f->string, 80);
            n -= rt_utf8_partial(f->string, n);
            return rt_errf(err, errlen, "unknown field '%.*s' (this server takes prompt, "
                           "max_tokens, temperature, top_p, top_k, stop, stream, seed, model)",
                           (int)n, f->string);
        }
    }
    const cJSON *f;
    int64_t v;
    if ((f = cJSON_GetObjectItemCaseSensitive(j, "model")) && !cJSON_IsString(f))
        return *param = "model", rt_errf(err, errlen, "'model' must be a string");
    if ((f = cJSON_GetObjectItemCaseSensitive(j, "max_tokens")) && !cJSON_IsNull(f)) {
        *param = "max_tokens";
        if (get_int(f, -1e18, 1e18, &v))
            return rt_errf(err, errlen, "'max_tokens' must be an integer");
        if (v < 1)
            return rt_errf(err, errlen, "'max_tokens' must be at least 1, got %lld", (long long)v);
        r->max_tokens = v;
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(j, "temperature")) && !cJSON_IsNull(f)) {
        *param = "temperature";
        if (!cJSON_IsNumber(f) || !(f->valuedouble >= 0) || !(f->valuedouble <= 100))
            return rt_errf(err, errlen, "'temperature' must be a number from 0 (greedy) to 100");
        r->sampling.temperature = f->valuedouble;
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(j, "top_p")) && !cJSON_IsNull(f)) {
        *param = "top_p";
        if (!cJSON_IsNumber(f) || !(f->valuedouble > 0) || !(f->valuedouble <= 1))
            return rt_errf(err, errlen, "'top_p' must be a number in (0, 1]");
        r->sampling.top_p = f->valuedouble;
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(j, "top_k")) && !cJSON_IsNull(f)) {
        *param = "top_k";
        if (get_int(f, 0, (double)tok->vocab, &v))
            return rt_errf(err, errlen, "'top_k' must be an integer from 0 (all tokens) to %lld "
                           "(the vocabulary)", (long long)tok->vocab);
        r->sampling.top_k = v;
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(j, "seed")) && !cJSON_IsNull(f)) {
        *param = "seed";
        if (get_int(f, 0, 9007199254740992.0, &v)) /* 2^53: exact in a JSON number */
            return rt_errf(err, errlen, "'seed' must be an integer from 0 to 2^53");
        r->sampling.seed = (uint64_t)v;
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(j, "stream")) && !cJSON_IsNull(f)) {
        *param = "stream";
        if (!cJSON_IsBool(f))
            return rt_errf(err, errlen, "'stream' must be true or false");
        r->stream = cJSON_IsTrue(f);
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(j, "stop")) && get_stop(f, r)) {
        *param = "stop";
        return rt_errf(err, errlen, "'stop' must be a non-empty string or an array of 1 to %d "
                       "of them", RT_MAX_STOP);
    }
    *param = NULL;
    return 0;
}

/* Reads the prompt and checks it and max_tokens against the cache. */
static int read_prompt(const cJSON *j, rt_request *r, const rt_tokenizer *tok, int64_t cache,
                       const char **param, char *err, size_t errlen)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    *param = "prompt";
    if (!f)
        return rt_errf(err, errlen, "'prompt' is missing");
    if (!cJSON_IsString(f) || !f->valuestring[0])
        return rt_errf(err, errlen, "'prompt' must be a non-empty string");
    size_t n = strlen(f->valuestring);
    if ((int64_t)n > cache)
        return rt_errf(err, errlen, "the prompt has %zu tokens, and the model's cache holds %lld "
                       "positions", n, (long long)cache);
    r->prompt = malloc(n * sizeof *r->prompt);
    if (!r->prompt)
        return rt_errf(err, errlen, "out of memory");
    r->prompt_len = rt_tokenizer_encode(tok, f->valuestring, n, r->prompt);
    /* The last prompt token and each new token but the last take a
     * position: prompt_len + max_tokens - 1 of them (generate.c). */
    int64_t most = cache - r->prompt_len + 1;
    if (r->max_tokens > most) {
        *param = "max_tokens";
        return rt_errf(err, errlen, "'max_tokens' %lld: with a prompt of %lld tokens the cache "
                       "of %lld positions leaves room for at most %lld", (long long)r->max_tokens,
                       (long long)r->prompt_len, (long long)cache, (long long)most);
    }
    if (r->max_tokens == 0) /* not given: OpenAI's 16, as the cache allows */
        r->max_tokens = most < 16 ? most : 16;
    *param = NULL;
    return 0;
}

int rt_request_parse(const char *body, size_t len, const rt_tokenizer *tok, int64_t cache,
                     const rt_sampling *defaults, uint64_t number, rt_request **out,
                     char *param, size_t paramlen, char *err, size_t errlen)
{
    *out = NULL;
    *param = 0;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return rt_errf(err, errlen, "the body must be a JSON object");
    }
    rt_request *r = calloc(1, sizeof *r);
    if (!r) {
        cJSON_Delete(j);
        return rt_errf(err, errlen, "out of memory");
    }
    r->sampling = *defaults;
    r->sampling.seed = defaults->seed + number;
    r->number = number;
    r->refs = 1;
    const char *field = NULL; /* may point into j: copied before j is freed */
    int rc = read_fields(j, r, tok, &field, err, errlen);
    if (rc == 0)
        rc = read_prompt(j, r, tok, cache, &field, err, errlen);
    if (rc && field && paramlen > 0) { /* cut to paramlen - 1 bytes, not in a character */
        snprintf(param, paramlen, "%s", field);
        size_t n = strlen(param);
        param[n - rt_utf8_partial(param, n)] = 0;
    }
    cJSON_Delete(j);
    if (rc) {
        rt_request_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void rt_request_free(rt_request *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nstop; i++)
        free(r->stop[i]);
    free(r->prompt);
    free(r->text);
    free(r);
}

/* Writes text[0..len) as a JSON string literal at `out` (room for 6 len + 2
 * bytes) and returns the bytes written.  cJSON's strings end at a NUL
 * byte, and a model may well make token 0, so control bytes are escaped
 * here (\u00XX).  JSON text is UTF-8 (RFC 8259, section 8.1), and a
 * byte-level model may make any byte: UTF-8 characters are copied whole,
 * and every other byte becomes \ufffd (U+FFFD, the replacement
 * character), so that a client's strict parser takes every answer. */
static size_t put_string(char *out, const char *text, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char *w = out;
    *w++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '"' || ch == '\\') {
            *w++ = '\\';
            *w++ = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            memcpy(w, "\\u00", 4);
            w[4] = hex[ch >> 4];
            w[5] = hex[ch & 15];
            w += 6;
        } else if (ch < 0x80) {
            *w++ = (char)ch;
        } else {
            size_t n = rt_utf8_char(text + i, len - i);
            if (n) { /* n bytes of text, n of room */
                memcpy(w, text + i, n);
                w += n;
                i += n - 1;
            } else {
                memcpy(w, "\\ufffd", 6);
                w += 6;
            }
        }
    }
    *w++ = '"';
    return (size_t)(w - out);
}

/* text[0..len) as a JSON string literal, malloc'd (NULL: out of memory). */
static char *json_string(const char *text, size_t len)
{
    char *q = malloc(6 * len + 3);
    if (q)
        q[put_string(q, text, len)] = 0;
    return q;
}

/* Writes the literal `lit` at w and returns the byte after it. */
static char *put(char *w, const char *lit)
{
    size_t n = strlen(lit);
    memcpy(w, lit, n);
    return w + n;
}

/* Writes v in decimal at w and returns the byte after it. */
static char *put_u64(char *w, uint64_t v)
{
    char digits[20];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    while (n > 0)
        *w++ = digits[--n];
    return w;
}

/* The fields every completion object has: id, object, created, model. */
static cJSON *completion_object(const rt_request *r)
{
    char id[32];
    snprintf(id, sizeof id, "cmpl-%llu", (unsigned long long)r->number);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", "einc");
    return o;
}

/* A streamed chunk's JSON, written directly at `out` (room for
 * RT_CHUNK_JSON_FIXED + 6 len bytes): the bytes cJSON_PrintUnformatted gives
 * for the object rt_request_json builds (tests/runtime/
 * test_request_json.c compares them), with no allocation and no printf,
 * since the HTTP thread writes one per streamed row and step.  `created`
 * is an integer (cJSON prints an integral number without a fraction);
 * `finish` is "stop", "length" or NULL, which need no escaping.  Returns
 * the bytes written. */
static size_t put_chunk(char *out, const rt_request *r, const char *text, size_t len,
                        const char *finish)
{
    time_t now = time(NULL);
    char *w = put(out, "{\"id\":\"cmpl-");
    w = put_u64(w, r->number);
    w = put(w, "\",\"object\":\"text_completion\",\"created\":");
    if (now < 0) /* before 1970: a clock that was never set */
        *w++ = '-';
    w = put_u64(w, now < 0 ? (uint64_t)-(int64_t)now : (uint64_t)now);
    w = put(w, ",\"model\":\"einc\",\"choices\":[{\"text\":");
    w += put_string(w, text, len);
    w = put(w, ",\"index\":0,\"logprobs\":null,\"finish_reason\":");
    if (finish) {
        *w++ = '"';
        w = put(w, finish);
        *w++ = '"';
    } else {
        w = put(w, "null");
    }
    w = put(w, "}]}");
    return (size_t)(w - out);
}

static char *chunk_json(const rt_request *r, const char *text, size_t len, const char *finish)
{
    char *out = malloc(RT_CHUNK_JSON_FIXED + 6 * len + 1);
    if (out)
        out[put_chunk(out, r, text, len, finish)] = 0;
    return out;
}

size_t rt_request_event_room(size_t len)
{
    return RT_CHUNK_JSON_FIXED + 6 * len + 8;
}

size_t rt_request_event(const rt_request *r, const char *text, size_t len, const char *finish,
                        char *out)
{
    char *w = put(out, "data: ");
    w += put_chunk(w, r, text, len, finish);
    return (size_t)(put(w, "\n\n") - out);
}

char *rt_request_json(const rt_request *r, const char *text, size_t len, const char *finish)
{
    if (r->stream)
        return chunk_json(r, text, len, finish);
    cJSON *o = completion_object(r);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    char *quoted = json_string(text, len);
    cJSON_AddRawToObject(c, "text", quoted ? quoted : "\"\"");
    free(quoted);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON_AddNullToObject(c, "logprobs");
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    if (!r->stream) {
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->prompt_len);
        cJSON_AddNumberToObject(u, "completion_tokens", (double)r->tokens);
        cJSON_AddNumberToObject(u, "total_tokens", (double)(r->prompt_len + r->tokens));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *rt_error_json(const char *message, const char *param, int status)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", status == 503 ? "server_error" : "invalid_request_error");
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
