/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Usage for filesystems without quotas, measured by subvold itself: a
 * worker thread reads each subvolume's tree (at idle I/O and CPU priority)
 * and the main thread keeps, per filesystem, which subvolumes refer to
 * which data extents (extent-map.h).  A subvolume is read again only when
 * its tree changed; exclusive bytes follow every change.  The bus is never
 * blocked: results arrive through the event loop. */

#include <systemd/sd-event.h>

#include "model.h"

typedef struct Scanner Scanner;

/* @on_results runs in the main loop when scans finished. */
int scanner_new(sd_event *event, size_t max_extents, void (*on_results)(void *userdata), void *userdata,
                Scanner **ret);
Scanner *scanner_free(Scanner *s);

/* Takes in what finished, then brings the scanner in line with @model:
 * queues the subvolumes of quota-less filesystems whose trees changed,
 * forgets deleted subvolumes and vanished filesystems, and writes the
 * figures it has into @model (UsageSource "scan") with each filesystem's
 * scan progress.  Call on every new model, before publishing it.  Returns
 * whether new figures came in. */
bool scanner_update(Scanner *s, Model *model);
