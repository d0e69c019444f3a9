/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The Manager owns the event loop, the bus connection and the current
 * model, and wires the modules together. */

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "model.h"
#include "mounts.h"

typedef struct Manager {
        sd_event *event;
        sd_bus *bus;
        Model *model;          /* what the bus publishes; replaced whole by a refresh */
        MountSource mount_source;
        char *cache_dir;       /* where the usage cache lives; NULL: not persisted */
        bool cache_write_failed;
        sd_event_source *usage_timer;  /* re-reads usage that is knowingly stale */
} Manager;

/* @cache_dir may be NULL (no persistent usage cache). */
int manager_new(MountSource source, const char *cache_dir, Manager **ret);
Manager *manager_free(Manager *m);
static inline void manager_freep(Manager **m) {
        manager_free(*m);
}

/* Connects to the system bus, publishes the objects and the model, takes
 * the bus name and tells systemd it is ready. */
int manager_start(Manager *m);

/* Enumerates everything again and publishes the new model, emitting the
 * change signals.  On failure the old model stays published. */
int manager_refresh(Manager *m);

/* Runs until SIGTERM/SIGINT or the bus goes away. */
int manager_run(Manager *m);
