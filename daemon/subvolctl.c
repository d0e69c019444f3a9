/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* subvolctl: a command-line client of subvold, over sd-bus. */
#include <fcntl.h>
#include <ctype.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <systemd/sd-bus.h>

#include "bus-util.h"
#include "model.h"
#include "mounts.h"
#include "util.h"

/* Exit codes, for scripts. */
enum {
        EXIT_OK = 0,
        EXIT_FAILED = 1,       /* subvold answered with an error */
        EXIT_USAGE = 2,        /* bad command line */
        EXIT_NO_DAEMON = 3,    /* subvold (or the bus) cannot be reached */
        EXIT_NOT_BTRFS = 4,    /* the path is not on btrfs */
        EXIT_NOT_FOUND = 5,    /* no such subvolume or filesystem */
};

#define UNKNOWN UINT64_MAX

static const char *arg_address = NULL;
static bool arg_json = false, arg_bytes = false;
static int arg_snapshots = -1;  /* -1: all, 1: only snapshots, 0: no snapshots */
static const char *arg_fs = NULL;
static bool arg_all = false, arg_inodes = false;
static const char *arg_output = NULL;

/* ---- what subvold publishes, as far as subvolctl needs it ---- */

typedef struct Sv {
        char *object, *filesystem, *display_path, *snapshot_source, *usage_source;
        char **access_paths;
        uint64_t id, parent_id, referenced, exclusive, inodes, referenced_limit, exclusive_limit;
        int is_snapshot, read_only, usage_consistent;
} Sv;

typedef struct Fs {
        char *object, *uuid, *label, *quota_mode;
        char *name;  /* what the tables call it (see fs_name()) */
        char **mount_points;
        uint64_t size, used, free, available;
} Fs;

typedef struct Objects {
        Sv *svs;
        size_t n_svs, allocated_svs;
        Fs *fss;
        size_t n_fss, allocated_fss;
} Objects;

static void objects_done(Objects *o) {
        for (size_t i = 0; i < o->n_svs; i++) {
                Sv *s = &o->svs[i];
                free(s->object), free(s->filesystem), free(s->display_path), free(s->snapshot_source);
                free(s->usage_source), strv_free(s->access_paths);
        }
        for (size_t i = 0; i < o->n_fss; i++) {
                Fs *f = &o->fss[i];
                free(f->object), free(f->uuid), free(f->label), free(f->quota_mode), free(f->name);
                strv_free(f->mount_points);
        }
        free(o->svs);
        free(o->fss);
}

static int log_bus_error(const sd_bus_error *e, int r) {
        if (sd_bus_error_has_name(e, SUBVOLD_ERROR_NOT_BTRFS)) {
                fprintf(stderr, "%s\n", e->message);
                return EXIT_NOT_BTRFS;
        }
        if (sd_bus_error_has_name(e, SUBVOLD_ERROR_NOT_FOUND)) {
                fprintf(stderr, "%s\n", e->message);
                return EXIT_NOT_FOUND;
        }
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER,
                                   SD_BUS_ERROR_NO_REPLY, SD_BUS_ERROR_DISCONNECTED)) {
                fprintf(stderr, "subvold is not running (%s).\n", e->message);
                return EXIT_NO_DAEMON;
        }
        fprintf(stderr, "subvold: %s\n", sd_bus_error_is_set(e) ? e->message : strerror(-r));
        return EXIT_FAILED;
}

static int connect_bus(sd_bus **ret) {
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

/* Reads one property value of the kinds subvold uses into @sv/@fs fields. */
static int read_string(sd_bus_message *m, char **ret) {
        const char *s;
        char type;
        int r = sd_bus_message_peek_type(m, &type, NULL);

        if (r < 0)
                return r;
        r = sd_bus_message_read_basic(m, type, &s);
        if (r < 0)
                return r;
        free(*ret);
        *ret = strdup(s);
        return *ret ? 0 : -ENOMEM;
}

/* Reads an aay of NUL-terminated byte strings (paths) into a strv. */
static int read_bytestrings(sd_bus_message *m, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        size_t n_l = 0;
        const void *p;
        size_t n;
        int r;

        r = sd_bus_message_enter_container(m, 'a', "ay");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_read_array(m, 'y', &p, &n)) > 0)
                if (strv_consume(&l, &n_l, n > 0 ? strndup(p, n - 1) : strdup("")) < 0)  /* n - 1: the NUL */
                        return -ENOMEM;
        if (r < 0)
                return r;
        strv_free(*ret);
        *ret = l;
        l = NULL;
        return sd_bus_message_exit_container(m);
}

static int read_subvolume_property(sd_bus_message *m, const char *name, Sv *s) {
        struct { const char *name; uint64_t *field; } u64[] = {
                { "Id", &s->id }, { "ParentId", &s->parent_id }, { "ReferencedBytes", &s->referenced },
                { "ExclusiveBytes", &s->exclusive }, { "Inodes", &s->inodes },
                { "ReferencedLimitBytes", &s->referenced_limit }, { "ExclusiveLimitBytes", &s->exclusive_limit },
        };
        struct { const char *name; int *field; } bools[] = {
                { "IsSnapshot", &s->is_snapshot }, { "ReadOnly", &s->read_only },
                { "UsageConsistent", &s->usage_consistent },
        };
        struct { const char *name; char **field; } strings[] = {
                { "Filesystem", &s->filesystem }, { "DisplayPath", &s->display_path },
                { "SnapshotSource", &s->snapshot_source }, { "UsageSource", &s->usage_source },
        };

        for (size_t i = 0; i < ELEMENTSOF(u64); i++)
                if (streq(name, u64[i].name))
                        return sd_bus_message_read_basic(m, 't', u64[i].field);
        for (size_t i = 0; i < ELEMENTSOF(bools); i++)
                if (streq(name, bools[i].name))
                        return sd_bus_message_read_basic(m, 'b', bools[i].field);
        for (size_t i = 0; i < ELEMENTSOF(strings); i++)
                if (streq(name, strings[i].name))
                        return read_string(m, strings[i].field);
        if (streq(name, "AccessPaths"))
                return read_bytestrings(m, &s->access_paths);
        return 0;  /* not needed here: skipped by the caller */
}

static int read_fs_property(sd_bus_message *m, const char *name, Fs *f) {
        struct { const char *name; uint64_t *field; } u64[] = {
                { "Size", &f->size }, { "Used", &f->used }, { "Free", &f->free }, { "Available", &f->available },
        };
        struct { const char *name; char **field; } strings[] = {
                { "Uuid", &f->uuid }, { "Label", &f->label }, { "QuotaMode", &f->quota_mode },
        };

        for (size_t i = 0; i < ELEMENTSOF(u64); i++)
                if (streq(name, u64[i].name))
                        return sd_bus_message_read_basic(m, 't', u64[i].field);
        for (size_t i = 0; i < ELEMENTSOF(strings); i++)
                if (streq(name, strings[i].name))
                        return read_string(m, strings[i].field);
        if (streq(name, "MountPoints"))
                return read_bytestrings(m, &f->mount_points);
        return 0;
}

