/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "bus-objects.h"
#include "bus-util.h"
#include "extent-map.h"
#include "util.h"

/* The manager's current model, for methods that take other objects. */
static Model **current_model;
static BusSpace *current_space;

char *bus_filesystem_path(const Filesystem *fs, char buf[static BUS_OBJECT_PATH_MAX]) {
        memcpy(buf, SUBVOLD_FS_PREFIX "/", strlen(SUBVOLD_FS_PREFIX "/"));
        uuid_format_hex(fs->uuid, buf + strlen(SUBVOLD_FS_PREFIX "/"));
        return buf;
}

char *bus_subvolume_path(const Subvolume *sv, char buf[static BUS_OBJECT_PATH_MAX]) {
        char digits[21], *d = digits + sizeof(digits);
        size_t len;
        uint64_t id = sv->id;

        /* Built by hand for the same reason as uuid_format(): this runs
         * several times per object in every GetManagedObjects. */
        *--d = 0;
        do
                *--d = (char) ('0' + id % 10);
        while ((id /= 10) > 0);
        bus_filesystem_path(sv->filesystem, buf);
        len = strlen(buf);
        buf[len] = '/';
        memcpy(buf + len + 1, d, digits + sizeof(digits) - d);
        return buf;
}

/* Splits ".../fs/<hex>[/<id>]" into the filesystem and, if present, the
 * subvolume.  Returns 1 for a filesystem path, 2 for a subvolume path, 0 for
 * anything else (including objects that do not exist). */
static int bus_objects_lookup(const Model *model, const char *path, Filesystem **ret_fs, Subvolume **ret_sv) {
        const char *p = path_startswith(path, SUBVOLD_FS_PREFIX), *slash;
        uint8_t uuid[16];
        uint64_t id;

        if (!model || !p || *p != '/')
                return 0;
        p++;
        slash = strchr(p, '/');
        if (uuid_parse_hex(p, slash ? (size_t) (slash - p) : strlen(p), uuid) < 0)
                return 0;
        *ret_fs = model_find_filesystem(model, uuid);
        if (!*ret_fs)
                return 0;
        if (!slash)
                return 1;
        if (parse_u64(slash + 1, &id) < 0)
                return 0;
        *ret_sv = filesystem_find_subvolume(*ret_fs, id);
        return *ret_sv ? 2 : 0;
}

static int find_filesystem(sd_bus *bus, const char *path, const char *interface, void *userdata,
                           void **ret_found, sd_bus_error *error) {
        Model **model = userdata;
        Filesystem *fs = NULL;
        Subvolume *sv = NULL;

        if (bus_objects_lookup(*model, path, &fs, &sv) != 1)
                return 0;
        *ret_found = fs;
        return 1;
}

static int find_subvolume(sd_bus *bus, const char *path, const char *interface, void *userdata,
                          void **ret_found, sd_bus_error *error) {
        Model **model = userdata;
        Filesystem *fs = NULL;
        Subvolume *sv = NULL;

        if (bus_objects_lookup(*model, path, &fs, &sv) != 2)
                return 0;
        *ret_found = sv;
        return 1;
}

/* The direct children of @prefix, the path being introspected: the
 * filesystems below .../fs, a filesystem's subvolumes below it.  sd-bus
 * would list every descendant as a child otherwise, so that a generic
 * client saw each subvolume twice and one Introspect grew with all of
 * them. */
static int enumerate_objects(sd_bus *bus, const char *prefix, void *userdata, char ***ret_nodes,
                             sd_bus_error *error) {
        const Model *model = *(Model **) userdata;
        _cleanup_strv_free_ char **nodes = NULL;
        char buf[BUS_OBJECT_PATH_MAX];
        Filesystem *fs = NULL;
        Subvolume *sv = NULL;
        size_t n = 0;

        if (!model)
                return 0;
        if (streq(prefix, SUBVOLD_FS_PREFIX)) {
                nodes = calloc(model->n_filesystems + 1, sizeof(char *));
                for (size_t i = 0; nodes && i < model->n_filesystems; i++)
                        if (!(nodes[n++] = strdup(bus_filesystem_path(model->filesystems[i], buf))))
                                return -ENOMEM;
        } else if (bus_objects_lookup(model, prefix, &fs, &sv) == 1) {
                nodes = calloc(fs->n_subvolumes + 1, sizeof(char *));
                for (size_t i = 0; nodes && i < fs->n_subvolumes; i++)
                        if (!(nodes[n++] = strdup(bus_subvolume_path(&fs->subvolumes[i], buf))))
                                return -ENOMEM;
        } else
                return 0;
        if (!nodes)
                return -ENOMEM;
        *ret_nodes = TAKE_PTR(nodes);
        return 1;
}

