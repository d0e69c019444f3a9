/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A GLib client that reads subvold the way a desktop application would:
 * GDBusObjectManagerClient for the object tree, bytestrings for paths, and
 * GetSubvolumeByFd with an fd passed in a GUnixFDList.  The test suite runs
 * it and compares what it prints with btrfs-progs.
 *
 *   gdbus-client objects           one line per subvolume:
 *                                  PATH ID IS_SNAPSHOT READ_ONLY SOURCE PATHHEX
 *   gdbus-client by-fd KIND [FILE] GetSubvolumeByFd; prints "ok OBJECT" or
 *                                  "error NAME"; KIND: file, opath, pipe, socket,
 *                                  or no-fd (a handle that points to no fd)
 *   gdbus-client statfs-by-fd FILE GetStatfsByFd; prints "ok OBJECT KEY=VALUE..."
 *   gdbus-client files METHOD ARG...
 *                                  a method of org.subvold.Subvold1.Files: every
 *                                  FILE argument is opened (O_RDONLY, or O_PATH
 *                                  when written opath:FILE) and passed as an fd,
 *                                  "all" becomes the options {All: true}, OBJECT
 *                                  paths and NAMEs pass as they are (names as
 *                                  bytestrings); prints "ok JSON" (the reply's
 *                                  arguments as a JSON array, byte arrays as
 *                                  arrays of numbers, a{s*} as objects) or
 *                                  "error NAME"; for an fd returned, "ok" and
 *                                  the file's contents in hex
 *   gdbus-client files-walk DIR NAME SNAPSHOT
 *                                  OpenDeletedFile on a directory, then ".." four
 *                                  times from the fd it returns: prints the inode
 *                                  and subvolume id reached and "ro" or "rw" for
 *                                  the mount the fd is on
 *   gdbus-client long-path PREFIX LENGTH
 *                                  GetSubvolumeByPath with PREFIX followed by
 *                                  "/a" up to LENGTH bytes (as long as the bus
 *                                  allows: longer than any command line);
 *                                  prints "ok OBJECT" or "error NAME"
 *   gdbus-client files-flood FILE COUNT DEPTH
 *                                  GetFileIdentity on FILE, COUNT times, DEPTH
 *                                  calls in flight at once (each with an fd of
 *                                  its own): prints "ok COUNT" when every call
 *                                  succeeded, else "error NAME MESSAGE" for the
 *                                  first error and how many calls failed
 *   gdbus-client managed-objects   GetManagedObjects; prints "ok OBJECTS BYTES"
 *   gdbus-client pages FS COUNT    GetSubvolumes on FS from 0 until next_id is 0,
 *                                  COUNT a page; per page "page BYTES N NEXT_ID",
 *                                  then "subvolume ID PATHHEX" per subvolume
 *   The last two print "error NAME MESSAGE" for an error reply; BYTES is
 *   the reply's size on the wire.
 */
#include <errno.h>
#include <fcntl.h>
#include <gio/gio.h>
#include <gio/gunixfdlist.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define BUS_NAME "org.subvold.Subvold1"
#define MANAGER_PATH "/org/subvold/Subvold1"
#define SUBVOLUME_IFACE "org.subvold.Subvold1.Subvolume"

static void print_hex(const char *s) {
        for (; *s; s++)
                printf("%02x", (unsigned char) *s);
        putchar('\n');
}

