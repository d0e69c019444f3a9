/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The frame shared by subvold's cache files, and the little-endian
 * encoding inside it:
 *   header   8-byte magic, u32 version, u32 count (of the top-level
 *            records), u64 payload size
 *   payload  up to the file's format
 *   trailer  u64 FNV-1a hash of header and payload
 * Files are replaced atomically (temporary file, fsync, rename, fsync of
 * the directory) and read with every size checked, so a truncated,
 * corrupted or foreign file is refused as a whole. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct CacheBuffer {
        uint8_t *data;
        size_t size, allocated, pos;
        bool overrun;            /* a read went past the end */
} CacheBuffer;

/* Writing: each returns 0 or -ENOMEM; OR-ing the results of a sequence
 * keeps any failure. */
int cache_put(CacheBuffer *b, const void *p, size_t n);
int cache_put_u64(CacheBuffer *b, uint64_t v);
int cache_put_u32(CacheBuffer *b, uint32_t v);

/* Reading: past the end, they return zeros and set b->overrun. */
void cache_get(CacheBuffer *b, void *p, size_t n);
uint64_t cache_get_u64(CacheBuffer *b);
uint32_t cache_get_u32(CacheBuffer *b);
/* Where the next @n bytes are, or NULL (and overrun) if there are fewer. */
const uint8_t *cache_get_bytes(CacheBuffer *b, size_t n);
static inline size_t cache_left(const CacheBuffer *b) {
        return b->overrun ? 0 : b->size - b->pos;
}

/* Starts a file: the header, its payload size filled in when written. */
int cache_begin(CacheBuffer *b, const char magic[8], uint32_t version, uint32_t count);

/* Finishes @b (payload size, hash) and writes it to @dir/@name.  Frees
 * @b's data either way. */
int cache_file_write(const char *dir, const char *name, CacheBuffer *b);

/* Reads @dir/@name and checks its frame.  On success *@ret is positioned at
 * the payload, which ends at ret->size.  Returns -ENOENT when there is no
 * file, -EPROTONOSUPPORT for another version, -EBADMSG for a truncated,
 * corrupted or foreign file, or another negative errno. */
int cache_file_read(const char *dir, const char *name, const char magic[8], uint32_t version, CacheBuffer *ret,
                    uint32_t *ret_count);

/* Says, in one line, why the @what cache in @dir is ignored: @r from a
 * load built on cache_file_read().  Nothing for -ENOENT (no cache yet). */
void cache_file_log_load_error(const char *what, const char *dir, int r);

/* One line when writing the @what cache starts failing (@r < 0 after a
 * success, or first), one when it works again; nothing otherwise.
 * Returns whether this write failed, to pass back as @failed_before. */
bool cache_file_log_write(const char *what, const char *dir, int r, bool failed_before);