/* ---- Filesystem properties ---- */

static int property_fs_uuid(sd_bus *bus, const char *path, const char *interface, const char *property,
                            sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Filesystem *fs = userdata;
        char buf[UUID_STRING_MAX];

        return sd_bus_message_append_basic(reply, 's', uuid_format(fs->uuid, buf));
}

static int property_fs_label(sd_bus *bus, const char *path, const char *interface, const char *property,
                             sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Filesystem *fs = userdata;
        _cleanup_free_ char *s = NULL;

        /* Labels are bytes: any of them can be set with mkfs.btrfs -L. */
        if (streq(property, "LabelBytes"))
                return bus_append_bytestring(reply, fs->label);
        s = display_escape(fs->label);
        if (!s)
                return -ENOMEM;
        return sd_bus_message_append_basic(reply, 's', s);
}

static int property_fs_type(sd_bus *bus, const char *path, const char *interface, const char *property,
                            sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append_basic(reply, 's', "btrfs");
}

static int property_fs_paths(sd_bus *bus, const char *path, const char *interface, const char *property,
                             sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Filesystem *fs = userdata;

        return bus_append_bytestring_array(reply, streq(property, "Devices") ? fs->devices : fs->mount_points);
}

static int property_fs_bytes(sd_bus *bus, const char *path, const char *interface, const char *property,
                             sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const StatfsInfo *st = &((const Filesystem *) userdata)->statfs;
        uint64_t blocks = streq(property, "Size") ? st->blocks :
                          streq(property, "Used") ? st->blocks - st->blocks_free :
                          streq(property, "Free") ? st->blocks_free : st->blocks_available;

        return sd_bus_message_append(reply, "t", blocks * st->block_size);
}

static int property_fs_quota(sd_bus *bus, const char *path, const char *interface, const char *property,
                             sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Filesystem *fs = userdata;

        if (streq(property, "QuotaMode"))
                return sd_bus_message_append_basic(reply, 's', quota_mode_to_string(fs->quota_mode));
        return sd_bus_message_append(reply, "b", fs->quota_consistent);
}

static int method_get_subvolumes(sd_bus_message *message, void *userdata, sd_bus_error *error);
static int method_get_exclusive_bytes(sd_bus_message *message, void *userdata, sd_bus_error *error);

