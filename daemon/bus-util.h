/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Names and helpers shared by the bus modules.  Every D-Bus error subvold
 * sends is one of these names. */

#include <systemd/sd-bus.h>

#define SUBVOLD_BUS_NAME        "org.subvold.Subvold1"
#define SUBVOLD_MANAGER_PATH    "/org/subvold/Subvold1"
#define SUBVOLD_FS_PREFIX       "/org/subvold/Subvold1/fs"
#define SUBVOLD_IFACE_MANAGER   "org.subvold.Subvold1.Manager"
#define SUBVOLD_IFACE_FS        "org.subvold.Subvold1.Filesystem"
#define SUBVOLD_IFACE_SUBVOLUME "org.subvold.Subvold1.Subvolume"

#define SUBVOLD_ERROR_NOT_FOUND        "org.subvold.Subvold1.Error.NotFound"
#define SUBVOLD_ERROR_NOT_BTRFS        "org.subvold.Subvold1.Error.NotBtrfs"
#define SUBVOLD_ERROR_INVALID_ARGUMENT "org.subvold.Subvold1.Error.InvalidArgument"
#define SUBVOLD_ERROR_ACCESS_DENIED    "org.subvold.Subvold1.Error.AccessDenied"
#define SUBVOLD_ERROR_FAILED           "org.subvold.Subvold1.Error.Failed"

/* Appends @s with its trailing NUL as "ay" (the GLib bytestring form). */
int bus_append_bytestring(sd_bus_message *m, const char *s);
/* Appends a NULL-terminated array of strings as "aay". */
int bus_append_bytestring_array(sd_bus_message *m, char * const *l);

/* Appends a statfs()-like a{sv}: the struct statfs fields by their names
 * (bsize, frsize, blocks, bfree, bavail, files, ffree, namelen, flags) and
 * the subvolume's referenced, exclusive, source and consistent. */
typedef struct StatfsInfo StatfsInfo;
typedef struct Usage Usage;
int bus_append_statfs(sd_bus_message *m, const StatfsInfo *st, const Usage *u);

static inline void sd_bus_creds_unrefp_(sd_bus_creds **c) {
        sd_bus_creds_unref(*c);
}
static inline void sd_bus_message_unrefp_(sd_bus_message **m) {
        sd_bus_message_unref(*m);
}
