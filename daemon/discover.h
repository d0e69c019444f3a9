/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Builds the model from the kernel: the mount table, then for every btrfs
 * filesystem reachable through a mount its properties and subvolumes. */

#include "model.h"
#include "mounts.h"

/* Returns 0 and a new model, or a negative errno when even the mount table
 * cannot be read.  A filesystem that cannot be read is logged and left out;
 * the others are still published. */
int discover_model(MountSource source, Model **ret);
