/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Notices change without polling everything: the mount table through
 * fanotify mount events (Linux 6.15) and POLLPRI on /proc/self/mountinfo
 * (remounts, and older kernels), and the published filesystems through a
 * timer that compares each one's generation (a read of its sysfs file, and
 * of its root tree while the transaction the model saw is open).  The
 * timer runs only while some btrfs is published.  Whatever it sees, it
 * reports through one callback; the manager decides when to refresh. */

#include <systemd/sd-event.h>

#include "model.h"

/* How often the filesystems' generations are compared. */
#define WATCH_GENERATION_INTERVAL_USEC (500 * 1000ULL)
/* How late it may run: sd-event's default (accuracy 0) is 250 ms, half the
 * interval again on top of every change's wait for the signal. */
#define WATCH_GENERATION_ACCURACY_USEC (10 * 1000ULL)

typedef struct Watch Watch;
/* @mounts: the mount table changed (else a filesystem's generation). */
typedef void (*watch_callback_t)(void *userdata, bool mounts);

/* @model points to the manager's current model. */
int watch_new(sd_event *event, Model **model, watch_callback_t on_change, void *userdata, Watch **ret);
Watch *watch_free(Watch *w);

/* Runs the generation timer while the model has filesystems, and stops it
 * otherwise; call after each refresh. */
void watch_update(Watch *w);
