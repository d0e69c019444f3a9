/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* versions, deleted, restore, identity: files in the snapshots. */
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model.h"
#include "subvolctl.h"

#define FILES_IFACE "org.subvold.Subvold1.Files"

/* A time as versions prints it, local time to the second. */
static const char *format_time(uint64_t usec, char buf[static 32]) {
        time_t t = (time_t) (usec / 1000000);
        struct tm tm;

        if (usec == 0 || !localtime_r(&t, &tm) || strftime(buf, 32, "%Y-%m-%d %H:%M:%S", &tm) == 0)
                return "-";
        return buf;
}

static int open_file(const char *path, int flags, int *ret) {
        int fd = open(path, flags | O_RDONLY | O_CLOEXEC | O_NOCTTY);

        if (fd < 0) {
                fprintf(stderr, "Cannot open %s: %s\n", path, strerror(errno));
                return EXIT_FAILED;
        }
        *ret = fd;
        return 0;
}

/* One entry of ListFileVersions or ListDeletedFiles. */
typedef struct Entry {
        char *snapshot, *name;  /* name: Path or Name, without its NUL */
        char *type, *match;
        uint64_t snapshot_time, inode, size, mtime, ctime;
        int same;
} Entry;

static void entries_free(Entry *e, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(e[i].snapshot), free(e[i].name), free(e[i].type), free(e[i].match);
        free(e);
}

/* A string or object path into *@ret. */
static int read_string(sd_bus_message *m, char **ret) {
        const char *s;
        char type;
        int r = sd_bus_message_peek_type(m, &type, NULL);

        if (r >= 0)
                r = sd_bus_message_read_basic(m, type, &s);
        if (r < 0)
                return r;
        free(*ret);
        *ret = strdup(s);
        return *ret ? 0 : -ENOMEM;
}

static int read_entry(sd_bus_message *m, Entry *e) {
        int r;

        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *key, *contents;
                char type;

                r = sd_bus_message_read(m, "s", &key);
                if (r >= 0)
                        r = sd_bus_message_peek_type(m, &type, &contents);
                if (r < 0)
                        return r;
                if (streq(contents, "ay") && (streq(key, "Path") || streq(key, "Name"))) {
                        const void *p;
                        size_t len;

                        r = sd_bus_message_enter_container(m, 'v', "ay");
                        if (r >= 0)
                                r = sd_bus_message_read_array(m, 'y', &p, &len);
                        /* A bytestring: its NUL is not part of the name. */
                        if (r >= 0 && !(e->name = memdup_suffix0(p, len > 0 ? len - 1 : 0)))
                                r = -ENOMEM;
                        if (r >= 0)
                                r = sd_bus_message_exit_container(m);
                } else if (streq(key, "Snapshot"))
                        r = sd_bus_message_enter_container(m, 'v', "o") >= 0 ? read_string(m, &e->snapshot) : -EBADMSG;
                else if (streq(key, "Type") || streq(key, "Match")) {
                        r = sd_bus_message_enter_container(m, 'v', "s");
                        if (r >= 0)
                                r = read_string(m, streq(key, "Type") ? &e->type : &e->match);
                } else if (streq(key, "SameAsCurrent"))
                        r = sd_bus_message_read(m, "v", "b", &e->same);
                else {
                        uint64_t *v = streq(key, "SnapshotTime") ? &e->snapshot_time : streq(key, "Inode") ? &e->inode :
                                      streq(key, "Size") ? &e->size : streq(key, "ModificationTime") ? &e->mtime :
                                      streq(key, "ChangeTime") ? &e->ctime : NULL;
                        r = v ? sd_bus_message_read(m, "v", "t", v) : sd_bus_message_skip(m, "v");
                }
                if (r >= 0 && (streq(key, "Snapshot") || streq(key, "Type") || streq(key, "Match")))
                        r = sd_bus_message_exit_container(m);
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        return r;
}