static int list_objects(void) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GDBusObjectManager) manager = g_dbus_object_manager_client_new_for_bus_sync(
                G_BUS_TYPE_SYSTEM, G_DBUS_OBJECT_MANAGER_CLIENT_FLAGS_DO_NOT_AUTO_START, BUS_NAME,
                MANAGER_PATH, NULL, NULL, NULL, NULL, &error);
        GList *objects;

        if (!manager) {
                fprintf(stderr, "object manager: %s\n", error->message);
                return 1;
        }
        objects = g_dbus_object_manager_get_objects(manager);
        for (GList *l = objects; l; l = l->next) {
                g_autoptr(GDBusInterface) iface = g_dbus_object_get_interface(l->data, SUBVOLUME_IFACE);
                GDBusProxy *proxy = G_DBUS_PROXY(iface);
                g_autoptr(GVariant) id = NULL, snap = NULL, ro = NULL, source = NULL, path = NULL;

                if (!iface)
                        continue;
                id = g_dbus_proxy_get_cached_property(proxy, "Id");
                snap = g_dbus_proxy_get_cached_property(proxy, "IsSnapshot");
                ro = g_dbus_proxy_get_cached_property(proxy, "ReadOnly");
                source = g_dbus_proxy_get_cached_property(proxy, "SnapshotSource");
                path = g_dbus_proxy_get_cached_property(proxy, "Path");
                if (!id || !snap || !ro || !source || !path) {
                        fprintf(stderr, "%s: property missing\n", g_dbus_object_get_object_path(l->data));
                        return 1;
                }
                printf("%s %" G_GUINT64_FORMAT " %d %d %s ", g_dbus_object_get_object_path(l->data),
                       g_variant_get_uint64(id), g_variant_get_boolean(snap), g_variant_get_boolean(ro),
                       g_variant_get_string(source, NULL));
                print_hex(g_variant_get_bytestring(path));
        }
        g_list_free_full(objects, g_object_unref);
        return 0;
}

static int open_kind(const char *kind, const char *file) {
        int fds[2];

        if (g_str_equal(kind, "file") && file)
                return open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (g_str_equal(kind, "opath") && file)
                return open(file, O_PATH | O_CLOEXEC);
        if (g_str_equal(kind, "pipe") && pipe2(fds, O_CLOEXEC) == 0) {
                close(fds[1]);
                return fds[0];
        }
        if (g_str_equal(kind, "socket"))
                return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        errno = EINVAL;
        return -1;
}

static void print_dict(GVariant *dict) {
        GVariantIter iter;
        const char *key;
        GVariant *value;

        g_variant_iter_init(&iter, dict);
        while (g_variant_iter_next(&iter, "{&sv}", &key, &value)) {
                g_autofree char *text = g_variant_print(value, FALSE);
                printf(" %s=%s", key, text);
                g_variant_unref(value);
        }
        putchar('\n');
}

static int print_reply(GVariant *reply, GError *error) {
        const char *object;

        if (!reply) {
                g_autofree char *name = g_dbus_error_get_remote_error(error);
                printf("error %s\n", name ? name : "(local)");
                fprintf(stderr, "%s\n", error->message);
                return 0;
        }
        if (g_variant_is_of_type(reply, G_VARIANT_TYPE("(oa{sv})"))) {
                g_autoptr(GVariant) dict = NULL;
                g_variant_get(reply, "(&o@a{sv})", &object, &dict);
                printf("ok %s", object);
                print_dict(dict);
                return 0;
        }
        g_variant_get(reply, "(&o)", &object);
        printf("ok %s\n", object);
        return 0;
}

static GDBusConnection *system_bus(void) {
        g_autoptr(GError) error = NULL;
        GDBusConnection *bus = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);

        if (!bus)
                fprintf(stderr, "bus: %s\n", error->message);
        return bus;
}

static int by_fd(const char *method, const char *kind, const char *file) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GDBusConnection) bus = system_bus();
        g_autoptr(GUnixFDList) fds = g_unix_fd_list_new();
        g_autoptr(GVariant) reply = NULL;
        int fd, index;

        if (!bus)
                return 1;
        if (g_str_equal(kind, "no-fd")) {
                /* A handle index with no fd attached: what a buggy client sends. */
                g_clear_object(&fds);
                index = 0;
                goto call;
        }
        fd = open_kind(kind, file);
        if (fd < 0) {
                fprintf(stderr, "open %s %s: %s\n", kind, file ? file : "", strerror(errno));
                return 1;
        }
        index = g_unix_fd_list_append(fds, fd, &error);
        close(fd);
        if (index < 0) {
                fprintf(stderr, "fd list: %s\n", error->message);
                return 1;
        }
call:
        reply = g_dbus_connection_call_with_unix_fd_list_sync(
                bus, BUS_NAME, MANAGER_PATH, "org.subvold.Subvold1.Manager", method,
                g_variant_new("(h)", index), NULL, G_DBUS_CALL_FLAGS_NO_AUTO_START, -1, fds, NULL, NULL, &error);
        return print_reply(reply, error);
}

