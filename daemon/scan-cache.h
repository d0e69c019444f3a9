/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The scan cache on disk: the extent maps of the scanner (extent-map.h),
 * so that after a restart a subvolume whose tree did not change, a
 * read-only snapshot above all, is not read again.  Same frame as the
 * usage cache (cache-file.h). */

#include "extent-map.h"

#define SCAN_CACHE_FILE "scan.cache"
#define SCAN_CACHE_VERSION 2  /* 2: packed extents carry ram_bytes */

typedef struct ScanCacheFs {
        uint8_t uuid[16];
        ExtentMap map;
} ScanCacheFs;

/* Writes @n filesystems' maps to @dir/scan.cache. */
int scan_cache_save(const char *dir, const ScanCacheFs *const *fss, size_t n);

/* Reads @dir/scan.cache into a new array of maps: all or nothing.  Errors
 * as usage_cache_load(). */
int scan_cache_load(const char *dir, ScanCacheFs **ret, size_t *ret_n);