/* Reads a{sv} into @sv or @fs; unknown properties are skipped. */
static int read_properties(sd_bus_message *m, Sv *sv, Fs *fs) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *name, *contents;
                int consumed;

                r = sd_bus_message_read(m, "s", &name);
                if (r < 0)
                        return r;
                r = sd_bus_message_peek_type(m, NULL, &contents);
                if (r < 0)
                        return r;
                r = sd_bus_message_enter_container(m, 'v', contents);
                if (r < 0)
                        return r;
                consumed = sd_bus_message_at_end(m, false);
                r = sv ? read_subvolume_property(m, name, sv) : read_fs_property(m, name, fs);
                if (r < 0)
                        return r;
                if (sd_bus_message_at_end(m, false) == consumed)  /* nothing read: skip */
                        sd_bus_message_skip(m, contents);
                r = sd_bus_message_exit_container(m);
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        if (r < 0)
                return r;
        return sd_bus_message_exit_container(m);
}

static int cmp_sv(const void *a, const void *b) {
        const Sv *x = a, *y = b;
        int c = strcmp(x->filesystem ? x->filesystem : "", y->filesystem ? y->filesystem : "");
        return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* ---- reading the model ----
 *
 * list, df and metrics read it one way, whatever its size:
 * Manager.Filesystems, each filesystem's properties, and its subvolumes
 * page by page with GetSubvolumes.  GetManagedObjects brought the same in
 * one reply, but subvold refuses it (LimitsExceeded) once that reply could
 * be larger than a bus message, and paging measured no slower. */

/* About 1 MiB a page: the calls' overhead is lost in it, and subvold never
 * builds more than that at once for us. */
#define SUBVOLUMES_PER_PAGE 1000u

static Sv *add_sv(Objects *o, const char *object) {
        if (grow_array(&o->svs, &o->allocated_svs, o->n_svs + 1, sizeof(Sv)) < 0)
                return NULL;
        o->svs[o->n_svs] = (Sv) { .object = strdup(object), .referenced = UNKNOWN, .exclusive = UNKNOWN,
                                  .inodes = UNKNOWN, .referenced_limit = UNKNOWN, .exclusive_limit = UNKNOWN };
        return o->svs[o->n_svs].object ? &o->svs[o->n_svs++] : NULL;
}

static Fs *add_fs(Objects *o, const char *object) {
        if (grow_array(&o->fss, &o->allocated_fss, o->n_fss + 1, sizeof(Fs)) < 0)
                return NULL;
        o->fss[o->n_fss] = (Fs) { .object = strdup(object) };
        return o->fss[o->n_fss].object ? &o->fss[o->n_fss++] : NULL;
}

/* Reads one GetSubvolumes page, a{oa{sv}}, into @o. */
static int read_subvolumes(sd_bus_message *m, Objects *o) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{oa{sv}}");
        while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "oa{sv}")) > 0) {
                const char *object;
                Sv *s;

                r = sd_bus_message_read(m, "o", &object);
                if (r < 0)
                        break;
                s = add_sv(o, object);
                r = s ? read_properties(m, s, NULL) : -ENOMEM;
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_exit_container(m);
        return r;
}

/* A call that failed: 0 when its object went away meanwhile (the model
 * may change between two calls: what is gone is simply not listed), else
 * a message and the exit code, negative. */
static int call_failed(const sd_bus_error *e, int r) {
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_OBJECT))
                return 0;
        return -log_bus_error(e, r);
}

static int parse_failed(int r) {
        fprintf(stderr, "Cannot parse subvold's reply: %s\n", strerror(-r));
        return -EXIT_FAILED;
}

/* Reads one filesystem's properties and all its subvolumes into @o. */
static int load_filesystem(sd_bus *bus, const char *object, Objects *o) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *props = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        uint64_t next = 0;
        Fs *f;
        int r;

        r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, object, "org.freedesktop.DBus.Properties", "GetAll", &error,
                               &props, "s", SUBVOLD_IFACE_FS);
        if (r < 0)
                return call_failed(&error, r);
        f = add_fs(o, object);
        r = f ? read_properties(props, NULL, f) : -ENOMEM;
        if (r < 0)
                return parse_failed(r);
        do {
                _cleanup_(sd_bus_message_unrefp_) sd_bus_message *page = NULL;

                r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, object, SUBVOLD_IFACE_FS, "GetSubvolumes", &error, &page,
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

/* The table's name for a filesystem: its label (which subvold escapes as
 * it escapes paths), or the first 8 hex digits of its UUID when it has
 * none or shares it with another; blanks written \x20, as findmnt writes
 * them, so that the columns still split on white space. */
static char *fs_name(const Objects *o, const Fs *f) {
        bool unique = f->label && *f->label;
        char *name, *n;

        for (size_t i = 0; unique && i < o->n_fss; i++)
                unique = &o->fss[i] == f || !o->fss[i].label || !streq(o->fss[i].label, f->label);
        if (!unique)
                return strndup(f->uuid ? f->uuid : "", 8);
        name = n = malloc(strlen(f->label) * 4 + 1);
        for (const char *l = f->label; name && *l; l++)
                n = *l == ' ' ? stpcpy(n, "\\x20") : (*n = *l, n + 1);
        if (name)
                *n = 0;
        return name;
}

/* Every filesystem and subvolume, sorted by filesystem and id; on failure
 * a message, nothing kept, and the exit code, negative. */
static int load_objects(sd_bus *bus, Objects *o) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_strv_free_ char **filesystems = NULL;
        int r;

        r = sd_bus_get_property_strv(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER,
                                     "Filesystems", &error, &filesystems);
        if (r < 0)
                return -log_bus_error(&error, r);
        for (char **f = filesystems; *f; f++) {
                r = load_filesystem(bus, *f, o);
                if (r < 0) {
                        objects_done(o);
                        *o = (Objects) {};
                        return r;
                }
        }
        for (size_t i = 0; i < o->n_fss; i++)
                if (!(o->fss[i].name = fs_name(o, &o->fss[i]))) {
                        objects_done(o);
                        *o = (Objects) {};
                        return -EXIT_FAILED;
                }
        qsort(o->svs, o->n_svs, sizeof(Sv), cmp_sv);
        return 0;
}

/* ---- output ---- */

/* IEC sizes like df -h ("4.0M", "12G"), or exact bytes with --bytes;
 * "-" when unknown. */