static int long_path(const char *prefix, size_t length) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GDBusConnection) bus = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);
        g_autoptr(GString) path = g_string_new(prefix);
        g_autoptr(GVariant) reply = NULL;

        if (!bus) {
                fprintf(stderr, "bus: %s\n", error->message);
                return 1;
        }
        while (path->len + 2 <= length)
                g_string_append(path, "/a");
        reply = g_dbus_connection_call_sync(bus, BUS_NAME, MANAGER_PATH, "org.subvold.Subvold1.Manager",
                                            "GetSubvolumeByPath", g_variant_new("(s)", path->str), NULL,
                                            G_DBUS_CALL_FLAGS_NO_AUTO_START, 300 * 1000, NULL, &error);
        return print_reply(reply, error);
}

static void print_json_string(const char *s) {
        putchar('"');
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p == '"' || *p == '\\')
                        printf("\\%c", *p);
                else if (*p < 0x20)
                        printf("\\u%04x", *p);
                else
                        putchar(*p);
        putchar('"');
}

/* Writes @v as JSON: what the tests parse. */
static void print_json(GVariant *v) {
        const GVariantType *t = g_variant_get_type(v);
        GVariantIter iter;
        GVariant *child;
        bool first = true;

        if (g_variant_is_of_type(v, G_VARIANT_TYPE_BOOLEAN))
                printf(g_variant_get_boolean(v) ? "true" : "false");
        else if (g_variant_is_of_type(v, G_VARIANT_TYPE_UINT64))
                printf("%" G_GUINT64_FORMAT, g_variant_get_uint64(v));
        else if (g_variant_is_of_type(v, G_VARIANT_TYPE_UINT32))
                printf("%" G_GUINT32_FORMAT, g_variant_get_uint32(v));
        else if (g_variant_is_of_type(v, G_VARIANT_TYPE_BYTE))
                printf("%u", g_variant_get_byte(v));
        else if (g_variant_type_is_basic(t))
                print_json_string(g_variant_get_string(v, NULL));
        else if (g_variant_type_is_variant(t)) {
                g_autoptr(GVariant) inner = g_variant_get_variant(v);
                print_json(inner);
        } else if (g_variant_type_is_array(t) && g_variant_type_is_dict_entry(g_variant_type_element(t))) {
                putchar('{');
                g_variant_iter_init(&iter, v);
                while ((child = g_variant_iter_next_value(&iter))) {
                        g_autoptr(GVariant) key = g_variant_get_child_value(child, 0), value = g_variant_get_child_value(child, 1);
                        printf(first ? "" : ",");
                        print_json_string(g_variant_get_string(key, NULL));
                        putchar(':');
                        print_json(value);
                        g_variant_unref(child);
                        first = false;
                }
                putchar('}');
        } else {
                putchar('[');
                g_variant_iter_init(&iter, v);
                while ((child = g_variant_iter_next_value(&iter))) {
                        printf(first ? "" : ",");
                        print_json(child);
                        g_variant_unref(child);
                        first = false;
                }
                putchar(']');
        }
}

/* Prints the reply of a Files call; an fd in it is read and printed. */
static int print_files_reply(GVariant *reply, GUnixFDList *fds, GError *error) {
        if (!reply) {
                g_autofree char *name = g_dbus_error_get_remote_error(error);
                printf("error %s\n", name ? name : "(local)");
                fprintf(stderr, "%s\n", error->message);
                return 0;
        }
        if (g_variant_is_of_type(reply, G_VARIANT_TYPE("(h)"))) {
                int fd = g_unix_fd_list_get(fds, 0, NULL);
                unsigned char buf[4096];
                ssize_t n;

                printf("ok ");
                while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
                        for (ssize_t i = 0; i < n; i++)
                                printf("%02x", buf[i]);
                putchar('\n');
                if (fd >= 0)
                        close(fd);
                return 0;
        }
        printf("ok ");
        print_json(reply);
        putchar('\n');
        return 0;
}

