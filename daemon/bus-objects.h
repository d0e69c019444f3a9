/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The Filesystem and Subvolume objects on the bus.  They are served straight
 * from the current model through fallback vtables: nothing is registered
 * per object, and replacing the model replaces what the bus shows. */

#include <systemd/sd-bus.h>

#include "bus-space.h"
#include "model.h"

#define BUS_OBJECT_PATH_MAX 96

char *bus_filesystem_path(const Filesystem *fs, char buf[static BUS_OBJECT_PATH_MAX]);
char *bus_subvolume_path(const Subvolume *sv, char buf[static BUS_OBJECT_PATH_MAX]);

/* The most subvolumes Filesystem.GetExclusiveBytes() takes in one call. */
#define GET_EXCLUSIVE_BYTES_MAX 100000u

/* What a reply that grows with the model may weigh at the most, unless
 * configured: half of dbus-daemon's default max_message_size. */
#define BUS_DEFAULT_MAX_MESSAGE_SIZE (16u << 20)

/* Registers the object tree below /org/subvold/Subvold1/fs.  @model points
 * to the manager's current model, which may be swapped at any time between
 * two bus calls; @space answers GetExclusiveBytes.  GetManagedObjects answers LimitsExceeded rather than
 * send a reply that could be larger than @max_message_size bytes, and
 * GetSubvolumes pages stay below it. */
int bus_objects_register(sd_bus *bus, Model **model, BusSpace *space, size_t max_message_size);

/* Emits InterfacesAdded, InterfacesRemoved and PropertiesChanged for what
 * differs between @old and @new.  @new must already be the current model. */
void bus_objects_emit_changes(sd_bus *bus, const Model *old, const Model *new);
/* Emits PropertiesChanged for what moved in @model since @before was
 * saved of it: the scanner's figures (see manager_refresh()). */
void bus_objects_emit_figures(sd_bus *bus, const ModelFigures *before, const Model *model);
