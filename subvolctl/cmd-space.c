/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* list, df, filesystems, show: what subvolumes and filesystems hold. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mounts.h"
#include "subvolctl.h"

/* ---- columns, for --output ---- */

typedef struct Column {
        const char *name, *header;
        bool right;
} Column;

#define COLUMNS_MAX 32

/* --output (comma-separated names of @columns), or @defaults. */
static int parse_columns(const Column *columns, size_t n, const int *defaults, size_t n_defaults, int *ret,
                         size_t *ret_n) {
        _cleanup_free_ char *spec = NULL;
        char *save = NULL;

        *ret_n = 0;
        if (!arg_output) {
                memcpy(ret, defaults, n_defaults * sizeof(int));
                *ret_n = n_defaults;
                return 0;
        }
        spec = strdup(arg_output);
        if (!spec)
                return -ENOMEM;
        for (char *w = strtok_r(spec, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
                size_t c = 0;

                while (c < n && !streq(w, columns[c].name))
                        c++;
                if (c == n || *ret_n == COLUMNS_MAX) {
                        _cleanup_free_ char *e = term_escape(w, false);
                        fprintf(stderr, c == n ? "Unknown column \"%s\"; see --help.\n" : "Too many columns (\"%s\").\n",
                                e ? e : "?");
                        return -EINVAL;
                }
                ret[(*ret_n)++] = (int) c;
        }
        if (*ret_n == 0)
                fprintf(stderr, "--output names no column.\n");
        return *ret_n > 0 ? 0 : -EINVAL;
}

static Table *table_for(const Column *columns, const int *chosen, size_t n) {
        const char *headers[COLUMNS_MAX];
        bool right[COLUMNS_MAX];

        for (size_t i = 0; i < n; i++) {
                headers[i] = columns[chosen[i]].header;
                right[i] = columns[chosen[i]].right;
        }
        return table_new(n, headers, right);
}

static void free_cells(char **cells, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(cells[i]);
}

/* ---- list ---- */

enum {
        LIST_FS, LIST_ID, LIST_PARENT, LIST_FLAGS, LIST_REFERENCED, LIST_EXCLUSIVE, LIST_SNAPSHOTS, LIST_WRITTEN,
        LIST_INODES, LIST_RLIMIT, LIST_ELIMIT, LIST_SOURCE, LIST_CREATED, LIST_UUID, LIST_PATH, _LIST_MAX
};

static const Column list_columns[_LIST_MAX] = {
        [LIST_FS] = { "fs", "FILESYSTEM", false },
        [LIST_ID] = { "id", "ID", false },
        [LIST_PARENT] = { "parent", "PARENT", false },
        [LIST_FLAGS] = { "flags", "FLAGS", false },
        [LIST_REFERENCED] = { "referenced", "REFERENCED", true },
        [LIST_EXCLUSIVE] = { "exclusive", "EXCLUSIVE", true },
        [LIST_SNAPSHOTS] = { "snapshots", "SNAPSHOTS", true },
        [LIST_WRITTEN] = { "written", "WRITTEN", true },
        [LIST_INODES] = { "inodes", "INODES", true },
        [LIST_RLIMIT] = { "rlimit", "REF LIMIT", true },
        [LIST_ELIMIT] = { "elimit", "EXCL LIMIT", true },
        [LIST_SOURCE] = { "source", "SOURCE", false },
        [LIST_CREATED] = { "created", "CREATED", false },
        [LIST_UUID] = { "uuid", "UUID", false },
        [LIST_PATH] = { "path", "PATH", false },
};

static char *list_cell(const Objects *o, const Object *s, int column) {
        const Object *f = find_fs(o, obj_str(s, SV_FILESYSTEM));
        char *c = NULL;

        switch (column) {
        case LIST_FS: return strdup(f && f->name ? f->name : "-");
        case LIST_ID: return value_to_text(&s->values[SV_ID], KIND_NUMBER);
        case LIST_PARENT: return value_to_text(&s->values[SV_PARENT_ID], KIND_NUMBER);
        case LIST_FLAGS:
                return asprintf(&c, "%c%c", obj_u64(s, SV_IS_SNAPSHOT) ? 'S' : '-',
                                obj_u64(s, SV_READ_ONLY) ? 'R' : '-') < 0 ? NULL : c;
        case LIST_REFERENCED: return value_to_text(&s->values[SV_REFERENCED], KIND_SIZE);
        case LIST_EXCLUSIVE: return value_to_text(&s->values[SV_EXCLUSIVE], KIND_SIZE);
        case LIST_SNAPSHOTS: return value_to_text(&s->values[SV_SNAPSHOTS_EXCLUSIVE], KIND_SIZE);
        case LIST_WRITTEN: return value_to_text(&s->values[SV_WRITTEN], KIND_SIZE);
        case LIST_INODES: return value_to_text(&s->values[SV_INODES], KIND_COUNT);
        case LIST_RLIMIT: return value_to_text(&s->values[SV_REFERENCED_LIMIT], KIND_LIMIT);
        case LIST_ELIMIT: return value_to_text(&s->values[SV_EXCLUSIVE_LIMIT], KIND_LIMIT);
        case LIST_SOURCE: return value_to_text(&s->values[SV_USAGE_SOURCE], KIND_STRING);
        case LIST_CREATED: return value_to_text(&s->values[SV_CREATION_TIME], KIND_TIME);
        case LIST_UUID: return value_to_text(&s->values[SV_UUID], KIND_UUID);
        default: return term_escape(obj_str(s, SV_PATH), true);
        }
}

int cmd_list(sd_bus *bus, int argc, char **argv) {
        static const int defaults[] = { LIST_FS, LIST_ID, LIST_FLAGS, LIST_REFERENCED, LIST_EXCLUSIVE, LIST_SNAPSHOTS,
                                        LIST_WRITTEN, LIST_INODES, LIST_PATH };
        _cleanup_(table_freep) Table *table = NULL;
        const Object *fs = NULL;
        int columns[COLUMNS_MAX], r;
        size_t n_columns, shown = 0;
        Objects o;

        if (parse_columns(list_columns, _LIST_MAX, defaults, ELEMENTSOF(defaults), columns, &n_columns) < 0)
                return EXIT_USAGE;
        r = load_objects(bus, &o);
        if (r < 0)
                return -r;
        if (arg_fs && (r = resolve_fs(bus, &o, arg_fs, &fs)) < 0)
                goto finish;
        if (arg_json)
                json_begin_array();
        else if (!(table = table_for(list_columns, columns, n_columns))) {
                r = -EXIT_FAILED;
                goto finish;
        }
        for (size_t i = 0; i < o.n_svs; i++) {
                const Object *s = &o.svs[i];
                char *cells[COLUMNS_MAX];

                if ((arg_snapshots == 1 && !obj_u64(s, SV_IS_SNAPSHOT)) ||
                    (arg_snapshots == 0 && obj_u64(s, SV_IS_SNAPSHOT)) ||
                    (fs && !streq(fs->path, obj_str(s, SV_FILESYSTEM))))
                        continue;
                shown++;
                if (arg_json) {
                        object_print_json(s, NULL, true);
                        continue;
                }
                for (size_t c = 0; c < n_columns; c++)
                        cells[c] = list_cell(&o, s, columns[c]);
                r = table_add(table, (const char *const *) cells);
                free_cells(cells, n_columns);
                if (r < 0)
                        goto finish;
        }
        if (arg_json) {
                json_end_array();
                json_done();
        } else {
                table_print(table);
                if (arg_legend)
                        printf("\n%zu subvolumes listed. FLAGS: S snapshot, R read-only.\n", shown);
        }
        r = 0;
finish:
        objects_done(&o);
        return r < 0 ? (r == -ENOMEM ? EXIT_FAILED : -r) : EXIT_OK;
}

/* ---- df ---- */

/* GetStatfs's a{sv}: the numbers df shows. */
typedef struct Df {
        uint64_t bsize, blocks, bfree, bavail, files, ffree;
        char *source;
} Df;

static int read_statfs(sd_bus_message *m, Df *d) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *key, *contents, *s;
                uint64_t *field = NULL;

                r = sd_bus_message_read(m, "s", &key);
                if (r >= 0)
                        r = sd_bus_message_peek_type(m, NULL, &contents);
                if (r < 0)
                        break;
                field = streq(key, "bsize") ? &d->bsize : streq(key, "blocks") ? &d->blocks :
                        streq(key, "bfree") ? &d->bfree : streq(key, "bavail") ? &d->bavail :
                        streq(key, "files") ? &d->files : streq(key, "ffree") ? &d->ffree : NULL;
                if (field && streq(contents, "t"))
                        r = sd_bus_message_read(m, "v", "t", field);
                else if (streq(key, "source") && streq(contents, "s")) {
                        r = sd_bus_message_read(m, "v", "s", &s);
                        if (r >= 0 && !(free(d->source), d->source = strdup(s)))
                                r = -ENOMEM;
                } else
                        r = sd_bus_message_skip(m, "v");
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        }
        return r < 0 ? r : sd_bus_message_exit_container(m);
}

