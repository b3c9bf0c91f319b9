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