static int files_call(const char *method, int argc, char **argv) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GDBusConnection) bus = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);
        g_autoptr(GUnixFDList) fds = g_unix_fd_list_new(), out_fds = NULL;
        g_autoptr(GVariant) reply = NULL;
        GVariantBuilder args;
        bool name_done = false;

        if (!bus) {
                fprintf(stderr, "bus: %s\n", error->message);
                return 1;
        }
        g_variant_builder_init(&args, G_VARIANT_TYPE_TUPLE);
        for (int i = 0; i < argc; i++) {
                const char *a = argv[i];

                if (g_str_equal(a, "all")) {
                        GVariantBuilder options;
                        g_variant_builder_init(&options, G_VARIANT_TYPE("a{sv}"));
                        g_variant_builder_add(&options, "{sv}", "All", g_variant_new_boolean(TRUE));
                        g_variant_builder_add_value(&args, g_variant_builder_end(&options));
                } else if (g_str_has_prefix(a, "/org/")) {
                        g_variant_builder_add(&args, "o", a);
                } else if (g_str_equal(method, "OpenDeletedFile") && i == 1 && !name_done) {
                        g_variant_builder_add_value(&args, g_variant_new_bytestring(a));
                        name_done = true;
                } else {
                        bool opath = g_str_has_prefix(a, "opath:");
                        int fd = open(opath ? a + 6 : a, (opath ? O_PATH : O_RDONLY | O_NONBLOCK) | O_CLOEXEC | O_NOCTTY);
                        int index;

                        if (fd < 0) {
                                fprintf(stderr, "open %s: %s\n", a, strerror(errno));
                                return 1;
                        }
                        index = g_unix_fd_list_append(fds, fd, &error);
                        close(fd);
                        if (index < 0)
                                return 1;
                        g_variant_builder_add(&args, "h", index);
                }
        }
        if (g_str_equal(method, "ListFileVersions") && argc == 1) {
                GVariantBuilder options;
                g_variant_builder_init(&options, G_VARIANT_TYPE("a{sv}"));
                g_variant_builder_add_value(&args, g_variant_builder_end(&options));
        }
        reply = g_dbus_connection_call_with_unix_fd_list_sync(
                bus, BUS_NAME, MANAGER_PATH, "org.subvold.Subvold1.Files", method, g_variant_builder_end(&args),
                NULL, G_DBUS_CALL_FLAGS_NO_AUTO_START, -1, fds, &out_fds, NULL, &error);
        return print_files_reply(reply, out_fds, error);
}

static int files_walk(const char *dir, const char *name, const char *snapshot) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GDBusConnection) bus = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);
        g_autoptr(GUnixFDList) fds = g_unix_fd_list_new(), out_fds = NULL;
        g_autoptr(GVariant) reply = NULL;
        struct btrfs_ioctl_ino_lookup_args lookup = { .objectid = BTRFS_FIRST_FREE_OBJECTID };
        struct statvfs sv;
        struct stat st;
        int fd, up, index;

        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (!bus || fd < 0 || (index = g_unix_fd_list_append(fds, fd, &error)) < 0)
                return 1;
        close(fd);
        reply = g_dbus_connection_call_with_unix_fd_list_sync(
                bus, BUS_NAME, MANAGER_PATH, "org.subvold.Subvold1.Files", "OpenDeletedFile",
                g_variant_new("(h@ayo)", index, g_variant_new_bytestring(name), snapshot), NULL,
                G_DBUS_CALL_FLAGS_NO_AUTO_START, -1, fds, &out_fds, NULL, &error);
        if (!reply)
                return print_files_reply(reply, out_fds, error);
        fd = g_unix_fd_list_get(out_fds, 0, NULL);
        up = openat(fd, "../../../..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (up < 0 || fstat(up, &st) < 0 || ioctl(up, BTRFS_IOC_INO_LOOKUP, &lookup) < 0 || fstatvfs(fd, &sv) < 0) {
                perror("walk");
                return 1;
        }
        printf("%ju %llu %s\n", (uintmax_t) st.st_ino, (unsigned long long) lookup.treeid,
               sv.f_flag & ST_RDONLY ? "ro" : "rw");
        return 0;
}