enum {
        DF_SUBVOLUME, DF_FS, DF_SOURCE, DF_SIZE, DF_USED, DF_AVAIL, DF_PCENT, DF_RATIO, DF_ITOTAL, DF_IUSED,
        DF_IAVAIL, DF_IPCENT, DF_TARGET, _DF_MAX
};

/* Named as GNU df's --output names them where they mean the same. */
static const Column df_columns[_DF_MAX] = {
        [DF_SUBVOLUME] = { "subvolume", "SUBVOLUME", false },
        [DF_FS] = { "fs", "FILESYSTEM", false },
        [DF_SOURCE] = { "source", "SOURCE", false },
        [DF_SIZE] = { "size", "SIZE", true },
        [DF_USED] = { "used", "USED", true },
        [DF_AVAIL] = { "avail", "AVAIL", true },
        [DF_PCENT] = { "pcent", "USE%", true },
        [DF_RATIO] = { "ratio", "RATIO", true },
        [DF_ITOTAL] = { "itotal", "INODES", true },
        [DF_IUSED] = { "iused", "IUSED", true },
        [DF_IAVAIL] = { "iavail", "IFREE", true },
        [DF_IPCENT] = { "ipcent", "IUSE%", true },
        [DF_TARGET] = { "target", "MOUNTED ON", false },
};

