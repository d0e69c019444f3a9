/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reading subvold's model, and naming what the user gave. */
#include <ctype.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mounts.h"
#include "subvolctl.h"

int log_bus_error(const sd_bus_error *e, int r, const char *what) {
        if (sd_bus_error_has_name(e, SUBVOLD_ERROR_NOT_BTRFS)) {
                if (what)
                        fprintf(stderr, "%s is not on a btrfs filesystem.\n", what);
                else
                        fprintf(stderr, "%s\n", e->message);
                return EXIT_NOT_BTRFS;
        }
        if (sd_bus_error_has_name(e, SUBVOLD_ERROR_NOT_FOUND)) {
                if (what)
                        fprintf(stderr, "%s: %s\n", what, e->message);
                else
                        fprintf(stderr, "%s\n", e->message);
                return EXIT_NOT_FOUND;
        }
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER,
                                   SD_BUS_ERROR_NO_REPLY, SD_BUS_ERROR_DISCONNECTED)) {
                fprintf(stderr, "subvold is not running (%s).\n", e->message);
                return EXIT_NO_DAEMON;
        }
        if (what)
                fprintf(stderr, "%s: ", what);
        fprintf(stderr, "subvold: %s\n", sd_bus_error_is_set(e) ? e->message : strerror(-r));
        return EXIT_FAILED;
}

int parse_failed(int r) {
        fprintf(stderr, "Cannot parse subvold's reply: %s\n", strerror(-r));
        return -EXIT_FAILED;
}

int connect_bus(sd_bus **ret) {
        int r;

        if (arg_address) {
                r = sd_bus_new(ret);
                if (r >= 0)
                        r = sd_bus_set_address(*ret, arg_address);
                if (r >= 0)
                        r = sd_bus_set_bus_client(*ret, true);
                if (r >= 0)
                        r = sd_bus_start(*ret);
        } else
                r = sd_bus_open_system(ret);
        if (r < 0) {
                fprintf(stderr, "Cannot connect to the bus: %s\n", strerror(-r));
                return EXIT_NO_DAEMON;
        }
        return 0;
}

int call_by_path(sd_bus *bus, const char *path, const char *method, sd_bus_message **ret) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        /* By fd: symlinks are followed and the file must exist, as a user
         * expects of a path on the command line. */
        _cleanup_close_ int fd = open(path, O_PATH | O_CLOEXEC);
        int r;

        if (fd < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -EXIT_FAILED;
        }
        r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER, method, &error,
                               ret, "h", fd);
        return r < 0 ? -log_bus_error(&error, r, path) : 0;
}

int subvolume_of_path(sd_bus *bus, const char *path, char **ret) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
        const char *object;
        int r = call_by_path(bus, path, "GetSubvolumeByFd", &reply);

        if (r < 0)
                return r;
        r = sd_bus_message_read(reply, "o", &object);
        if (r < 0)
                return parse_failed(r);
        return (*ret = strdup(object)) ? 0 : -EXIT_FAILED;
}

int subvolume_in(sd_bus *bus, const Objects *o, const char *path, const Object **ret) {
        _cleanup_free_ char *object = NULL;
        int r = subvolume_of_path(bus, path, &object);

        if (r < 0)
                return r;
        *ret = find_sv(o, object);
        return 0;
}

void objects_done(Objects *o) {
        for (size_t i = 0; i < o->n_svs; i++)
                object_done(&o->svs[i]);
        for (size_t i = 0; i < o->n_fss; i++)
                object_done(&o->fss[i]);
        free(o->svs);
        free(o->fss);
        *o = (Objects) {};
}

static Object *add_object(Object **array, size_t *n, size_t *allocated, const Schema *schema, const char *path) {
        if (grow_array(array, allocated, *n + 1, sizeof(Object)) < 0 ||
            object_init(&(*array)[*n], schema, path) < 0)
                return NULL;
        return &(*array)[(*n)++];
}

/* Reads one GetSubvolumes page, a{oa{sv}}, into @o. */
static int read_subvolumes(sd_bus_message *m, Objects *o) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{oa{sv}}");
        while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "oa{sv}")) > 0) {
                const char *path;
                Object *s;

                r = sd_bus_message_read(m, "o", &path);
                if (r < 0)
                        break;
                s = add_object(&o->svs, &o->n_svs, &o->allocated_svs, &subvolume_schema, path);
                r = s ? object_read(s, m, NULL) : -ENOMEM;
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        }
        return r < 0 ? r : sd_bus_message_exit_container(m);
}

/* A call that failed: 0 when its object went away meanwhile (the model
 * may change between two calls: what is gone is simply not listed), else
 * a message and the exit code, negative. */
static int call_failed(const sd_bus_error *e, int r) {
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_OBJECT))
                return 0;
        return -log_bus_error(e, r, NULL);
}

/* About 1 MiB a page: the calls' overhead is lost in it, and subvold never
 * builds more than that at once for us. */
#define SUBVOLUMES_PER_PAGE 1000u