/* Sends a call and returns its reply as a message, error replies
 * included, and its size on the wire; NULL when the bus failed us.  No
 * timeout: the test's own bounds the wait. */
static GDBusMessage *call_message(GDBusConnection *bus, const char *path, const char *iface, const char *method,
                                  GVariant *args, gsize *ret_size) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GDBusMessage) call = g_dbus_message_new_method_call(BUS_NAME, path, iface, method);
        g_autoptr(GDBusMessage) reply = NULL;
        g_autofree guchar *blob = NULL;

        g_dbus_message_set_body(call, args);
        reply = g_dbus_connection_send_message_with_reply_sync(bus, call, G_DBUS_SEND_MESSAGE_FLAGS_NONE, G_MAXINT,
                                                               NULL, NULL, &error);
        if (reply)
                blob = g_dbus_message_to_blob(reply, ret_size, G_DBUS_CAPABILITY_FLAGS_UNIX_FD_PASSING, &error);
        if (!blob) {
                fprintf(stderr, "%s: %s\n", method, error->message);
                return NULL;
        }
        return g_steal_pointer(&reply);
}

/* Prints "error NAME MESSAGE" if @reply is an error; says whether it was. */
static gboolean print_error(GDBusMessage *reply) {
        GVariant *body = g_dbus_message_get_body(reply);
        const char *message = "";

        if (g_dbus_message_get_message_type(reply) != G_DBUS_MESSAGE_TYPE_ERROR)
                return FALSE;
        if (body && g_variant_is_of_type(body, G_VARIANT_TYPE("(s)")))
                g_variant_get(body, "(&s)", &message);
        printf("error %s %s\n", g_dbus_message_get_error_name(reply), message);
        return TRUE;
}

static int managed_objects(void) {
        g_autoptr(GDBusConnection) bus = system_bus();
        g_autoptr(GDBusMessage) reply = NULL;
        g_autoptr(GVariant) objects = NULL;
        gsize size;

        if (!bus)
                return 1;
        reply = call_message(bus, MANAGER_PATH, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", NULL, &size);
        if (!reply)
                return 1;
        if (print_error(reply))
                return 0;
        objects = g_variant_get_child_value(g_dbus_message_get_body(reply), 0);
        printf("ok %zu %zu\n", g_variant_n_children(objects), size);
        return 0;
}

static int pages(const char *fs, guint max_count) {
        g_autoptr(GDBusConnection) bus = system_bus();
        guint64 next = 0;

        if (!bus)
                return 1;
        do {
                g_autoptr(GDBusMessage) reply = NULL;
                g_autoptr(GVariant) subvolumes = NULL, properties = NULL;
                GVariantIter iter;
                gsize size;

                reply = call_message(bus, fs, "org.subvold.Subvold1.Filesystem", "GetSubvolumes",
                                     g_variant_new("(tu)", next, max_count), &size);
                if (!reply)
                        return 1;
                if (print_error(reply))
                        return 0;
                g_variant_get(g_dbus_message_get_body(reply), "(@a{oa{sv}}t)", &subvolumes, &next);
                printf("page %zu %zu %" G_GUINT64_FORMAT "\n", size, g_variant_n_children(subvolumes), next);
                g_variant_iter_init(&iter, subvolumes);
                while (g_variant_iter_next(&iter, "{&o@a{sv}}", NULL, &properties)) {
                        guint64 id;
                        const char *path;

                        if (!g_variant_lookup(properties, "Id", "t", &id) ||
                            !g_variant_lookup(properties, "Path", "^&ay", &path)) {
                                fprintf(stderr, "GetSubvolumes: Id or Path missing\n");
                                return 1;
                        }
                        printf("subvolume %" G_GUINT64_FORMAT " ", id);
                        print_hex(path);
                        g_clear_pointer(&properties, g_variant_unref);
                }
        } while (next != 0);
        return 0;
}

/* files-flood: calls in flight, answered in any order. */
typedef struct Flood {
        GDBusConnection *bus;
        GMainLoop *loop;
        const char *file;
        unsigned left, depth, in_flight, ok, failed;
        char *first_error;
} Flood;

static void flood_next(Flood *f);

static void flood_done(GObject *source, GAsyncResult *result, gpointer userdata) {
        Flood *f = userdata;
        g_autoptr(GError) error = NULL;
        g_autoptr(GUnixFDList) out_fds = NULL;
        g_autoptr(GVariant) reply = g_dbus_connection_call_with_unix_fd_list_finish(f->bus, &out_fds, result,
                                                                                     &error);

        f->in_flight--;
        if (reply)
                f->ok++;
        else {
                f->failed++;
                if (!f->first_error) {
                        g_autofree char *name = g_dbus_error_get_remote_error(error);
                        f->first_error = g_strdup_printf("%s %s", name ?: "(local)", error->message);
                }
        }
        flood_next(f);
}

static void flood_next(Flood *f) {
        while (f->left > 0 && f->in_flight < f->depth) {
                g_autoptr(GUnixFDList) fds = g_unix_fd_list_new();
                int fd = open(f->file, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);

                if (fd < 0 || g_unix_fd_list_append(fds, fd, NULL) < 0) {
                        perror(f->file);
                        exit(1);
                }
                close(fd);
                g_dbus_connection_call_with_unix_fd_list(f->bus, BUS_NAME, MANAGER_PATH, "org.subvold.Subvold1.Files",
                                                         "GetFileIdentity", g_variant_new("(h)", 0), NULL,
                                                         G_DBUS_CALL_FLAGS_NO_AUTO_START, -1, fds, NULL,
                                                         flood_done, f);
                f->left--;
                f->in_flight++;
        }
        if (f->in_flight == 0)
                g_main_loop_quit(f->loop);
}

static int files_flood(const char *file, unsigned count, unsigned depth) {
        g_autoptr(GError) error = NULL;
        g_autoptr(GDBusConnection) bus = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);
        g_autoptr(GMainLoop) loop = g_main_loop_new(NULL, FALSE);
        Flood f = { .bus = bus, .loop = loop, .file = file, .left = count, .depth = depth ?: 1 };

        if (!bus) {
                fprintf(stderr, "bus: %s\n", error->message);
                return 1;
        }
        flood_next(&f);
        g_main_loop_run(loop);
        if (f.failed == 0)
                printf("ok %u\n", f.ok);
        else
                printf("error %s (%u of %u calls failed)\n", f.first_error, f.failed, count);
        g_free(f.first_error);
        return 0;
}

