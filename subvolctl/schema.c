/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The one schema: what every command calls a property, as text and as
 * JSON.  subvolctl(1) documents the JSON names; test_subvolctl checks the
 * two agree. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "mounts.h"
#include "subvolctl.h"

static const Property subvolume_properties[_SV_MAX] = {
        [SV_FILESYSTEM] = { "Filesystem", "filesystem", KIND_FILESYSTEM },
        [SV_ID] = { "Id", "id", KIND_NUMBER },
        [SV_PARENT_ID] = { "ParentId", "parent_id", KIND_NUMBER },
        [SV_PATH] = { "Path", "path", KIND_PATH },
        [SV_NAME] = { "Name", "name", KIND_PATH },
        [SV_DISPLAY_PATH] = { "DisplayPath", "display_path", KIND_STRING },
        [SV_UUID] = { "Uuid", "uuid", KIND_UUID },
        [SV_PARENT_UUID] = { "ParentUuid", "parent_uuid", KIND_UUID },
        [SV_RECEIVED_UUID] = { "ReceivedUuid", "received_uuid", KIND_UUID },
        [SV_IS_SNAPSHOT] = { "IsSnapshot", "snapshot", KIND_BOOL },
        [SV_SNAPSHOT_SOURCE] = { "SnapshotSource", "snapshot_source", KIND_OBJECT },
        [SV_READ_ONLY] = { "ReadOnly", "read_only", KIND_BOOL },
        [SV_GENERATION] = { "Generation", "generation", KIND_NUMBER },
        [SV_CHANGE_GENERATION] = { "ChangeGeneration", "change_generation", KIND_NUMBER },
        [SV_CREATION_TIME] = { "CreationTime", "creation_time", KIND_TIME },
        [SV_ACCESS_PATHS] = { "AccessPaths", "access_paths", KIND_PATHS },
        [SV_REFERENCED] = { "ReferencedBytes", "referenced", KIND_SIZE },
        [SV_EXCLUSIVE] = { "ExclusiveBytes", "exclusive", KIND_SIZE },
        [SV_INODES] = { "Inodes", "inodes", KIND_COUNT },
        [SV_REFERENCED_LIMIT] = { "ReferencedLimitBytes", "referenced_limit", KIND_LIMIT },
        [SV_EXCLUSIVE_LIMIT] = { "ExclusiveLimitBytes", "exclusive_limit", KIND_LIMIT },
        [SV_USAGE_SOURCE] = { "UsageSource", "source", KIND_STRING },
        [SV_USAGE_CONSISTENT] = { "UsageConsistent", "usage_consistent", KIND_BOOL },
        [SV_USAGE_UPDATED] = { "UsageUpdated", "usage_updated", KIND_TIME },
        [SV_WRITTEN] = { "WrittenBytes", "written", KIND_SIZE },
        [SV_SNAPSHOTS_EXCLUSIVE] = { "SnapshotsExclusiveBytes", "snapshots_exclusive", KIND_SIZE },
        [SV_LOGICAL_REFERENCED] = { "LogicalReferencedBytes", "logical_referenced", KIND_SIZE },
};

static const Property filesystem_properties[_FS_MAX] = {
        [FS_UUID] = { "Uuid", "uuid", KIND_UUID },
        /* Label is LabelBytes escaped: JSON has the bytes, losslessly. */
        [FS_LABEL] = { "Label", NULL, KIND_STRING },
        [FS_LABEL_BYTES] = { "LabelBytes", "label", KIND_PATH },
        [FS_TYPE] = { "Type", "type", KIND_STRING },
        [FS_DEVICES] = { "Devices", "devices", KIND_PATHS },
        [FS_MOUNT_POINTS] = { "MountPoints", "mount_points", KIND_PATHS },
        [FS_SIZE] = { "Size", "size", KIND_SIZE },
        [FS_USED] = { "Used", "used", KIND_SIZE },
        [FS_FREE] = { "Free", "free", KIND_SIZE },
        [FS_AVAILABLE] = { "Available", "available", KIND_SIZE },
        [FS_GENERATION] = { "Generation", "generation", KIND_NUMBER },
        [FS_QUOTA_MODE] = { "QuotaMode", "quota_mode", KIND_STRING },
        [FS_QUOTA_CONSISTENT] = { "QuotaConsistent", "quota_consistent", KIND_BOOL },
        [FS_SCAN_PROGRESS] = { "ScanProgress", "scan_progress", KIND_RATIO },
};

