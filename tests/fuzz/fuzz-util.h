/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the fuzz targets share: a scratch directory for the cache files,
 * the cache frame built around a fuzzed payload, and quiet logs. */

#include <stddef.h>
#include <stdint.h>

#include "cache-file.h"
#include "util.h"

/* A private directory on tmpfs (or /tmp), made once, removed at exit. */
const char *fuzz_scratch_dir(void);

/* Writes the cache file @name into @dir from a fuzz input:
 *   byte 0 bit 0 set: the rest is the whole file, as is;
 *   else: bytes 1-4 are the frame's count (little-endian) and the rest is
 *   the payload, framed with @magic and @version by the daemon's own
 *   writer (so the hash is right and the loader reads the payload).
 * Returns 0, or -1 when the input is too short to say. */
int fuzz_write_cache(const char *dir, const char *name, const char magic[8], uint32_t version,
                     const uint8_t *data, size_t size);

/* The bytes of @dir/@name into a new buffer (for comparing files). */
int fuzz_read_file(const char *dir, const char *name, uint8_t **ret, size_t *ret_size);

/* Reads the next @n bytes from an input, or zeros past its end. */
typedef struct FuzzInput {
        const uint8_t *p;
        size_t left;
} FuzzInput;

uint64_t fuzz_take(FuzzInput *in, size_t n);

/* The @n bytes at @p and a NUL, in a new string (aborts without memory).
 * Not strndup(): ASan's strict_string_checks reads it past @n. */
char *fuzz_string(const uint8_t *p, size_t n);
