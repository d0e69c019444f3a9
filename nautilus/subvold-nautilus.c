/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GNOME Files (Nautilus 43, libnautilus-extension-4) extension: list-view
 * columns, a "Subvolume" properties section and "Previous Versions…" for
 * files on btrfs, from subvold on the system bus.
 *
 * Nothing here blocks Nautilus' main thread: the file is opened and
 * stat'ed in a GTask thread, every D-Bus call is asynchronous.  A file is
 * mapped to its subvolume through st_dev (btrfs gives every subvolume a
 * device number of its own), so subvold is asked once per subvolume, not
 * once per file; each subvolume's properties are a GDBusProxy, kept fresh
 * by PropertiesChanged.  When subvold is not there the extension adds
 * nothing and says so only at debug level. */
#include <fcntl.h>
#include <gio/gunixfdlist.h>
#include <linux/magic.h>
#include <nautilus-extension.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "subvold-nautilus.h"

#define SUBVOLD_NAME "org.subvold.Subvold1"
#define MANAGER_PATH "/org/subvold/Subvold1"
#define MANAGER_IFACE "org.subvold.Subvold1.Manager"
#define SUBVOLUME_IFACE "org.subvold.Subvold1.Subvolume"
#define FILESYSTEM_IFACE "org.subvold.Subvold1.Filesystem"
/* btrfs' inode number of every subvolume's root directory. */
#define SUBVOLUME_ROOT_INO 256
/* Object data on a NautilusFileInfo: the path of its subvolume's object,
 * or "" when the file is known not to be on a subvolume subvold knows. */
#define FILE_SUBVOLUME_KEY "subvold-subvolume"

typedef struct {
        SubvoldProvider *self; /* which outlives it */
        char *object_path;
        GDBusProxy *proxy; /* NULL until loaded */
        gboolean loading;
        GList *waiters;    /* Lookups waiting for the proxy */
        GHashTable *files; /* NautilusFileInfo shown with its figures: invalidated when they change */
} Subvolume;

struct _SubvoldProvider {
        GObject parent;
        GDBusConnection *bus; /* NULL until connected */
        gboolean connecting;
        GList *bus_waiters;
        GHashTable *by_dev;      /* st_dev -> object path, "" for none */
        GHashTable *pending_dev; /* st_dev -> GList of lookups awaiting GetSubvolumeByFd */
        GHashTable *subvolumes;  /* object path -> Subvolume */
        guint owner_signal, added_signal, removed_signal;
};

typedef struct Lookup Lookup;
typedef void (*LookupDone)(Lookup *l, Subvolume *s);

/* One file's way to its subvolume.  It is also the NautilusOperationHandle
 * of an info request. */
struct Lookup {
        SubvoldProvider *self;
        NautilusFileInfo *file;
        char *path;
        int fd;
        gboolean btrfs;
        guint64 dev, ino;
        Subvolume *subvolume;
        gboolean source_asked;
        LookupDone done;
        GClosure *update_complete; /* for info requests */
        gboolean cancelled;
        GListStore *store;         /* for properties */
};

static void subvold_provider_info_iface_init(NautilusInfoProviderInterface *iface);
static void subvold_provider_column_iface_init(NautilusColumnProviderInterface *iface);
static void subvold_provider_menu_iface_init(NautilusMenuProviderInterface *iface);
static void subvold_provider_properties_iface_init(NautilusPropertiesModelProviderInterface *iface);

G_DEFINE_DYNAMIC_TYPE_EXTENDED(SubvoldProvider, subvold_provider, G_TYPE_OBJECT, 0,
        G_IMPLEMENT_INTERFACE_DYNAMIC(NAUTILUS_TYPE_INFO_PROVIDER, subvold_provider_info_iface_init)
        G_IMPLEMENT_INTERFACE_DYNAMIC(NAUTILUS_TYPE_COLUMN_PROVIDER, subvold_provider_column_iface_init)
        G_IMPLEMENT_INTERFACE_DYNAMIC(NAUTILUS_TYPE_MENU_PROVIDER, subvold_provider_menu_iface_init)
        G_IMPLEMENT_INTERFACE_DYNAMIC(NAUTILUS_TYPE_PROPERTIES_MODEL_PROVIDER,
                                      subvold_provider_properties_iface_init))

