/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* display_escape() (model.c), what DisplayPath and Label go through, on any
 * bytes: the result is valid UTF-8 without control characters, surrogates
 * or noncharacters (all that sd-bus refuses in a string), at most four
 * times as long, and escaping it again changes nothing.  The check below
 * decodes on its own, not with the daemon's code. */
#include "fuzz-util.h"
#include "model.h"

static bool acceptable(const unsigned char *s) {
        while (*s) {
                uint32_t c;
                size_t n;

                if (*s < 0x80) {
                        if (*s < 0x20 || *s == 0x7f)
                                return false;
                        s++;
                        continue;
                }
                n = (*s & 0xe0) == 0xc0 ? 2 : (*s & 0xf0) == 0xe0 ? 3 : (*s & 0xf8) == 0xf0 ? 4 : 0;
                if (n == 0)
                        return false;
                c = *s & (0x7f >> n);
                for (size_t i = 1; i < n; i++) {
                        if ((s[i] & 0xc0) != 0x80)
                                return false;
                        c = c << 6 | (s[i] & 0x3f);
                }
                if (c < (n == 2 ? 0x80u : n == 3 ? 0x800u : 0x10000u) || c > 0x10ffff ||
                    (c >= 0xd800 && c < 0xe000) || (c >= 0xfdd0 && c < 0xfdf0) || (c & 0xfffe) == 0xfffe)
                        return false;
                s += n;
        }
        return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_free_ char *s = fuzz_string(data, size), *out = NULL, *again = NULL;

        out = display_escape(s);
        if (!out || !acceptable((const unsigned char *) out) || strlen(out) > 4 * strlen(s))
                abort();
        again = display_escape(out);
        if (!again || !streq(again, out))
                abort();
        return 0;
}
