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

typedef enum ScanIOClass {
        SCAN_IO_IDLE,            /* disk time only when nobody else wants it */
        SCAN_IO_BEST_EFFORT,     /* the lowest level of the normal class */
        _SCAN_IO_CLASS_MAX,
} ScanIOClass;

typedef struct ScannerOptions {
        size_t max_memory;       /* per filesystem, at every moment; one that needs more gets no figures */
        int nice;                /* of the worker thread, -20..19 */
        ScanIOClass io_class;
        const char *cache_dir;   /* where scan.cache lives; NULL: not persisted */
} ScannerOptions;

#define SCANNER_OPTIONS_DEFAULT \
        ((ScannerOptions) { .max_memory = 256u << 20, .nice = 19, .io_class = SCAN_IO_IDLE })

/* Starts the worker and reads the scan cache, if any.  @on_results runs
 * in the main loop when scans finished. */
int scanner_new(sd_event *event, const ScannerOptions *options, void (*on_results)(void *userdata),
                void *userdata, Scanner **ret);
/* Saves what is not saved yet, stops the worker. */
Scanner *scanner_free(Scanner *s);

/* Takes in what finished, then brings the scanner in line with @model:
 * queues the subvolumes of quota-less filesystems whose trees changed
 * (handed to the worker from the next event loop iteration, once the
 * refresh that called this is over), forgets deleted subvolumes and
 * vanished filesystems, and writes the figures it has into @model
 * (UsageSource "scan") with each filesystem's scan progress.  Call on
 * every new model, before publishing it.  Returns whether new figures
 * came in. */
bool scanner_update(Scanner *s, Model *model);

/* The mount table changed: the worker's fd on a mount is closed (by the
 * worker after the tree it reads through it, if any), and a read through
 * a mount that is gone stops.  Call at
 * once, not with the next refresh: until then the filesystem of a umount
 * would stay alive (and its devices busy). */
void scanner_mounts_changed(Scanner *s, MountSource source);
