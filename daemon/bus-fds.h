/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Files that clients pass are let go of away from the event loop.
 *
 * Closing a file can block: close() calls the file system's flush, which
 * on FUSE waits for a server that may never answer (uninterruptibly), and
 * the last close of a file can wait for NFS, a lingering socket or the
 * unmount of a lazily detached mount.  sd-bus closes the fds of a message
 * when it frees it, in the event loop.  So every incoming call that
 * carries fds is held (one more reference) until each of its fds has been
 * swapped for /dev/null by a helper thread (dup3() puts /dev/null in the
 * slot at once and then closes the client's file, in the helper, however
 * long that takes); only then is the message freed, closing /dev/null.
 *
 * Limits: an fd the message carries but its body does not refer to (the
 * bus allows that) is not seen and is closed by sd-bus as before.  At most
 * BUS_FDS_MAX_STUCK closes may be stuck at once; past that, calls with fds
 * wait, held, for a helper to come free, up to BUS_FDS_MAX_HELD of them,
 * and past that their fds are closed in the loop. */

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#define BUS_FDS_MAX_STUCK 8
#define BUS_FDS_MAX_HELD 64

typedef struct BusFds BusFds;

int bus_fds_new(sd_bus *bus, sd_event *event, BusFds **ret);
/* Waits for no helper: a stuck one is left behind (the process is
 * exiting). */
BusFds *bus_fds_free(BusFds *f);