/* One row's figures in bytes and counts; UNKNOWN where subvold does not
 * know them: size, used and use% with the usage unknown, the inode counts
 * when subvold has none (files 0: a subvolume holds at least its root
 * directory).  Free inodes are never known: btrfs has no count of them. */
typedef struct DfRow {
        uint64_t size, used, avail, pcent, itotal, iused;
} DfRow;

static DfRow df_row(const Df *d) {
        bool known = d->source && !streq(d->source, "none");
        uint64_t used = (d->blocks - d->bfree) * d->bsize, avail = d->bavail * d->bsize;

        return (DfRow) {
                .size = known ? d->blocks * d->bsize : UNKNOWN,
                .used = known ? used : UNKNOWN,
                .avail = avail,
                /* As df: used / (used + available), rounded up. */
                .pcent = !known ? UNKNOWN : used + avail ? (used * 100 + used + avail - 1) / (used + avail) : 0,
                .itotal = d->files ? d->files : UNKNOWN,
                .iused = d->files ? d->files - d->ffree : UNKNOWN,
        };
}

/* ZFS's compressratio: what the data would take uncompressed over what it
 * takes; 0 when unknown (quotas on, not measured). */
static double compress_ratio(const Object *s) {
        uint64_t logical = obj_u64(s, SV_LOGICAL_REFERENCED), referenced = obj_u64(s, SV_REFERENCED);

        if (logical == UNKNOWN || referenced == UNKNOWN || !s->values[SV_LOGICAL_REFERENCED].set)
                return 0;
        return referenced ? (double) logical / (double) referenced : 1;
}

static char *df_cell(const Objects *o, const Object *s, const Df *d, const char *target, int column) {
        const Object *f = find_fs(o, obj_str(s, SV_FILESYSTEM));
        DfRow row = df_row(d);
        char buf[32];

        switch (column) {
        case DF_SUBVOLUME: return term_escape(obj_str(s, SV_PATH), true);
        case DF_FS: return strdup(f && f->name ? f->name : "-");
        case DF_SOURCE: return term_escape(d->source ?: "none", true);
        case DF_SIZE: return strdup(format_size(row.size, buf));
        case DF_USED: return strdup(format_size(row.used, buf));
        case DF_AVAIL: return strdup(format_size(row.avail, buf));
        case DF_PCENT: return strdup(format_percent(row.pcent, buf));
        case DF_RATIO:
                if (compress_ratio(s) == 0)
                        return strdup("-");
                snprintf(buf, sizeof buf, "%.2fx", compress_ratio(s));
                return strdup(buf);
        case DF_ITOTAL: return strdup(format_count(row.itotal, buf));
        case DF_IUSED: return strdup(format_count(row.iused, buf));
        case DF_TARGET: return target ? term_escape(target, false) : strdup("-");
        default: return strdup("-");  /* free inodes and their use%: no count */
        }
}

