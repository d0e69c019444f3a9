/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The btrfs backend: everything subvold asks the kernel about a btrfs
 * filesystem, through btrfs ioctls.  Subvolumes are read from the root
 * tree directly rather than with libbtrfsutil's iterator, which gives up
 * on the whole filesystem at the first subvolume whose path it cannot
 * look up (a directory path past 4080 bytes, which any user can make). */

#include <stdint.h>
#include <sys/types.h>

#include "extent-map.h"
#include "model.h"
#include "mounts.h"

/* Opens the root directory of @m by its mount point, after checking that
 * the mount point is still that mount (-ESTALE if the mount table changed
 * meanwhile).  The fd is on a private clone of the mount where the kernel
 * allows it, so that even during an operation a umount does not fail with
 * EBUSY; the caller closes it before returning to the event loop all the
 * same. */
int btrfs_open_mount(const Mount *m, MountSource source, int *ret_fd);

/* An fd on mount @m itself (not a clone), checked to be that mount and
 * filesystem @fsid: to make a clone of a directory inside it, which
 * open_tree() refuses from a clone.  Close it at once: while it is open a
 * umount fails with EBUSY. */
int btrfs_pin_mount(const Mount *m, MountSource source, const uint8_t fsid[16], int *ret_fd);

/* The filesystem UUID (fsid) of the btrfs that @fd is on. */
int btrfs_read_fsid(int fd, uint8_t ret[16]);

/* The filesystem's current transaction generation: it moves with every
 * change (BTRFS_IOC_FS_INFO, no privilege needed). */
int btrfs_read_generation(int fd, uint64_t *ret);

/* A hash of the root tree's subvolume items (ROOT_ITEM, ROOT_REF,
 * ROOT_BACKREF) in leaves written during transaction @generation or later.
 * The generation moves only when a new transaction starts; this catches
 * the subvolumes created, deleted, renamed or flipped read-only within the
 * running one.  Cheap: unchanged leaves are not read (CAP_SYS_ADMIN). */
int btrfs_read_root_fingerprint(int fd, uint64_t generation, uint64_t *ret);

/* Whether transaction @generation (the filesystem's current one) takes no
 * more changes to the subvolumes: its commit has written the root items
 * of the trees btrfs updates only when committing.  Then, until the
 * generation moves, nothing about the subvolumes can change.  Never with
 * quotas on (see fs-btrfs.c); false is always safe. */
int btrfs_transaction_closed(int fd, uint64_t generation, bool *ret);

/* /sys/fs/btrfs/<fsid>/generation, the generation BTRFS_IOC_FS_INFO
 * returns, read without touching any mount of the filesystem.  The fd does
 * not keep the filesystem alive: once it is unmounted, reads fail with
 * ENODEV. */
int btrfs_sysfs_open_generation(const uint8_t fsid[16]);
int btrfs_sysfs_read_generation(int fd, uint64_t *ret);

/* Room for tree search results, kept by a thread that reads many trees
 * of one filesystem in a row. */
typedef struct TreeSearchBuffer {
        struct btrfs_ioctl_search_args_v2 *args;
        uint32_t nodesize;       /* of the filesystem searched, 0 if unknown */
} TreeSearchBuffer;

/* Allocates @b's room if need be and learns the node size of the
 * filesystem @fd is on. */
int btrfs_search_buffer_prepare(int fd, TreeSearchBuffer *b);
void btrfs_search_buffer_done(TreeSearchBuffer *b);

/* What a subvolume scan may do.  Its extent array (24 bytes an extent)
 * starts small; when it fills, repeats are dropped in place (reflinks and
 * clones repeat extents: a file doubled onto itself 21 times has 2^21
 * items and one extent), and only when that frees too little does it
 * grow, if may_grow() agrees to the new size. */
typedef struct ScanControl {
        const volatile bool *cancel;    /* true: stop with -ECANCELED */
        /* The array is to take @bytes, more or less than now (it is told
         * the final size too): whether it may grow.  NULL: no limit. */
        bool (*may_grow)(size_t bytes, void *userdata);
        void *userdata;
} ScanControl;

/* Reads subvolume @id's tree (CAP_SYS_ADMIN): its inode count and the
 * distinct data extents its files refer to (sorted; regular and
 * preallocated, holes and inline data left out), each with its size on
 * disk.  @buf: prepared for @fd's filesystem, or NULL.  -EFBIG when the
 * distinct extents fill all that may_grow() allows. */
