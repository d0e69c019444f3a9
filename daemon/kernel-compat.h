/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Kernel interfaces newer than the installed headers (Debian 12 ships
 * linux-libc-dev 6.1 and glibc 2.36).  Everything is guarded so that newer
 * headers win, and the calls go through syscall(2). */

#include <linux/types.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* listmount(2)/statmount(2), Linux 6.8 */
#ifndef __NR_statmount
#define __NR_statmount 457
#endif
#ifndef __NR_listmount
#define __NR_listmount 458
#endif

/* Own names (…_compat) so that newer system headers cannot clash. */
#define LSMT_ROOT_COMPAT 0xffffffffffffffffULL

struct mnt_id_req_compat {
        __u32 size;
        __u32 mnt_ns_fd;
        __u64 mnt_id;
        __u64 param;
        __u64 mnt_ns_id;
};
#define MNT_ID_REQ_SIZE_VER0 24

struct statmount_compat {
        __u32 size;
        __u32 mnt_opts;
        __u64 mask;
        __u32 sb_dev_major;
        __u32 sb_dev_minor;
        __u64 sb_magic;
        __u32 sb_flags;
        __u32 fs_type;
        __u64 mnt_id;
        __u64 mnt_parent_id;
        __u32 mnt_id_old;
        __u32 mnt_parent_id_old;
        __u64 mnt_attr;
        __u64 mnt_propagation;
        __u64 mnt_peer_group;
        __u64 mnt_master;
        __u64 propagate_from;
        __u32 mnt_root;
        __u32 mnt_point;
        __u64 mnt_ns_id;
        __u32 fs_subtype;
        __u32 sb_source;          /* Linux 6.11 */
        __u32 opt_num;
        __u32 opt_array;
        __u32 opt_sec_num;
        __u32 opt_sec_array;
        __u64 supported_mask;
        __u32 mnt_uidmap_num;
        __u32 mnt_uidmap;
        __u32 mnt_gidmap_num;
        __u32 mnt_gidmap;
        __u64 __spare2[43];
        char str[];
};

#define STATMOUNT_SB_BASIC_COMPAT  0x00000001U
#define STATMOUNT_MNT_BASIC_COMPAT 0x00000002U
#define STATMOUNT_MNT_ROOT_COMPAT  0x00000008U
#define STATMOUNT_MNT_POINT_COMPAT 0x00000010U
#define STATMOUNT_FS_TYPE_COMPAT   0x00000020U
#define STATMOUNT_SB_SOURCE_COMPAT 0x00000200U

_Static_assert(sizeof(struct statmount_compat) == 512, "struct statmount layout");
_Static_assert(__builtin_offsetof(struct statmount_compat, sb_source) == 124, "sb_source offset");

static inline int sys_listmount(const struct mnt_id_req_compat *req, uint64_t *ids, size_t n, unsigned flags) {
        return (int) syscall(__NR_listmount, req, ids, n, flags);
}
static inline int sys_statmount(const struct mnt_id_req_compat *req, struct statmount_compat *buf, size_t size, unsigned flags) {
        return (int) syscall(__NR_statmount, req, buf, size, flags);
}

/* statx(2) with the fields added after 6.1: stx_mnt_id (5.8, in 6.1 headers
 * but not in glibc 2.36's struct) and stx_subvol (6.10). */
#define STATX_MNT_ID_COMPAT        0x00001000U
#define STATX_MNT_ID_UNIQUE_COMPAT 0x00004000U
#define STATX_SUBVOL_COMPAT        0x00008000U

struct statx_compat {
        __u32 stx_mask;
        __u32 stx_blksize;
        __u64 stx_attributes;
        __u32 stx_nlink;
        __u32 stx_uid;
        __u32 stx_gid;
        __u16 stx_mode;
        __u16 __spare0[1];
        __u64 stx_ino;
        __u64 stx_size;
        __u64 stx_blocks;
        __u64 stx_attributes_mask;
        struct statx_timestamp_compat { __s64 tv_sec; __u32 tv_nsec; __s32 __reserved; } stx_atime, stx_btime,
                stx_ctime, stx_mtime;
        __u32 stx_rdev_major;
        __u32 stx_rdev_minor;
        __u32 stx_dev_major;
        __u32 stx_dev_minor;
        __u64 stx_mnt_id;          /* @0x90 */
        __u32 stx_dio_mem_align;
        __u32 stx_dio_offset_align;
        __u64 stx_subvol;          /* @0xa0 */
        __u64 __spare3[11];
};
_Static_assert(sizeof(struct statx_compat) == 256, "struct statx layout");
_Static_assert(__builtin_offsetof(struct statx_compat, stx_subvol) == 0xa0, "stx_subvol offset");

static inline int sys_statx(int dirfd, const char *path, int flags, unsigned mask, struct statx_compat *buf) {
        return (int) syscall(__NR_statx, dirfd, path, flags, mask, buf);
}

/* statfs() f_flags bit saying the kernel filled f_flags in (kernel-internal
 * include/linux/statfs.h; statvfs() removes it). */
#define ST_VALID_COMPAT 0x0020

/* fanotify mount events, Linux 6.15 */
#define FAN_MNT_ATTACH_COMPAT  0x01000000U
#define FAN_MNT_DETACH_COMPAT  0x02000000U
#define FAN_REPORT_MNT_COMPAT  0x00004000U
#define FAN_MARK_MNTNS_COMPAT  0x00000110U

/* open_tree(2), Linux 5.2: a detached clone of a mount, which does not pin
 * the original (umount of it does not fail with EBUSY). */
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#define OPEN_TREE_CLONE_COMPAT 1U

static inline int sys_open_tree(int dirfd, const char *path, unsigned flags) {
        return (int) syscall(__NR_open_tree, dirfd, path, flags);
}
