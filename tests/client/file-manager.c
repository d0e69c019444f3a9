/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a file manager does, with the GDBus client that gdbus-codegen
 * generates from dbus/org.subvold.Subvold1.xml: from an open file, find its
 * subvolume by fd, show its usage and whether it is a snapshot, and list the
 * snapshots taken of it (GetSnapshots).  Using the generated code also
 * proves the XML complete and accurate.
 *
 *   file-manager FILE   prints "key value" lines for the test to check */
#include <fcntl.h>
#include <gio/gunixfdlist.h>
#include <stdio.h>
#include <unistd.h>

#include "subvold-dbus.h"

int main(int argc, char *argv[]) {
        g_autoptr(GError) error = NULL;
        g_autoptr(SubvoldManager) manager = NULL;
        g_autoptr(GDBusObjectManager) objects = NULL;
        g_autoptr(GUnixFDList) fds = g_unix_fd_list_new();
        g_autoptr(GDBusObject) object = NULL;
        g_autofree char *path = NULL;
        SubvoldSubvolume *subvolume;
        int fd, index;

        if (argc != 2) {
                fprintf(stderr, "usage: %s FILE\n", argv[0]);
                return 2;
        }
        manager = subvold_manager_proxy_new_for_bus_sync(G_BUS_TYPE_SYSTEM, G_DBUS_PROXY_FLAGS_NONE,
                                                         "org.subvold.Subvold1", "/org/subvold/Subvold1", NULL, &error);
        objects = manager ? subvold_object_manager_client_new_for_bus_sync(
                                    G_BUS_TYPE_SYSTEM, G_DBUS_OBJECT_MANAGER_CLIENT_FLAGS_NONE, "org.subvold.Subvold1",
                                    "/org/subvold/Subvold1", NULL, &error)
                          : NULL;
        if (!objects) {
                fprintf(stderr, "%s\n", error->message);
                return 1;
        }

        fd = open(argv[1], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                perror(argv[1]);
                return 1;
        }
        index = g_unix_fd_list_append(fds, fd, &error);
        close(fd);
        if (index < 0 || !subvold_manager_call_get_subvolume_by_fd_sync(manager, g_variant_new_handle(index), fds,
                                                                         &path, NULL, NULL, &error)) {
                fprintf(stderr, "GetSubvolumeByFd: %s\n", error->message);
                return 1;
        }
        object = g_dbus_object_manager_get_object(objects, path);
        subvolume = object ? subvold_object_peek_subvolume(SUBVOLD_OBJECT(object)) : NULL;
        if (!subvolume) {
                fprintf(stderr, "%s is not in the object manager\n", path);
                return 1;
        }
        printf("subvolume %s\n", path);
        printf("id %" G_GUINT64_FORMAT "\n", subvold_subvolume_get_id(subvolume));
        printf("path %s\n", subvold_subvolume_get_path(subvolume));  /* a bytestring */
        printf("display-path %s\n", subvold_subvolume_get_display_path(subvolume));
        printf("snapshot %s\n", subvold_subvolume_get_is_snapshot(subvolume) ? "yes" : "no");
        printf("read-only %s\n", subvold_subvolume_get_read_only(subvolume) ? "yes" : "no");
        printf("referenced %" G_GUINT64_FORMAT "\n", subvold_subvolume_get_referenced_bytes(subvolume));
        printf("exclusive %" G_GUINT64_FORMAT "\n", subvold_subvolume_get_exclusive_bytes(subvolume));
        printf("source %s\n", subvold_subvolume_get_usage_source(subvolume));

        /* The snapshots taken of it, one a page: what paging through many
         * looks like, and each entry carries its properties. */
        for (guint64 start = 0;;) {
                g_autoptr(GVariant) page = NULL;
                GVariantIter iter;
                const char *snapshot;
                GVariant *props;

                if (!subvold_subvolume_call_get_snapshots_sync(subvolume, start, 1, &page, &start, NULL, &error)) {
                        fprintf(stderr, "GetSnapshots: %s\n", error->message);
                        return 1;
                }
                g_variant_iter_init(&iter, page);
                while (g_variant_iter_next(&iter, "{&o@a{sv}}", &snapshot, &props)) {
                        g_autofree char *source = NULL;

                        g_variant_lookup(props, "SnapshotSource", "o", &source);
                        printf("snapshot-of-it %s %s\n", snapshot, source ? source : "-");
                        g_variant_unref(props);
                }
                if (start == 0)
                        break;
        }
        return 0;
}