static int df_add(const Objects *o, const Object *s, const Df *d, Table *table, const int *columns, size_t n) {
        const Object *f = find_fs(o, obj_str(s, SV_FILESYSTEM));
        const char *mounted = mount_point_of(o, s);
        char **access = obj_strv(s, SV_ACCESS_PATHS);
        /* With --all, a subvolume mounted nowhere shows where it is reachable. */
        const char *target = mounted ?: access && access[0] ? access[0] : NULL;
        DfRow row = df_row(d);
        char *cells[COLUMNS_MAX];
        int r;

        if (arg_json) {
                json_begin_object();
                json_key("object");
                json_string(s->path);
                json_key("filesystem");
                json_string(f ? obj_str(f, FS_UUID) : "");
                json_key("id");
                json_u64(obj_u64(s, SV_ID));
                json_key("path");
                json_bytes(obj_str(s, SV_PATH));
                json_key("display_path");
                json_string(obj_str(s, SV_DISPLAY_PATH));
                json_key("source");
                json_string(d->source ?: "none");
                json_key("size");
                json_u64_or_null(row.size, UNKNOWN);
                json_key("used");
                json_u64_or_null(row.used, UNKNOWN);
                json_key("available");
                json_u64_or_null(row.avail, UNKNOWN);
                json_key("use_percent");
                json_u64_or_null(row.pcent, UNKNOWN);
                json_key("compress_ratio");
                if (compress_ratio(s) == 0)
                        json_null();
                else
                        json_double(compress_ratio(s));
                json_key("inodes");
                json_u64_or_null(row.itotal, UNKNOWN);
                json_key("inodes_used");
                json_u64_or_null(row.iused, UNKNOWN);
                json_key("inodes_free");
                json_null();
                json_key("mounted");
                json_bool(mounted);
                json_key("mounted_on");
                if (target)
                        json_bytes(target);
                else
                        json_null();
                json_end_object();
                return 0;
        }
        for (size_t c = 0; c < n; c++)
                cells[c] = df_cell(o, s, d, target, columns[c]);
        r = table_add(table, (const char *const *) cells);
        free_cells(cells, n);
        return r;
}

/* GetStatfs of every subvolume df shows, with up to STATFS_IN_FLIGHT
 * calls under way at once: one after another, df waited for a round trip
 * per subvolume (35 s at 100,000 subvolumes).  dbus-daemon holds at most
 * 128 calls per connection waiting for their replies unless configured
 * otherwise. */
#define STATFS_IN_FLIGHT 64

typedef struct StatfsCall {
        Df df;
        bool wanted;         /* df shows this subvolume */
        bool ok;             /* false: failed, or the subvolume went away meanwhile */
        size_t *in_flight;
} StatfsCall;

static int on_statfs(sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        StatfsCall *c = userdata;

        (*c->in_flight)--;
        /* An error: the subvolume went away meanwhile, or subvold says why. */
        if (sd_bus_message_is_method_error(reply, NULL)) {
                if (!sd_bus_error_has_name(sd_bus_message_get_error(reply), SD_BUS_ERROR_UNKNOWN_OBJECT))
                        (void) log_bus_error(sd_bus_message_get_error(reply), -EIO, NULL);
        } else
                c->ok = read_statfs(reply, &c->df) >= 0;
        return 0;
}

static int statfs_all(sd_bus *bus, const Objects *o, StatfsCall *calls) {
        size_t next = 0, in_flight = 0;
        int r;

        for (;;) {
                for (; next < o->n_svs && in_flight < STATFS_IN_FLIGHT; next++) {
                        if (!calls[next].wanted)
                                continue;
                        calls[next].in_flight = &in_flight;
                        r = sd_bus_call_method_async(bus, NULL, SUBVOLD_BUS_NAME, o->svs[next].path,
                                                     SUBVOLD_IFACE_SUBVOLUME, "GetStatfs", on_statfs, &calls[next], "");
                        if (r < 0)
                                return r;
                        in_flight++;
                }
                if (in_flight == 0)
                        return 0;
                r = sd_bus_process(bus, NULL);
                if (r == 0)
                        r = sd_bus_wait(bus, UINT64_MAX);
                if (r < 0 && r != -EINTR)
                        return r;
        }
}

