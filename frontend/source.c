/*
 * source.c - checks on the whole buffer before it is scanned.
 *
 * Offsets are 32-bit (diag.h), so a file must be shorter than 4 GB.  NUL
 * bytes and malformed UTF-8 are reported at their byte offset, each run of
 * bad bytes once (so one binary blob does not bury the other messages), and
 * the file is not parsed further: the scanner may then assume every byte
 * >= 0x80 starts a well-formed character.
 */
#include <stdint.h>

#include "fe_internal.h"

/* Length of the well-formed UTF-8 sequence at s[0..n), 0 if malformed
 * (overlong forms, surrogates and code points above U+10FFFF included). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

bool fe_source_check(const char *src, size_t len, diag_ctx *d)
{
    if (len >= UINT32_MAX) {
        diag_error(d, DIAG_NOLOC, "source file is too large (%zu bytes; the limit is 4 GB)", len);
        return false;
    }
    const unsigned char *s = (const unsigned char *)src;
    bool ok = true, in_bad_run = false;
    for (size_t i = 0; i < len;) {
        size_t k = s[i] == 0 ? 0 : utf8_len(s + i, len - i);
        if (k > 0) {
            in_bad_run = false;
            i += k;
            continue;
        }
        if (!in_bad_run) {
            if (s[i] == 0)
                diag_error(d, (uint32_t)i, "NUL byte in source (byte offset %zu)", i);
            else
                diag_error(d, (uint32_t)i, "invalid UTF-8 byte 0x%02X (byte offset %zu)",
                           (unsigned)s[i], i);
        }
        ok = false;
        in_bad_run = true;
        i++;
    }
    return ok;
}
