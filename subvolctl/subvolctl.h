/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* subvolctl: a command-line client of subvold, over sd-bus.
 *
 * main.c      options, per-command help, the pager, dispatch
 * schema.c    every property subvolctl knows: its D-Bus name, its JSON
 *             name, what kind of value it is; reading, printing as text
 *             and as JSON (the one schema of every command)
 * output.c    terminal escaping, sizes and times, the JSON writer, tables
 * objects.c   reading subvold's model; naming filesystems; --fs
 * cmd-*.c     the commands */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <systemd/sd-bus.h>

#include "bus-util.h"
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

typedef enum JsonMode { JSON_OFF, JSON_SHORT, JSON_PRETTY } JsonMode;

/* The options; which command accepts which is in main.c. */
extern JsonMode arg_json;
extern bool arg_bytes, arg_legend, arg_all, arg_inodes, arg_force;
extern int arg_snapshots;  /* -1: all, 1: only snapshots, 0: no snapshots */
extern const char *arg_fs, *arg_output, *arg_from, *arg_to, *arg_address, *arg_snapshots_of;

/* ---- schema.c ---- */

typedef enum Kind {
        KIND_SIZE,        /* t: bytes; UINT64_MAX unknown */
        KIND_LIMIT,       /* t: bytes; UINT64_MAX no limit */
        KIND_COUNT,       /* t: UINT64_MAX unknown */
        KIND_NUMBER,      /* t: an id or a generation */
        KIND_TIME,        /* t: µs since the epoch; 0 unknown */
        KIND_BOOL,        /* b */
        KIND_STRING,      /* s */
        KIND_UUID,        /* s: "" none */
        KIND_OBJECT,      /* o: "/" none */
        KIND_FILESYSTEM,  /* o: a Filesystem object; JSON: its UUID */
        KIND_PATH,        /* ay: bytes and a NUL */
        KIND_PATHS,       /* aay */
        KIND_RATIO,       /* d: 0 to 1 */
} Kind;

typedef struct Property {
        const char *dbus;  /* its D-Bus name */
        const char *json;  /* its JSON name; NULL: not in JSON */
        Kind kind;
} Property;

typedef struct Schema {
        const char *interface, *type;  /* type: "subvolume" or "filesystem" */
        const Property *properties;
        size_t n;
} Schema;

/* Indexes into the two schemas. */
enum {
        SV_FILESYSTEM, SV_ID, SV_PARENT_ID, SV_PATH, SV_NAME, SV_DISPLAY_PATH, SV_UUID, SV_PARENT_UUID,
        SV_RECEIVED_UUID, SV_IS_SNAPSHOT, SV_SNAPSHOT_SOURCE, SV_READ_ONLY, SV_GENERATION, SV_CHANGE_GENERATION,
        SV_CREATION_TIME, SV_ACCESS_PATHS, SV_REFERENCED, SV_EXCLUSIVE, SV_INODES, SV_REFERENCED_LIMIT,
        SV_EXCLUSIVE_LIMIT, SV_USAGE_SOURCE, SV_USAGE_CONSISTENT, SV_USAGE_UPDATED, SV_WRITTEN,
        SV_SNAPSHOTS_EXCLUSIVE, SV_LOGICAL_REFERENCED, _SV_MAX
};
enum {
        FS_UUID, FS_LABEL, FS_LABEL_BYTES, FS_TYPE, FS_DEVICES, FS_MOUNT_POINTS, FS_SIZE, FS_USED, FS_FREE,
        FS_AVAILABLE, FS_GENERATION, FS_QUOTA_MODE, FS_QUOTA_CONSISTENT, FS_SCAN_PROGRESS, _FS_MAX
};

extern const Schema subvolume_schema, filesystem_schema, identity_schema;

/* One property's value; which member holds it is its Kind's business.
 * Small: list keeps one per property of every subvolume. */
typedef struct Value {
        bool set;
        union {
                uint64_t u;    /* t, b; UINT64_MAX while not set */
                double d;      /* d */
                char *s;       /* s, o, ay (without its NUL); NULL while not set */
                char **l;      /* aay */
        };
} Value;

/* One object of subvold's: a subvolume or a filesystem. */
typedef struct Object {
        char *path;           /* its D-Bus object path */
        const Schema *schema;
        Value *values;        /* schema->n */
        char *name;           /* filesystems: what tables call it (see fs_name()) */
} Object;

int object_init(Object *o, const Schema *schema, const char *path);
void object_done(Object *o);
/* Reads a{sv} into @o: what the schema knows is kept, the rest skipped.
 * With @changed, the indexes read are set there. */
int object_read(Object *o, sd_bus_message *m, bool *changed);
bool value_equal(const Value *a, const Value *b, Kind kind);
void value_clear(Value *v, Kind kind);

