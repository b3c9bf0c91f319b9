/*
 * tokenizer.c - text to token ids and back for --serve.
 *
 * The models einc trains on text read it a byte or a character at a time:
 * examples/fortunes/prepare.py gives each character its ASCII code as id
 * (V = 128) and turns every byte >= 128 into '?'.  So:
 *  - V >= 256: byte-level, each byte of the UTF-8 text is one id 0..255,
 *    and an id decodes to its byte (ids >= 256 have no text);
 *  - 128 <= V < 256: ASCII, prepare.py's table (a byte >= 128 is '?');
 *  - V < 128: no text tokenizer fits, and --serve refuses the model.
 * rt_utf8_partial and rt_utf8_char keep what the server sends UTF-8 when
 * a byte-level model makes bytes that are not (docs/generation.md).
 * Each kind is a branch of encode and decode; a learned tokenizer (BPE)
 * would be one more kind with its own tables.
 */
#include "rt_serve.h"

int rt_tokenizer_init(rt_tokenizer *t, int64_t vocab, char *err, size_t errlen)
{
    t->vocab = vocab;
    if (vocab >= 256)
        t->kind = RT_TOKENIZER_BYTES;
    else if (vocab >= 128)
        t->kind = RT_TOKENIZER_ASCII;
    else
        return rt_errf(err, errlen, "--serve: the logits have %lld tokens; the tokenizer needs "
                       "at least 128 (ASCII characters) or 256 (bytes)", (long long)vocab);
    return 0;
}

int64_t rt_tokenizer_encode(const rt_tokenizer *t, const char *text, size_t len, int32_t *ids)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        ids[i] = t->kind == RT_TOKENIZER_ASCII && c >= 128 ? '?' : c;
    }
    return (int64_t)len;
}

int rt_tokenizer_decode(const rt_tokenizer *t, int32_t id, char *out)
{
    if (id < 0 || id >= 256 || (t->kind == RT_TOKENIZER_ASCII && id >= 128))
        return 0;
    out[0] = (char)id;
    return 1;
}

/* The bytes of the UTF-8 character whose first byte is c (RFC 3629,
 * section 4), or 0 when c begins none: a continuation byte, or 0xc0, 0xc1
 * and 0xf5 up, which only ever began overlong or out-of-range forms. */
static size_t utf8_need(unsigned char c)
{
    return c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
         : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
}

size_t rt_utf8_partial(const char *text, size_t len)
{
    size_t k = 0; /* continuation bytes (10xxxxxx) ending the text, up to 3 */
    while (k < len && k < 3 && ((unsigned char)text[len - 1 - k] & 0xc0) == 0x80)
        k++;
    if (k == len)
        return 0; /* continuation bytes only: no first byte to wait on */
    size_t need = utf8_need((unsigned char)text[len - 1 - k]);
    return need > k + 1 ? k + 1 : 0;
}

size_t rt_utf8_char(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t need = len ? utf8_need(s[0]) : 0;
    if (need == 0 || need > len)
        return 0;
    /* The second byte's range excludes overlong forms (e0, f0), the
     * surrogates (ed) and code points over U+10FFFF (f4) */
    unsigned char lo = s[0] == 0xe0 ? 0xa0 : s[0] == 0xf0 ? 0x90 : 0x80;
    unsigned char hi = s[0] == 0xed ? 0x9f : s[0] == 0xf4 ? 0x8f : 0xbf;
    for (size_t j = 1; j < need; j++, lo = 0x80, hi = 0xbf)
        if (s[j] < lo || s[j] > hi)
            return 0;
    return need;
}
