/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <inttypes.h>
#include <limits.h>

#include "bus-manager.h"
#include "bus-objects.h"
#include "bus-util.h"
#include "fs-btrfs.h"
#include "util.h"

static int reply_subvolume(sd_bus_message *message, const Subvolume *sv) {
        char buf[BUS_OBJECT_PATH_MAX];

        return sd_bus_reply_method_return(message, "o", bus_subvolume_path(sv, buf));
}

/* The fsid of the filesystem mounted as @mount_id, read through that mount
 * now (the table may be a refresh old, and mountinfo ids are reused). */
static int mount_fsid(const Model *model, uint64_t mount_id, uint8_t ret[16]) {
        _cleanup_close_ int fd = -1;
        Filesystem *fs = NULL;
        const Mount *mount = model_find_mount(model, mount_id, &fs);
        int r;

        if (!mount || !fs)
                return -ENOENT;
        r = btrfs_open_mount(mount, model->mounts.source, &fd);
        if (r < 0)
                return r;
        return btrfs_read_fsid(fd, ret);
}

int bus_lookup_subvolume_by_fd(const Model *model, int fd, const Subvolume **ret, FdIdentity *ret_id,
                               sd_bus_error *error) {
        const Filesystem *fs;
        FdIdentity id = {};
        int r;

        r = btrfs_identify_fd(fd, model->mounts.source == MOUNT_SOURCE_LISTMOUNT, &id);
        if (r == -ENOENT && !model_is_btrfs_device(model, id.dev))
                r = -EMEDIUMTYPE;
        if (r == -EMEDIUMTYPE)
                return sd_bus_error_set(error, SUBVOLD_ERROR_NOT_BTRFS,
                                        "The file descriptor does not refer to a file on a btrfs filesystem.");
        if (r == -ENOENT)
                return sd_bus_error_set(error, SUBVOLD_ERROR_NOT_FOUND,
                                        "The file descriptor refers to an empty placeholder directory, which "
                                        "a snapshot leaves where its source had a nested subvolume; it belongs "
                                        "to no subvolume.");
        if (r < 0)
                return sd_bus_error_setf(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                         "Cannot inspect the file descriptor: %s", strerror(-r));
        if (!id.have_fsid && mount_fsid(model, id.mount_id, id.fsid) < 0)
                return sd_bus_error_set(error, SUBVOLD_ERROR_NOT_FOUND,
                                        "The file descriptor refers to a FIFO, socket, device node or symbolic "
                                        "link on a mount that subvold cannot see; pass a file descriptor of a "
                                        "regular file or directory instead.");
        fs = model_find_filesystem(model, id.fsid);
        if (!fs)
                return sd_bus_error_set(error, SUBVOLD_ERROR_NOT_FOUND,
                                        "The file is on a btrfs filesystem that is not mounted in subvold's "
                                        "mount namespace.");
        *ret = filesystem_find_subvolume(fs, id.subvolume_id);
        if (!*ret)
                return sd_bus_error_setf(error, SUBVOLD_ERROR_NOT_FOUND,
                                         "Subvolume %" PRIu64 " is not in subvold's model yet; "
                                         "call Refresh() or try again later.", id.subvolume_id);
        if (ret_id)
                *ret_id = id;
        return 0;
}

/* The subvolume holding the file behind the fd in @message's first
 * argument; sets a named error otherwise. */
static int lookup_subvolume_by_fd(Manager *m, sd_bus_message *message, int *ret_fd, const Subvolume **ret,
                                  sd_bus_error *error) {
        int fd, r;

        r = sd_bus_message_read(message, "h", &fd);
        if (r < 0)
                return sd_bus_error_set(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                        "The call carries no usable file descriptor.");
        r = bus_lookup_subvolume_by_fd(m->model, fd, ret, NULL, error);
        if (r < 0)
                return r;
        *ret_fd = fd;
        return 0;
}

static int method_get_subvolume_by_fd(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        const Subvolume *sv;
        int fd, r;

        r = lookup_subvolume_by_fd(userdata, message, &fd, &sv, error);
        if (r < 0)
                return r;
        return reply_subvolume(message, sv);
}