/* Reads one filesystem's properties and all its subvolumes into @o. */
static int load_filesystem(sd_bus *bus, const char *path, Objects *o) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *props = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        uint64_t next = 0;
        Object *f;
        int r;

        r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, path, "org.freedesktop.DBus.Properties", "GetAll", &error,
                               &props, "s", SUBVOLD_IFACE_FS);
        if (r < 0)
                return call_failed(&error, r);
        f = add_object(&o->fss, &o->n_fss, &o->allocated_fss, &filesystem_schema, path);
        r = f ? object_read(f, props, NULL) : -ENOMEM;
        if (r < 0)
                return parse_failed(r);
        do {
                _cleanup_(sd_bus_message_unrefp_) sd_bus_message *page = NULL;

                r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, path, SUBVOLD_IFACE_FS, "GetSubvolumes", &error, &page,
                                       "tu", next, SUBVOLUMES_PER_PAGE);
                if (r < 0)
                        return call_failed(&error, r);
                r = read_subvolumes(page, o);
                if (r >= 0)
                        r = sd_bus_message_read(page, "t", &next);
                if (r < 0)
                        return parse_failed(r);
        } while (next != 0);
        return 0;
}

/* What tables call a filesystem: its label, or the first 8 hex digits of
 * its UUID when it has none or shares it with another; escaped for the
 * terminal with blanks as \x20, as findmnt writes them, so that the
 * columns still split on white space. */
static char *fs_name(const Objects *o, const Object *f) {
        const char *label = obj_str(f, FS_LABEL_BYTES);
        bool unique = *label;

        for (size_t i = 0; unique && i < o->n_fss; i++)
                unique = &o->fss[i] == f || !streq(obj_str(&o->fss[i], FS_LABEL_BYTES), label);
        if (!unique)
                return strndup(obj_str(f, FS_UUID), 8);
        return term_escape(label, true);
}

static int cmp_sv(const void *a, const void *b) {
        const Object *x = a, *y = b;
        int c = strcmp(obj_str(x, SV_FILESYSTEM), obj_str(y, SV_FILESYSTEM));
        uint64_t i = obj_u64(x, SV_ID), j = obj_u64(y, SV_ID);

        return c ? c : (i > j) - (i < j);
}

int load_objects(sd_bus *bus, Objects *o) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_strv_free_ char **filesystems = NULL;
        int r = 0;

        *o = (Objects) {};
        if (sd_bus_get_property_strv(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER,
                                     "Filesystems", &error, &filesystems) < 0)
                return -log_bus_error(&error, -EIO, NULL);
        for (char **f = filesystems; r >= 0 && *f; f++)
                r = load_filesystem(bus, *f, o);
        for (size_t i = 0; r >= 0 && i < o->n_fss; i++)
                if (!(o->fss[i].name = fs_name(o, &o->fss[i])))
                        r = -EXIT_FAILED;
        if (r < 0) {
                objects_done(o);
                return r;
        }
        qsort(o->svs, o->n_svs, sizeof(Object), cmp_sv);
        return 0;
}

const Object *find_fs(const Objects *o, const char *path) {
        for (size_t i = 0; i < o->n_fss; i++)
                if (streq(o->fss[i].path, path))
                        return &o->fss[i];
        return NULL;
}

const Object *find_sv(const Objects *o, const char *path) {
        for (size_t i = 0; i < o->n_svs; i++)
                if (streq(o->svs[i].path, path))
                        return &o->svs[i];
        return NULL;
}

/* The same UUID, ignoring dashes and case. */
static bool uuid_equal(const char *u, const char *s) {
        for (; *u || *s; u += *u != 0, s += *s != 0) {
                while (*u == '-')
                        u++;
                while (*s == '-')
                        s++;
                if (tolower((unsigned char) *u) != tolower((unsigned char) *s))
                        return false;
        }
        return true;
}

int resolve_fs(sd_bus *bus, const Objects *o, const char *spec, const Object **ret) {
        const Object *match = NULL;

        for (size_t i = 0; i < o->n_fss; i++) {
                const Object *f = &o->fss[i];

                if (streq(spec, f->path) || uuid_equal(obj_str(f, FS_UUID), spec))
                        return *ret = f, 0;
                if (streq(spec, obj_str(f, FS_LABEL_BYTES)) || streq(spec, f->name)) {
                        if (match) {
                                fprintf(stderr, "Two filesystems are labelled \"%s\"; name one by UUID.\n", spec);
                                return -EXIT_USAGE;
                        }
                        match = f;
                }
        }
        if (match)
                return *ret = match, 0;
        /* Any other existing path: the filesystem it is on. */
        if (!path_startswith(spec, SUBVOLD_MANAGER_PATH) && access(spec, F_OK) == 0) {
                const Object *s;
                int r = subvolume_in(bus, o, spec, &s);

                if (r < 0)
                        return r;
                if (s && (*ret = find_fs(o, obj_str(s, SV_FILESYSTEM))))
                        return 0;
        }
        fprintf(stderr, "No btrfs filesystem \"%s\" is known to subvold (give a label, a UUID, a path or an "
                        "object path).\n", spec);
        return -EXIT_NOT_FOUND;
}

const char *mount_point_of(const Objects *o, const Object *s) {
        const Object *f = find_fs(o, obj_str(s, SV_FILESYSTEM));

        for (char **a = obj_strv(s, SV_ACCESS_PATHS); f && a && *a; a++)
                for (char **m = obj_strv(f, FS_MOUNT_POINTS); m && *m; m++)
                        if (streq(*a, *m))
                                return *a;
        return NULL;
}