/* The subvolume holding @path and its statfs, by fd. */
static int statfs_of_path(sd_bus *bus, const Objects *o, const char *path, const Object **ret, Df *d) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
        const char *object;
        int r = call_by_path(bus, path, "GetStatfsByFd", &reply);

        if (r < 0)
                return -r;
        if (sd_bus_message_read(reply, "o", &object) < 0 || read_statfs(reply, d) < 0)
                return -parse_failed(-EBADMSG);
        /* Created after we read the model: not shown, as if it were not there. */
        *ret = find_sv(o, object);
        return 0;
}

int cmd_df(sd_bus *bus, int argc, char **argv) {
        static const int space[] = { DF_SUBVOLUME, DF_SIZE, DF_USED, DF_AVAIL, DF_PCENT, DF_RATIO, DF_TARGET };
        static const int inodes[] = { DF_SUBVOLUME, DF_ITOTAL, DF_IUSED, DF_IAVAIL, DF_IPCENT, DF_TARGET };
        _cleanup_(table_freep) Table *table = NULL;
        _cleanup_free_ StatfsCall *calls = NULL;
        int columns[COLUMNS_MAX], r, ret = EXIT_OK;
        size_t n_columns;
        Objects o;

        if (parse_columns(df_columns, _DF_MAX, arg_inodes ? inodes : space,
                          arg_inodes ? ELEMENTSOF(inodes) : ELEMENTSOF(space), columns, &n_columns) < 0)
                return EXIT_USAGE;
        r = load_objects(bus, &o);
        if (r < 0)
                return -r;
        calls = calloc(o.n_svs + 1, sizeof(StatfsCall));  /* + 1: not NULL for none */
        if (!calls || (!arg_json && !(table = table_for(df_columns, columns, n_columns)))) {
                ret = EXIT_FAILED;
                goto finish;
        }
        /* Without paths, as df does: the subvolumes mounted somewhere, or all. */
        for (size_t i = 0; argc == 0 && i < o.n_svs; i++)
                calls[i].wanted = arg_all || mount_point_of(&o, &o.svs[i]);
        r = statfs_all(bus, &o, calls);
        if (r < 0) {
                fprintf(stderr, "Cannot read the subvolumes' statfs: %s\n", strerror(-r));
                ret = EXIT_NO_DAEMON;
                goto finish;
        }
        if (arg_json)
                json_begin_array();
        for (size_t i = 0; i < o.n_svs; i++)
                if (calls[i].ok && df_add(&o, &o.svs[i], &calls[i].df, table, columns, n_columns) < 0)
                        ret = EXIT_FAILED;
        for (int i = 0; i < argc; i++) {
                const Object *s = NULL;
                Df d = {};

                r = statfs_of_path(bus, &o, argv[i], &s, &d);
                if (r != 0)
                        ret = r;
                else if (s && df_add(&o, s, &d, table, columns, n_columns) < 0)
                        ret = EXIT_FAILED;
                free(d.source);
        }
        if (arg_json) {
                json_end_array();
                json_done();
        } else
                table_print(table);
finish:
        for (size_t i = 0; calls && i < o.n_svs; i++)
                free(calls[i].df.source);
        objects_done(&o);
        return ret;
}

/* ---- filesystems ---- */