/* ---------------------------------------------------------------- properties */

static GVariant *prop(Subvolume *s, const char *name) {
        return s && s->proxy ? g_dbus_proxy_get_cached_property(s->proxy, name) : NULL;
}

static char *prop_string(Subvolume *s, const char *name) {
        g_autoptr(GVariant) v = prop(s, name);
        return v && (g_variant_is_of_type(v, G_VARIANT_TYPE_STRING) || g_variant_is_of_type(v, G_VARIANT_TYPE_OBJECT_PATH))
                       ? g_variant_dup_string(v, NULL)
                       : NULL;
}

static guint64 prop_u64(Subvolume *s, const char *name) {
        g_autoptr(GVariant) v = prop(s, name);
        return v && g_variant_is_of_type(v, G_VARIANT_TYPE_UINT64) ? g_variant_get_uint64(v) : G_MAXUINT64;
}

static gboolean prop_bool(Subvolume *s, const char *name) {
        g_autoptr(GVariant) v = prop(s, name);
        return v && g_variant_is_of_type(v, G_VARIANT_TYPE_BOOLEAN) && g_variant_get_boolean(v);
}

static gboolean subvolume_loaded(Subvolume *s) {
        g_autoptr(GVariant) v = prop(s, "DisplayPath");
        return v != NULL;
}

/* A usage figure for people: empty when unknown (UINT64_MAX, or no source
 * at all), never "0 bytes" for something nobody measured. */
static char *usage_string(Subvolume *s, const char *name) {
        g_autofree char *source = prop_string(s, "UsageSource");
        guint64 bytes = prop_u64(s, name);

        if (bytes == G_MAXUINT64 || !source || g_str_equal(source, "none"))
                return g_strdup("");
        return g_format_size(bytes);
}

static Subvolume *subvolume_find(SubvoldProvider *self, const char *path) {
        return g_hash_table_lookup(self->subvolumes, path);
}

/* "yes, of /home" for a snapshot whose source is known; "yes" when the
 * source is gone; "" for no snapshot. */
static char *snapshot_string(SubvoldProvider *self, Subvolume *s) {
        g_autofree char *source = prop_string(s, "SnapshotSource");
        g_autofree char *name = NULL;

        if (!prop_bool(s, "IsSnapshot"))
                return g_strdup("");
        name = source ? prop_string(subvolume_find(self, source), "DisplayPath") : NULL;
        return name ? g_strdup_printf("yes, of %s", name) : g_strdup("yes");
}

/* ---------------------------------------------------------------- subvolumes */

static void lookup_continue(Lookup *l);

static void file_gone(gpointer data, GObject *where_the_file_was) {
        g_hash_table_remove(((Subvolume *) data)->files, where_the_file_was);
}

static void subvolume_free(gpointer data) {
        Subvolume *s = data;
        GHashTableIter i;
        gpointer file;

        g_hash_table_iter_init(&i, s->files);
        while (g_hash_table_iter_next(&i, &file, NULL))
                g_object_weak_unref(file, file_gone, s);
        g_hash_table_destroy(s->files);
        g_clear_object(&s->proxy);
        g_free(s->object_path);
        g_free(s);
}

static void subvolume_remember_file(Subvolume *s, NautilusFileInfo *file) {
        if (g_hash_table_add(s->files, file))
                g_object_weak_ref(G_OBJECT(file), file_gone, s);
}

static void subvolume_invalidate_files(Subvolume *s) {
        GHashTableIter i;
        gpointer file;

        g_hash_table_iter_init(&i, s->files);
        while (g_hash_table_iter_next(&i, &file, NULL))
                nautilus_file_info_invalidate_extension_info(file);
}

/* Its figures changed: Nautilus asks again for the files shown with them,
 * and for those of its snapshots (they show its name). */
