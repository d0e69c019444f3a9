/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Filesystem.GetExclusiveBytes() answered in steps: a set of many
 * subvolumes costs one walk of all their extent lists (a million
 * references for a thousand snapshots), more than one event loop
 * iteration should take.  The calls wait in a queue and the first is
 * worked on a bounded number of extents per iteration, so that every
 * other call is served in between. */

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "model.h"

/* Extents per step: some 1-3 ms on this kind of machine. */
#define BUS_SPACE_STEP_EXTENTS 16384
/* Calls waiting, in all and from one connection: past that,
 * LimitsExceeded. */
#define BUS_SPACE_MAX_PENDING 32
#define BUS_SPACE_MAX_PENDING_PER_SENDER 4
/* A call whose counts the map took back this often (its filesystem
 * changed under it each time) is finished in one go. */
#define BUS_SPACE_MAX_RESTARTS 3

typedef struct BusSpace BusSpace;

/* @model points to the manager's current model. */
int bus_space_new(sd_event *event, Model **model, BusSpace **ret);
/* Drops the waiting calls unanswered (the bus is going). */
BusSpace *bus_space_free(BusSpace *b);

/* Answers @message (a GetExclusiveBytes call on @fs) for the @n subvolume
 * ids in @ids (sorted, distinct, measured; taken over), now or later.
 * Returns 1, or a negative errno / an error set in @error. */
int bus_space_exclusive_bytes(BusSpace *b, sd_bus_message *message, const Filesystem *fs, uint64_t *ids, size_t n,
                              sd_bus_error *error);