static const char *format_size(uint64_t v, char buf[static 32]) {
        static const char units[] = "BKMGTPE";
        double d = (double) v;
        size_t u = 0;

        if (v == UNKNOWN)
                return "-";
        if (arg_bytes) {
                snprintf(buf, 32, "%" PRIu64, v);
                return buf;
        }
        while (d >= 1024 && u < sizeof(units) - 2) {
                d /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, 32, "%" PRIu64 "B", v);
        else
                snprintf(buf, 32, d < 10 ? "%.1f%c" : "%.0f%c", d < 10 ? ceil(d * 10) / 10 : ceil(d), units[u]);
        return buf;
}

static const char *format_count(uint64_t v, char buf[static 32]) {
        if (v == UNKNOWN)
                return "-";
        snprintf(buf, 32, "%" PRIu64, v);
        return buf;
}

static void json_string(FILE *f, const char *s) {
        fputc('"', f);
        for (; s && *s; s++) {
                unsigned char c = (unsigned char) *s;
                if (c == '"' || c == '\\')
                        fprintf(f, "\\%c", c);
                else if (c < 0x20)
                        fprintf(f, "\\u%04x", c);
                else
                        fputc(c, f);
        }
        fputc('"', f);
}

/* JSON numbers for sizes; null for unknown. */
static void json_u64(FILE *f, const char *key, uint64_t v, bool comma) {
        fprintf(f, "\"%s\":", key);
        if (v == UNKNOWN)
                fputs("null", f);
        else
                fprintf(f, "%" PRIu64, v);
        if (comma)
                fputc(',', f);
}

static const Fs *find_fs(const Objects *o, const char *object) {
        for (size_t i = 0; i < o->n_fss; i++)
                if (streq(o->fss[i].object, object))
                        return &o->fss[i];
        return NULL;
}

/* ---- commands ---- */

/* Resolves --fs (a UUID, with or without dashes, or a path) to a
 * Filesystem object path. */
static int resolve_fs(sd_bus *bus, const Objects *o, const char *spec, char **ret) {
        if (spec[0] == '/') {
                _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
                sd_bus_error error = SD_BUS_ERROR_NULL;
                const char *sv;
                int r;

                r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER,
                                       "GetSubvolumeByPath", &error, &reply, "s", spec);
                if (r < 0) {
                        r = log_bus_error(&error, r);
                        sd_bus_error_free(&error);
                        return -r;
                }
                if (sd_bus_message_read(reply, "o", &sv) < 0)
                        return -EXIT_FAILED;
                for (size_t i = 0; i < o->n_svs; i++)
                        if (streq(o->svs[i].object, sv))
                                return (*ret = strdup(o->svs[i].filesystem)) ? 0 : -EXIT_FAILED;
                return -EXIT_NOT_FOUND;
        }
        for (size_t i = 0; i < o->n_fss; i++) {
                const char *u = o->fss[i].uuid, *s = spec;
                /* compare ignoring dashes, case-insensitively */
                for (; *u || *s; u += *u != 0, s += *s != 0) {
                        while (*u == '-')
                                u++;
                        while (*s == '-')
                                s++;
                        if (tolower((unsigned char) *u) != tolower((unsigned char) *s))
                                break;
                }
                if (!*u && !*s)
                        return (*ret = strdup(o->fss[i].object)) ? 0 : -EXIT_FAILED;
        }
        fprintf(stderr, "No btrfs filesystem %s is known to subvold.\n", spec);
        return -EXIT_NOT_FOUND;
}

/* Columns @s takes on a terminal: one per character. */
static int text_width(const char *s) {
        int n = 0;

        for (; *s; s++)
                n += ((unsigned char) *s & 0xc0) != 0x80;  /* not a UTF-8 continuation byte */
        return n;
}

static int cmd_list(sd_bus *bus, int argc, char **argv) {
        _cleanup_free_ char *fs = NULL;
        Objects o = {};
        bool first = true;
        int r, width = strlen("FILESYSTEM");

        r = load_objects(bus, &o);
        if (r >= 0 && arg_fs)
                r = resolve_fs(bus, &o, arg_fs, &fs);
        for (size_t i = 0; r >= 0 && i < o.n_fss; i++)
                if ((!fs || streq(fs, o.fss[i].object)) && text_width(o.fss[i].name) > width)
                        width = text_width(o.fss[i].name);
        if (r < 0) {
                objects_done(&o);
                return -r;
        }
        if (arg_json)
                putchar('[');
        else
                printf("%-*s %-8s %-5s %10s %10s %10s  %s\n", width, "FILESYSTEM", "ID", "FLAGS", "REFERENCED",
                       "EXCLUSIVE", "INODES", "PATH");
        for (size_t i = 0; i < o.n_svs; i++) {
                const Sv *s = &o.svs[i];
                const Fs *f = find_fs(&o, s->filesystem);
                const char *name = f ? f->name : "-";
                char b1[32], b2[32], b3[32];

                if ((arg_snapshots == 1 && !s->is_snapshot) || (arg_snapshots == 0 && s->is_snapshot) ||
                    (fs && !streq(fs, s->filesystem)))
                        continue;
                if (arg_json) {
                        printf("%s{\"object\":", first ? "" : ",");
                        json_string(stdout, s->object);
                        printf(",\"filesystem\":");
                        json_string(stdout, f ? f->uuid : "");
                        printf(",\"id\":%" PRIu64 ",\"path\":", s->id);
                        json_string(stdout, s->display_path);
                        printf(",\"snapshot\":%s,\"read_only\":%s,", s->is_snapshot ? "true" : "false",
                               s->read_only ? "true" : "false");
                        json_u64(stdout, "referenced", s->referenced, true);
                        json_u64(stdout, "exclusive", s->exclusive, true);
                        json_u64(stdout, "inodes", s->inodes, true);
                        printf("\"source\":");
                        json_string(stdout, s->usage_source);
                        putchar('}');
                        first = false;
                        continue;
                }
                printf("%s%*s %-8" PRIu64 " %c%c    %10s %10s %10s  %s\n", name, width - text_width(name), "",
                       s->id, s->is_snapshot ? 'S' : '-',
                       s->read_only ? 'R' : '-', format_size(s->referenced, b1), format_size(s->exclusive, b2),
                       format_count(s->inodes, b3),
                       s->display_path);
        }
        if (arg_json)
                puts("]");
        objects_done(&o);
        return EXIT_OK;
}

/* Reads GetStatfs's a{sv} into the numbers df shows. */
typedef struct Df {
        uint64_t bsize, blocks, bfree, bavail, files, ffree;
        char *source;
} Df;

