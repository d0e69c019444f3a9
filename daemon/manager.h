/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The Manager owns the event loop, the bus connection and the current
 * model, and wires the modules together. */

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bus-fds.h"
#include "bus-files.h"
#include "bus-space.h"
#include "model.h"
#include "mounts.h"
#include "scanner.h"
#include "watch.h"

/* Refreshes run once per REFRESH_INTERVAL_USEC on average, and at most
 * REFRESH_BURST within one: a change after a quiet while is published at
 * once, a stream of changes costs no more than one refresh a second
 * (Refresh() from root is never held back, but counts).  New usage
 * figures alone wait until the whole bucket is back, so that the change
 * that comes next still finds a refresh at hand. */
#define REFRESH_INTERVAL_USEC (1000 * 1000ULL)
#define REFRESH_BURST 2

typedef struct Manager {
        sd_event *event;
        sd_bus *bus;
        BusFds *bus_fds;       /* lets go of the fds clients pass */
        BusFiles *bus_files;   /* versions and identity of files */
        BusSpace *bus_space;   /* GetExclusiveBytes, in steps */
        Model *model;          /* what the bus publishes; replaced whole by a refresh */
        MountSource mount_source;
        char *cache_dir;       /* where the usage cache lives; NULL: not persisted */
        bool cache_write_failed;
        bool disconnected;     /* the bus went away */
        Watch *watch;
        Scanner *scanner;
        ScannerOptions scan_options;     /* its cache_dir is cache_dir */
        sd_event_source *refresh_timer;  /* the next refresh, when one is due */
        uint64_t last_refresh;           /* CLOCK_MONOTONIC */
        /* The rate limit, as the generic cell rate algorithm keeps it: a
         * refresh may run REFRESH_BURST - 1 intervals before this, and
         * moves it one interval on (CLOCK_MONOTONIC). */
        uint64_t refresh_budget;
        bool refresh_usage_only;         /* the armed refresh is for new usage alone */
        /* A filesystem could not be read for the last model: only a read
         * of the whole model brings it in. */
        bool model_incomplete;
        uint64_t exit_idle_usec;         /* 0: never exit when idle */
        size_t max_message_size;         /* see bus_objects_register() */
        uint64_t last_activity;          /* CLOCK_MONOTONIC, of the last bus message */
        sd_event_source *idle_timer;
} Manager;

/* @cache_dir may be NULL (no persistent usage and scan caches);
 * @exit_idle_usec 0 keeps the daemon running. */
int manager_new(MountSource source, const char *cache_dir, uint64_t exit_idle_usec, size_t max_message_size,
                const ScannerOptions *scan_options, Manager **ret);
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

/* Asks for a refresh soon: after @delay_usec, and no sooner than the rate
 * limit (see REFRESH_BURST) allows. */
void manager_schedule_refresh(Manager *m, uint64_t delay_usec);
/* The same for new usage figures (the scanner's, the quotas' next read):
 * no sooner than a full bucket allows. */
void manager_schedule_usage_refresh(Manager *m, uint64_t delay_usec);

/* Runs until SIGTERM/SIGINT or the bus goes away. */
int manager_run(Manager *m);
