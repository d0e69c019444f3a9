/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Small helpers shared by every module: cleanup attributes, logging, and
 * a few string/array utilities.  Nothing here knows about btrfs or D-Bus. */

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

/* Closes *@fd and sets it to -1: a number once closed may be anyone's
 * (a message's fd in sd-bus, another thread's), so it must not be closed
 * again. */
static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
                *fd = -1;
        }
}
#define _cleanup_close_ _cleanup_(closep)

static inline void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Hands an owned pointer over: returns it and clears the source. */
#define TAKE_PTR(p)                            \
        ({                                     \
                __typeof__(p) _p_ = (p);       \
                (p) = NULL;                    \
                _p_;                           \
        })
#define TAKE_FD(fd)                            \
        ({                                     \
                int _fd_ = (fd);               \
                (fd) = -1;                     \
                _fd_;                          \
        })

/* Logging goes to stderr with a syslog priority prefix ("<3>"), which
 * journald understands when stderr is connected to it. */
enum { LOG_LEVEL_ERR = 3, LOG_LEVEL_WARNING = 4, LOG_LEVEL_INFO = 6, LOG_LEVEL_DEBUG = 7 };
extern int log_max_level;
void log_internal(int level, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* Logs and returns -abs(error), so callers can write "return log_error_errno(r, ...)".
 * %m in the format refers to the error passed in. */
int log_errno_internal(int level, int error, const char *format, ...) __attribute__((format(printf, 3, 4)));

#define log_error(...)   log_internal(LOG_LEVEL_ERR, __VA_ARGS__)
#define log_warning(...) log_internal(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_info(...)    log_internal(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...)   log_internal(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_error_errno(e, ...)   log_errno_internal(LOG_LEVEL_ERR, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_errno_internal(LOG_LEVEL_WARNING, (e), __VA_ARGS__)
#define log_debug_errno(e, ...)   log_errno_internal(LOG_LEVEL_DEBUG, (e), __VA_ARGS__)

static inline bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

/* Frees a NULL-terminated array of strings and the array; returns NULL. */
char **strv_free(char **l);
static inline void strv_freep(char ***l) {
        strv_free(*l);
}
#define _cleanup_strv_free_ _cleanup_(strv_freep)
size_t strv_length(char * const *l);
/* Appends a copy of s; returns 0 or -ENOMEM. */
int strv_extend(char ***l, size_t *n, const char *s);
/* Appends s itself, taking ownership even on failure; returns 0 or -ENOMEM. */
int strv_consume(char ***l, size_t *n, char *s);
void strv_sort(char **l);
/* Removes adjacent duplicates from a sorted array. */
void strv_uniq(char **l);

/* Parses a plain decimal number: digits only (no sign, no spaces), and it
 * must fit.  Returns 0, -EINVAL or -ERANGE; *ret is untouched on failure. */
int parse_u64(const char *s, uint64_t *ret);
/* A byte count: decimal digits and an optional K, M or G (powers of 1024). */
int parse_size(const char *s, uint64_t *ret);

/* A copy of @n bytes at @p (NULL when out of memory). */
static inline void *memdup(const void *p, size_t n) {
        void *q = malloc(n ?: 1);
        return q ? memcpy(q, p, n) : NULL;
}

/* @n bytes that need not end in NUL (names in kernel buffers and bus
 * arrays), as a C string.  Not strndup(): that may read its argument as a
 * C string, past @n (ASan's strict_string_checks says so). */
static inline char *memdup_suffix0(const void *p, size_t n) {
        char *s = malloc(n + 1);

        if (s) {
                memcpy(s, p, n);
                s[n] = 0;
        }
        return s;
}

/* Joins a directory and a relative part with exactly one '/' between them. */
char *path_join(const char *a, const char *b);

/* In @base, @n elements of @size bytes sorted by the uint64_t at @offset
 * in each: the index of the first whose key is @key or more (@n if none). */
size_t sorted_lower_bound(const void *base, size_t n, size_t size, size_t offset, uint64_t key);

/* Makes sure *array can hold at least need elements of size elem, growing
 * geometrically.  Returns 0 or -ENOMEM. */
int grow_array(void *array, size_t *allocated, size_t need, size_t elem);

/* Formats a 16-byte UUID as 8-4-4-4-12 lowercase (37 bytes with NUL),
 * or "" when it is all zero. */
#define UUID_STRING_MAX 37
char *uuid_format(const uint8_t uuid[16], char buf[static UUID_STRING_MAX]);
bool uuid_is_null(const uint8_t uuid[16]);
/* Formats as 32 lowercase hex digits (33 bytes with NUL). */
#define UUID_HEX_MAX 33
char *uuid_format_hex(const uint8_t uuid[16], char buf[static UUID_HEX_MAX]);
/* Parses exactly 32 hex digits; returns 0 or -EINVAL. */
int uuid_parse_hex(const char *s, size_t len, uint8_t ret[16]);