static int read_statfs(sd_bus_message *m, Df *d) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *key, *contents;
                uint64_t *field = NULL;

                r = sd_bus_message_read(m, "s", &key);
                if (r >= 0)
                        r = sd_bus_message_peek_type(m, NULL, &contents);
                if (r < 0)
                        break;
                field = streq(key, "bsize") ? &d->bsize : streq(key, "blocks") ? &d->blocks :
                        streq(key, "bfree") ? &d->bfree : streq(key, "bavail") ? &d->bavail :
                        streq(key, "files") ? &d->files : streq(key, "ffree") ? &d->ffree : NULL;
                if (field)
                        r = sd_bus_message_read(m, "v", "t", field);
                else if (streq(key, "source") && streq(contents, "s")) {
                        r = sd_bus_message_enter_container(m, 'v', "s");
                        if (r >= 0)
                                r = read_string(m, &d->source);
                        if (r >= 0)
                                r = sd_bus_message_exit_container(m);
                } else
                        r = sd_bus_message_skip(m, "v");
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_exit_container(m);
        return r;
}

/* The columns of df's table, named as GNU df's --output names them where
 * they mean the same. */
typedef enum DfColumn {
        COL_SUBVOLUME, COL_FILESYSTEM, COL_SOURCE, COL_SIZE, COL_USED, COL_AVAIL, COL_PCENT,
        COL_ITOTAL, COL_IUSED, COL_IAVAIL, COL_IPCENT, COL_TARGET, _COL_MAX
} DfColumn;

static const struct {
        const char *name, *header;
        int width;  /* negative: left-aligned */
} df_columns[_COL_MAX] = {
        [COL_SUBVOLUME] = { "subvolume", "SUBVOLUME", -30 },
        [COL_FILESYSTEM] = { "fs", "FILESYSTEM", -10 },
        [COL_SOURCE] = { "source", "SOURCE", -12 },
        [COL_SIZE] = { "size", "SIZE", 8 },
        [COL_USED] = { "used", "USED", 8 },
        [COL_AVAIL] = { "avail", "AVAIL", 8 },
        [COL_PCENT] = { "pcent", "USE%", 5 },
        [COL_ITOTAL] = { "itotal", "INODES", 9 },
        [COL_IUSED] = { "iused", "IUSED", 9 },
        [COL_IAVAIL] = { "iavail", "IFREE", 9 },
        [COL_IPCENT] = { "ipcent", "IUSE%", 5 },
        [COL_TARGET] = { "target", "MOUNTED ON", 0 },
};

#define DF_COLUMNS_MAX 32