/* Calls a Files method that answers aa{sv}. */
static int list_entries(sd_bus *bus, const char *method, int fd, Entry **ret, size_t *ret_n) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *call = NULL, *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        Entry *e = NULL;
        size_t n = 0, allocated = 0;
        int r;

        r = sd_bus_message_new_method_call(bus, &call, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, FILES_IFACE, method);
        if (r >= 0)
                r = sd_bus_message_append(call, "h", fd);
        if (r >= 0 && streq(method, "ListFileVersions"))
                r = arg_all ? sd_bus_message_append(call, "a{sv}", 1, "All", "b", 1) :
                              sd_bus_message_append(call, "a{sv}", 0);
        if (r < 0)
                return parse_failed(r);
        r = sd_bus_call(bus, call, 0, &error, &reply);
        if (r < 0) {
                r = log_bus_error(&error, r, NULL);
                sd_bus_error_free(&error);
                return -r;
        }
        r = sd_bus_message_enter_container(reply, 'a', "a{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'a', "{sv}")) > 0) {
                if (grow_array(&e, &allocated, n + 1, sizeof(Entry)) < 0) {
                        r = -ENOMEM;
                        break;
                }
                e[n] = (Entry) {};
                r = read_entry(reply, &e[n++]);
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
        }
        if (r < 0) {
                entries_free(e, n);
                return parse_failed(r);
        }
        *ret = e;
        *ret_n = n;
        return 0;
}

/* The DisplayPath of a Subvolume object, or its object path. */
static char *snapshot_display(sd_bus *bus, const char *object) {
        char *s = NULL;

        if (sd_bus_get_property_string(bus, SUBVOLD_BUS_NAME, object, SUBVOLD_IFACE_SUBVOLUME, "DisplayPath", NULL,
                                       &s) < 0)
                return strdup(object);
        return s;
}

static void json_entry(sd_bus *bus, const Entry *e, bool version) {
        _cleanup_free_ char *where = snapshot_display(bus, e->snapshot);

        json_begin_object();
        json_key("snapshot");
        json_string(e->snapshot);
        json_key("snapshot_path");
        json_string(where ? where : "");
        json_key("snapshot_time");
        json_u64_or_null(e->snapshot_time, 0);
        json_key(version ? "path" : "name");
        json_bytes(e->name ? e->name : "");
        if (version) {
                json_key("match");
                json_string(e->match ? e->match : "");
                json_key("inode");
                json_u64(e->inode);
                json_key("change_time");
                json_u64_or_null(e->ctime, 0);
                json_key("same_as_current");
                json_bool(e->same);
        } else {
                json_key("type");
                json_string(e->type ? e->type : "");
        }
        json_key("size");
        json_u64(e->size);
        json_key("modification_time");
        json_u64_or_null(e->mtime, 0);
        json_end_object();
}

/* versions and deleted: ListFileVersions or ListDeletedFiles on @path,
 * as a table (@none when empty) or JSON. */
static int list_files(sd_bus *bus, const char *path, bool version) {
        static const char *const headers[2][6] = {
                { "NAME", "TYPE", "SIZE", "MODIFIED", "SNAPSHOT TIME", "SNAPSHOT" },
                { "SNAPSHOT TIME", "SIZE", "MODIFIED", "MATCH", "CURRENT", "SNAPSHOT" },
        };
        static const bool right[2][6] = { { false, false, true }, { false, true } };
        _cleanup_(table_freep) Table *table = NULL;
        _cleanup_close_ int fd = -1;
        Entry *e = NULL;
        size_t n = 0;
        int r;

        r = open_file(path, version ? 0 : O_DIRECTORY, &fd);
        if (r == 0)
                r = -list_entries(bus, version ? "ListFileVersions" : "ListDeletedFiles", fd, &e, &n);
        if (r != 0)
                return r;
        if (arg_json)
                json_begin_array();
        else if (n == 0)
                printf("%s\n", version ? "No earlier versions in the snapshots." :
                                        "The snapshots hold nothing that this directory lost.");
        else if (!(table = table_new(6, headers[version], right[version])))
                r = EXIT_FAILED;
        for (size_t i = 0; r == 0 && i < n; i++) {
                _cleanup_free_ char *where = NULL, *shown = NULL, *name = NULL;
                char t1[32], t2[32], size[32];

                if (arg_json) {
                        json_entry(bus, &e[i], version);
                        continue;
                }
                where = snapshot_display(bus, e[i].snapshot);
                shown = term_escape(where ? where : "", false);
                name = term_escape(e[i].name ? e[i].name : "", true);
                const char *cells[2][6] = {
                        { name, e[i].type ? e[i].type : "-", format_size(e[i].size, size), format_time(e[i].mtime, t1),
                          format_time(e[i].snapshot_time, t2), shown },
                        { format_time(e[i].snapshot_time, t1), format_size(e[i].size, size),
                          format_time(e[i].mtime, t2), e[i].match ? e[i].match : "-", e[i].same ? "*" : "", shown },
                };
                if (table_add(table, cells[version]) < 0)
                        r = EXIT_FAILED;
        }
        if (arg_json) {
                json_end_array();
                json_done();
        } else if (table)
                table_print(table);
        entries_free(e, n);
        return r;
}