int cmd_filesystems(sd_bus *bus, int argc, char **argv) {
        static const char *const headers[] = { "FILESYSTEM", "UUID", "DEVICES", "SIZE", "USED", "AVAIL", "QUOTA",
                                               "SCANNED", "SUBVOLUMES", "MOUNTED ON" };
        static const bool right[] = { false, false, false, true, true, true, false, true, true, false };
        _cleanup_(table_freep) Table *table = NULL;
        const Object *only = NULL;
        Objects o;
        int r;

        r = load_objects(bus, &o);
        if (r < 0)
                return -r;
        if (argc == 1 && (r = resolve_fs(bus, &o, argv[0], &only)) < 0)
                goto finish;
        if (arg_json)
                json_begin_array();
        else if (!(table = table_new(ELEMENTSOF(headers), headers, right))) {
                r = -EXIT_FAILED;
                goto finish;
        }
        for (size_t i = 0; i < o.n_fss; i++) {
                const Object *f = &o.fss[i];
                char **mounts = obj_strv(f, FS_MOUNT_POINTS);
                size_t n_svs = 0;
                char *cells[ELEMENTSOF(headers)] = {};

                if (only && only != f)
                        continue;
                for (size_t j = 0; j < o.n_svs; j++)
                        n_svs += streq(obj_str(&o.svs[j], SV_FILESYSTEM), f->path);
                if (arg_json) {
                        object_print_json(f, NULL, true);
                        continue;
                }
                cells[0] = strdup(f->name);
                cells[1] = strdup(obj_str(f, FS_UUID));
                cells[2] = value_to_text(&f->values[FS_DEVICES], KIND_PATHS);
                cells[3] = value_to_text(&f->values[FS_SIZE], KIND_SIZE);
                cells[4] = value_to_text(&f->values[FS_USED], KIND_SIZE);
                cells[5] = value_to_text(&f->values[FS_AVAILABLE], KIND_SIZE);
                /* Quota figures are estimates while btrfs calls them inconsistent. */
                if (asprintf(&cells[6], "%s%s", obj_str(f, FS_QUOTA_MODE),
                             streq(obj_str(f, FS_QUOTA_MODE), "disabled") || obj_u64(f, FS_QUOTA_CONSISTENT) ?
                             "" : ",inconsistent") < 0)
                        cells[6] = NULL;
                cells[7] = value_to_text(&f->values[FS_SCAN_PROGRESS], KIND_RATIO);
                if (asprintf(&cells[8], "%zu", n_svs) < 0)
                        cells[8] = NULL;
                cells[9] = term_escape(mounts && mounts[0] ? mounts[0] : "-", false);
                r = table_add(table, (const char *const *) cells);
                free_cells(cells, ELEMENTSOF(headers));
                if (r < 0)
                        goto finish;
        }
        if (arg_json) {
                json_end_array();
                json_done();
        } else
                table_print(table);
        r = 0;
finish:
        objects_done(&o);
        return r < 0 ? (r == -ENOMEM ? EXIT_FAILED : -r) : EXIT_OK;
}

/* ---- show ---- */

int cmd_show(sd_bus *bus, int argc, char **argv) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *props = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_free_ char *path = NULL;
        const Schema *schema = &subvolume_schema;
        Object object = {};
        int r;

        if (argc == 0 && arg_fs) {
                /* A filesystem, named as --fs names them anywhere. */
                const Object *f;
                Objects o;

                r = load_objects(bus, &o);
                if (r < 0)
                        return -r;
                r = resolve_fs(bus, &o, arg_fs, &f);
                if (r >= 0 && !(path = strdup(f->path)))
                        r = -EXIT_FAILED;
                objects_done(&o);
                if (r < 0)
                        return -r;
        } else if (argc != 1 || arg_fs) {
                fprintf(stderr, "show takes one PATH or OBJECT, or --fs FILESYSTEM.\n");
                return EXIT_USAGE;
        } else if (path_startswith(argv[0], SUBVOLD_MANAGER_PATH)) {
                path = strdup(argv[0]);
        } else if ((r = subvolume_of_path(bus, argv[0], &path)) < 0)
                return -r;
        if (!path)
                return EXIT_FAILED;
        /* .../fs/<uuid> is a filesystem, .../fs/<uuid>/<id> a subvolume. */
        if (path_startswith(path, SUBVOLD_FS_PREFIX) && !strchr(path + strlen(SUBVOLD_FS_PREFIX "/"), '/'))
                schema = &filesystem_schema;
        r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, path, "org.freedesktop.DBus.Properties", "GetAll", &error,
                               &props, "s", schema->interface);
        if (r < 0) {
                if (!sd_bus_error_has_names(&error, SD_BUS_ERROR_UNKNOWN_OBJECT, SD_BUS_ERROR_UNKNOWN_INTERFACE))
                        return log_bus_error(&error, r, NULL);
                fprintf(stderr, "subvold has no subvolume or filesystem %s.\n", path);
                return EXIT_NOT_FOUND;
        }
        r = object_init(&object, schema, path);
        if (r >= 0)
                r = object_read(&object, props, NULL);
        if (r < 0) {
                object_done(&object);
                return -parse_failed(r);
        }
        if (arg_json) {
                object_print_json(&object, NULL, true);
                json_done();
        } else {
                printf("Object=%s\n", path);
                object_print_text(&object);
        }
        object_done(&object);
        return EXIT_OK;
}