/* --output, or the default columns of df and df -i. */
static int parse_df_columns(DfColumn columns[static DF_COLUMNS_MAX], size_t *n) {
        static const DfColumn space[] = { COL_SUBVOLUME, COL_SIZE, COL_USED, COL_AVAIL, COL_PCENT, COL_TARGET };
        static const DfColumn inodes[] = { COL_SUBVOLUME, COL_ITOTAL, COL_IUSED, COL_IAVAIL, COL_IPCENT, COL_TARGET };
        _cleanup_free_ char *spec = NULL;
        char *save = NULL;

        *n = 0;
        if (!arg_output) {
                for (; *n < ELEMENTSOF(space); (*n)++)
                        columns[*n] = arg_inodes ? inodes[*n] : space[*n];
                return 0;
        }
        spec = strdup(arg_output);
        if (!spec)
                return -ENOMEM;
        for (char *w = strtok_r(spec, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
                size_t c = 0;

                while (c < _COL_MAX && !streq(w, df_columns[c].name))
                        c++;
                if (c == _COL_MAX || *n == DF_COLUMNS_MAX) {
                        fprintf(stderr, c == _COL_MAX ? "Unknown df column \"%s\"; see --help.\n"
                                                      : "Too many df columns (\"%s\").\n", w);
                        return -EINVAL;
                }
                columns[(*n)++] = c;
        }
        if (*n == 0)
                fprintf(stderr, "--output names no column.\n");
        return *n > 0 ? 0 : -EINVAL;
}

/* Where df says the subvolume is mounted: the first of its paths that is
 * a mount point of its filesystem; NULL when it is mounted nowhere. */
static const char *mount_point_of(const Objects *o, const Sv *s) {
        const Fs *f = find_fs(o, s->filesystem);

        for (char **a = s->access_paths; f && a && *a; a++)
                for (char **m = f->mount_points; m && *m; m++)
                        if (streq(*a, *m))
                                return *a;
        return NULL;
}

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

static const char *format_percent(uint64_t v, char buf[static 32]) {
        if (v == UNKNOWN)
                return "-";
        snprintf(buf, 32, "%" PRIu64 "%%", v);
        return buf;
}

static void print_df_cells(const char *const *cells, const DfColumn *columns, size_t n_columns) {
        for (size_t i = 0; i < n_columns; i++)
                if (i + 1 < n_columns)
                        printf("%*s ", df_columns[columns[i]].width, cells[i]);
                else
                        printf("%s\n", cells[i]);
}

static void print_df_row(const Objects *o, const Sv *s, const Df *d, const DfColumn *columns, size_t n_columns,
                         bool *first) {
        const Fs *f = find_fs(o, s->filesystem);
        const char *mounted = mount_point_of(o, s);
        /* With --all, a subvolume mounted nowhere shows where it is reachable. */
        const char *target = mounted ?: s->access_paths ? s->access_paths[0] : NULL;
        DfRow row = df_row(d);
        char bufs[DF_COLUMNS_MAX][32];
        const char *cells[DF_COLUMNS_MAX];

        if (arg_json) {
                printf("%s{\"object\":", *first ? "" : ",");
                json_string(stdout, s->object);
                printf(",\"path\":");
                json_string(stdout, s->display_path);
                printf(",\"filesystem\":");
                json_string(stdout, f ? f->uuid : "");
                printf(",\"source\":");
                json_string(stdout, d->source ?: "none");
                putchar(',');
                json_u64(stdout, "size", row.size, true);
                json_u64(stdout, "used", row.used, true);
                json_u64(stdout, "available", row.avail, true);
                json_u64(stdout, "use_percent", row.pcent, true);
                json_u64(stdout, "inodes", row.itotal, true);
                json_u64(stdout, "inodes_used", row.iused, true);
                json_u64(stdout, "inodes_free", UNKNOWN, true);
                printf("\"mounted\":%s,\"mounted_on\":", mounted ? "true" : "false");
                if (target)
                        json_string(stdout, target);
                else
                        fputs("null", stdout);
                putchar('}');
                *first = false;
                return;
        }
        for (size_t i = 0; i < n_columns; i++)
                switch (columns[i]) {
                case COL_SUBVOLUME: cells[i] = s->display_path; break;
                case COL_FILESYSTEM: cells[i] = f && f->name ? f->name : "-"; break;
                case COL_SOURCE: cells[i] = d->source ?: "none"; break;
                case COL_SIZE: cells[i] = format_size(row.size, bufs[i]); break;
                case COL_USED: cells[i] = format_size(row.used, bufs[i]); break;
                case COL_AVAIL: cells[i] = format_size(row.avail, bufs[i]); break;
                case COL_PCENT: cells[i] = format_percent(row.pcent, bufs[i]); break;
                case COL_ITOTAL: cells[i] = format_count(row.itotal, bufs[i]); break;
                case COL_IUSED: cells[i] = format_count(row.iused, bufs[i]); break;
                case COL_TARGET: cells[i] = target ?: "-"; break;
                default: cells[i] = "-";  /* free inodes and their use%: no count */
                }
        print_df_cells(cells, columns, n_columns);
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
        if (sd_bus_message_is_method_error(reply, NULL))
                (void) call_failed(sd_bus_message_get_error(reply), -EIO);
        else
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
                        r = sd_bus_call_method_async(bus, NULL, SUBVOLD_BUS_NAME, o->svs[next].object,
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

static int cmd_df(sd_bus *bus, int argc, char **argv) {
        _cleanup_free_ StatfsCall *calls = NULL;
        DfColumn columns[DF_COLUMNS_MAX];
        const char *headers[DF_COLUMNS_MAX];
        size_t n_columns;
        Objects o = {};
        bool first = true;
        int r, ret = EXIT_OK;

        if (parse_df_columns(columns, &n_columns) < 0)
                return EXIT_USAGE;
        r = load_objects(bus, &o);
        if (r < 0)
                return -r;
        calls = calloc(o.n_svs + 1, sizeof(StatfsCall));  /* + 1: not NULL for none */
        if (!calls) {
                objects_done(&o);
                return EXIT_FAILED;
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
                putchar('[');
        else {
                for (size_t i = 0; i < n_columns; i++)
                        headers[i] = df_columns[columns[i]].header;
                print_df_cells(headers, columns, n_columns);
        }
        for (size_t i = 0; i < o.n_svs; i++)
                if (calls[i].ok)
                        print_df_row(&o, &o.svs[i], &calls[i].df, columns, n_columns, &first);
        for (int i = 0; i < argc; i++) {
                _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
                sd_bus_error error = SD_BUS_ERROR_NULL;
                _cleanup_close_ int fd = open(argv[i], O_PATH | O_CLOEXEC);
                const char *object;
                const Sv *s = NULL;
                Df d = {};

                if (fd < 0) {
                        fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
                        ret = EXIT_FAILED;
                        continue;
                }
                r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER,
                                       "GetStatfsByFd", &error, &reply, "h", fd);
                if (r < 0) {
                        fprintf(stderr, "%s: ", argv[i]);
                        ret = log_bus_error(&error, r);
                        sd_bus_error_free(&error);
                        continue;
                }
                if (sd_bus_message_read(reply, "o", &object) < 0 || read_statfs(reply, &d) < 0) {
                        fprintf(stderr, "%s: cannot parse subvold's reply\n", argv[i]);
                        ret = EXIT_FAILED;
                } else {
                        for (size_t j = 0; j < o.n_svs && !s; j++)
                                if (streq(o.svs[j].object, object))
                                        s = &o.svs[j];
                        if (s)
                                print_df_row(&o, s, &d, columns, n_columns, &first);
                }
                free(d.source);
        }
        if (arg_json)
                puts("]");
finish:
        for (size_t i = 0; i < o.n_svs; i++)
                free(calls[i].df.source);
        objects_done(&o);
        return ret;
}

/* Prints one variant's value: as text (Name=value lines) or as JSON. */
static int print_value(sd_bus_message *m, bool json) {
        const char *contents;
        char type;
        int r;

        r = sd_bus_message_peek_type(m, &type, &contents);
        if (r <= 0)
                return r;
        if (type == 'a' && streq(contents, "y")) {
                const uint8_t *p;
                size_t n;

                r = sd_bus_message_read_array(m, 'y', (const void **) &p, &n);
                if (r < 0)
                        return r;
                if (json) {
                        putchar('[');
                        for (size_t i = 0; i < n; i++)
                                printf("%s%u", i ? "," : "", p[i]);
                        putchar(']');
                } else  /* a bytestring: drop the trailing NUL */
                        fwrite(p, 1, n && !p[n - 1] ? n - 1 : n, stdout);
                return 0;
        }
        if (type == 'a') {
                bool first = true;

                r = sd_bus_message_enter_container(m, 'a', contents);
                if (r < 0)
                        return r;
                if (json)
                        putchar('[');
                while ((r = sd_bus_message_at_end(m, false)) == 0) {
                        if (!first)
                                putchar(json ? ',' : ' ');
                        first = false;
                        r = print_value(m, json);
                        if (r < 0)
                                return r;
                }
                if (json)
                        putchar(']');
                return sd_bus_message_exit_container(m);
        }
        if (type == 't') {
                uint64_t v;
                r = sd_bus_message_read_basic(m, 't', &v);
                if (r >= 0)
                        printf("%" PRIu64, v);
                return r;
        }
        if (type == 'd') {
                double d;
                r = sd_bus_message_read_basic(m, 'd', &d);
                if (r >= 0)
                        printf("%g", d);
                return r;
        }
        if (type == 'b') {
                int b;
                r = sd_bus_message_read_basic(m, 'b', &b);
                if (r >= 0)
                        fputs(json ? (b ? "true" : "false") : (b ? "yes" : "no"), stdout);
                return r;
        }
        if (type == 's' || type == 'o') {
                const char *s;
                r = sd_bus_message_read_basic(m, type, &s);
                if (r >= 0) {
                        if (json)
                                json_string(stdout, s);
                        else
                                fputs(s, stdout);
                }
                return r;
        }
        /* A type subvold does not publish: keep the output well-formed. */
        if (json)
                fputs("null", stdout);
        return sd_bus_message_skip(m, NULL);
}

/* Prints a{sv}: "Name=value" lines, or one JSON object. */
static int print_properties(sd_bus_message *m) {
        bool first = true;
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (arg_json && r >= 0)
                putchar('{');
        while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *name, *contents;

                r = sd_bus_message_read(m, "s", &name);
                if (r >= 0)
                        r = sd_bus_message_peek_type(m, NULL, &contents);
                if (r >= 0)
                        r = sd_bus_message_enter_container(m, 'v', contents);
                if (r < 0)
                        break;
                if (arg_json) {
                        printf("%s", first ? "" : ",");
                        json_string(stdout, name);
                        putchar(':');
                } else
                        printf("%s=", name);
                r = print_value(m, arg_json);
                if (!arg_json)
                        putchar('\n');
                first = false;
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_exit_container(m);
        if (arg_json)
                putchar('}');
        return r;
}

static int cmd_show(sd_bus *bus, int argc, char **argv) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL, *props = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        const char *object;
        int r;

        if (argc != 1) {
                fprintf(stderr, "show takes one PATH or OBJECT.\n");
                return EXIT_USAGE;
        }
        if (path_startswith(argv[0], SUBVOLD_FS_PREFIX))
                object = argv[0];
        else {
                /* By fd: symlinks are followed and the file must exist, as a
                 * user expects of a path on the command line. */
                _cleanup_close_ int fd = open(argv[0], O_PATH | O_CLOEXEC);

                if (fd < 0) {
                        fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
                        return EXIT_FAILED;
                }
                r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER,
                                       "GetSubvolumeByFd", &error, &reply, "h", fd);
                if (r >= 0)
                        r = sd_bus_message_read(reply, "o", &object);
                if (r < 0)
                        goto fail;
        }
        r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, object, "org.freedesktop.DBus.Properties", "GetAll", &error,
                               &props, "s", SUBVOLD_IFACE_SUBVOLUME);
        if (r < 0)
                goto fail;
        if (!arg_json)
                printf("Object=%s\n", object);
        r = print_properties(props);
        if (arg_json)
                putchar('\n');
        return r < 0 ? EXIT_FAILED : EXIT_OK;
fail:
        if (sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_OBJECT))
                fprintf(stderr, "No such subvolume object: %s\n", object), r = -EXIT_NOT_FOUND;
        else
                r = -log_bus_error(&error, r);
        sd_bus_error_free(&error);
        return -r;
}

