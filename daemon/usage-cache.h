/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The usage cache on disk: what the model knew of every subvolume's usage,
 * so that the first answers after a restart need not wait for the kernel.
 *
 * The file is versioned and checksummed and replaced atomically.  What is
 * loaded is a Model holding only the fields the cache carries (no paths,
 * no mounts); discover.c uses it exactly like the previous model. */

#include "model.h"

#define USAGE_CACHE_FILE "usage.cache"
#define USAGE_CACHE_VERSION 1

/* Loads @dir/usage.cache.  Returns 0, -ENOENT when there is none,
 * -EPROTONOSUPPORT for a file of another version, -EBADMSG for a truncated
 * or corrupted one, or another negative errno when it cannot be read. */
int usage_cache_load(const char *dir, Model **ret);

/* Writes the usage of every filesystem in @m to @dir/usage.cache: a
 * temporary file, fsync, rename, fsync of the directory. */
int usage_cache_save(const char *dir, const Model *m);