int main(int argc, char *argv[]) {
        if (argc >= 2 && g_str_equal(argv[1], "objects"))
                return list_objects();
        if (argc >= 3 && g_str_equal(argv[1], "by-fd"))
                return by_fd("GetSubvolumeByFd", argv[2], argc >= 4 ? argv[3] : NULL);
        if (argc >= 3 && g_str_equal(argv[1], "statfs-by-fd"))
                return by_fd("GetStatfsByFd", "file", argv[2]);
        if (argc >= 4 && g_str_equal(argv[1], "long-path"))
                return long_path(argv[2], strtoul(argv[3], NULL, 10));
        if (argc >= 5 && g_str_equal(argv[1], "files-walk"))
                return files_walk(argv[2], argv[3], argv[4]);
        if (argc >= 4 && g_str_equal(argv[1], "files"))
                return files_call(argv[2], argc - 3, argv + 3);
        if (argc >= 5 && g_str_equal(argv[1], "files-flood"))
                return files_flood(argv[2], (unsigned) g_ascii_strtoull(argv[3], NULL, 10),
                                   (unsigned) g_ascii_strtoull(argv[4], NULL, 10));
        if (argc >= 2 && g_str_equal(argv[1], "managed-objects"))
                return managed_objects();
        if (argc >= 4 && g_str_equal(argv[1], "pages"))
                return pages(argv[2], (guint) g_ascii_strtoull(argv[3], NULL, 10));
        fprintf(stderr, "usage: %s objects | by-fd KIND [FILE] | statfs-by-fd FILE | managed-objects | pages FS COUNT |\n"
                "       files METHOD ARG... | files-walk DIR NAME SNAPSHOT | files-flood FILE COUNT DEPTH |\n"
                "       long-path PREFIX LENGTH\n",
                argv[0]);
        return 2;
}
