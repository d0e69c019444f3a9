/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <btrfsutil.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/statfs.h>

#include "fs-btrfs.h"
#include "kernel-compat.h"
#include "util.h"

/* libbtrfsutil returns its own error enum and leaves the cause in errno. */
static int btrfs_util_errno(enum btrfs_util_error e) {
        if (e == BTRFS_UTIL_OK)
                return 0;
        if (e == BTRFS_UTIL_ERROR_NO_MEMORY)
                return -ENOMEM;
        if (e == BTRFS_UTIL_ERROR_SUBVOLUME_NOT_FOUND)
                return -ENOENT;
        return errno > 0 ? -errno : -EIO;
}

int btrfs_open_mount(const Mount *m, MountSource source, int *ret_fd) {
        _cleanup_close_ int fd = -1;
        struct statx_compat stx = {};
        unsigned mask = source == MOUNT_SOURCE_LISTMOUNT ? STATX_MNT_ID_UNIQUE_COMPAT : STATX_MNT_ID_COMPAT;

        fd = open(m->point, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return -errno;
        if (sys_statx(fd, "", AT_EMPTY_PATH, mask, &stx) < 0)
                return -errno;
        if (!(stx.stx_mask & mask) || stx.stx_mnt_id != m->id)
                return -ESTALE;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int btrfs_read_fsid(int fd, uint8_t ret[16]) {
        struct btrfs_ioctl_fs_info_args info = {};

        if (ioctl(fd, BTRFS_IOC_FS_INFO, &info) < 0)
                return -errno;
        memcpy(ret, info.fsid, 16);
        return 0;
}

static int btrfs_read_devices(int fd, uint64_t max_id, char ***ret) {
        _cleanup_strv_free_ char **devices = NULL;
        size_t n = 0;

        for (uint64_t id = 0; id <= max_id; id++) {
                struct btrfs_ioctl_dev_info_args dev = { .devid = id };

                if (ioctl(fd, BTRFS_IOC_DEV_INFO, &dev) < 0) {
                        if (errno == ENODEV)
                                continue;  /* ids can have gaps after a device removal */
                        return -errno;
                }
                dev.path[sizeof(dev.path) - 1] = 0;
                if (strv_extend(&devices, &n, (const char *) dev.path) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(devices);
        return 0;
}

static void subvolume_from_info(const struct btrfs_util_subvolume_info *info, Subvolume *sv) {
        *sv = (Subvolume) {
                .id = info->id,
                .parent_id = info->parent_id,
                .generation = info->generation,
                .change_generation = info->ctransid,
                .creation_usec = info->otime.tv_sec > 0 ?
                        (uint64_t) info->otime.tv_sec * 1000000 + (uint64_t) info->otime.tv_nsec / 1000 : 0,
                .read_only = info->flags & BTRFS_ROOT_SUBVOL_RDONLY,
        };
        memcpy(sv->uuid, info->uuid, 16);
        memcpy(sv->parent_uuid, info->parent_uuid, 16);
        memcpy(sv->received_uuid, info->received_uuid, 16);
}

static int btrfs_read_subvolumes(int fd, Filesystem *fs) {
        struct btrfs_util_subvolume_iterator *iter = NULL;
        struct btrfs_util_subvolume_info info;
        enum btrfs_util_error e;
        Subvolume sv;
        int r = 0;

        e = btrfs_util_subvolume_info_fd(fd, BTRFS_FS_TREE_OBJECTID, &info);
        if (e)
                return btrfs_util_errno(e);
        subvolume_from_info(&info, &sv);
        sv.path = strdup("/");
        if (!sv.path || !filesystem_add_subvolume(fs, &sv))
                return -ENOMEM;

        e = btrfs_util_create_subvolume_iterator_fd(fd, BTRFS_FS_TREE_OBJECTID, 0, &iter);
        if (e)
                return btrfs_util_errno(e);
        for (;;) {
                char *path = NULL;

                e = btrfs_util_subvolume_iterator_next_info(iter, &path, &info);
                if (e == BTRFS_UTIL_ERROR_STOP_ITERATION)
                        break;
                if (e) {
                        /* Never call next() again after an error. */
                        r = btrfs_util_errno(e);
                        break;
                }
                subvolume_from_info(&info, &sv);
                sv.path = path_join("/", path);
                free(path);
                if (!sv.path || !filesystem_add_subvolume(fs, &sv)) {
                        r = -ENOMEM;
                        break;
                }
        }
        btrfs_util_destroy_subvolume_iterator(iter);
        return r;
}

int btrfs_read_filesystem(int fd, Filesystem *fs) {
        struct btrfs_ioctl_fs_info_args info = { .flags = BTRFS_FS_INFO_FLAG_GENERATION };
        char label[BTRFS_LABEL_SIZE] = {};
        struct statfs sfs;
        int r;

        if (ioctl(fd, BTRFS_IOC_FS_INFO, &info) < 0)
                return -errno;
        if (ioctl(fd, BTRFS_IOC_GET_FSLABEL, label) < 0)
                return -errno;
        if (fstatfs(fd, &sfs) < 0)
                return -errno;
        label[sizeof(label) - 1] = 0;
        fs->label = strdup(label);
        if (!fs->label)
                return -ENOMEM;
        fs->generation = info.flags & BTRFS_FS_INFO_FLAG_GENERATION ? info.generation : 0;
        fs->size = (uint64_t) sfs.f_blocks * sfs.f_bsize;
        fs->free = (uint64_t) sfs.f_bfree * sfs.f_bsize;
        r = btrfs_read_devices(fd, info.max_id, &fs->devices);
        if (r < 0)
                return r;
        return btrfs_read_subvolumes(fd, fs);
}

uint64_t btrfs_fold_fsid(const uint8_t u[16], uint64_t subvolume_id) {
        uint32_t w[4];

        for (size_t i = 0; i < 4; i++)
                w[i] = (uint32_t) u[4 * i] << 24 | (uint32_t) u[4 * i + 1] << 16 |
                       (uint32_t) u[4 * i + 2] << 8 | u[4 * i + 3];
        return (uint64_t) ((w[0] ^ w[2]) ^ (uint32_t) (subvolume_id >> 32)) << 32 |
               ((w[1] ^ w[3]) ^ (uint32_t) subvolume_id);
}

int btrfs_identify_fd(int fd, uint64_t *ret_subvolume_id, uint64_t *ret_folded_fsid) {
        struct statx_compat stx = {};
        struct statfs sfs;
        uint32_t val[2];

        if (fstatfs(fd, &sfs) < 0)
                return -errno;
        if ((uint32_t) sfs.f_type != BTRFS_SUPER_MAGIC)
                return -EMEDIUMTYPE;
        if (sys_statx(fd, "", AT_EMPTY_PATH, STATX_SUBVOL_COMPAT, &stx) < 0)
                return -errno;
        if (!(stx.stx_mask & STATX_SUBVOL_COMPAT))
                return -ENOENT;
        memcpy(val, &sfs.f_fsid, sizeof val);
        *ret_subvolume_id = stx.stx_subvol;
        *ret_folded_fsid = (uint64_t) val[0] << 32 | val[1];
        return 0;
}