/* GetFileIdentity's answer. */
static const Property identity_properties[] = {
        { "Filesystem", "filesystem", KIND_FILESYSTEM },
        { "Subvolume", "subvolume", KIND_OBJECT },
        { "Inode", "inode", KIND_NUMBER },
        { "InodeGeneration", "inode_generation", KIND_NUMBER },
        { "ChangeTime", "change_time", KIND_TIME },
        { "Key", "key", KIND_STRING },
        { "LineageKey", "lineage_key", KIND_STRING },
};

const Schema subvolume_schema = { SUBVOLD_IFACE_SUBVOLUME, "subvolume", subvolume_properties, _SV_MAX };
const Schema filesystem_schema = { SUBVOLD_IFACE_FS, "filesystem", filesystem_properties, _FS_MAX };
const Schema identity_schema = { NULL, "identity", identity_properties, ELEMENTSOF(identity_properties) };

static bool kind_is_string(Kind kind) {
        return kind == KIND_STRING || kind == KIND_UUID || kind == KIND_OBJECT || kind == KIND_FILESYSTEM ||
               kind == KIND_PATH;
}

void value_clear(Value *v, Kind kind) {
        if (kind_is_string(kind))
                free(v->s);
        else if (kind == KIND_PATHS)
                strv_free(v->l);
        /* Absent (an older subvold): unknown. */
        *v = (Value) {};
        if (!kind_is_string(kind) && kind != KIND_PATHS)
                v->u = UINT64_MAX;
}

int object_init(Object *o, const Schema *schema, const char *path) {
        *o = (Object) { .schema = schema, .path = strdup(path), .values = calloc(schema->n, sizeof(Value)) };
        if (!o->path || !o->values) {
                object_done(o);
                return -ENOMEM;
        }
        for (size_t i = 0; i < schema->n; i++)
                value_clear(&o->values[i], schema->properties[i].kind);
        return 0;
}

void object_done(Object *o) {
        for (size_t i = 0; o->values && i < o->schema->n; i++)
                value_clear(&o->values[i], o->schema->properties[i].kind);
        free(o->values);
        free(o->path);
        free(o->name);
        *o = (Object) {};
}

/* "ay" with its NUL (GLib's bytestring) into a C string. */
static int read_bytestring(sd_bus_message *m, char **ret) {
        const void *p;
        size_t n;
        int r = sd_bus_message_read_array(m, 'y', &p, &n);

        if (r < 0)
                return r;
        *ret = memdup_suffix0(p, n > 0 && ((const char *) p)[n - 1] == 0 ? n - 1 : n);
        return *ret ? 0 : -ENOMEM;
}

static int read_value(sd_bus_message *m, Value *v, Kind kind) {
        static const char types[] = {
                [KIND_SIZE] = 't', [KIND_LIMIT] = 't', [KIND_COUNT] = 't', [KIND_NUMBER] = 't', [KIND_TIME] = 't',
                [KIND_BOOL] = 'b', [KIND_STRING] = 's', [KIND_UUID] = 's', [KIND_OBJECT] = 'o',
                [KIND_FILESYSTEM] = 'o', [KIND_RATIO] = 'd',
        };
        const char *s;
        int r, b;

        value_clear(v, kind);
        v->set = true;
        if (kind == KIND_PATH)
                return read_bytestring(m, &v->s);
        if (kind == KIND_PATHS) {
                size_t n = 0;
                char *e;

                r = sd_bus_message_enter_container(m, 'a', "ay");
                if (r >= 0 && !(v->l = calloc(1, sizeof(char *))))
                        r = -ENOMEM;
                while (r >= 0 && !sd_bus_message_at_end(m, false)) {
                        r = read_bytestring(m, &e);
                        if (r >= 0)
                                r = strv_consume(&v->l, &n, e);
                }
                return r < 0 ? r : sd_bus_message_exit_container(m);
        }
        switch (types[kind]) {
        case 't':
                return sd_bus_message_read_basic(m, 't', &v->u);
        case 'b':
                r = sd_bus_message_read_basic(m, 'b', &b);
                v->u = b;
                return r;
        case 'd':
                return sd_bus_message_read_basic(m, 'd', &v->d);
        default:
                r = sd_bus_message_read_basic(m, types[kind], &s);
                if (r >= 0 && !(v->s = strdup(s)))
                        r = -ENOMEM;
                return r;
        }
}

