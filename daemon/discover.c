/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "discover.h"
#include "fs-btrfs.h"
#include "util.h"

/* Subvolumes can be created or deleted while we walk them; libbtrfsutil
 * then fails the iteration, and a new walk sees a consistent tree. */
#define READ_ATTEMPTS 3

static int discover_filesystem(int fd, const uint8_t uuid[16], Filesystem **ret) {
        int r = -EIO;

        for (int attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
                _cleanup_(filesystem_freep) Filesystem *fs = filesystem_new(uuid);

                if (!fs)
                        return -ENOMEM;
                r = btrfs_read_filesystem(fd, fs);
                if (r >= 0) {
                        *ret = TAKE_PTR(fs);
                        return 0;
                }
                if (r == -ENOMEM || r == -EPERM)
                        break;
        }
        return r;
}

/* Adds the filesystem behind mount number @i to @model, or attaches the
 * mount to it when another mount already brought it in. */
static int discover_mount(Model *model, size_t i) {
        const Mount *mount = &model->mounts.mounts[i];
        _cleanup_close_ int fd = -1;
        Filesystem *fs;
        uint8_t uuid[16];
        char buf[UUID_STRING_MAX];
        int r;

        r = btrfs_open_mount(mount, model->mounts.source, &fd);
        if (r < 0)
                return log_warning_errno(r, "Skipping btrfs mount %s: cannot open it: %m", mount->point);
        r = btrfs_read_fsid(fd, uuid);
        if (r < 0)
                return log_warning_errno(r, "Skipping btrfs mount %s: BTRFS_IOC_FS_INFO failed: %m", mount->point);

        fs = model_find_filesystem(model, uuid);
        if (!fs) {
                r = discover_filesystem(fd, uuid, &fs);
                if (r < 0)
                        return log_warning_errno(r, "Skipping btrfs filesystem %s mounted on %s: %m",
                                                 uuid_format(uuid, buf), mount->point);
                r = model_add_filesystem(model, fs);
                if (r < 0)
                        return r;
        }
        model_attach_mount(model, i, fs);
        return 0;
}

int discover_model(MountSource source, Model **ret) {
        _cleanup_(model_freep) Model *model = model_new();
        MountTable mounts;
        int r;

        if (!model)
                return -ENOMEM;
        r = mount_table_read(source, &mounts);
        if (r < 0)
                return log_error_errno(r, "Failed to read the mount table: %m");
        r = model_set_mounts(model, &mounts);
        if (r < 0) {
                mount_table_done(&mounts);
                return r;
        }
        for (size_t i = 0; i < model->mounts.n_mounts; i++) {
                const Mount *mount = &model->mounts.mounts[i];

                if (!mount->is_btrfs || !mount_table_is_reachable(&model->mounts, mount))
                        continue;
                r = discover_mount(model, i);
                if (r == -ENOMEM)
                        return r;
        }
        r = model_finish(model);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(model);
        return 0;
}