int cmd_versions(sd_bus *bus, int argc, char **argv) {
        return list_files(bus, argv[0], true);
}

int cmd_deleted(sd_bus *bus, int argc, char **argv) {
        return list_files(bus, argv[0], false);
}

/* The snapshot --from names: an object path, a path in a snapshot, or a
 * time as versions/deleted print it, looked up among @e. */
static int resolve_snapshot(sd_bus *bus, const char *spec, const Entry *e, size_t n, char **ret) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_close_ int fd = -1;
        const char *object;
        int r;

        if (strncmp(spec, SUBVOLD_MANAGER_PATH "/", strlen(SUBVOLD_MANAGER_PATH "/")) == 0)
                return (*ret = strdup(spec)) ? 0 : EXIT_FAILED;
        for (size_t i = 0; i < n; i++) {
                char t[32];
                if (streq(format_time(e[i].snapshot_time, t), spec))
                        return (*ret = strdup(e[i].snapshot)) ? 0 : EXIT_FAILED;
        }
        fd = open(spec, O_PATH | O_CLOEXEC);
        if (fd < 0) {
                fprintf(stderr, "No snapshot \"%s\": neither an object path, a time that versions printed, nor a "
                                "path.\n", spec);
                return EXIT_NOT_FOUND;
        }
        r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER, "GetSubvolumeByFd",
                               &error, &reply, "h", fd);
        if (r >= 0)
                r = sd_bus_message_read(reply, "o", &object);
        if (r < 0) {
                r = log_bus_error(&error, r, NULL);
                sd_bus_error_free(&error);
                return r;
        }
        return (*ret = strdup(object)) ? 0 : EXIT_FAILED;
}

/* Copies @src to @dst: a reflink where the filesystem can (the version's
 * extents are shared, nothing is written), else copy_file_range() (same
 * filesystem type), else read and write. */
static int copy_data(int src, int dst, bool *ret_reflink) {
        char buf[64 * 1024];
        ssize_t k;

        *ret_reflink = ioctl(dst, FICLONE, src) >= 0;
        if (*ret_reflink)
                return 0;
        while ((k = copy_file_range(src, NULL, dst, NULL, 1 << 30, 0)) > 0)
                ;
        if (k == 0)
                return 0;
        if (errno != EXDEV && errno != EOPNOTSUPP && errno != ENOSYS && errno != EINVAL)
                return -errno;
        while ((k = read(src, buf, sizeof buf)) > 0)
                for (ssize_t done = 0; done < k;) {
                        ssize_t w = write(dst, buf + done, (size_t) (k - done));
                        if (w < 0)
                                return -errno;
                        done += w;
                }
        return k < 0 ? -errno : 0;
}