static const char *dbus_signature(Kind kind) {
        switch (kind) {
        case KIND_BOOL: return "b";
        case KIND_STRING: case KIND_UUID: return "s";
        case KIND_OBJECT: case KIND_FILESYSTEM: return "o";
        case KIND_PATH: return "ay";
        case KIND_PATHS: return "aay";
        case KIND_RATIO: return "d";
        default: return "t";
        }
}

/* The index of property @name, looked for from @hint on: subvold sends
 * them in the schema's order, so that this is one comparison each, not
 * one per property (100,000 subvolumes make it count). */
static size_t property_index(const Schema *schema, const char *name, size_t hint) {
        for (size_t k = 0; k < schema->n; k++) {
                size_t i = (hint + k) % schema->n;

                if (streq(schema->properties[i].dbus, name))
                        return i;
        }
        return schema->n;
}

int object_read(Object *o, sd_bus_message *m, bool *changed) {
        size_t next = 0;
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *name, *contents;
                size_t i;

                r = sd_bus_message_read(m, "s", &name);
                if (r >= 0)
                        r = sd_bus_message_peek_type(m, NULL, &contents);
                if (r < 0)
                        break;
                i = property_index(o->schema, name, next);
                next = i + 1;
                /* Unknown to us, or of another type than we know: skipped. */
                if (i == o->schema->n || !streq(contents, dbus_signature(o->schema->properties[i].kind)))
                        r = sd_bus_message_skip(m, "v");
                else {
                        r = sd_bus_message_enter_container(m, 'v', contents);
                        if (r >= 0)
                                r = read_value(m, &o->values[i], o->schema->properties[i].kind);
                        if (r >= 0)
                                r = sd_bus_message_exit_container(m);
                        if (changed)
                                changed[i] = true;
                }
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        }
        return r < 0 ? r : sd_bus_message_exit_container(m);
}

bool value_equal(const Value *a, const Value *b, Kind kind) {
        if (a->set != b->set)
                return false;
        if (kind_is_string(kind))
                return !a->s == !b->s && (!a->s || streq(a->s, b->s));
        if (kind == KIND_PATHS) {
                size_t i = 0;

                for (; a->l && b->l && a->l[i] && b->l[i]; i++)
                        if (!streq(a->l[i], b->l[i]))
                                return false;
                return (!a->l || !a->l[i]) && (!b->l || !b->l[i]);
        }
        return kind == KIND_RATIO ? a->d == b->d : a->u == b->u;
}