static int method_get_statfs_by_fd(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
        char buf[BUS_OBJECT_PATH_MAX];
        const Subvolume *sv;
        StatfsInfo fs, st;
        int fd, r;

        r = lookup_subvolume_by_fd(userdata, message, &fd, &sv, error);
        if (r < 0)
                return r;
        /* The filesystem's own figures, fresh, and of the mount the fd is on
         * (its flags say read-only, nosuid, ...). */
        r = btrfs_read_statfs(fd, &fs);
        if (r < 0)
                return sd_bus_error_setf(error, SUBVOLD_ERROR_FAILED, "statfs() failed: %s", strerror(-r));
        st = subvolume_statfs(sv, &fs);
        r = sd_bus_message_new_method_return(message, &reply);
        if (r >= 0)
                r = sd_bus_message_append(reply, "o", bus_subvolume_path(sv, buf));
        if (r >= 0)
                r = bus_append_statfs(reply, &st, &sv->usage);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* GetSubvolumeByPath and GetSubvolumeByPathBytes: @path is a C string
 * shorter than PATH_MAX. */
static int reply_subvolume_by_path(sd_bus_message *message, Manager *m, const char *path, sd_bus_error *error) {
        _cleanup_free_ char *shown = display_escape(path);  /* errors are UTF-8 */
        Subvolume *sv = NULL;

        if (!shown)
                return -ENOMEM;
        switch (model_resolve_path(m->model, path, &sv)) {
        case RESOLVE_OK:
                return reply_subvolume(message, sv);
        case RESOLVE_INVALID:
                return sd_bus_error_setf(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                         "Path \"%s\" is not absolute; pass an absolute path.", shown);
        case RESOLVE_NOT_BTRFS:
                return sd_bus_error_setf(error, SUBVOLD_ERROR_NOT_BTRFS,
                                         "Path \"%s\" is not on a btrfs filesystem.", shown);
        case RESOLVE_NOT_FOUND:
        default:
                return sd_bus_error_setf(error, SUBVOLD_ERROR_NOT_FOUND,
                                         "Path \"%s\" is on btrfs, but no subvolume in subvold's model "
                                         "holds it; call Refresh() or try again later.", shown);
        }
}

/* Refused before any work: resolving is linear in the length, but the bus
 * allows strings of megabytes. */
static int path_too_long(size_t len, sd_bus_error *error) {
        return sd_bus_error_setf(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                 "The path is %zu bytes long, longer than PATH_MAX (%d).", len, PATH_MAX);
}

static int method_get_subvolume_by_path(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        const char *path;
        int r;

        r = sd_bus_message_read(message, "s", &path);
        if (r < 0)
                return r;
        if (strlen(path) >= PATH_MAX)
                return path_too_long(strlen(path), error);
        return reply_subvolume_by_path(message, userdata, path, error);
}

/* The same for a path of any bytes (ay, with or without the trailing NUL
 * of GLib's bytestrings): the paths subvold publishes are ay, and a name
 * that is not UTF-8 cannot be passed as s. */
static int method_get_subvolume_by_path_bytes(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        char path[PATH_MAX];
        const void *p;
        size_t n;
        int r;

        r = sd_bus_message_read_array(message, 'y', &p, &n);
        if (r < 0)
                return r;
        if (n > 0 && ((const char *) p)[n - 1] == 0)
                n--;
        if (n >= PATH_MAX)
                return path_too_long(n, error);
        if (memchr(p, 0, n))
                return sd_bus_error_set(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                        "The path holds a NUL byte before its end.");
        memcpy(path, p, n);
        path[n] = 0;
        return reply_subvolume_by_path(message, userdata, path, error);
}

/* Root only, checked from the credentials the bus vouches for: the bus
 * policy says the same, but a policy can be edited or bypassed. */
static int check_caller_is_root(sd_bus_message *message, sd_bus_error *error) {
        _cleanup_(sd_bus_creds_unrefp_) sd_bus_creds *creds = NULL;
        uid_t uid;
        int r;

        r = sd_bus_query_sender_creds(message, SD_BUS_CREDS_EUID, &creds);
        if (r < 0)
                return r;
        r = sd_bus_creds_get_euid(creds, &uid);
        if (r < 0 || uid != 0)
                return sd_bus_error_set(error, SUBVOLD_ERROR_ACCESS_DENIED,
                                        "Only root may ask subvold to refresh.");
        return 0;
}

static int method_refresh(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        int r;

        r = check_caller_is_root(message, error);
        if (r < 0)
                return r;
        r = manager_refresh(m);
        if (r < 0)
                return sd_bus_error_setf(error, SUBVOLD_ERROR_FAILED,
                                         "Failed to enumerate mounts and subvolumes: %s", strerror(-r));
        return sd_bus_reply_method_return(message, NULL);
}

static int property_version(sd_bus *bus, const char *path, const char *interface, const char *property,
                            sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", PROJECT_VERSION);
}

static int property_filesystems(sd_bus *bus, const char *path, const char *interface, const char *property,
                                sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        const Model *model = ((Manager *) userdata)->model;
        char buf[BUS_OBJECT_PATH_MAX];
        int r;

        r = sd_bus_message_open_container(reply, 'a', "o");
        for (size_t i = 0; r >= 0 && model && i < model->n_filesystems; i++)
                r = sd_bus_message_append(reply, "o", bus_filesystem_path(model->filesystems[i], buf));
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        return r;
}

static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Filesystems", "ao", property_filesystems, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("GetSubvolumeByFd", SD_BUS_ARGS("h", fd), SD_BUS_RESULT("o", subvolume),
                                method_get_subvolume_by_fd, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetStatfsByFd", SD_BUS_ARGS("h", fd), SD_BUS_RESULT("o", subvolume, "a{sv}", statfs),
                                method_get_statfs_by_fd, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetSubvolumeByPath", SD_BUS_ARGS("s", path), SD_BUS_RESULT("o", subvolume),
                                method_get_subvolume_by_path, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetSubvolumeByPathBytes", SD_BUS_ARGS("ay", path), SD_BUS_RESULT("o", subvolume),
                                method_get_subvolume_by_path_bytes, SD_BUS_VTABLE_UNPRIVILEGED),
        /* UNPRIVILEGED: we check ourselves, to answer with our own error. */
        SD_BUS_METHOD("Refresh", NULL, NULL, method_refresh, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

int bus_manager_register(sd_bus *bus, Manager *m) {
        return sd_bus_add_object_vtable(bus, NULL, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_MANAGER, manager_vtable, m);
}
