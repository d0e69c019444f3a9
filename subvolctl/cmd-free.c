/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* free: what deleting exactly these subvolumes would free, as subvold's
 * Filesystem.GetExclusiveBytes says (ZFS's "destroy -nv"). */
#include <glob.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mounts.h"
#include "subvolctl.h"

/* A subvolume's root directory has this inode number on btrfs. */
#define SUBVOLUME_ROOT_INODE 256

typedef struct Chosen {
        const Object **svs;
        size_t n, allocated;
} Chosen;

static int choose(Chosen *c, const Object *s) {
        for (size_t i = 0; i < c->n; i++)
                if (c->svs[i] == s)
                        return 0;  /* named twice (two paths, or a glob and a path): once */
        if (grow_array(&c->svs, &c->allocated, c->n + 1, sizeof(Object *)) < 0)
                return -ENOMEM;
        c->svs[c->n++] = s;
        return 0;
}

/* @path must be a subvolume's root: "free /home/alice/doc" is a mistake,
 * not a request about the subvolume holding it. */
static int choose_path(sd_bus *bus, const Objects *o, const char *path, Chosen *c) {
        const Object *s;
        struct stat st;
        int r;

        r = subvolume_in(bus, o, path, &s);
        if (r < 0)
                return r;
        if (stat(path, &st) < 0 || st.st_ino != SUBVOLUME_ROOT_INODE) {
                _cleanup_free_ char *e = term_escape(path, false);
                fprintf(stderr, "%s is not a subvolume (give the directory it is mounted or reached at).\n",
                        e ? e : "?");
                return -EXIT_USAGE;
        }
        if (!s) {
                fprintf(stderr, "%s is newer than what subvolctl read; try again.\n", path);
                return -EXIT_NOT_FOUND;
        }
        return choose(c, s) < 0 ? -EXIT_FAILED : 0;
}

/* An argument: a path, or a pattern of paths that glob(3) expands (for
 * when the shell did not, e.g. quoted). */
static int choose_argument(sd_bus *bus, const Objects *o, const char *arg, Chosen *c) {
        glob_t g = {};
        int r = 0;

        if (!strpbrk(arg, "*?["))
                return choose_path(bus, o, arg, c);
        if (glob(arg, GLOB_NOSORT, NULL, &g) != 0) {
                fprintf(stderr, "%s matches nothing.\n", arg);
                globfree(&g);
                return -EXIT_NOT_FOUND;
        }
        for (size_t i = 0; r >= 0 && i < g.gl_pathc; i++)
                r = choose_path(bus, o, g.gl_pathv[i], c);
        globfree(&g);
        return r;
}

/* --snapshots-of: every subvolume whose ParentUuid is its Uuid. */
static int choose_snapshots_of(sd_bus *bus, const Objects *o, const char *path, Chosen *c) {
        const Object *source;
        int r = subvolume_in(bus, o, path, &source);

        if (r < 0)
                return r;
        if (!source || !*obj_str(source, SV_UUID))
                return 0;
        for (size_t i = 0; i < o->n_svs; i++)
                if (streq(obj_str(&o->svs[i], SV_FILESYSTEM), obj_str(source, SV_FILESYSTEM)) &&
                    streq(obj_str(&o->svs[i], SV_PARENT_UUID), obj_str(source, SV_UUID)) &&
                    choose(c, &o->svs[i]) < 0)
                        return -EXIT_FAILED;
        return 0;
}

/* GetExclusiveBytes of the chosen subvolumes on filesystem @fs. */
static int exclusive_bytes(sd_bus *bus, const Chosen *c, const char *fs, uint64_t *ret) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *call = NULL, *reply = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        int r;

        r = sd_bus_message_new_method_call(bus, &call, SUBVOLD_BUS_NAME, fs, SUBVOLD_IFACE_FS, "GetExclusiveBytes");
        if (r >= 0)
                r = sd_bus_message_open_container(call, 'a', "o");
        for (size_t i = 0; r >= 0 && i < c->n; i++)
                if (streq(obj_str(c->svs[i], SV_FILESYSTEM), fs))
                        r = sd_bus_message_append(call, "o", c->svs[i]->path);
        if (r >= 0)
                r = sd_bus_message_close_container(call);
        if (r < 0)
                return parse_failed(r);
        r = sd_bus_call(bus, call, 0, &error, &reply);
        if (r < 0)
                return -log_bus_error(&error, r, NULL);
        r = sd_bus_message_read(reply, "t", ret);
        return r < 0 ? parse_failed(r) : 0;
}

int cmd_free(sd_bus *bus, int argc, char **argv) {
        Chosen c = {};
        Objects o;
        int r;

        r = load_objects(bus, &o);
        if (r < 0)
                return -r;
        for (int i = 0; r >= 0 && i < argc; i++)
                r = choose_argument(bus, &o, argv[i], &c);
        if (r >= 0 && arg_snapshots_of)
                r = choose_snapshots_of(bus, &o, arg_snapshots_of, &c);
        if (r >= 0 && c.n == 0) {
                fprintf(stderr, "No subvolume to consider%s.\n", arg_snapshots_of ? " (it has no snapshots)" : "");
                r = -EXIT_NOT_FOUND;
        }
        if (r < 0)
                goto finish;
        if (arg_json)
                json_begin_array();
        /* One answer per filesystem: a set spans one. */
        for (size_t k = 0; k < o.n_fss; k++) {
                const Object *f = &o.fss[k];
                uint64_t bytes;
                size_t n = 0;
                char buf[32];

                for (size_t i = 0; i < c.n; i++)
                        n += streq(obj_str(c.svs[i], SV_FILESYSTEM), f->path);
                if (n == 0)
                        continue;
                r = exclusive_bytes(bus, &c, f->path, &bytes);
                if (r < 0)
                        goto finish;
                if (arg_json) {
                        json_begin_object();
                        json_key("filesystem");
                        json_string(obj_str(f, FS_UUID));
                        json_key("subvolumes");
                        json_begin_array();
                        for (size_t i = 0; i < c.n; i++)
                                if (streq(obj_str(c.svs[i], SV_FILESYSTEM), f->path))
                                        json_string(c.svs[i]->path);
                        json_end_array();
                        json_key("bytes");
                        json_u64_or_null(bytes, UNKNOWN);
                        json_end_object();
                        continue;
                }
                for (size_t i = 0; i < c.n; i++)
                        if (streq(obj_str(c.svs[i], SV_FILESYSTEM), f->path)) {
                                _cleanup_free_ char *p = term_escape(obj_str(c.svs[i], SV_PATH), false);
                                printf("%s %s\n", f->name, p ? p : "?");
                        }
                if (bytes == UNKNOWN)
                        printf("Deleting these %zu would free an unknown amount: subvold has not measured them "
                               "(quotas on, or the scan not done).\n", n);
                else
                        printf("Deleting these %zu would free %s of data.\n", n, format_size(bytes, buf));
        }
        if (arg_json) {
                json_end_array();
                json_done();
        }
        r = 0;
finish:
        free(c.svs);
        objects_done(&o);
        return r < 0 ? -r : EXIT_OK;
}