char *value_to_text(const Value *v, Kind kind) {
        char buf[64], *s = NULL;

        if (!v->set)
                return strdup("-");
        switch (kind) {
        case KIND_SIZE:
        case KIND_LIMIT:
                if (kind == KIND_LIMIT && v->u == UINT64_MAX)
                        return strdup("infinity");
                return strdup(format_size(v->u, buf));
        case KIND_COUNT:
                return strdup(format_count(v->u, buf));
        case KIND_NUMBER:
                return asprintf(&s, "%" PRIu64, v->u) < 0 ? NULL : s;
        case KIND_TIME:
                return strdup(format_timestamp(v->u, buf));
        case KIND_BOOL:
                return strdup(v->u ? "yes" : "no");
        case KIND_UUID:
                return strdup(!v->s || !*v->s ? "-" : v->s);
        case KIND_OBJECT:
                return strdup(!v->s || streq(v->s, "/") ? "-" : v->s);
        case KIND_RATIO:
                return asprintf(&s, "%.0f%%", v->d * 100) < 0 ? NULL : s;
        case KIND_PATHS: {
                /* On one line (monitor): words, blanks escaped. */
                size_t n = 0;
                FILE *f = open_memstream(&s, &n);

                for (char **p = v->l; f && p && *p; p++) {
                        _cleanup_free_ char *e = term_escape(*p, true);
                        fprintf(f, "%s%s", p == v->l ? "" : " ", e ? e : "?");
                }
                if (f)
                        fclose(f);
                return s;
        }
        default:  /* strings and paths: what a user could have put there */
                return term_escape(v->s ? v->s : "", false);
        }
}

void object_print_text(const Object *o) {
        for (size_t i = 0; i < o->schema->n; i++) {
                const Property *p = &o->schema->properties[i];
                const Value *v = &o->values[i];

                if (p->kind == KIND_PATHS) {
                        /* One line per path: paths hold blanks. */
                        if (!v->l || !v->l[0])
                                printf("%s=\n", p->dbus);
                        for (char **l = v->l; l && *l; l++) {
                                _cleanup_free_ char *e = term_escape(*l, false);
                                printf("%s=%s\n", p->dbus, e ? e : "?");
                        }
                        continue;
                }
                _cleanup_free_ char *text = value_to_text(v, p->kind);
                printf("%s=%s\n", p->dbus, text ? text : "?");
        }
}

/* The UUID in a Filesystem object path (.../fs/<32 hex digits>), dashed. */
static void json_filesystem(const char *object) {
        const char *hex = path_startswith(object, SUBVOLD_FS_PREFIX);
        char uuid[37];
        size_t n = 0;

        if (!hex || strlen(hex) != 33) {
                json_null();
                return;
        }
        for (size_t i = 0; i < 32; i++) {
                if (i == 8 || i == 12 || i == 16 || i == 20)
                        uuid[n++] = '-';
                uuid[n++] = hex[i + 1];  /* after the "/" */
        }
        uuid[n] = 0;
        json_string(uuid);
}

static void json_value(const Value *v, Kind kind) {
        if (!v->set) {
                json_null();
                return;
        }
        switch (kind) {
        case KIND_SIZE: case KIND_LIMIT: case KIND_COUNT:
                json_u64_or_null(v->u, UINT64_MAX);
                break;
        case KIND_NUMBER:
                json_u64(v->u);
                break;
        case KIND_TIME:
                json_u64_or_null(v->u, 0);
                break;
        case KIND_BOOL:
                json_bool(v->u);
                break;
        case KIND_UUID:
                if (!v->s || !*v->s)
                        json_null();
                else
                        json_string(v->s);
                break;
        case KIND_OBJECT:
                if (!v->s || streq(v->s, "/"))
                        json_null();
                else
                        json_string(v->s);
                break;
        case KIND_FILESYSTEM:
                json_filesystem(v->s ? v->s : "");
                break;
        case KIND_PATH:
                json_bytes(v->s ? v->s : "");
                break;
        case KIND_PATHS:
                json_begin_array();
                for (char **l = v->l; l && *l; l++)
                        json_bytes(*l);
                json_end_array();
                break;
        case KIND_RATIO:
                json_double(v->d);
                break;
        default:
                json_string(v->s ? v->s : "");
        }
}

void object_print_json(const Object *o, const bool *only, bool with_path) {
        json_begin_object();
        if (with_path) {
                json_key("object");
                json_string(o->path);
        }
        for (size_t i = 0; i < o->schema->n; i++) {
                const Property *p = &o->schema->properties[i];

                if (!p->json || (only && !only[i]))
                        continue;
                json_key(p->json);
                json_value(&o->values[i], p->kind);
        }
        json_end_object();
}