static inline uint64_t obj_u64(const Object *o, size_t i) {
        return o->values[i].u;
}
static inline const char *obj_str(const Object *o, size_t i) {
        return o->values[i].s ? o->values[i].s : "";
}
static inline char **obj_strv(const Object *o, size_t i) {
        return o->values[i].l;
}

/* A value for people: sizes, times, "-" for unknown, "infinity" for no
 * limit, strings escaped for the terminal. */
char *value_to_text(const Value *v, Kind kind);
/* "Name=value" lines of every property; lists one line per element. */
void object_print_text(const Object *o);
/* The object in the JSON schema, "object" (its D-Bus path) first unless
 * !@with_path; @only: just these indexes. */
void object_print_json(const Object *o, const bool *only, bool with_path);

/* ---- output.c ---- */

/* @s with every byte that could move a terminal's cursor or change its
 * state (C0 and C1 controls, DEL) and every byte that is not valid UTF-8
 * written as \xNN; @word: blanks too, so that columns split on them. */
char *term_escape(const char *s, bool word);
const char *format_size(uint64_t v, char buf[static 32]);
const char *format_count(uint64_t v, char buf[static 32]);
const char *format_percent(uint64_t v, char buf[static 32]);
/* "Fri 2026-12-04 16:06:15 UTC"; "-" for 0. */
const char *format_timestamp(uint64_t usec, char buf[static 64]);

/* JSON, written as it is built; pretty with --json=pretty.  Commas and
 * indentation are the writer's business. */
void json_begin_object(void);
void json_end_object(void);
void json_begin_array(void);
void json_end_array(void);
void json_key(const char *key);
void json_string(const char *s);
/* Bytes as a JSON string when they are valid UTF-8, else as an array of
 * their values: lossless either way. */
void json_bytes(const char *s);
void json_u64(uint64_t v);
void json_u64_or_null(uint64_t v, uint64_t null_value);
void json_bool(bool b);
void json_double(double d);
void json_null(void);
/* Ends a top-level value: a newline and a flush. */
void json_done(void);

/* A table: cells escaped by the caller, widths from the content. */
typedef struct Table Table;
Table *table_new(size_t n_columns, const char *const *headers, const bool *right_aligned);
int table_add(Table *t, const char *const *cells);
void table_print(Table *t);
Table *table_free(Table *t);
static inline void table_freep(Table **t) {
        table_free(*t);
}

/* ---- objects.c ---- */

typedef struct Objects {
        Object *svs, *fss;
        size_t n_svs, allocated_svs, n_fss, allocated_fss;
} Objects;

void objects_done(Objects *o);
/* Every filesystem and subvolume, subvolumes sorted by filesystem and id;
 * on failure a message and the exit code, negative. */
int load_objects(sd_bus *bus, Objects *o);
const Object *find_fs(const Objects *o, const char *object);
const Object *find_sv(const Objects *o, const char *object);
/* --fs: a label, a UUID (dashes optional), a mount point or other path,
 * or a Filesystem object path; the exit code, negative, on failure. */
int resolve_fs(sd_bus *bus, const Objects *o, const char *spec, const Object **ret);
/* The mount point of its filesystem at which @s is mounted, or NULL. */
const char *mount_point_of(const Objects *o, const Object *s);

int connect_bus(sd_bus **ret);
/* Messages for a failed call; @what: what the user gave (a path), or
 * NULL.  Returns the exit code. */
int log_bus_error(const sd_bus_error *e, int r, const char *what);
int parse_failed(int r);
/* Calls Manager.@method(h) with @path opened (symlinks followed); on
 * failure a message naming @path and the exit code, negative. */
int call_by_path(sd_bus *bus, const char *path, const char *method, sd_bus_message **ret);
/* The Subvolume object of @path; the exit code, negative, on failure. */
int subvolume_of_path(sd_bus *bus, const char *path, char **ret);
/* The same, among @o: NULL when subvold published it after @o was read. */
int subvolume_in(sd_bus *bus, const Objects *o, const char *path, const Object **ret);

/* ---- the commands ---- */

int cmd_list(sd_bus *bus, int argc, char **argv);
int cmd_df(sd_bus *bus, int argc, char **argv);
int cmd_filesystems(sd_bus *bus, int argc, char **argv);
int cmd_show(sd_bus *bus, int argc, char **argv);
int cmd_monitor(sd_bus *bus, int argc, char **argv);
int cmd_metrics(sd_bus *bus, int argc, char **argv);
int cmd_versions(sd_bus *bus, int argc, char **argv);
int cmd_deleted(sd_bus *bus, int argc, char **argv);
int cmd_restore(sd_bus *bus, int argc, char **argv);
int cmd_identity(sd_bus *bus, int argc, char **argv);
int cmd_free(sd_bus *bus, int argc, char **argv);