static void subvolume_changed(GDBusProxy *proxy, GVariant *changed, GStrv invalidated, gpointer data) {
        SubvoldProvider *self = data;
        const char *path = g_dbus_proxy_get_object_path(proxy);
        GHashTableIter i;
        gpointer value;

        g_hash_table_iter_init(&i, self->subvolumes);
        while (g_hash_table_iter_next(&i, NULL, &value)) {
                Subvolume *s = value;
                g_autofree char *source = prop_string(s, "SnapshotSource");
                if (g_str_equal(s->object_path, path) || g_strcmp0(source, path) == 0)
                        subvolume_invalidate_files(s);
        }
}

static void subvolume_proxy_ready(GObject *source, GAsyncResult *result, gpointer data) {
        g_autoptr(GError) error = NULL;
        GDBusProxy *proxy = g_dbus_proxy_new_finish(result, &error);
        Subvolume *s = data;
        GList *waiters;

        /* The provider keeps its Subvolumes until it goes, and it is
         * referenced by every lookup waiting here. */
        s->loading = FALSE;
        if (!proxy)
                g_debug("subvold: %s: %s", s->object_path, error->message);
        s->proxy = proxy;
        if (proxy)
                g_signal_connect(proxy, "g-properties-changed", G_CALLBACK(subvolume_changed), s->self);
        waiters = g_steal_pointer(&s->waiters);
        for (GList *w = waiters; w; w = w->next)
                lookup_continue(w->data);
        g_list_free(waiters);
}

/* Makes @l wait for @path's properties (loading them once), then go on. */
static void subvolume_want(Lookup *l, const char *path) {
        SubvoldProvider *self = l->self;
        Subvolume *s = subvolume_find(self, path);

        if (!s) {
                s = g_new0(Subvolume, 1);
                s->self = self;
                s->object_path = g_strdup(path);
                s->files = g_hash_table_new(NULL, NULL);
                g_hash_table_insert(self->subvolumes, s->object_path, s);
        }
        if (!l->subvolume)
                l->subvolume = s;
        if (subvolume_loaded(s)) {
                lookup_continue(l);
                return;
        }
        s->waiters = g_list_append(s->waiters, l);
        if (s->loading)
                return;
        s->loading = TRUE;
        g_clear_object(&s->proxy);
        g_dbus_proxy_new(self->bus, G_DBUS_PROXY_FLAGS_NONE, NULL, SUBVOLD_NAME, path, SUBVOLUME_IFACE, NULL,
                         subvolume_proxy_ready, s);
}

/* ---------------------------------------------------------------- lookups */

static void lookup_free(Lookup *l) {
        if (l->fd >= 0)
                close(l->fd);
        g_clear_pointer(&l->update_complete, g_closure_unref);
        g_clear_object(&l->store);
        g_clear_object(&l->file);
        g_clear_object(&l->self);
        g_free(l->path);
        g_free(l);
}

static void lookup_finish(Lookup *l, Subvolume *s) {
        if (s && !subvolume_loaded(s))
                s = NULL;
        if (l->file)
                g_object_set_data_full(G_OBJECT(l->file), FILE_SUBVOLUME_KEY, g_strdup(s ? s->object_path : ""),
                                       g_free);
        l->done(l, s);
        lookup_free(l);
}

static void lookup_continue(Lookup *l) {
        Subvolume *s = l->subvolume;
        g_autofree char *source = NULL;

        if (!subvolume_loaded(s)) {
                lookup_finish(l, NULL);
                return;
        }
        /* A snapshot shows its source's name: load that once too. */
        source = prop_string(s, "SnapshotSource");
        if (!l->source_asked && source && !g_str_equal(source, "/")) {
                l->source_asked = TRUE;
                subvolume_want(l, source);
                return;
        }
        lookup_finish(l, s);
}

typedef struct {
        SubvoldProvider *self;
        guint64 dev;
} ByFdCall;

static void by_fd_reply(GObject *source, GAsyncResult *result, gpointer data) {
        ByFdCall *call = data;
        SubvoldProvider *self = call->self;
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) reply = g_dbus_connection_call_with_unix_fd_list_finish(G_DBUS_CONNECTION(source), NULL,
                                                                                    result, &error);
        const char *path = "";
        GList *waiters = NULL;
        gpointer key = NULL;

        if (reply)
                g_variant_get(reply, "(&o)", &path);
        else
                g_debug("subvold: GetSubvolumeByFd: %s", error->message);
        g_hash_table_steal_extended(self->pending_dev, &call->dev, &key, (gpointer *) &waiters);
        g_free(key);
        g_hash_table_insert(self->by_dev, g_memdup2(&call->dev, sizeof call->dev), g_strdup(path));
        for (GList *w = waiters; w; w = w->next) {
                if (*path)
                        subvolume_want(w->data, path);
                else
                        lookup_finish(w->data, NULL);
        }
        g_list_free(waiters);
        g_object_unref(self);
        g_free(call);
}