int btrfs_scan_subvolume(int fd, TreeSearchBuffer *buf, uint64_t id, const ScanControl *control,
                         uint64_t *ret_inodes, DataExtent **ret_extents, size_t *ret_n_extents);

/* statfs() of the filesystem @fd is on. */
int btrfs_read_statfs(int fd, StatfsInfo *ret);

/* Fills @fs from the filesystem @fd is on: label, devices, size, free,
 * generation and every subvolume (CAP_SYS_ADMIN needed).  A subvolume
 * whose path cannot be found, or is longer than SUBVOLUME_PATH_MAX, is
 * left out (one warning), not the filesystem. */
int btrfs_read_filesystem(int fd, Filesystem *fs);

/* The subvolumes part of btrfs_read_filesystem(): the root tree's items
 * and each subvolume's path, into @fs, which has none yet. */
int btrfs_read_subvolumes(int fd, Filesystem *fs);

/* BTRFS_IOC_TREE_SEARCH_V2 on @fd: 0 or a negative errno.  Every tree
 * search above goes through it (the fuzz targets replace it). */
int btrfs_tree_search_ioctl(int fd, struct btrfs_ioctl_search_args_v2 *args);

/* Reads the quota tree (CAP_SYS_ADMIN): the quota mode and consistency
 * into @fs, and each level-0 qgroup's figures into the usage of the
 * subvolume with that id (subvolumes must be indexed).  Subvolumes without
 * a qgroup, and all of them when quotas are off, get USAGE_NONE.  Reading
 * never enables quotas or starts a rescan. */
int btrfs_read_quotas(int fd, Filesystem *fs, uint64_t now_usec);

/* An inode as its item in a subvolume's tree records it. */
typedef struct BtrfsInode {
        uint64_t ino;
        uint64_t generation;     /* the transaction that created it */
        uint64_t size;
        uint32_t mode, nlink;
        uint64_t mtime_usec, ctime_usec;
} BtrfsInode;

/* Reads inode @ino of subvolume @tree (CAP_SYS_ADMIN; the subvolume need
 * not be mounted): -ENOENT when there is none. */
int btrfs_read_inode(int fd, uint64_t tree, uint64_t ino, BtrfsInode *ret);

/* The path of inode @ino from the root of subvolume @tree ("a/b", "" for
 * the root), through its first link, at most @max bytes: -ENOENT when it
 * has no link (deleted), -ENAMETOOLONG. */
int btrfs_inode_path(int fd, uint64_t tree, uint64_t ino, size_t max, char **ret);

/* An entry of a directory. */
typedef struct BtrfsDirEntry {
        uint64_t ino;
        uint8_t type;            /* BTRFS_FT_* */
        bool subvolume;          /* it leads into another subvolume (ino is its id) */
} BtrfsDirEntry;

/* The entry @name (@len bytes) of directory @dir of subvolume @tree:
 * -ENOENT when there is none. */
int btrfs_dir_lookup(int fd, uint64_t tree, uint64_t dir, const char *name, size_t len, BtrfsDirEntry *ret);

/* Calls @entry for every entry of directory @dir of subvolume @tree. */
int btrfs_dir_list(int fd, uint64_t tree, uint64_t dir,
                   int (*entry)(const char *name, size_t len, const BtrfsDirEntry *e, void *userdata),
                   void *userdata);

/* What a client's fd says about the file behind it. */
typedef struct FdIdentity {
        uint64_t subvolume_id;
        uint64_t ino;
        mode_t mode;
        uint8_t fsid[16];
        bool have_fsid;          /* false: the fd cannot answer (see below) */
        uint64_t mount_id;       /* of the mount the fd is on */
        dev_t dev;
} FdIdentity;

/* For any fd a client hands over: whether it is on btrfs (-EMEDIUMTYPE if
 * not), the subvolume holding it, and the filesystem's fsid, asked of the
 * file itself (BTRFS_IOC_FS_INFO) -- never guessed from statfs()'s f_fsid,
 * a 64-bit fold of it that anyone can make another filesystem share.
 * O_PATH fds of directories and regular files are reopened for the
 * question.  The ioctl does not reach btrfs through a FIFO, socket or
 * device node (their file operations are not btrfs's): for those
 * have_fsid is false and mount_id (unique ids if @unique_mount_id, else
 * the old ones) says which mount the fd is on.  Never asks a non-btrfs
 * file system anything that could block.  -ENOENT: a directory that may
 * be the empty placeholder a snapshot leaves for a nested subvolume; dev
 * is its device, which is a btrfs superblock's if it is one. */
int btrfs_identify_fd(int fd, bool unique_mount_id, FdIdentity *ret);