static int on_change_signal(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *member = sd_bus_message_get_member(m), *object = NULL;
        int r;

        if (streq(member, "InterfacesAdded") || streq(member, "InterfacesRemoved")) {
                r = sd_bus_message_read(m, "o", &object);
                if (r < 0)
                        return 0;
                if (arg_json) {
                        printf("{\"event\":\"%s\",\"object\":", member[10] == 'A' ? "added" : "removed");
                        json_string(stdout, object);
                        puts("}");
                } else
                        printf("%s %s\n", member[10] == 'A' ? "added  " : "removed", object);
        } else if (streq(member, "PropertiesChanged")) {
                const char *iface;

                object = sd_bus_message_get_path(m);
                if (sd_bus_message_read(m, "s", &iface) < 0)
                        return 0;
                if (arg_json) {
                        printf("{\"event\":\"changed\",\"object\":");
                        json_string(stdout, object);
                        printf(",\"properties\":");
                        (void) print_properties(m);
                        puts("}");
                } else {
                        printf("changed %s\n", object);
                        (void) print_properties(m);
                }
        }
        fflush(stdout);
        return 0;
}

static int cmd_monitor(sd_bus *bus, int argc, char **argv) {
        sigset_t mask;
        int r;

        r = sd_bus_match_signal(bus, NULL, SUBVOLD_BUS_NAME, NULL, NULL, NULL, on_change_signal, NULL);
        if (r < 0) {
                fprintf(stderr, "Cannot subscribe to subvold's signals: %s\n", strerror(-r));
                return EXIT_FAILED;
        }
        if (!arg_json)
                fprintf(stderr, "Monitoring subvold; Ctrl-C to stop.\n");
        /* Stop cleanly on SIGINT/SIGTERM: wait for them as events. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        for (;;) {
                struct timespec zero = {};
                r = sd_bus_process(bus, NULL);
                if (r < 0) {
                        fprintf(stderr, "Connection lost: %s\n", strerror(-r));
                        return EXIT_NO_DAEMON;
                }
                if (sigtimedwait(&mask, NULL, &zero) > 0)
                        return EXIT_OK;
                if (r > 0)
                        continue;
                r = sd_bus_wait(bus, 200 * 1000);
                if (r < 0 && r != -EINTR)
                        return EXIT_NO_DAEMON;
        }
}

/* Prometheus label values: backslash, double quote and newline escaped. */
static void prom_label(const char *name, const char *value, bool comma) {
        printf("%s=\"", name);
        for (; value && *value; value++) {
                if (*value == '\\' || *value == '"')
                        printf("\\%c", *value);
                else if (*value == '\n')
                        fputs("\\n", stdout);
                else
                        putchar(*value);
        }
        printf("\"%s", comma ? "," : "");
}

static void prom_header(const char *metric, const char *help) {
        printf("# HELP %s %s\n# TYPE %s gauge\n", metric, help, metric);
}

static int cmd_metrics(sd_bus *bus, int argc, char **argv) {
        static const struct { const char *metric, *help; size_t offset; } sv_metrics[] = {
                { "subvold_subvolume_referenced_bytes", "Bytes the subvolume refers to.", offsetof(Sv, referenced) },
                { "subvold_subvolume_exclusive_bytes", "Bytes only this subvolume refers to.", offsetof(Sv, exclusive) },
                { "subvold_subvolume_inodes", "Inodes in the subvolume.", offsetof(Sv, inodes) },
                { "subvold_subvolume_referenced_limit_bytes", "Quota limit on referenced bytes.", offsetof(Sv, referenced_limit) },
                { "subvold_subvolume_exclusive_limit_bytes", "Quota limit on exclusive bytes.", offsetof(Sv, exclusive_limit) },
        };
        static const struct { const char *metric, *help; size_t offset; } fs_metrics[] = {
                { "subvold_filesystem_size_bytes", "Filesystem data capacity.", offsetof(Fs, size) },
                { "subvold_filesystem_used_bytes", "Filesystem bytes in use.", offsetof(Fs, used) },
                { "subvold_filesystem_free_bytes", "Filesystem free bytes.", offsetof(Fs, free) },
                { "subvold_filesystem_available_bytes", "Filesystem bytes available to users.", offsetof(Fs, available) },
        };
        Objects o = {};
        int r;

        r = load_objects(bus, &o);
        if (r < 0)
                return -r;
        for (size_t k = 0; k < ELEMENTSOF(fs_metrics); k++) {
                prom_header(fs_metrics[k].metric, fs_metrics[k].help);
                for (size_t i = 0; i < o.n_fss; i++) {
                        printf("%s{", fs_metrics[k].metric);
                        prom_label("uuid", o.fss[i].uuid, true);
                        prom_label("label", o.fss[i].label, true);
                        prom_label("quota_mode", o.fss[i].quota_mode, false);
                        printf("} %" PRIu64 "\n", *(uint64_t *) ((uint8_t *) &o.fss[i] + fs_metrics[k].offset));
                }
        }
        prom_header("subvold_subvolume_info", "One series per subvolume; 1.");
        for (size_t i = 0; i < o.n_svs; i++) {
                const Sv *s = &o.svs[i];
                const Fs *f = find_fs(&o, s->filesystem);
                char id[21];

                snprintf(id, sizeof id, "%" PRIu64, s->id);
                printf("subvold_subvolume_info{");
                prom_label("uuid", f ? f->uuid : "", true);
                prom_label("id", id, true);
                prom_label("path", s->display_path, true);
                prom_label("snapshot", s->is_snapshot ? "true" : "false", true);
                prom_label("read_only", s->read_only ? "true" : "false", true);
                prom_label("source", s->usage_source, false);
                printf("} 1\n");
        }
        /* Unknown values (and absent limits) produce no sample at all. */
        for (size_t k = 0; k < ELEMENTSOF(sv_metrics); k++) {
                prom_header(sv_metrics[k].metric, sv_metrics[k].help);
                for (size_t i = 0; i < o.n_svs; i++) {
                        const Sv *s = &o.svs[i];
                        const Fs *f = find_fs(&o, s->filesystem);
                        uint64_t v = *(const uint64_t *) ((const uint8_t *) s + sv_metrics[k].offset);
                        char id[21];

                        if (v == UNKNOWN)
                                continue;
                        snprintf(id, sizeof id, "%" PRIu64, s->id);
                        printf("%s{", sv_metrics[k].metric);
                        prom_label("uuid", f ? f->uuid : "", true);
                        prom_label("id", id, true);
                        prom_label("path", s->display_path, true);
                        prom_label("snapshot", s->is_snapshot ? "true" : "false", false);
                        printf("} %" PRIu64 "\n", v);
                }
        }
        objects_done(&o);
        return EXIT_OK;
}

/* ---- previous versions, deleted files, identity ---- */

#define FILES_IFACE "org.subvold.Subvold1.Files"

static bool arg_force = false;
static const char *arg_from = NULL, *arg_to = NULL;

/* A time as versions prints it, local time to the second. */
static const char *format_time(uint64_t usec, char buf[static 32]) {
        time_t t = (time_t) (usec / 1000000);
        struct tm tm;

        if (usec == 0 || !localtime_r(&t, &tm) || strftime(buf, 32, "%Y-%m-%d %H:%M:%S", &tm) == 0)
                return "-";
        return buf;
}

/* Terminal-safe: what subvold's DisplayPath does to a name. */
static void print_escaped(const char *s, int width) {
        _cleanup_free_ char *e = display_escape(s);

        printf("%-*s", width, e ? e : "?");
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
                        if (r >= 0 && !(e->name = strndup(p, len > 0 ? len - 1 : 0)))
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
                r = log_bus_error(&error, r);
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

static void json_entry(sd_bus *bus, const Entry *e, bool version, bool comma) {
        _cleanup_free_ char *where = snapshot_display(bus, e->snapshot);

        printf("{\"snapshot\":");
        json_string(stdout, e->snapshot);
        printf(",\"snapshot_path\":");
        json_string(stdout, where);
        printf(",\"snapshot_time\":%" PRIu64 ",\"%s\":", e->snapshot_time, version ? "path" : "name");
        json_string(stdout, e->name);
        if (version) {
                printf(",\"match\":");
                json_string(stdout, e->match);
                printf(",\"inode\":%" PRIu64 ",\"change_time\":%" PRIu64 ",\"same_as_current\":%s", e->inode, e->ctime,
                       e->same ? "true" : "false");
        } else {
                printf(",\"type\":");
                json_string(stdout, e->type);
        }
        printf(",\"size\":%" PRIu64 ",\"modification_time\":%" PRIu64 "}%s\n", e->size, e->mtime, comma ? "," : "");
}

static int cmd_versions(sd_bus *bus, int argc, char **argv) {
        _cleanup_close_ int fd = -1;
        Entry *e = NULL;
        size_t n = 0;
        int r;

        if (argc != 1) {
                fprintf(stderr, "versions takes one FILE.\n");
                return EXIT_USAGE;
        }
        r = open_file(argv[0], 0, &fd);
        if (r == 0)
                r = -list_entries(bus, "ListFileVersions", fd, &e, &n);
        if (r != 0)
                return r;
        if (arg_json)
                printf("[\n");
        else if (n == 0)
                printf("No earlier versions in the snapshots.\n");
        else
                printf("%-19s  %6s  %-19s  %-5s  %-7s  %s\n", "SNAPSHOT TIME", "SIZE", "MODIFIED", "MATCH", "CURRENT",
                       "SNAPSHOT");
        for (size_t i = 0; i < n; i++) {
                char t1[32], t2[32], size[32];
                _cleanup_free_ char *where = NULL;

                if (arg_json) {
                        json_entry(bus, &e[i], true, i + 1 < n);
                        continue;
                }
                where = snapshot_display(bus, e[i].snapshot);
                printf("%-19s  %6s  %-19s  %-5s  %-7s  ", format_time(e[i].snapshot_time, t1),
                       format_size(e[i].size, size), format_time(e[i].mtime, t2), e[i].match ? e[i].match : "-",
                       e[i].same ? "*" : "");
                print_escaped(where, 0);
                putchar('\n');
        }
        if (arg_json)
                printf("]\n");
        entries_free(e, n);
        return EXIT_OK;
}

static int cmd_deleted(sd_bus *bus, int argc, char **argv) {
        _cleanup_close_ int fd = -1;
        Entry *e = NULL;
        size_t n = 0;
        int r;

        if (argc != 1) {
                fprintf(stderr, "deleted takes one DIR.\n");
                return EXIT_USAGE;
        }
        r = open_file(argv[0], O_DIRECTORY, &fd);
        if (r == 0)
                r = -list_entries(bus, "ListDeletedFiles", fd, &e, &n);
        if (r != 0)
                return r;
        if (arg_json)
                printf("[\n");
        else if (n == 0)
                printf("The snapshots hold nothing that this directory lost.\n");
        else
                printf("%-24s  %-9s  %6s  %-19s  %-19s  %s\n", "NAME", "TYPE", "SIZE", "MODIFIED", "SNAPSHOT TIME",
                       "SNAPSHOT");
        for (size_t i = 0; i < n; i++) {
                char t1[32], t2[32], size[32];
                _cleanup_free_ char *where = NULL;

                if (arg_json) {
                        json_entry(bus, &e[i], false, i + 1 < n);
                        continue;
                }
                where = snapshot_display(bus, e[i].snapshot);
                print_escaped(e[i].name, 24);
                printf("  %-9s  %6s  %-19s  %-19s  ", e[i].type ? e[i].type : "-", format_size(e[i].size, size),
                       format_time(e[i].mtime, t1), format_time(e[i].snapshot_time, t2));
                print_escaped(where, 0);
                putchar('\n');
        }
        if (arg_json)
                printf("]\n");
        entries_free(e, n);
        return EXIT_OK;
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
                r = log_bus_error(&error, r);
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

static int cmd_restore(sd_bus *bus, int argc, char **argv) {
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
                r = log_bus_error(&error, r);
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

static int cmd_identity(sd_bus *bus, int argc, char **argv) {
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
                        r = log_bus_error(&error, r);
                        sd_bus_error_free(&error);
                        return r;
                }
                if (arg_json)
                        printf("{\"relation\":\"%s\"}\n", relation);
                else
                        printf("%s\n", relation);
                /* For scripts: 0 the same file, 10 copies of one file. */
                return streq(relation, "same") ? EXIT_OK : streq(relation, "same-lineage") ? 10 : EXIT_FAILED;
        }
        r = sd_bus_call_method(bus, SUBVOLD_BUS_NAME, SUBVOLD_MANAGER_PATH, FILES_IFACE, "GetFileIdentity", &error,
                               &reply, "h", a);
        if (r < 0) {
                r = log_bus_error(&error, r);
                sd_bus_error_free(&error);
                return r;
        }
        return print_properties(reply) < 0 ? EXIT_FAILED : EXIT_OK;
}

static void help(void) {
        printf("Usage: %s [OPTIONS] COMMAND ...\n\n"
               "Shows what subvold knows of btrfs subvolumes.\n\n"
               "Commands:\n"
               "  list [--snapshots|--no-snapshots] [--fs UUID|PATH]\n"
               "                         One line per subvolume\n"
               "  df [-i] [--all] [--output=COLUMNS] [PATH...]\n"
               "                         Size, used and available space (or inodes) of the\n"
               "                         subvolumes holding PATHs, or of those mounted (--all: all)\n"
               "  show PATH|OBJECT       Every property of one subvolume\n"
               "  monitor                Print changes as subvold signals them\n"
               "  metrics                Prometheus text exposition of every figure\n"
               "  versions FILE [--all]  Earlier versions of FILE in its snapshots\n"
               "  deleted DIR            Files the snapshots hold that DIR no longer has\n"
               "  restore FILE --from SNAPSHOT [--to DEST] [--force]\n"
               "                         Write FILE's version in SNAPSHOT (object path, snapshot\n"
               "                         path, or a time as versions prints it) as a new file, by\n"
               "                         reflink where possible; FILE may be DIR/NAME of a deleted file\n"
               "  identity FILE [FILE2]  FILE's identity keys; with FILE2 whether they are the same\n"
               "                         file (exit 0), copies of one file (10) or different (1)\n\n"
               "Options:\n"
               "  -h --help              Show this help\n"
               "     --version           Show the version\n"
               "     --address=ADDRESS   Connect to this bus instead of the system bus\n"
               "     --json              JSON output (list, df, show, monitor)\n"
               "     --bytes             Exact byte counts instead of IEC sizes (K = 1024)\n"
               "  -i --inodes            df: inode columns instead of space\n"
               "     --output=COLUMNS    df: these columns, comma-separated, of subvolume, fs,\n"
               "                         source, size, used, avail, pcent, itotal, iused, iavail,\n"
               "                         ipcent, target\n\n"
               "Exit status: 0 success, 1 failure, 2 bad usage, 3 subvold not reachable,\n"
               "4 not on btrfs, 5 no such subvolume or filesystem.\n",
               program_invocation_short_name);
}

int main(int argc, char *argv[]) {
        enum { ARG_VERSION = 0x100, ARG_ADDRESS, ARG_JSON, ARG_BYTES, ARG_SNAPSHOTS, ARG_NO_SNAPSHOTS, ARG_FS, ARG_ALL,
               ARG_FROM, ARG_TO, ARG_FORCE, ARG_OUTPUT };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "address", required_argument, NULL, ARG_ADDRESS },
                { "json", no_argument, NULL, ARG_JSON },
                { "bytes", no_argument, NULL, ARG_BYTES },
                { "snapshots", no_argument, NULL, ARG_SNAPSHOTS },
                { "no-snapshots", no_argument, NULL, ARG_NO_SNAPSHOTS },
                { "fs", required_argument, NULL, ARG_FS },
                { "all", no_argument, NULL, ARG_ALL },
                { "from", required_argument, NULL, ARG_FROM },
                { "to", required_argument, NULL, ARG_TO },
                { "force", no_argument, NULL, ARG_FORCE },
                { "inodes", no_argument, NULL, 'i' },
                { "output", required_argument, NULL, ARG_OUTPUT },
                {}
        };
        static const struct { const char *name; int (*run)(sd_bus *, int, char **); } commands[] = {
                { "list", cmd_list }, { "df", cmd_df }, { "show", cmd_show },
                { "monitor", cmd_monitor }, { "metrics", cmd_metrics }, { "versions", cmd_versions },
                { "deleted", cmd_deleted }, { "restore", cmd_restore }, { "identity", cmd_identity },
        };
        sd_bus *bus = NULL;
        int c, r;

        while ((c = getopt_long(argc, argv, "hi", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_OK;
                case ARG_VERSION:
                        printf("subvolctl %s\n", PROJECT_VERSION);
                        return EXIT_OK;
                case ARG_ADDRESS:
                        arg_address = optarg;
                        break;
                case ARG_JSON:
                        arg_json = true;
                        break;
                case ARG_BYTES:
                        arg_bytes = true;
                        break;
                case ARG_SNAPSHOTS:
                        arg_snapshots = 1;
                        break;
                case ARG_NO_SNAPSHOTS:
                        arg_snapshots = 0;
                        break;
                case ARG_FS:
                        arg_fs = optarg;
                        break;
                case ARG_ALL:
                        arg_all = true;
                        break;
                case ARG_FROM:
                        arg_from = optarg;
                        break;
                case ARG_TO:
                        arg_to = optarg;
                        break;
                case ARG_FORCE:
                        arg_force = true;
                        break;
                case 'i':
                        arg_inodes = true;
                        break;
                case ARG_OUTPUT:
                        arg_output = optarg;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (optind >= argc) {
                help();
                return EXIT_USAGE;
        }
        for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
                if (!streq(argv[optind], commands[i].name))
                        continue;
                r = connect_bus(&bus);
                if (r == 0)
                        r = commands[i].run(bus, argc - optind - 1, argv + optind + 1);
                sd_bus_flush_close_unref(bus);
                return r;
        }
        fprintf(stderr, "Unknown command \"%s\"; see --help.\n", argv[optind]);
        return EXIT_USAGE;
}
