/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <unistd.h>

#include "util.h"

int log_max_level = LOG_LEVEL_INFO;

__attribute__((format(printf, 3, 0)))
static void log_vprint(int level, int error, const char *format, va_list ap) {
        /* The <N> syslog prefix keeps the level in the journal and in any
         * file or pipe; a person at a terminal reads the text alone. */
        static int prefix = -1;
        int saved = errno;

        flockfile(stderr);  /* one line, also when the scanner thread logs */
        if (prefix < 0)
                prefix = !isatty(STDERR_FILENO);
        errno = error;  /* so that %m prints the error we were given (isatty() may set errno) */
        if (prefix)
                fprintf(stderr, "<%d>", level);
        vfprintf(stderr, format, ap);
        fputc('\n', stderr);
        funlockfile(stderr);
        errno = saved;
}

void log_internal(int level, const char *format, ...) {
        va_list ap;

        if (level > log_max_level)
                return;
        va_start(ap, format);
        log_vprint(level, errno, format, ap);
        va_end(ap);
}

int log_errno_internal(int level, int error, const char *format, ...) {
        va_list ap;

        error = error < 0 ? -error : error;
        if (level <= log_max_level) {
                va_start(ap, format);
                log_vprint(level, error, format, ap);
                va_end(ap);
        }
        return -error;
}

char **strv_free(char **l) {
        if (l)
                for (char **s = l; *s; s++)
                        free(*s);
        free(l);
        return NULL;
}

size_t strv_length(char * const *l) {
        size_t n = 0;

        while (l && l[n])
                n++;
        return n;
}

int strv_consume(char ***l, size_t *n, char *s) {
        char **t;

        if (!s)
                return -ENOMEM;
        t = realloc(*l, (*n + 2) * sizeof(char *));
        if (!t) {
                free(s);
                return -ENOMEM;
        }
        t[(*n)++] = s;
        t[*n] = NULL;
        *l = t;
        return 0;
}

int strv_extend(char ***l, size_t *n, const char *s) {
        return strv_consume(l, n, strdup(s));
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char * const *) a, *(char * const *) b);
}

void strv_sort(char **l) {
        if (l)
                qsort(l, strv_length(l), sizeof(char *), cmp_str);
}

void strv_uniq(char **l) {
        size_t out = 0;

        if (!l || !l[0])
                return;
        for (size_t i = 1; l[i]; i++) {
                if (streq(l[i], l[out]))
                        free(l[i]);
                else
                        l[++out] = l[i];
        }
        l[out + 1] = NULL;
}

int parse_size(const char *s, uint64_t *ret) {
        static const char suffixes[] = "KMG";
        _cleanup_free_ char *digits = NULL;
        const char *unit;
        uint64_t v, factor = 1;
        size_t n;
        int r;

        if (!s)
                return -EINVAL;
        n = strlen(s);
        unit = n > 0 ? strchr(suffixes, s[n - 1]) : NULL;
        if (unit) {
                factor = 1ULL << (10 * (unit - suffixes + 1));
                n--;
        }
        digits = strndup(s, n);
        if (!digits)
                return -ENOMEM;
        r = parse_u64(digits, &v);
        if (r < 0)
                return r;
        if (v > UINT64_MAX / factor)
                return -ERANGE;
        *ret = v * factor;
        return 0;
}

int parse_u64(const char *s, uint64_t *ret) {
        unsigned long long v;
        char *end;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -errno;
        if (*end)
                return -EINVAL;
        *ret = v;
        return 0;
}

char *path_join(const char *a, const char *b) {
        size_t la = strlen(a);
        char *s;

        while (la > 0 && a[la - 1] == '/')
                la--;
        while (*b == '/')
                b++;
        if (asprintf(&s, "%.*s/%s", (int) la, a, b) < 0)
                return NULL;
        return s;
}

size_t sorted_lower_bound(const void *base, size_t n, size_t size, size_t offset, uint64_t key) {
        size_t lo = 0, hi = n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                uint64_t k;

                memcpy(&k, (const uint8_t *) base + mid * size + offset, sizeof k);
                if (k < key)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

int grow_array(void *array, size_t *allocated, size_t need, size_t elem) {
        void **p = array;
        size_t n;
        void *q;

        if (need <= *allocated)
                return 0;
        n = need < 16 ? 16 : need * 2;
        q = reallocarray(*p, n, elem);
        if (!q)
                return -ENOMEM;
        *p = q;
        *allocated = n;
        return 0;
}

bool uuid_is_null(const uint8_t uuid[16]) {
        for (size_t i = 0; i < 16; i++)
                if (uuid[i])
                        return false;
        return true;
}

/* Hand-rolled: snprintf() made formatting the biggest cost of a
 * GetManagedObjects reply, which formats three UUIDs per subvolume. */
static char *hex_bytes(const uint8_t *u, size_t n, char *out) {
        static const char digits[] = "0123456789abcdef";

        for (size_t i = 0; i < n; i++) {
                *out++ = digits[u[i] >> 4];
                *out++ = digits[u[i] & 15];
        }
        return out;
}

char *uuid_format(const uint8_t u[16], char buf[static UUID_STRING_MAX]) {
        char *p = buf;

        if (!uuid_is_null(u)) {
                p = hex_bytes(u, 4, p);
                *p++ = '-';
                p = hex_bytes(u + 4, 2, p);
                *p++ = '-';
                p = hex_bytes(u + 6, 2, p);
                *p++ = '-';
                p = hex_bytes(u + 8, 2, p);
                *p++ = '-';
                p = hex_bytes(u + 10, 6, p);
        }
        *p = 0;
        return buf;
}

char *uuid_format_hex(const uint8_t u[16], char buf[static UUID_HEX_MAX]) {
        *hex_bytes(u, 16, buf) = 0;
        return buf;
}

static int unhex(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        return -1;
}

int uuid_parse_hex(const char *s, size_t len, uint8_t ret[16]) {
        uint8_t u[16];

        if (len != 32)
                return -EINVAL;
        for (size_t i = 0; i < 16; i++) {
                int hi = unhex(s[2 * i]), lo = unhex(s[2 * i + 1]);
                if (hi < 0 || lo < 0)
                        return -EINVAL;
                u[i] = (uint8_t) (hi << 4 | lo);
        }
        memcpy(ret, u, 16);
        return 0;
}