/* On a btrfs, with the bus there: which subvolume is st_dev? */
static void lookup_by_dev(Lookup *l) {
        SubvoldProvider *self = l->self;
        g_autoptr(GUnixFDList) fds = NULL;
        const char *known = g_hash_table_lookup(self->by_dev, &l->dev);
        GList *pending;
        ByFdCall *call;

        if (known) {
                if (*known)
                        subvolume_want(l, known);
                else
                        lookup_finish(l, NULL);
                return;
        }
        if (g_hash_table_lookup_extended(self->pending_dev, &l->dev, NULL, (gpointer *) &pending)) {
                g_hash_table_insert(self->pending_dev, g_memdup2(&l->dev, sizeof l->dev), g_list_append(pending, l));
                return;
        }
        g_hash_table_insert(self->pending_dev, g_memdup2(&l->dev, sizeof l->dev), g_list_append(NULL, l));
        fds = g_unix_fd_list_new_from_array(&l->fd, 1);
        l->fd = -1; /* now the list's */
        call = g_new0(ByFdCall, 1);
        call->self = g_object_ref(self);
        call->dev = l->dev;
        g_dbus_connection_call_with_unix_fd_list(self->bus, SUBVOLD_NAME, MANAGER_PATH, MANAGER_IFACE,
                                                 "GetSubvolumeByFd", g_variant_new("(h)", 0), G_VARIANT_TYPE("(o)"),
                                                 G_DBUS_CALL_FLAGS_NONE, -1, fds, NULL, by_fd_reply, call);
}

/* Forget what a change may have made wrong: a dev nobody knew may be a
 * new subvolume, a dev of a removed one may be reused.  Properties are
 * kept in their proxies. */
static void forget_devs(SubvoldProvider *self) {
        g_hash_table_remove_all(self->by_dev);
}

static void name_owner_changed(GDBusConnection *bus, const char *sender, const char *path, const char *iface,
                               const char *signal, GVariant *params, gpointer data) {
        SubvoldProvider *self = data;
        const char *name, *old_owner, *new_owner;
        GHashTableIter i;
        gpointer value;

        g_variant_get(params, "(&s&s&s)", &name, &old_owner, &new_owner);
        forget_devs(self);
        /* Gone: the proxies have nothing; load again at the next request
         * rather than now, so that subvold is not started again for
         * nothing (it may stop when idle). */
        if (*new_owner)
                return;
        g_hash_table_iter_init(&i, self->subvolumes);
        while (g_hash_table_iter_next(&i, NULL, &value))
                if (!((Subvolume *) value)->loading)
                        g_clear_object(&((Subvolume *) value)->proxy);
}

static void objects_changed(GDBusConnection *bus, const char *sender, const char *path, const char *iface,
                            const char *signal, GVariant *params, gpointer data) {
        forget_devs(data);
}

static void bus_ready(GObject *source, GAsyncResult *result, gpointer data) {
        SubvoldProvider *self = data;
        g_autoptr(GError) error = NULL;
        GList *waiters;

        self->connecting = FALSE;
        self->bus = g_bus_get_finish(result, &error);
        if (!self->bus)
                g_debug("subvold: no system bus: %s", error->message);
        else {
                self->owner_signal = g_dbus_connection_signal_subscribe(
                        self->bus, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged",
                        "/org/freedesktop/DBus", SUBVOLD_NAME, G_DBUS_SIGNAL_FLAGS_NONE, name_owner_changed, self, NULL);
                self->added_signal = g_dbus_connection_signal_subscribe(
                        self->bus, SUBVOLD_NAME, "org.freedesktop.DBus.ObjectManager", "InterfacesAdded", MANAGER_PATH,
                        NULL, G_DBUS_SIGNAL_FLAGS_NONE, objects_changed, self, NULL);
                self->removed_signal = g_dbus_connection_signal_subscribe(
                        self->bus, SUBVOLD_NAME, "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved",
                        MANAGER_PATH, NULL, G_DBUS_SIGNAL_FLAGS_NONE, objects_changed, self, NULL);
        }
        waiters = g_steal_pointer(&self->bus_waiters);
        for (GList *w = waiters; w; w = w->next) {
                if (self->bus)
                        lookup_by_dev(w->data);
                else
                        lookup_finish(w->data, NULL);
        }
        g_list_free(waiters);
        g_object_unref(self);
}

