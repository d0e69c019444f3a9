/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Builds the model from the kernel: the mount table, then for every btrfs
 * filesystem reachable through a mount its properties and subvolumes. */

#include "model.h"
#include "mounts.h"

/* How often usage may be read from the kernel, per filesystem. */
#define USAGE_READ_INTERVAL_USEC (1000 * 1000ULL)

/* Returns 0 and a new model, or a negative errno when even the mount table
 * cannot be read.  A filesystem that cannot be read is logged and left out;
 * the others are still published.
 *
 * Usage is taken from @previous (the model published so far, or the one
 * loaded from the usage cache; may be NULL) while nothing changed since it
 * was read, and read from the kernel otherwise -- but at most once per
 * USAGE_READ_INTERVAL_USEC per filesystem.  *ret_pending is set when some
 * usage is knowingly stale (rate-limited, or its transaction is not
 * committed yet) or a filesystem could not be read: call again later.
 * *ret_failed is set in the second case. */
int discover_model(MountSource source, const Model *previous, uint64_t now_usec, Model **ret, bool *ret_pending,
                   bool *ret_failed);