static const sd_bus_vtable filesystem_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Uuid", "s", property_fs_uuid, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Label", "s", property_fs_label, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LabelBytes", "ay", property_fs_label, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Type", "s", property_fs_type, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Devices", "aay", property_fs_paths, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("MountPoints", "aay", property_fs_paths, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Size", "t", property_fs_bytes, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Used", "t", property_fs_bytes, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Free", "t", property_fs_bytes, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Available", "t", property_fs_bytes, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Generation", "t", NULL, offsetof(Filesystem, generation), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("QuotaMode", "s", property_fs_quota, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("QuotaConsistent", "b", property_fs_quota, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ScanProgress", "d", NULL, offsetof(Filesystem, scan_progress), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("GetSubvolumes", SD_BUS_ARGS("t", start_id, "u", max_count),
                                SD_BUS_RESULT("a{oa{sv}}", subvolumes, "t", next_id), method_get_subvolumes,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetExclusiveBytes", SD_BUS_ARGS("ao", subvolumes), SD_BUS_RESULT("t", bytes),
                                method_get_exclusive_bytes, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

/* ---- Subvolume properties ---- */

static int property_sv_filesystem(sd_bus *bus, const char *path, const char *interface, const char *property,
                                  sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Subvolume *sv = userdata;
        char buf[BUS_OBJECT_PATH_MAX];

        return sd_bus_message_append_basic(reply, 'o', bus_filesystem_path(sv->filesystem, buf));
}

static int property_sv_path(sd_bus *bus, const char *path, const char *interface, const char *property,
                            sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Subvolume *sv = userdata;

        return bus_append_bytestring(reply, streq(property, "Name") ? path_last_component(sv->path) : sv->path);
}

static int property_sv_display_path(sd_bus *bus, const char *path, const char *interface, const char *property,
                                    sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Subvolume *sv = userdata;
        _cleanup_free_ char *s = display_escape(sv->path);

        if (!s)
                return -ENOMEM;
        return sd_bus_message_append_basic(reply, 's', s);
}

static int property_sv_uuid(sd_bus *bus, const char *path, const char *interface, const char *property,
                            sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Subvolume *sv = userdata;
        const uint8_t *u = streq(property, "Uuid") ? sv->uuid :
                           streq(property, "ParentUuid") ? sv->parent_uuid : sv->received_uuid;
        char buf[UUID_STRING_MAX];

        return sd_bus_message_append_basic(reply, 's', uuid_format(u, buf));
}

static int property_sv_bool(sd_bus *bus, const char *path, const char *interface, const char *property,
                            sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Subvolume *sv = userdata;
        int b = streq(property, "ReadOnly") ? sv->read_only : !uuid_is_null(sv->parent_uuid);

        return sd_bus_message_append_basic(reply, 'b', &b);
}

static int property_sv_snapshot_source(sd_bus *bus, const char *path, const char *interface,
                                       const char *property, sd_bus_message *reply, void *userdata,
                                       sd_bus_error *error) {
        const Subvolume *sv = userdata;
        char buf[BUS_OBJECT_PATH_MAX];

        return sd_bus_message_append_basic(reply, 'o',
                                           sv->snapshot_source ? bus_subvolume_path(sv->snapshot_source, buf) : "/");
}

static int property_sv_access_paths(sd_bus *bus, const char *path, const char *interface, const char *property,
                                    sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        _cleanup_strv_free_ char **paths = subvolume_access_paths(userdata);

        return paths ? bus_append_bytestring_array(reply, paths) : -ENOMEM;
}

static int property_sv_usage(sd_bus *bus, const char *path, const char *interface, const char *property,
                             sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Usage *u = &((const Subvolume *) userdata)->usage;
        int consistent = u->consistent;

        if (streq(property, "UsageSource"))
                return sd_bus_message_append_basic(reply, 's', usage_source_to_string(u->source));
        return sd_bus_message_append_basic(reply, 'b', &consistent);
}

static int method_get_statfs(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        const Subvolume *sv = userdata;
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
        StatfsInfo st = subvolume_statfs(sv, &sv->filesystem->statfs);
        int r;

        r = sd_bus_message_new_method_return(message, &reply);
        if (r >= 0)
                r = bus_append_statfs(reply, &st, &sv->usage);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* The subvolume at @path on the filesystem of @fs, or an error for the
 * caller: NotFound when nothing is there, InvalidArgument for a
 * filesystem or a subvolume of another filesystem. */
static int lookup_subvolume_arg(const Filesystem *fs, const char *path, Subvolume **ret, sd_bus_error *error) {
        Filesystem *other = NULL;
        Subvolume *sv = NULL;

        switch (bus_objects_lookup(*current_model, path, &other, &sv)) {
        case 2:
                if (other != fs)
                        return sd_bus_error_setf(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                                 "%s is a subvolume of another filesystem.", path);
                *ret = sv;
                return 0;
        case 1:
                return sd_bus_error_setf(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                         "%s is a filesystem, not a subvolume.", path);
        default:
                return sd_bus_error_setf(error, SUBVOLD_ERROR_NOT_FOUND, "No subvolume %s.", path);
        }
}

static int method_get_written_since(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        const Subvolume *sv = userdata;
        const ExtentUser *u = NULL, *since = NULL;
        Subvolume *snapshot;
        const char *path;
        int r;

        r = sd_bus_message_read(message, "o", &path);
        if (r < 0)
                return r;
        r = lookup_subvolume_arg(sv->filesystem, path, &snapshot, error);
        if (r < 0)
                return r;
        if (sv->filesystem->extent_map) {
                u = extent_map_find_user(sv->filesystem->extent_map, sv->id);
                since = extent_map_find_user(sv->filesystem->extent_map, snapshot->id);
        }
        return sd_bus_reply_method_return(message, "t", u && since ? extent_map_written_since(u, since) : UINT64_MAX);
}

static int method_get_snapshots(sd_bus_message *message, void *userdata, sd_bus_error *error);

static const sd_bus_vtable subvolume_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Filesystem", "o", property_sv_filesystem, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Id", "t", NULL, offsetof(Subvolume, id), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("ParentId", "t", NULL, offsetof(Subvolume, parent_id), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Path", "ay", property_sv_path, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Name", "ay", property_sv_path, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DisplayPath", "s", property_sv_display_path, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Uuid", "s", property_sv_uuid, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("ParentUuid", "s", property_sv_uuid, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("ReceivedUuid", "s", property_sv_uuid, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("IsSnapshot", "b", property_sv_bool, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("SnapshotSource", "o", property_sv_snapshot_source, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ReadOnly", "b", property_sv_bool, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Generation", "t", NULL, offsetof(Subvolume, generation), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ChangeGeneration", "t", NULL, offsetof(Subvolume, change_generation), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CreationTime", "t", NULL, offsetof(Subvolume, creation_usec), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("AccessPaths", "aay", property_sv_access_paths, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ReferencedBytes", "t", NULL, offsetof(Subvolume, usage.referenced), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ExclusiveBytes", "t", NULL, offsetof(Subvolume, usage.exclusive), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Inodes", "t", NULL, offsetof(Subvolume, usage.inodes), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ReferencedLimitBytes", "t", NULL, offsetof(Subvolume, usage.referenced_limit), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ExclusiveLimitBytes", "t", NULL, offsetof(Subvolume, usage.exclusive_limit), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UsageSource", "s", property_sv_usage, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UsageConsistent", "b", property_sv_usage, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UsageUpdated", "t", NULL, offsetof(Subvolume, usage.updated_usec), 0),
        SD_BUS_PROPERTY("WrittenBytes", "t", NULL, offsetof(Subvolume, written_bytes), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("SnapshotsExclusiveBytes", "t", NULL, offsetof(Subvolume, snapshots_exclusive_bytes),
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LogicalReferencedBytes", "t", NULL, offsetof(Subvolume, logical_referenced_bytes),
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("GetStatfs", SD_BUS_NO_ARGS, SD_BUS_RESULT("a{sv}", statfs), method_get_statfs,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetWrittenSince", SD_BUS_ARGS("o", snapshot), SD_BUS_RESULT("t", bytes),
                                method_get_written_since, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetSnapshots", SD_BUS_ARGS("t", start_id, "u", max_count),
                                SD_BUS_RESULT("a{oa{sv}}", snapshots, "t", next_id), method_get_snapshots,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

/* ---- org.freedesktop.DBus.ObjectManager ----
 *
 * GetManagedObjects and the InterfacesAdded signal are serialized here
 * straight from the model: sd-bus's generic object manager walks every
 * object through the fallback machinery and adds the empty standard
 * interfaces to each, which made GetManagedObjects seven times slower than
 * "btrfs subvolume list" at 10,000 subvolumes. */

/* Appends a{sv}: every property in @vtable. */
static int append_properties(sd_bus_message *m, const char *path, const char *interface,
                             const sd_bus_vtable *vtable, void *object) {
        sd_bus *bus = sd_bus_message_get_bus(m);
        int r;

        r = sd_bus_message_open_container(m, 'a', "{sv}");
        for (const sd_bus_vtable *v = vtable; r >= 0 && v->type != _SD_BUS_VTABLE_END; v++) {
                const char *name = v->x.property.member, *signature = v->x.property.signature;

                if (v->type != _SD_BUS_VTABLE_PROPERTY)
                        continue;
                r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0)
                        r = sd_bus_message_append_basic(m, 's', name);
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', signature);
                if (r >= 0)
                        r = v->x.property.get ?
                                v->x.property.get(bus, path, interface, name, m, object, NULL) :
                                sd_bus_message_append_basic(m, signature[0], (uint8_t *) object + v->x.property.offset);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

/* Appends {s a{sv}}: one interface and its properties. */
static int append_interface(sd_bus_message *m, const char *path, const char *interface,
                            const sd_bus_vtable *vtable, void *object) {
        int r;

        r = sd_bus_message_open_container(m, 'e', "sa{sv}");
        if (r >= 0)
                r = sd_bus_message_append_basic(m, 's', interface);
        if (r >= 0)
                r = append_properties(m, path, interface, vtable, object);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

/* Appends {o a{sa{sv}}}: one object with its only interface. */
static int append_object(sd_bus_message *m, const char *path, const char *interface,
                         const sd_bus_vtable *vtable, void *object) {
        int r;

        r = sd_bus_message_open_container(m, 'e', "oa{sa{sv}}");
        if (r >= 0)
                r = sd_bus_message_append_basic(m, 'o', path);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sa{sv}}");
        if (r >= 0)
                r = append_interface(m, path, interface, vtable, object);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

/* ---- how large a reply may grow ----
 *
 * dbus-daemon disconnects a peer that sends a message larger than its
 * max_message_size (32 MiB unless configured), and subvold exits when its
 * bus goes away.  So the replies that grow with the model are checked
 * before they are built, against an upper bound of their wire size: every
 * alignment counted at its largest, every escaped string at four times its
 * bytes. */

static size_t max_message_size = BUS_DEFAULT_MAX_MESSAGE_SIZE;

/* Room for the header, the reply's own fields and the array around the
 * objects. */
#define MESSAGE_OVERHEAD 1024
/* A dict entry, its key (an object path or a string) and the array
 * around what follows, alignments included. */
#define ENTRY_OVERHEAD (8 + 4 + BUS_OBJECT_PATH_MAX + 1 + 4 + 8)

/* What @vtable's properties take, values of variable length counted at a
 * base size that the callers add each object's own lengths to. */
static size_t properties_bound(const sd_bus_vtable *vtable) {
        size_t n = 8 + 4;  /* the array's length and alignment */

        for (const sd_bus_vtable *v = vtable; v->type != _SD_BUS_VTABLE_END; v++) {
                const char *sig = v->x.property.signature;

                if (v->type != _SD_BUS_VTABLE_PROPERTY)
                        continue;
                /* entry alignment, name, signature, value alignment */
                n += 7 + 4 + strlen(v->x.property.member) + 1 + 1 + strlen(sig) + 1 + 7;
                /* strings and object paths: a UUID, a constant or an object
                 * path at the most, unless the caller adds more */
                n += strchr("sog", sig[0]) ? 4 + BUS_OBJECT_PATH_MAX + 1 : 8;
        }
        return n;
}

/* A byte string as "ay", or an escaped string as "s" (4 bytes out per byte
 * in, at the most), beyond the base above. */
static size_t string_bound(const char *s, size_t per_byte) {
        return per_byte * strlen(s) + 8;
}

static size_t strv_bound(char * const *l) {
        size_t n = 0;

        for (; l && *l; l++)
                n += 3 + 4 + string_bound(*l, 1);
        return n;
}

static size_t subvolume_bound(const Subvolume *sv) {
        static size_t base;

        if (base == 0)
                base = ENTRY_OVERHEAD + 4 + strlen(SUBVOLD_IFACE_SUBVOLUME) + 1 + properties_bound(subvolume_vtable);
        /* Path, Name, DisplayPath, AccessPaths */
        return base + 2 * string_bound(sv->path, 1) + string_bound(sv->path, 4) +
               subvolume_access_paths_bound(sv, 3 + 4 + 8);  /* as string_bound(), aligned */
}

static size_t filesystem_bound(const Filesystem *fs) {
        static size_t base;

        if (base == 0)
                base = ENTRY_OVERHEAD + 4 + strlen(SUBVOLD_IFACE_FS) + 1 + properties_bound(filesystem_vtable);
        /* Label, LabelBytes, Devices, MountPoints */
        return base + string_bound(fs->label, 4) + string_bound(fs->label, 1) + strv_bound(fs->devices) +
               strv_bound(fs->mount_points);
}

static int method_get_managed_objects(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        const Model *model = *(Model **) userdata;
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
        char buf[BUS_OBJECT_PATH_MAX];
        size_t size = MESSAGE_OVERHEAD, n_objects = 0;
        int r;

        for (size_t i = 0; model && i < model->n_filesystems; i++) {
                const Filesystem *fs = model->filesystems[i];

                size += filesystem_bound(fs);
                for (size_t j = 0; j < fs->n_subvolumes; j++)
                        size += subvolume_bound(&fs->subvolumes[j]);
                n_objects += 1 + fs->n_subvolumes;
        }
        if (size > max_message_size)
                return sd_bus_error_setf(error, SD_BUS_ERROR_LIMITS_EXCEEDED,
                                         "The %zu objects would make a reply of up to %zu bytes, more than the "
                                         "%zu bytes a bus message may carry here; page through each "
                                         "filesystem's subvolumes with org.subvold.Subvold1.Filesystem."
                                         "GetSubvolumes() instead.", n_objects, size, max_message_size);

        r = sd_bus_message_new_method_return(message, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "{oa{sa{sv}}}");
        for (size_t i = 0; r >= 0 && model && i < model->n_filesystems; i++) {
                Filesystem *fs = model->filesystems[i];

                r = append_object(reply, bus_filesystem_path(fs, buf), SUBVOLD_IFACE_FS, filesystem_vtable, fs);
                for (size_t j = 0; r >= 0 && j < fs->n_subvolumes; j++)
                        r = append_object(reply, bus_subvolume_path(&fs->subvolumes[j], buf), SUBVOLD_IFACE_SUBVOLUME,
                                          subvolume_vtable, &fs->subvolumes[j]);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* Whether @sv is listed on a page of @source's snapshots (any subvolume
 * when @source is NULL). */
static bool page_member(const Subvolume *sv, const Subvolume *source) {
        return !source || sv->snapshot_source == source;
}

/* The reply of GetSubvolumes and GetSnapshots: the subvolumes of @fs (the
 * snapshots of @source only, unless NULL) from id @start_id on, as many
 * as asked for and fit in one message, always one while any is left, and
 * the id to go on from.  A filtered page walks every subvolume from
 * @start_id: O(subvolumes of the filesystem), as GetManagedObjects. */
static int reply_subvolume_page(sd_bus_message *message, Filesystem *fs, const Subvolume *source,
                                sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
        char buf[BUS_OBJECT_PATH_MAX];
        size_t i, end, count = 0, size = MESSAGE_OVERHEAD;
        uint64_t start_id;
        uint32_t max_count;
        int r;

        r = sd_bus_message_read(message, "tu", &start_id, &max_count);
        if (r < 0)
                return r;
        if (max_count == 0)
                return sd_bus_error_set(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                        "max_count is 0; ask for at least one subvolume.");
        i = end = sorted_lower_bound(fs->subvolumes, fs->n_subvolumes, sizeof(Subvolume), offsetof(Subvolume, id),
                                     start_id);
        for (; end < fs->n_subvolumes; end++) {
                const Subvolume *sv = &fs->subvolumes[end];

                if (!page_member(sv, source))
                        continue;
                if (count == max_count || (count > 0 && size + subvolume_bound(sv) > max_message_size))
                        break;
                size += subvolume_bound(sv);
                count++;
        }

        r = sd_bus_message_new_method_return(message, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "{oa{sv}}");
        for (; r >= 0 && i < end; i++) {
                Subvolume *sv = &fs->subvolumes[i];

                if (!page_member(sv, source))
                        continue;
                r = sd_bus_message_open_container(reply, 'e', "oa{sv}");
                if (r >= 0)
                        r = sd_bus_message_append_basic(reply, 'o', bus_subvolume_path(sv, buf));
                if (r >= 0)
                        r = append_properties(reply, buf, SUBVOLD_IFACE_SUBVOLUME, subvolume_vtable, sv);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r >= 0)
                r = sd_bus_message_append(reply, "t", end < fs->n_subvolumes ? fs->subvolumes[end].id : UINT64_C(0));
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_get_subvolumes(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        return reply_subvolume_page(message, userdata, NULL, error);
}

static int method_get_snapshots(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        Subvolume *sv = userdata;

        return reply_subvolume_page(message, sv->filesystem, sv, error);
}

static int cmp_id(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static int method_get_exclusive_bytes(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        Filesystem *fs = userdata;
        _cleanup_free_ uint64_t *ids = NULL;
        size_t n = 0, allocated = 0;
        const char *path;
        int r;

        r = sd_bus_message_enter_container(message, 'a', "o");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_read(message, "o", &path)) > 0) {
                Subvolume *sv;

                if (n == GET_EXCLUSIVE_BYTES_MAX)
                        return sd_bus_error_setf(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                                 "More than %u subvolumes; ask for at most %u at a time.",
                                                 GET_EXCLUSIVE_BYTES_MAX, GET_EXCLUSIVE_BYTES_MAX);
                r = lookup_subvolume_arg(fs, path, &sv, error);
                if (r < 0)
                        return r;
                if (grow_array(&ids, &allocated, n + 1, sizeof(uint64_t)) < 0)
                        return -ENOMEM;
                ids[n++] = sv->id;
        }
        if (r < 0)
                return r;
        r = sd_bus_message_exit_container(message);
        if (r < 0)
                return r;
        if (n == 0)
                return sd_bus_reply_method_return(message, "t", UINT64_C(0));
        /* Sorted, a duplicate is next to its twin. */
        qsort(ids, n, sizeof(uint64_t), cmp_id);
        for (size_t i = 1; i < n; i++)
                if (ids[i] == ids[i - 1])
                        return sd_bus_error_setf(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                                 "Subvolume %" PRIu64 " is in the set twice.", ids[i]);
        for (size_t i = 0; i < n; i++)
                /* Not measured (yet), or no map at all: unknown. */
                if (!fs->extent_map || !extent_map_find_user(fs->extent_map, ids[i]))
                        return sd_bus_reply_method_return(message, "t", UINT64_MAX);
        return bus_space_exclusive_bytes(current_space, message, fs, TAKE_PTR(ids), n, error);
}

/* Sees every message to the manager's path before sd-bus's own handlers,
 * and takes GetManagedObjects. */
static int on_manager_path_message(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        if (!sd_bus_message_is_method_call(message, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects"))
                return 0;
        return method_get_managed_objects(message, userdata, error);
}

int bus_objects_register(sd_bus *bus, Model **model, BusSpace *space, size_t max_size) {
        int r;

        max_message_size = max_size;
        current_model = model;
        current_space = space;
        /* sd-bus's object manager stays registered for introspection; our
         * callback answers GetManagedObjects and we emit the signals. */
        r = sd_bus_add_object_manager(bus, NULL, SUBVOLD_MANAGER_PATH);
        if (r < 0)
                return r;
        r = sd_bus_add_object(bus, NULL, SUBVOLD_MANAGER_PATH, on_manager_path_message, model);
        if (r < 0)
                return r;
        r = sd_bus_add_fallback_vtable(bus, NULL, SUBVOLD_FS_PREFIX, SUBVOLD_IFACE_FS, filesystem_vtable,
                                       find_filesystem, model);
        if (r < 0)
                return r;
        r = sd_bus_add_fallback_vtable(bus, NULL, SUBVOLD_FS_PREFIX, SUBVOLD_IFACE_SUBVOLUME, subvolume_vtable,
                                       find_subvolume, model);
        if (r < 0)
                return r;
        return sd_bus_add_node_enumerator(bus, NULL, SUBVOLD_FS_PREFIX, enumerate_objects, model);
}

/* ---- change signals ---- */

static bool strv_equal(char * const *a, char * const *b) {
        for (; a && *a && b && *b; a++, b++)
                if (!streq(*a, *b))
                        return false;
        return !(a && *a) && !(b && *b);
}

/* @mounts_unchanged: filesystem_access_unchanged() of their filesystems,
 * when the paths are the same; then so are the access paths. */
static bool access_paths_equal(const Subvolume *a, const Subvolume *b, bool mounts_unchanged) {
        _cleanup_strv_free_ char **x = NULL, **y = NULL;

        if (mounts_unchanged)
                return true;
        x = subvolume_access_paths(a);
        y = subvolume_access_paths(b);
        /* Out of memory: say they changed, the cheap mistake. */
        return x && y && strv_equal(x, y);
}

static bool subvolume_equal(const Subvolume *a, const Subvolume *b, bool mounts_unchanged) {
        SubvolumeFigures figures = subvolume_figures(a);

        return subvolume_figures_equal(&figures, b) && a->parent_id == b->parent_id &&
               streq(a->path, b->path) &&
               memcmp(a->received_uuid, b->received_uuid, 16) == 0 && a->read_only == b->read_only &&
               a->generation == b->generation && a->change_generation == b->change_generation &&
               !a->snapshot_source == !b->snapshot_source &&
               (!a->snapshot_source || a->snapshot_source->id == b->snapshot_source->id) &&
               access_paths_equal(a, b, mounts_unchanged);
}

static bool filesystem_equal(const Filesystem *a, const Filesystem *b) {
        return streq(a->label, b->label) && strv_equal(a->devices, b->devices) &&
               strv_equal(a->mount_points, b->mount_points) &&
               memcmp(&a->statfs, &b->statfs, sizeof(StatfsInfo)) == 0 && a->generation == b->generation &&
               a->quota_mode == b->quota_mode && a->quota_consistent == b->quota_consistent &&
               a->scan_progress == b->scan_progress;
}

static void emit_added(sd_bus *bus, const char *path, const char *interface, const sd_bus_vtable *vtable,
                       const void *object) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *m = NULL;
        int r;

        r = sd_bus_message_new_signal(bus, &m, SUBVOLD_MANAGER_PATH, "org.freedesktop.DBus.ObjectManager",
                                      "InterfacesAdded");
        if (r >= 0)
                r = sd_bus_message_append_basic(m, 'o', path);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sa{sv}}");
        if (r >= 0)
                r = append_interface(m, path, interface, vtable, (void *) object);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_send(bus, m, NULL);
        if (r < 0)
                log_warning_errno(r, "Failed to emit InterfacesAdded for %s: %m", path);
}

static void emit_removed(sd_bus *bus, const char *path, const char *interface) {
        int r = sd_bus_emit_signal(bus, SUBVOLD_MANAGER_PATH, "org.freedesktop.DBus.ObjectManager",
                                   "InterfacesRemoved", "oas", path, 1, interface);
        if (r < 0)
                log_warning_errno(r, "Failed to emit InterfacesRemoved for %s: %m", path);
}

static void emit_changed(sd_bus *bus, const char *path, const char *interface) {
        /* NULL names: every property flagged EMITS_CHANGE. */
        int r = sd_bus_emit_properties_changed_strv(bus, path, interface, NULL);
        if (r < 0)
                log_warning_errno(r, "Failed to emit PropertiesChanged for %s: %m", path);
}

/* Emits what changed in the subvolumes of one filesystem; @old or @new may
 * be NULL when the whole filesystem came or went. */
static void emit_subvolume_changes(sd_bus *bus, const Filesystem *old, const Filesystem *new) {
        size_t i = 0, j = 0, n_old = old ? old->n_subvolumes : 0, n_new = new ? new->n_subvolumes : 0;
        bool mounts_unchanged = old && new && filesystem_access_unchanged(old, new);
        char buf[BUS_OBJECT_PATH_MAX];

        /* Both arrays are sorted by id: walk them side by side. */
        while (i < n_old || j < n_new) {
                const Subvolume *a = i < n_old ? &old->subvolumes[i] : NULL;
                const Subvolume *b = j < n_new ? &new->subvolumes[j] : NULL;

                if (a && (!b || a->id < b->id)) {
                        emit_removed(bus, bus_subvolume_path(a, buf), SUBVOLD_IFACE_SUBVOLUME);
                        i++;
                } else if (b && (!a || b->id < a->id)) {
                        emit_added(bus, bus_subvolume_path(b, buf), SUBVOLD_IFACE_SUBVOLUME, subvolume_vtable, b);
                        j++;
                } else {
                        if (!subvolume_equal(a, b, mounts_unchanged))
                                emit_changed(bus, bus_subvolume_path(b, buf), SUBVOLD_IFACE_SUBVOLUME);
                        i++;
                        j++;
                }
        }
}

void bus_objects_emit_figures(sd_bus *bus, const ModelFigures *before, const Model *model) {
        char buf[BUS_OBJECT_PATH_MAX];

        for (size_t i = 0; i < model->n_filesystems && i < before->n_filesystems; i++) {
                const Filesystem *fs = model->filesystems[i];

                if (before->filesystems[i].scan_progress != fs->scan_progress)
                        emit_changed(bus, bus_filesystem_path(fs, buf), SUBVOLD_IFACE_FS);
                for (size_t j = 0; j < fs->n_subvolumes; j++)
                        if (!subvolume_figures_equal(&before->filesystems[i].subvolumes[j], &fs->subvolumes[j]))
                                emit_changed(bus, bus_subvolume_path(&fs->subvolumes[j], buf), SUBVOLD_IFACE_SUBVOLUME);
        }
}

void bus_objects_emit_changes(sd_bus *bus, const Model *old, const Model *new) {
        char buf[BUS_OBJECT_PATH_MAX];
        bool set_changed = false;
        int r;

        for (size_t i = 0; old && i < old->n_filesystems; i++) {
                const Filesystem *a = old->filesystems[i];

                if (!model_find_filesystem(new, a->uuid)) {
                        emit_subvolume_changes(bus, a, NULL);
                        emit_removed(bus, bus_filesystem_path(a, buf), SUBVOLD_IFACE_FS);
                        set_changed = true;
                }
        }
        for (size_t i = 0; i < new->n_filesystems; i++) {
                const Filesystem *b = new->filesystems[i];
                const Filesystem *a = old ? model_find_filesystem(old, b->uuid) : NULL;

                if (!a) {
                        emit_added(bus, bus_filesystem_path(b, buf), SUBVOLD_IFACE_FS, filesystem_vtable, b);
                        set_changed = true;
                } else if (!filesystem_equal(a, b))
                        emit_changed(bus, bus_filesystem_path(b, buf), SUBVOLD_IFACE_FS);
                emit_subvolume_changes(bus, a, b);
        }
        if (set_changed) {
                r = sd_bus_emit_properties_changed(bus, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER, "Filesystems", NULL);
                if (r < 0)
                        log_warning_errno(r, "Failed to emit PropertiesChanged for the filesystems: %m");
        }
}