static void stat_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancellable) {
        Lookup *l = data;
        struct statfs sfs;
        struct stat st;

        /* O_PATH: opens anything without side effects (no FIFO waits, no
         * device opens); enough for fstat(), fstatfs() and subvold. */
        l->fd = open(l->path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        l->btrfs = l->fd >= 0 && fstatfs(l->fd, &sfs) == 0 && sfs.f_type == BTRFS_SUPER_MAGIC &&
                   fstat(l->fd, &st) == 0;
        if (l->btrfs) {
                l->dev = st.st_dev;
                l->ino = st.st_ino;
        }
        g_task_return_boolean(task, TRUE);
}

static void stat_done(GObject *source, GAsyncResult *result, gpointer data) {
        Lookup *l = data;
        SubvoldProvider *self = l->self;

        if (!l->btrfs) {
                lookup_finish(l, NULL);
                return;
        }
        if (self->bus) {
                lookup_by_dev(l);
                return;
        }
        self->bus_waiters = g_list_append(self->bus_waiters, l);
        if (!self->connecting) {
                self->connecting = TRUE;
                g_bus_get(G_BUS_TYPE_SYSTEM, NULL, bus_ready, g_object_ref(self));
        }
}

/* Starts finding @file's subvolume; @done gets it (NULL for none), then
 * the lookup is freed.  FALSE (and nothing started) for a file with no
 * local path. */
static gboolean lookup_start(SubvoldProvider *self, NautilusFileInfo *file, LookupDone done, Lookup **ret) {
        g_autoptr(GFile) location = nautilus_file_info_get_location(file);
        g_autoptr(GTask) task = NULL;
        Lookup *l;

        if (!location || !g_file_is_native(location))
                return FALSE;
        l = g_new0(Lookup, 1);
        l->path = g_file_get_path(location);
        if (!l->path) {
                g_free(l);
                return FALSE;
        }
        l->self = g_object_ref(self);
        l->file = g_object_ref(file);
        l->fd = -1;
        l->done = done;
        *ret = l;
        task = g_task_new(self, NULL, stat_done, l);
        g_task_set_task_data(task, l, NULL);
        g_task_run_in_thread(task, stat_thread);
        return TRUE;
}

/* ---------------------------------------------------------------- columns */

static void info_done(Lookup *l, Subvolume *s) {
        g_autofree char *size = NULL, *exclusive = NULL, *snapshot = NULL, *name = NULL;
        gboolean root = l->ino == SUBVOLUME_ROOT_INO;

        if (l->cancelled)
                return;
        if (s) {
                name = prop_string(s, "DisplayPath");
                size = root ? usage_string(s, "ReferencedBytes") : g_strdup("");
                exclusive = root ? usage_string(s, "ExclusiveBytes") : g_strdup("");
                snapshot = snapshot_string(l->self, s);
                nautilus_file_info_add_string_attribute(l->file, "subvold_subvolume", name);
                nautilus_file_info_add_string_attribute(l->file, "subvold_size", size);
                nautilus_file_info_add_string_attribute(l->file, "subvold_exclusive", exclusive);
                nautilus_file_info_add_string_attribute(l->file, "subvold_snapshot", snapshot);
                subvolume_remember_file(s, l->file);
        }
        nautilus_info_provider_update_complete_invoke(l->update_complete, NAUTILUS_INFO_PROVIDER(l->self),
                                                      (NautilusOperationHandle *) l, NAUTILUS_OPERATION_COMPLETE);
}

static NautilusOperationResult update_file_info(NautilusInfoProvider *provider, NautilusFileInfo *file,
                                                GClosure *update_complete, NautilusOperationHandle **handle) {
        Lookup *l;

        if (!lookup_start(SUBVOLD_PROVIDER(provider), file, info_done, &l))
                return NAUTILUS_OPERATION_COMPLETE;
        l->update_complete = g_closure_ref(update_complete);
        *handle = (NautilusOperationHandle *) l;
        return NAUTILUS_OPERATION_IN_PROGRESS;
}

/* Nautilus no longer waits for it: the lookup runs on (it fills the
 * cache) but neither touches the file nor calls back. */
static void cancel_update(NautilusInfoProvider *provider, NautilusOperationHandle *handle) {
        ((Lookup *) handle)->cancelled = TRUE;
}

static void subvold_provider_info_iface_init(NautilusInfoProviderInterface *iface) {
        iface->update_file_info = update_file_info;
        iface->cancel_update = cancel_update;
}

static GList *get_columns(NautilusColumnProvider *provider) {
        /* Nautilus 43 shows no tooltip per cell, so the exclusive size,
         * meant for a tooltip, is a column of its own. */
        return g_list_append(
                g_list_append(
                        g_list_append(g_list_append(NULL, nautilus_column_new("subvold_subvolume", "subvold_subvolume",
                                                                              "Subvolume",
                                                                              "The btrfs subvolume the file is in")),
                                      nautilus_column_new("subvold_size", "subvold_size", "Subvolume size",
                                                          "For a subvolume's root directory: the data it refers to, "
                                                          "shared or not")),
                        nautilus_column_new("subvold_exclusive", "subvold_exclusive", "Subvolume exclusive",
                                            "For a subvolume's root directory: the data only it refers to, what "
                                            "deleting it would free")),
                nautilus_column_new("subvold_snapshot", "subvold_snapshot", "Snapshot",
                                    "Whether the file's subvolume is a snapshot, and of which subvolume"));
}

static void subvold_provider_column_iface_init(NautilusColumnProviderInterface *iface) {
        iface->get_columns = get_columns;
}

/* ---------------------------------------------------------------- properties */

static void add_item(GListStore *store, const char *name, const char *value) {
        g_autoptr(NautilusPropertiesItem) item = nautilus_properties_item_new(name, value);
        g_list_store_append(store, item);
}

static char *time_string(guint64 usec) {
        g_autoptr(GDateTime) t = usec ? g_date_time_new_from_unix_local((gint64) (usec / G_USEC_PER_SEC)) : NULL;
        return t ? g_date_time_format(t, "%Y-%m-%d %H:%M:%S") : g_strdup("unknown");
}

static char *limit_string(Subvolume *s, const char *name) {
        guint64 limit = prop_u64(s, name);
        return limit == G_MAXUINT64 ? g_strdup("none") : g_format_size(limit);
}

static const char *source_string(const char *source) {
        if (g_strcmp0(source, "qgroup") == 0)
                return "btrfs quotas";
        if (g_strcmp0(source, "simple-quota") == 0)
                return "btrfs simple quotas";
        if (g_strcmp0(source, "scan") == 0)
                return "measured by subvold";
        return "unknown";
}

static void filesystem_ready(GObject *source, GAsyncResult *result, gpointer data) {
        g_autoptr(GListStore) store = data;
        g_autoptr(GDBusProxy) fs = g_dbus_proxy_new_finish(result, NULL);
        g_autoptr(GVariant) label = fs ? g_dbus_proxy_get_cached_property(fs, "Label") : NULL;
        g_autoptr(GVariant) uuid = fs ? g_dbus_proxy_get_cached_property(fs, "Uuid") : NULL;
        g_autofree char *value = NULL;

        if (!uuid)
                return;
        if (label && *g_variant_get_string(label, NULL))
                value = g_strdup_printf("%s (%s)", g_variant_get_string(label, NULL), g_variant_get_string(uuid, NULL));
        else
                value = g_variant_dup_string(uuid, NULL);
        /* Second, after the subvolume. */
        {
                g_autoptr(NautilusPropertiesItem) item = nautilus_properties_item_new("Filesystem", value);
                g_list_store_insert(store, MIN(1u, g_list_model_get_n_items(G_LIST_MODEL(store))), item);
        }
}

/* What df would show for the subvolume: GetStatfs' figures read as df
 * reads statfs(). */
static void statfs_ready(GObject *source, GAsyncResult *result, gpointer data) {
        g_autoptr(GListStore) store = data;
        g_autoptr(GVariant) reply = g_dbus_proxy_call_finish(G_DBUS_PROXY(source), result, NULL);
        g_autoptr(GVariant) dict = reply ? g_variant_get_child_value(reply, 0) : NULL;
        guint64 bsize = 0, blocks = 0, bfree = 0, bavail = 0;
        g_autofree char *size = NULL, *used = NULL, *avail = NULL;

        if (!dict || !g_variant_lookup(dict, "bsize", "t", &bsize) || !g_variant_lookup(dict, "blocks", "t", &blocks) ||
            !g_variant_lookup(dict, "bfree", "t", &bfree) || !g_variant_lookup(dict, "bavail", "t", &bavail))
                return;
        size = g_format_size(blocks * bsize);
        used = g_format_size((blocks - MIN(bfree, blocks)) * bsize);
        avail = g_format_size(bavail * bsize);
        add_item(store, "df: size", size);
        add_item(store, "df: used", used);
        add_item(store, "df: available", avail);
}

static void properties_done(Lookup *l, Subvolume *s) {
        SubvoldProvider *self = l->self;
        g_autofree char *name = NULL, *source = NULL, *parent_uuid = NULL, *usage = NULL, *fs = NULL,
                        *created = NULL, *referenced = NULL, *exclusive = NULL, *rlimit = NULL, *elimit = NULL,
                        *snapshot_of = NULL;

        if (!s) {
                add_item(l->store, "Subvolume", "not on a btrfs subvolume that subvold knows");
                return;
        }
        name = prop_string(s, "DisplayPath");
        add_item(l->store, "Subvolume", name);
        source = prop_string(s, "SnapshotSource");
        parent_uuid = prop_string(s, "ParentUuid");
        if (!prop_bool(s, "IsSnapshot"))
                snapshot_of = g_strdup("not a snapshot");
        else if (source && !g_str_equal(source, "/") && subvolume_loaded(subvolume_find(self, source)))
                snapshot_of = prop_string(subvolume_find(self, source), "DisplayPath");
        else
                snapshot_of = g_strdup_printf("a deleted subvolume (%s)", parent_uuid ? parent_uuid : "");
        add_item(l->store, "Snapshot of", snapshot_of);
        add_item(l->store, "Read-only", prop_bool(s, "ReadOnly") ? "yes" : "no");
        created = time_string(prop_u64(s, "CreationTime") == G_MAXUINT64 ? 0 : prop_u64(s, "CreationTime"));
        add_item(l->store, "Created", created);
        usage = prop_string(s, "UsageSource");
        referenced = usage_string(s, "ReferencedBytes");
        exclusive = usage_string(s, "ExclusiveBytes");
        add_item(l->store, "Referenced", *referenced ? referenced : "unknown");
        add_item(l->store, "Exclusive", *exclusive ? exclusive : "unknown");
        add_item(l->store, "Usage from", source_string(usage));
        rlimit = limit_string(s, "ReferencedLimitBytes");
        elimit = limit_string(s, "ExclusiveLimitBytes");
        add_item(l->store, "Referenced limit", rlimit);
        add_item(l->store, "Exclusive limit", elimit);
        fs = prop_string(s, "Filesystem");
        if (fs && !g_str_equal(fs, "/"))
                g_dbus_proxy_new(self->bus, G_DBUS_PROXY_FLAGS_DO_NOT_CONNECT_SIGNALS, NULL, SUBVOLD_NAME, fs,
                                 FILESYSTEM_IFACE, NULL, filesystem_ready, g_object_ref(l->store));
        g_dbus_proxy_call(s->proxy, "GetStatfs", NULL, G_DBUS_CALL_FLAGS_NONE, -1, NULL, statfs_ready,
                          g_object_ref(l->store));
}

static GList *get_models(NautilusPropertiesModelProvider *provider, GList *files) {
        SubvoldProvider *self = SUBVOLD_PROVIDER(provider);
        g_autoptr(GListStore) store = NULL;
        const char *known;
        Lookup *l;

        if (!files || files->next)
                return NULL;
        /* Known not to be on btrfs (the view asked already): no section. */
        known = g_object_get_data(files->data, FILE_SUBVOLUME_KEY);
        if (known && !*known)
                return NULL;
        store = g_list_store_new(NAUTILUS_TYPE_PROPERTIES_ITEM);
        if (!lookup_start(self, files->data, properties_done, &l))
                return NULL;
        l->store = g_object_ref(store);
        return g_list_append(NULL, nautilus_properties_model_new("Subvolume", G_LIST_MODEL(store)));
}

static void subvold_provider_properties_iface_init(NautilusPropertiesModelProviderInterface *iface) {
        iface->get_models = get_models;
}

/* ---------------------------------------------------------------- menu */

static void previous_versions_activate(NautilusMenuItem *item, gpointer data) {
        NautilusFileInfo *file = data;
        g_autoptr(GFile) location = nautilus_file_info_get_location(file);
        g_autofree char *path = location ? g_file_get_path(location) : NULL;
        g_autoptr(GError) error = NULL;
        char *argv[] = { SUBVOLD_VERSIONS_PROGRAM, path, NULL };

        if (path && !g_spawn_async(NULL, argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, NULL, &error))
                g_warning("subvold: cannot run %s: %s", argv[0], error->message);
}

static GList *get_file_items(NautilusMenuProvider *provider, GList *files) {
        NautilusFileInfo *file;
        NautilusMenuItem *item;
        const char *known;
        GFileType type;

        if (!files || files->next)
                return NULL;
        file = files->data;
        type = nautilus_file_info_get_file_type(file);
        /* Only where a lookup found the file's subvolume: nothing on
         * other filesystems, nothing without subvold. */
        known = g_object_get_data(G_OBJECT(file), FILE_SUBVOLUME_KEY);
        if (!known || !*known || (type != G_FILE_TYPE_REGULAR && type != G_FILE_TYPE_DIRECTORY))
                return NULL;
        item = nautilus_menu_item_new("SubvoldPreviousVersions", "Previous Versions…",
                                      "Versions of this file in the snapshots of its subvolume", NULL);
        g_signal_connect_data(item, "activate", G_CALLBACK(previous_versions_activate), g_object_ref(file),
                              (GClosureNotify) (void (*)(void)) g_object_unref, 0);
        return g_list_append(NULL, item);
}

static void subvold_provider_menu_iface_init(NautilusMenuProviderInterface *iface) {
        iface->get_file_items = get_file_items;
}

/* ---------------------------------------------------------------- type */

static void subvold_provider_finalize(GObject *object) {
        SubvoldProvider *self = SUBVOLD_PROVIDER(object);

        if (self->bus) {
                g_dbus_connection_signal_unsubscribe(self->bus, self->owner_signal);
                g_dbus_connection_signal_unsubscribe(self->bus, self->added_signal);
                g_dbus_connection_signal_unsubscribe(self->bus, self->removed_signal);
                g_object_unref(self->bus);
        }
        g_hash_table_destroy(self->subvolumes);
        g_hash_table_destroy(self->by_dev);
        g_hash_table_destroy(self->pending_dev);
        G_OBJECT_CLASS(subvold_provider_parent_class)->finalize(object);
}

static void subvold_provider_init(SubvoldProvider *self) {
        self->by_dev = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
        self->pending_dev = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        self->subvolumes = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, subvolume_free);
}

static void subvold_provider_class_init(SubvoldProviderClass *klass) {
        G_OBJECT_CLASS(klass)->finalize = subvold_provider_finalize;
}

static void subvold_provider_class_finalize(SubvoldProviderClass *klass) {
}

static GType provider_types[1];

void nautilus_module_initialize(GTypeModule *module) {
        subvold_provider_register_type(module);
        provider_types[0] = SUBVOLD_TYPE_PROVIDER;
}

void nautilus_module_shutdown(void) {
}

void nautilus_module_list_types(const GType **types, int *n_types) {
        *types = provider_types;
        *n_types = G_N_ELEMENTS(provider_types);
}
