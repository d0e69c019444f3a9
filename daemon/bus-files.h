/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The org.subvold.Subvold1.Files interface on /org/subvold/Subvold1: file
 * identity, previous versions and deleted files, worked out in a thread of
 * its own. */

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "model.h"

typedef struct BusFiles BusFiles;

/* @model points to the manager's current model. */
int bus_files_new(sd_bus *bus, sd_event *event, Model **model, BusFiles **ret);
/* Waits for the call being worked on, drops the queued ones. */
BusFiles *bus_files_free(BusFiles *b);