int cmd_restore(sd_bus *bus, int argc, char **argv) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *call = NULL, *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_free_ char *dir = NULL, *snapshot = NULL, *dest = NULL, *tmp = NULL;
        _cleanup_close_ int file = -1, parent = -1, version = -1, out = -1;
        const char *name, *method;
        Entry *e = NULL;
        size_t n = 0;
        struct stat st;
        bool reflink, deleted;
        char stamp[32];
        time_t t = 0;
        struct tm tm;
        int r, fd;

        if (argc != 1 || !arg_from) {
                fprintf(stderr, "restore takes one FILE (or DIR/NAME of a deleted file) and --from SNAPSHOT.\n");
                return EXIT_USAGE;
        }
        dir = strdup(argv[0]);
        if (!dir)
                return EXIT_FAILED;
        name = path_last_component(argv[0]);
        *(char *) path_last_component(dir) = 0;
        /* A file that is there now: its version; one that is gone: a
         * deleted file of its directory. */
        file = open(argv[0], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        deleted = file < 0 && errno == ENOENT;
        if (file < 0 && !deleted)
                return open_file(argv[0], 0, &file);
        r = open_file(*dir ? dir : ".", O_DIRECTORY, &parent);
        if (r != 0)
                return r;
        r = -list_entries(bus, deleted ? "ListDeletedFiles" : "ListFileVersions", deleted ? parent : file, &e, &n);
        if (r == 0)
                r = resolve_snapshot(bus, arg_from, e, n, &snapshot);
        for (size_t i = 0; r == 0 && i < n; i++)
                if (streq(e[i].snapshot, snapshot) && (!deleted || streq(e[i].name, name)))
                        t = (time_t) (e[i].snapshot_time / 1000000);
        entries_free(e, n);
        if (r != 0)
                return r;
        method = deleted ? "OpenDeletedFile" : "OpenFileVersion";
        r = sd_bus_message_new_method_call(bus, &call, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, FILES_IFACE, method);
        if (r >= 0)
                r = sd_bus_message_append(call, "h", deleted ? parent : file);
        if (r >= 0 && deleted)
                r = sd_bus_message_append_array(call, 'y', name, strlen(name) + 1);
        if (r >= 0)
                r = sd_bus_message_append(call, "o", snapshot);
        if (r >= 0)
                r = sd_bus_call(bus, call, 0, &error, &reply);
        if (r >= 0)
                r = sd_bus_message_read(reply, "h", &fd);
        if (r < 0) {
                r = log_bus_error(&error, r, NULL);
                sd_bus_error_free(&error);
                return r;
        }
        version = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (version < 0 || fstat(version, &st) < 0 || !S_ISREG(st.st_mode)) {
                fprintf(stderr, "Only regular files can be restored.\n");
                return EXIT_FAILED;
        }
        /* Next to the file, named with the snapshot's date. */
        if (arg_to)
                dest = strdup(arg_to);
        else if (localtime_r(&(time_t) { t }, &tm) && strftime(stamp, sizeof stamp, "%Y-%m-%d_%H-%M-%S", &tm))
                r = asprintf(&dest, "%s.%s", argv[0], stamp);
        if (r < 0 || !dest)
                return EXIT_FAILED;
        /* Never over an existing file without --force; with it, replaced
         * whole, not rewritten in place. */
        if (!arg_force)
                out = open(dest, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, st.st_mode & 07777);
        else if (asprintf(&tmp, "%s.XXXXXX", dest) >= 0)
                out = mkostemp(tmp, O_CLOEXEC);
        if (out < 0) {
                fprintf(stderr, errno == EEXIST ? "%s exists; --force replaces it.\n" : "Cannot create %s: %m\n", dest);
                return EXIT_FAILED;
        }
        r = copy_data(version, out, &reflink);
        if (r >= 0 && (fchmod(out, st.st_mode & 07777) < 0 ||
                       futimens(out, (struct timespec[]) { st.st_atim, st.st_mtim }) < 0))
                r = -errno;
        if (r >= 0 && tmp && rename(tmp, dest) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlink(tmp ?: dest);
                fprintf(stderr, "Cannot write %s: %s\n", dest, strerror(-r));
                return EXIT_FAILED;
        }
        printf("Restored %s as %s (%s).\n", argv[0], dest, reflink ? "a reflink: no data copied" : "copied");
        return EXIT_OK;
}

/* GetFileIdentity's a{sv}, as show prints an object. */
static int print_identity(sd_bus_message *reply) {
        Object o;
        int r = object_init(&o, &identity_schema, "");

        if (r >= 0)
                r = object_read(&o, reply, NULL);
        if (r < 0) {
                object_done(&o);
                return -parse_failed(r);
        }
        if (arg_json) {
                object_print_json(&o, NULL, false);
                json_done();
        } else
                object_print_text(&o);
        object_done(&o);
        return EXIT_OK;
}

int cmd_identity(sd_bus *bus, int argc, char **argv) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_close_ int a = -1, b = -1;
        const char *relation;
        int r;

        if (argc < 1 || argc > 2) {
                fprintf(stderr, "identity takes FILE [FILE2].\n");
                return EXIT_USAGE;
        }
        r = open_file(argv[0], 0, &a);
        if (r == 0 && argc == 2)
                r = open_file(argv[1], 0, &b);
        if (r != 0)
                return r;
        if (argc == 2) {
                r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, FILES_IFACE, "CompareFiles", &error,
                                       &reply, "hh", a, b);
                if (r >= 0)
                        r = sd_bus_message_read(reply, "s", &relation);
                if (r < 0) {
                        r = log_bus_error(&error, r, NULL);
                        sd_bus_error_free(&error);
                        return r;
                }
                if (arg_json) {
                        json_begin_object();
                        json_key("relation");
                        json_string(relation);
                        json_end_object();
                        json_done();
                } else
                        printf("%s\n", relation);
                /* For scripts: 0 the same file, 10 copies of one file. */
                return streq(relation, "same") ? EXIT_OK : streq(relation, "same-lineage") ? 10 : EXIT_FAILED;
        }
        r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, FILES_IFACE, "GetFileIdentity", &error,
                               &reply, "h", a);
        if (r < 0) {
                r = log_bus_error(&error, r, NULL);
                sd_bus_error_free(&error);
                return r;
        }
        return print_identity(reply);
}

