/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <endian.h>
#include <sys/ioctl.h>
#include <sys/param.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "fs-btrfs.h"
#include "kernel-compat.h"
#include "util.h"

int btrfs_open_mount(const Mount *m, MountSource source, int *ret_fd) {
        _cleanup_close_ int fd = -1;
        struct statx_compat stx = {};
        unsigned mask = source == MOUNT_SOURCE_LISTMOUNT ? STATX_MNT_ID_UNIQUE_COMPAT : STATX_MNT_ID_COMPAT;

        /* Is the mount point still that mount? */
        if (sys_statx(AT_FDCWD, m->point, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, mask, &stx) < 0)
                return -errno;
        if (!(stx.stx_mask & mask) || stx.stx_mnt_id != m->id)
                return -ESTALE;
        /* Work on a private clone of the mount: an fd on the mount itself
         * would make a concurrent umount fail with EBUSY.  Without
         * open_tree() (old kernel, seccomp filter) open the mount itself. */
        fd = sys_open_tree(AT_FDCWD, m->point, OPEN_TREE_CLONE_COMPAT | O_CLOEXEC | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT);
        if (fd >= 0) {
                /* open_tree() gives an O_PATH fd, on which ioctls fail: open
                 * the clone's root for real.  The clone lives as long as
                 * this second fd. */
                int dir = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
                if (dir < 0)
                        return -errno;
                closep(&fd);
                fd = dir;
        } else if (errno == EPERM || errno == ENOSYS || errno == EINVAL)
                fd = open(m->point, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return -errno;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int btrfs_pin_mount(const Mount *m, MountSource source, const uint8_t fsid[16], int *ret_fd) {
        unsigned mask = source == MOUNT_SOURCE_LISTMOUNT ? STATX_MNT_ID_UNIQUE_COMPAT : STATX_MNT_ID_COMPAT;
        _cleanup_close_ int fd = open(m->point, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        struct statx_compat stx = {};
        uint8_t u[16];
        int r;

        if (fd < 0)
                return -errno;
        if (sys_statx(fd, "", AT_EMPTY_PATH, mask, &stx) < 0)
                return -errno;
        if (!(stx.stx_mask & mask) || stx.stx_mnt_id != m->id)
                return -ESTALE;
        r = btrfs_read_fsid(fd, u);
        if (r < 0)
                return r;
        if (memcmp(u, fsid, 16) != 0)
                return -ESTALE;  /* mountinfo's ids are reused */
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

int btrfs_read_generation(int fd, uint64_t *ret) {
        struct btrfs_ioctl_fs_info_args info = { .flags = BTRFS_FS_INFO_FLAG_GENERATION };

        if (ioctl(fd, BTRFS_IOC_FS_INFO, &info) < 0)
                return -errno;
        if (!(info.flags & BTRFS_FS_INFO_FLAG_GENERATION))
                return -EOPNOTSUPP;
        *ret = info.generation;
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

int btrfs_read_statfs(int fd, StatfsInfo *ret) {
        struct statfs sfs;

        if (fstatfs(fd, &sfs) < 0)
                return -errno;
        *ret = (StatfsInfo) {
                .block_size = sfs.f_bsize,
                .blocks = sfs.f_blocks,
                .blocks_free = sfs.f_bfree,
                .blocks_available = sfs.f_bavail,
                .files = sfs.f_files,
                .files_free = sfs.f_ffree,
                .name_max = sfs.f_namelen,
                /* ST_VALID only says the kernel filled f_flags in; statvfs()
                 * drops it too. */
                .flags = sfs.f_flags & ~(uint64_t) ST_VALID_COMPAT,
        };
        return 0;
}

/* 64 KiB: larger buffers made searches slower, not faster (the kernel
 * faults in the whole rest of the buffer for every leaf it copies). */
enum { SEARCH_BUF_SIZE = 64 * 1024 };

int btrfs_search_buffer_prepare(int fd, TreeSearchBuffer *b) {
        struct btrfs_ioctl_fs_info_args info = {};

        if (!b->args && !(b->args = malloc(sizeof(*b->args) + SEARCH_BUF_SIZE)))
                return -ENOMEM;
        b->nodesize = ioctl(fd, BTRFS_IOC_FS_INFO, &info) < 0 ? 0 : info.nodesize;
        return 0;
}

void btrfs_search_buffer_done(TreeSearchBuffer *b) {
        free(b->args);
        *b = (TreeSearchBuffer) {};
}

typedef int (*tree_item_t)(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata);

/* What a tree_item_t returns to say it wants none of the items that
 * follow with the same objectid and type: the search goes on after them
 * without copying them out, where the kernel's batch allows. */
#define TREE_SKIP_RUN 2

/* Weak: the fuzz targets (tests/fuzz/) link their own, which answers with
 * crafted buffers, so that all that follows runs on them as it does on the
 * kernel's answers. */
__attribute__((weak)) int btrfs_tree_search_ioctl(int fd, struct btrfs_ioctl_search_args_v2 *args) {
        return ioctl(fd, BTRFS_IOC_TREE_SEARCH_V2, args) < 0 ? -errno : 0;
}

/* A key of a btrfs tree, in CPU byte order. */
typedef struct TreeKey {
        uint64_t objectid;
        uint8_t type;
        uint64_t offset;
} TreeKey;

/* Calls @item for every item of tree @tree_id whose key lies between @min
 * and @max (objectid, type, offset, compared in that order: the key
 * space is one 136-bit range), in key order, in leaves written in
 * transaction @min_transid or later, until @item returns non-zero
 * (negative: an error; TREE_SKIP_RUN: see there).  @buf may be NULL: a
 * buffer is allocated for this search alone. */
static int tree_search(int fd, TreeSearchBuffer *buf, uint64_t tree_id, TreeKey min, TreeKey max,
                       uint64_t min_transid, tree_item_t item, void *userdata) {
        _cleanup_free_ struct btrfs_ioctl_search_args_v2 *own = NULL;
        struct btrfs_ioctl_search_args_v2 *args;
        uint64_t skip_objectid = 0;
        uint8_t skip_type = 0;
        uint32_t nodesize = 0;
        int r;

        if (buf && buf->args) {
                args = buf->args;
                nodesize = buf->nodesize;
        } else if (!(args = own = malloc(sizeof(*args) + SEARCH_BUF_SIZE)))
                return -ENOMEM;
        args->key = (struct btrfs_ioctl_search_key) {
                .tree_id = tree_id,
                .min_objectid = min.objectid,
                .max_objectid = max.objectid,
                .min_type = min.type,
                .max_type = max.type,
                .min_offset = min.offset,
                .max_offset = max.offset,
                .min_transid = min_transid,
                .max_transid = UINT64_MAX,
        };
        for (;;) {
                struct btrfs_ioctl_search_header hdr = {}, *h = &hdr;
                size_t off = 0;
                bool skipping = false;

                args->key.nr_items = UINT32_MAX;
                args->buf_size = SEARCH_BUF_SIZE;
                r = btrfs_tree_search_ioctl(fd, args);
                if (r < 0)
                        return r;
                if (args->key.nr_items == 0)
                        return 0;
                for (uint32_t i = 0; i < args->key.nr_items; i++) {
                        /* Items follow each other unaligned: copy the header
                         * out; @item copies what it reads of the data.  An
                         * answer that runs past the buffer is refused, not
                         * read past. */
                        if (SEARCH_BUF_SIZE - off < sizeof(hdr))
                                return -EIO;
                        memcpy(&hdr, args->buf + off, sizeof(hdr));
                        if (hdr.len > SEARCH_BUF_SIZE - off - sizeof(hdr))
                                return -EIO;
                        if (skipping && hdr.objectid == skip_objectid && hdr.type == skip_type) {
                                off += sizeof(hdr) + hdr.len;
                                continue;
                        }
                        r = item(&hdr, args->buf + off + sizeof(hdr), userdata);
                        skipping = r == TREE_SKIP_RUN;
                        if (skipping) {
                                skip_objectid = hdr.objectid;
                                skip_type = hdr.type;
                        } else if (r != 0)
                                return r < 0 ? r : 0;  /* positive: found what it wanted */
                        off += sizeof(hdr) + hdr.len;
                }
                /* The kernel stops at the end of the range or when the next
                 * item does not fit; no item is larger than a node, so with
                 * that much room left it was the end: skip the call that
                 * would find nothing. */
                if (nodesize > 0 && SEARCH_BUF_SIZE - off >= sizeof(hdr) + nodesize)
                        return 0;
                /* Continue right after the last key returned, or after its
                 * whole run when that is to be skipped. */
                if (h->objectid == max.objectid && h->type == max.type &&
                    (skipping || h->offset == max.offset))
                        return 0;
                args->key.min_objectid = h->objectid;
                args->key.min_type = h->type;
                args->key.min_offset = h->offset + 1;
                if (skipping || h->offset == UINT64_MAX) {
                        args->key.min_offset = 0;
                        if (++args->key.min_type > UINT8_MAX) {
                                args->key.min_type = 0;
                                if (++args->key.min_objectid == 0)
                                        return 0;  /* that was the last key there is */
                        }
                }
        }
}

/* tree_search() over whole objectids: from (@min_objectid, @min_type, 0) to
 * (@max_objectid, @max_type, UINT64_MAX).  Items of other types between the
 * two objectids come too: @item filters. */
static int btrfs_tree_search(int fd, TreeSearchBuffer *buf, uint64_t tree_id, uint64_t min_objectid,
                             uint64_t max_objectid, uint32_t min_type, uint32_t max_type, uint64_t min_transid,
                             tree_item_t item, void *userdata) {
        return tree_search(fd, buf, tree_id, (TreeKey) { min_objectid, (uint8_t) min_type, 0 },
                           (TreeKey) { max_objectid, (uint8_t) max_type, UINT64_MAX }, min_transid, item, userdata);
}

/* FNV-1a over the keys and contents of the items it sees. */
static int fingerprint_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        uint64_t *hash = userdata;
        const uint8_t *parts[2] = { (const uint8_t *) h, data };
        size_t lengths[2] = { sizeof(*h), h->len };

        if (h->type < BTRFS_ROOT_ITEM_KEY || h->type > BTRFS_ROOT_BACKREF_KEY)
                return 0;
        for (size_t p = 0; p < 2; p++)
                for (size_t i = 0; i < lengths[p]; i++)
                        *hash = (*hash ^ parts[p][i]) * 0x100000001b3ULL;
        return 0;
}

int btrfs_read_root_fingerprint(int fd, uint64_t generation, uint64_t *ret) {
        uint64_t hash = 0xcbf29ce484222325ULL;
        int r;

        r = btrfs_tree_search(fd, NULL, BTRFS_ROOT_TREE_OBJECTID, BTRFS_FS_TREE_OBJECTID, UINT64_MAX,
                              BTRFS_ROOT_ITEM_KEY, BTRFS_ROOT_BACKREF_KEY, generation, fingerprint_item, &hash);
        if (r < 0)
                return r;
        *ret = hash;
        return 0;
}

/* The extent, device and checksum trees, which mkfs makes: btrfs writes
 * their root items, in the root tree, only while committing a transaction
 * (commit_cowonly_roots(), after the snapshots and the subvolumes' own root
 * items are done).  The quota tree's is there while quotas are on. */
typedef struct CommitProbe {
        uint64_t newest;
        bool quotas;
} CommitProbe;

static int commit_probe_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        CommitProbe *c = userdata;
        uint64_t generation;

        if (h->type != BTRFS_ROOT_ITEM_KEY)
                return 0;
        if (h->objectid == BTRFS_QUOTA_TREE_OBJECTID)
                c->quotas = true;
        if (h->objectid != BTRFS_EXTENT_TREE_OBJECTID && h->objectid != BTRFS_DEV_TREE_OBJECTID &&
            h->objectid != BTRFS_CSUM_TREE_OBJECTID)
                return 0;
        if (h->len < offsetof(struct btrfs_root_item, generation) + sizeof(generation))
                return 0;
        memcpy(&generation, (const uint8_t *) data + offsetof(struct btrfs_root_item, generation), sizeof(generation));
        c->newest = MAX(c->newest, le64toh(generation));
        return 0;
}

int btrfs_transaction_closed(int fd, uint64_t generation, bool *ret) {
        CommitProbe c = {};
        int r;

        r = btrfs_tree_search(fd, NULL, BTRFS_ROOT_TREE_OBJECTID, BTRFS_EXTENT_TREE_OBJECTID,
                              BTRFS_QUOTA_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, BTRFS_ROOT_ITEM_KEY, 0,
                              commit_probe_item, &c);
        if (r < 0)
                return r;
        /* With quotas on, each snapshot's accounting writes these root
         * items early, within the commit, before the snapshot is in. */
        *ret = !c.quotas && c.newest >= generation;
        return 0;
}

int btrfs_sysfs_open_generation(const uint8_t fsid[16]) {
        char uuid[UUID_STRING_MAX], path[sizeof("/sys/fs/btrfs//generation") + UUID_STRING_MAX];
        int fd;

        snprintf(path, sizeof path, "/sys/fs/btrfs/%s/generation", uuid_format(fsid, uuid));
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        return fd < 0 ? -errno : fd;
}

int btrfs_sysfs_read_generation(int fd, uint64_t *ret) {
        char buf[32];
        ssize_t n;

        /* sysfs makes the value again for every read at offset 0. */
        n = pread(fd, buf, sizeof buf - 1, 0);
        if (n < 0)
                return -errno;
        if (n > 0 && buf[n - 1] == '\n')
                n--;
        buf[n] = 0;
        return parse_u64(buf, ret);
}

typedef struct SubvolumeScan {
        uint64_t inodes;
        DataExtent *extents;
        size_t n_extents, allocated;
        const ScanControl *control;
} SubvolumeScan;

static void sift_down(DataExtent *a, size_t i, size_t n) {
        for (size_t child; (child = 2 * i + 1) < n; i = child) {
                if (child + 1 < n && a[child + 1].bytenr > a[child].bytenr)
                        child++;
                if (a[i].bytenr >= a[child].bytenr)
                        return;
                DataExtent t = a[i];
                a[i] = a[child];
                a[child] = t;
        }
}

/* Sorts @a by bytenr and drops repeats, in place (qsort() would allocate
 * a copy: glibc sorts by merging); returns how many are left. */
static size_t sort_unique(DataExtent *a, size_t n) {
        size_t out = 0;
        bool sorted = true;

        /* Often in order already: a file's extents mostly are. */
        for (size_t i = 1; i < n && sorted; i++)
                sorted = a[i - 1].bytenr <= a[i].bytenr;
        if (!sorted) {
                for (size_t i = n / 2; i-- > 0;)
                        sift_down(a, i, n);
                for (size_t end = n; end-- > 1;) {
                        DataExtent t = a[0];
                        a[0] = a[end];
                        a[end] = t;
                        sift_down(a, 0, end);
                }
        }
        for (size_t i = 0; i < n; i++)
                if (out == 0 || a[out - 1].bytenr != a[i].bytenr)
                        a[out++] = a[i];
        return out;
}

/* Resizes the extent array to @n entries, if may_grow() agrees. */
static int extents_resize(SubvolumeScan *scan, size_t n) {
        const ScanControl *c = scan->control;
        DataExtent *p;

        if (c && c->may_grow && !c->may_grow(n * sizeof(DataExtent), c->userdata) && n > scan->allocated)
                return -EFBIG;
        if (n == 0) {
                free(scan->extents);
                p = NULL;
        } else if (!(p = reallocarray(scan->extents, n, sizeof(DataExtent)))) {
                if (c && c->may_grow)
                        (void) c->may_grow(scan->allocated * sizeof(DataExtent), c->userdata);
                return -ENOMEM;
        }
        scan->extents = p;
        scan->allocated = n;
        return 0;
}

/* The array is full: drop repeats; grow only when that left less than a
 * quarter free (else sorting again and again would gain little each time). */
static int extents_make_room(SubvolumeScan *scan) {
        scan->n_extents = sort_unique(scan->extents, scan->n_extents);
        if (scan->allocated > 0 && scan->n_extents <= scan->allocated / 4 * 3)
                return 0;
        return extents_resize(scan, scan->allocated ? scan->allocated * 2 : 256);
}

static int scan_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        SubvolumeScan *scan = userdata;
        struct btrfs_file_extent_item fe;
        int r;

        if (scan->control && scan->control->cancel && *scan->control->cancel)
                return -ECANCELED;
        if (h->type == BTRFS_INODE_ITEM_KEY) {
                scan->inodes++;
                return 0;
        }
        if (h->type != BTRFS_EXTENT_DATA_KEY)
                return 0;
        /* Inline extents live in the metadata (data only: they count
         * nothing) and may be shorter than the struct; holes have no disk
         * extent. */
        if (h->len < sizeof(fe))
                return 0;
        memcpy(&fe, data, sizeof(fe));
        if ((fe.type != BTRFS_FILE_EXTENT_REG && fe.type != BTRFS_FILE_EXTENT_PREALLOC) || fe.disk_bytenr == 0)
                return 0;
        if (scan->n_extents == scan->allocated) {
                r = extents_make_room(scan);
                if (r < 0)
                        return r;
        }
        scan->extents[scan->n_extents++] = (DataExtent) { .bytenr = le64toh(fe.disk_bytenr),
                                                          .bytes = le64toh(fe.disk_num_bytes),
                                                          .ram_bytes = le64toh(fe.ram_bytes) };
        return 0;
}

int btrfs_scan_subvolume(int fd, TreeSearchBuffer *buf, uint64_t id, const ScanControl *control,
                         uint64_t *ret_inodes, DataExtent **ret_extents, size_t *ret_n_extents) {
        SubvolumeScan scan = { .control = control };
        int r;

        /* Inodes and file extents of every file; the items in between
         * (names, xattrs, ...) come along and are skipped. */
        r = btrfs_tree_search(fd, buf, id, BTRFS_FIRST_FREE_OBJECTID, BTRFS_LAST_FREE_OBJECTID, BTRFS_INODE_ITEM_KEY,
                              BTRFS_EXTENT_DATA_KEY, 0, scan_item, &scan);
        /* Each extent once, however many files and reflinks refer to it;
         * kept as long as the subvolume exists: no spare room. */
        if (r >= 0) {
                scan.n_extents = sort_unique(scan.extents, scan.n_extents);
                if (scan.n_extents < scan.allocated)
                        r = extents_resize(&scan, scan.n_extents);
        }
        if (r < 0) {
                (void) extents_resize(&scan, 0);
                return r;
        }
        *ret_inodes = scan.inodes;
        *ret_extents = scan.extents;
        *ret_n_extents = scan.n_extents;
        return 0;
}

/* ---- inodes and directories of any subvolume ---- */

static uint64_t timespec_usec(const struct btrfs_timespec *ts);

static int inode_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        BtrfsInode *ret = userdata;
        struct btrfs_inode_item it;

        if (h->type != BTRFS_INODE_ITEM_KEY || h->len < sizeof it)
                return 0;
        memcpy(&it, data, sizeof it);
        *ret = (BtrfsInode) {
                .ino = h->objectid,
                .generation = le64toh(it.generation),
                .size = le64toh(it.size),
                .mode = le32toh(it.mode),
                .nlink = le32toh(it.nlink),
                .mtime_usec = timespec_usec(&it.mtime),
                .ctime_usec = timespec_usec(&it.ctime),
        };
        return 1;
}

int btrfs_read_inode(int fd, uint64_t tree, uint64_t ino, BtrfsInode *ret) {
        BtrfsInode inode = {};
        TreeKey key = { ino, BTRFS_INODE_ITEM_KEY, 0 };
        int r = tree_search(fd, NULL, tree, key, key, 0, inode_item, &inode);

        if (r < 0)
                return r;
        if (inode.ino != ino)
                return -ENOENT;
        *ret = inode;
        return 0;
}

typedef struct InodeRef {
        uint64_t parent;
        char name[NAME_MAX + 1];
} InodeRef;

/* The first link of an inode: an INODE_REF (parent in the key) or, for
 * inodes with many links in one directory, an INODE_EXTREF. */
static int inode_ref_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        InodeRef *ref = userdata;
        size_t head, len;
        uint64_t parent;

        if (h->type == BTRFS_INODE_REF_KEY && h->len >= sizeof(struct btrfs_inode_ref)) {
                struct btrfs_inode_ref r;

                memcpy(&r, data, sizeof r);
                head = sizeof r, len = le16toh(r.name_len), parent = h->offset;
        } else if (h->type == BTRFS_INODE_EXTREF_KEY && h->len >= sizeof(struct btrfs_inode_extref)) {
                struct btrfs_inode_extref r;

                memcpy(&r, data, sizeof r);
                head = sizeof r, len = le16toh(r.name_len), parent = le64toh(r.parent_objectid);
        } else
                return 0;
        if (len == 0 || len > NAME_MAX || len > h->len - head)
                return 0;
        memcpy(ref->name, (const char *) data + head, len);
        ref->name[len] = 0;
        ref->parent = parent;
        return 1;  /* the first is enough */
}

int btrfs_inode_path(int fd, uint64_t tree, uint64_t ino, size_t max, char **ret) {
        _cleanup_free_ char *path = strdup("");
        size_t len = 0;

        if (!path)
                return -ENOMEM;
        /* Up the links to the subvolume's root directory. */
        while (ino != BTRFS_FIRST_FREE_OBJECTID) {
                InodeRef ref = {};
                char *longer;
                size_t n;
                int r = tree_search(fd, NULL, tree, (TreeKey) { ino, BTRFS_INODE_REF_KEY, 0 },
                                    (TreeKey) { ino, BTRFS_INODE_EXTREF_KEY, UINT64_MAX }, 0, inode_ref_item, &ref);

                if (r < 0)
                        return r;
                if (!ref.parent || ref.parent == ino)
                        return -ENOENT;  /* no link: deleted, or a damaged tree */
                n = strlen(ref.name);
                if (len + n + 1 > max)
                        return -ENAMETOOLONG;  /* also what ends a loop */
                longer = malloc(len + n + 2);
                if (!longer)
                        return -ENOMEM;
                memcpy(longer, ref.name, n);
                if (len > 0) {
                        longer[n] = '/';
                        memcpy(longer + n + 1, path, len + 1);
                        len += n + 1;
                } else {
                        longer[n] = 0;
                        len = n;
                }
                free(path);
                path = longer;
                ino = ref.parent;
        }
        *ret = TAKE_PTR(path);
        return 0;
}

/* btrfs names directory items by crc32c (Castagnoli, reflected, seed ~1,
 * no final inversion) of the name. */
static uint32_t btrfs_name_hash(const char *name, size_t len) {
        uint32_t crc = ~1u;

        for (size_t i = 0; i < len; i++) {
                crc ^= (uint8_t) name[i];
                for (int k = 0; k < 8; k++)
                        crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
        }
        return crc;
}

typedef struct DirLookup {
        const char *name;
        size_t len;
        BtrfsDirEntry *ret;
        bool found;
} DirLookup;

/* Walks the btrfs_dir_items packed in one item. */
static int dir_items(const struct btrfs_ioctl_search_header *h, const uint8_t *data,
                     int (*each)(const char *name, size_t len, const BtrfsDirEntry *e, void *userdata),
                     void *userdata) {
        for (size_t off = 0; off + sizeof(struct btrfs_dir_item) <= h->len;) {
                struct btrfs_dir_item di;
                BtrfsDirEntry e;
                size_t name_len, data_len;
                int r;

                memcpy(&di, data + off, sizeof di);
                name_len = le16toh(di.name_len), data_len = le16toh(di.data_len);
                if (name_len == 0 || name_len > NAME_MAX || sizeof di + name_len + data_len > h->len - off)
                        return 0;  /* malformed: the rest is not trusted */
                e = (BtrfsDirEntry) { .ino = le64toh(di.location.objectid), .type = di.type,
                                      .subvolume = di.location.type == BTRFS_ROOT_ITEM_KEY };
                r = each((const char *) data + off + sizeof di, name_len, &e, userdata);
                if (r != 0)
                        return r;
                off += sizeof di + name_len + data_len;
        }
        return 0;
}

static int dir_lookup_entry(const char *name, size_t len, const BtrfsDirEntry *e, void *userdata) {
        DirLookup *l = userdata;

        if (len != l->len || memcmp(name, l->name, len) != 0)
                return 0;
        *l->ret = *e;
        l->found = true;
        return 1;
}

static int dir_lookup_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        return h->type == BTRFS_DIR_ITEM_KEY ? dir_items(h, data, dir_lookup_entry, userdata) : 0;
}

int btrfs_dir_lookup(int fd, uint64_t tree, uint64_t dir, const char *name, size_t len, BtrfsDirEntry *ret) {
        TreeKey key = { dir, BTRFS_DIR_ITEM_KEY, btrfs_name_hash(name, len) };
        DirLookup l = { .name = name, .len = len, .ret = ret };
        int r = tree_search(fd, NULL, tree, key, key, 0, dir_lookup_item, &l);

        if (r < 0)
                return r;
        return l.found ? 0 : -ENOENT;
}

typedef struct DirList {
        int (*entry)(const char *name, size_t len, const BtrfsDirEntry *e, void *userdata);
        void *userdata;
} DirList;

static int dir_list_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        DirList *l = userdata;

        return h->type == BTRFS_DIR_INDEX_KEY ? dir_items(h, data, l->entry, l->userdata) : 0;
}

int btrfs_dir_list(int fd, uint64_t tree, uint64_t dir,
                   int (*entry)(const char *name, size_t len, const BtrfsDirEntry *e, void *userdata),
                   void *userdata) {
        DirList l = { entry, userdata };
        int r = tree_search(fd, NULL, tree, (TreeKey) { dir, BTRFS_DIR_INDEX_KEY, 0 },
                            (TreeKey) { dir, BTRFS_DIR_INDEX_KEY, UINT64_MAX }, 0, dir_list_item, &l);

        return r < 0 ? r : 0;
}

/* ---- subvolumes, from the root tree ---- */

/* What the root tree says of where a subvolume is, beside its entry in
 * fs->subvolumes (same index) until its path is known. */
typedef struct RootLink {
        uint64_t dirid;          /* the directory of the parent that holds it */
        char *name;              /* its name there */
        bool linked;             /* has a back reference (else: being deleted) */
        bool failed;             /* no path: not published */
        bool visiting;
} RootLink;

/* Directory paths INO_LOOKUP found, by tree and directory: subvolumes
 * tend to share a directory (a container store, a snapshot directory),
 * and at 100,000 subvolumes one ioctl each was a third of reading them. */
#define DIR_CACHE_SLOTS 64

typedef struct DirPath {
        uint64_t tree, dir;
        char *path;              /* "a/b/", NULL: slot empty */
} DirPath;

/* The subvolumes go straight into the filesystem's array (in id order, as
 * the search returns them), not into a second array copied over after:
 * at 100,000 subvolumes that copy wrote 23 MiB once more. */
typedef struct RootTree {
        Filesystem *fs;
        RootLink *links;
        size_t allocated_links;
        DirPath dir_cache[DIR_CACHE_SLOTS];
} RootTree;

static void root_tree_done(RootTree *t) {
        for (size_t i = 0; i < t->fs->n_subvolumes; i++)
                free(t->links[i].name);
        free(t->links);
        for (size_t i = 0; i < DIR_CACHE_SLOTS; i++)
                free(t->dir_cache[i].path);
}

static uint64_t timespec_usec(const struct btrfs_timespec *ts) {
        uint64_t sec = le64toh(ts->sec);
        return sec > 0 ? sec * 1000000 + le32toh(ts->nsec) / 1000 : 0;
}

static int root_tree_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        RootTree *t = userdata;
        Filesystem *fs = t->fs;
        size_t n = fs->n_subvolumes;
        Subvolume *last = n > 0 ? &fs->subvolumes[n - 1] : NULL;

        if (h->objectid != BTRFS_FS_TREE_OBJECTID &&
            (h->objectid < BTRFS_FIRST_FREE_OBJECTID || h->objectid > BTRFS_LAST_FREE_OBJECTID))
                return 0;  /* not a subvolume */
        if (h->type == BTRFS_ROOT_ITEM_KEY && h->len >= btrfs_legacy_root_item_size() &&
            (!last || last->id != h->objectid)) {
                struct btrfs_root_item ri = {};
                Subvolume sv = {
                        .id = h->objectid,
                        .usage = USAGE_NONE,
                };

                /* Older root items end before the UUIDs and times: zeros. */
                memcpy(&ri, data, h->len < sizeof ri ? h->len : sizeof ri);
                sv.generation = le64toh(ri.generation);
                sv.change_generation = le64toh(ri.ctransid);
                sv.creation_generation = le64toh(ri.otransid);
                sv.creation_usec = timespec_usec(&ri.otime);
                sv.read_only = le64toh(ri.flags) & BTRFS_ROOT_SUBVOL_RDONLY;
                memcpy(sv.uuid, ri.uuid, 16);
                memcpy(sv.parent_uuid, ri.parent_uuid, 16);
                memcpy(sv.received_uuid, ri.received_uuid, 16);
                if (grow_array(&t->links, &t->allocated_links, n + 1, sizeof(RootLink)) < 0 ||
                    !filesystem_add_subvolume(fs, &sv))
                        return -ENOMEM;
                t->links[n] = (RootLink) {};
        } else if (h->type == BTRFS_ROOT_REF_KEY) {
                /* The same links as the back references, under the parent:
                 * 100,000 of them under a parent of 100,000, a third of
                 * what the search would copy out. */
                return TREE_SKIP_RUN;
        } else if (h->type == BTRFS_ROOT_BACKREF_KEY && last && last->id == h->objectid && !t->links[n - 1].linked &&
                   h->len >= sizeof(struct btrfs_root_ref)) {
                RootLink *link = &t->links[n - 1];
                struct btrfs_root_ref ref;
                size_t len;

                memcpy(&ref, data, sizeof ref);
                len = le16toh(ref.name_len);
                if (len == 0 || len > h->len - sizeof ref)
                        return 0;  /* malformed: left unlinked */
                /* A name refused below leaves the entry unlinked, and a
                 * next back reference may try again. */
                free(link->name);
                link->name = memdup_suffix0((const char *) data + sizeof ref, len);
                if (!link->name)
                        return -ENOMEM;
                link->dirid = le64toh(ref.dirid);
                last->parent_id = h->offset;
                link->linked = !memchr(data + sizeof ref, 0, len) && !memchr(data + sizeof ref, '/', len);
        }
        return 0;
}

/* The index of subvolume @id, or SIZE_MAX. */
static size_t root_tree_find(const RootTree *t, uint64_t id) {
        size_t n = t->fs->n_subvolumes;
        size_t i = sorted_lower_bound(t->fs->subvolumes, n, sizeof(Subvolume), offsetof(Subvolume, id), id);

        return i < n && t->fs->subvolumes[i].id == id ? i : SIZE_MAX;
}

/* The path of directory @dir inside subvolume @tree: "a/b/", or "" for
 * its root.  Valid until the next call. */
static int root_tree_dir_path(RootTree *t, int fd, uint64_t tree, uint64_t dir, const char **ret) {
        struct btrfs_ioctl_ino_lookup_args lookup = { .treeid = tree, .objectid = dir };
        DirPath *slot = &t->dir_cache[(tree * 31 + dir) % DIR_CACHE_SLOTS];

        if (dir == BTRFS_FIRST_FREE_OBJECTID) {
                *ret = "";
                return 0;
        }
        if (!slot->path || slot->tree != tree || slot->dir != dir) {
                if (ioctl(fd, BTRFS_IOC_INO_LOOKUP, &lookup) < 0)
                        return -errno;
                lookup.name[sizeof lookup.name - 1] = 0;
                free(slot->path);
                *slot = (DirPath) { tree, dir, strdup(lookup.name) };
                if (!slot->path)
                        return -ENOMEM;
        }
        *ret = slot->path;
        return 0;
}

/* The path of subvolume number @i below its parent @p, whose path is known. */
static int root_tree_resolve_one(RootTree *t, int fd, size_t p, size_t i) {
        const Subvolume *parent = &t->fs->subvolumes[p];
        const char *dir = "", *name = t->links[i].name;
        int r;

        r = root_tree_dir_path(t, fd, parent->id, t->links[i].dirid, &dir);
        if (r < 0)
                return r;
        if (strlen(parent->path) + strlen(dir) + strlen(name) + 2 > SUBVOLUME_PATH_MAX)
                return -ENAMETOOLONG;
        if (asprintf(&t->fs->subvolumes[i].path, "%s%s%s%s", parent->path, streq(parent->path, "/") ? "" : "/", dir,
                     name) < 0) {
                t->fs->subvolumes[i].path = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* Resolves the path of subvolume number @i and of the parents it needs,
 * without recursion (nesting can be deep): up to a parent whose path is
 * known, then down.  A subvolume whose path cannot be found (deleted
 * meanwhile, a directory path too long for INO_LOOKUP, a loop in a
 * damaged tree) fails alone, with the ones below it. */
static int root_tree_resolve(int fd, RootTree *t, size_t i) {
        Subvolume *svs = t->fs->subvolumes;
        RootLink *links = t->links;
        _cleanup_free_ size_t *chain = NULL;
        size_t n = 0, allocated = 0;
        int r;

        for (size_t x = i; !svs[x].path && !links[x].failed;) {
                if (links[x].visiting) {
                        links[x].failed = true;  /* a loop */
                        break;
                }
                if (grow_array(&chain, &allocated, n + 1, sizeof(size_t)) < 0)
                        return -ENOMEM;
                chain[n++] = x;
                links[x].visiting = true;
                x = links[x].linked ? root_tree_find(t, svs[x].parent_id) : SIZE_MAX;
                if (x == SIZE_MAX) {
                        links[chain[n - 1]].failed = true;
                        break;
                }
        }
        while (n > 0) {
                size_t x = chain[--n], parent = root_tree_find(t, svs[x].parent_id);

                links[x].visiting = false;
                if (links[x].failed || parent == SIZE_MAX || !svs[parent].path) {
                        links[x].failed = true;
                        continue;
                }
                r = root_tree_resolve_one(t, fd, parent, x);
                if (r == -ENOMEM)
                        return r;
                links[x].failed = r < 0;
        }
        return 0;
}

int btrfs_read_subvolumes(int fd, Filesystem *fs) {
        _cleanup_(root_tree_done) RootTree t = { .fs = fs };
        size_t top, skipped = 0, kept = 0;
        uint64_t first_skipped = 0;
        int r;

        /* One search: every root item and back reference of a subvolume. */
        r = btrfs_tree_search(fd, NULL, BTRFS_ROOT_TREE_OBJECTID, BTRFS_FS_TREE_OBJECTID, BTRFS_LAST_FREE_OBJECTID,
                              BTRFS_ROOT_ITEM_KEY, BTRFS_ROOT_BACKREF_KEY, 0, root_tree_item, &t);
        if (r < 0)
                return r;
        top = root_tree_find(&t, BTRFS_FS_TREE_OBJECTID);
        if (top == SIZE_MAX)
                return -EIO;
        fs->subvolumes[top].path = strdup("/");
        if (!fs->subvolumes[top].path)
                return -ENOMEM;
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                if (!t.links[i].linked && i != top)
                        continue;  /* deleted, not cleaned up yet */
                r = root_tree_resolve(fd, &t, i);
                if (r < 0)
                        return r;
                if (t.links[i].failed && skipped++ == 0)
                        first_skipped = fs->subvolumes[i].id;
        }
        /* Only those with a path are published, in the same order. */
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                if (!fs->subvolumes[i].path) {
                        free(t.links[i].name);
                        continue;
                }
                if (kept != i) {
                        fs->subvolumes[kept] = fs->subvolumes[i];
                        t.links[kept] = t.links[i];
                }
                kept++;
        }
        fs->n_subvolumes = kept;
        if (skipped > 0)
                log_warning("Not publishing %zu subvolume(s) whose path cannot be found or is longer than %d bytes "
                            "(subvolume %" PRIu64 " first).", skipped, SUBVOLUME_PATH_MAX, first_skipped);
        return 0;
}

int btrfs_read_filesystem(int fd, Filesystem *fs) {
        struct btrfs_ioctl_fs_info_args info = { .flags = BTRFS_FS_INFO_FLAG_GENERATION };
        char label[BTRFS_LABEL_SIZE] = {};
        int r;

        if (ioctl(fd, BTRFS_IOC_FS_INFO, &info) < 0)
                return -errno;
        if (ioctl(fd, BTRFS_IOC_GET_FSLABEL, label) < 0)
                return -errno;
        r = btrfs_read_statfs(fd, &fs->statfs);
        if (r < 0)
                return r;
        label[sizeof(label) - 1] = 0;
        fs->label = strdup(label);
        if (!fs->label)
                return -ENOMEM;
        fs->generation = info.flags & BTRFS_FS_INFO_FLAG_GENERATION ? info.generation : 0;
        /* Before the subvolumes: a change after this point shows in the
         * next comparison and is not lost. */
        r = btrfs_read_root_fingerprint(fd, fs->generation, &fs->root_fingerprint);
        if (r < 0)
                return r;
        r = btrfs_read_devices(fd, info.max_id, &fs->devices);
        if (r < 0)
                return r;
        return btrfs_read_subvolumes(fd, fs);
}

/* Not in the 6.1 headers. */
#ifndef BTRFS_QGROUP_STATUS_FLAG_SIMPLE_MODE
#define BTRFS_QGROUP_STATUS_FLAG_SIMPLE_MODE (1ULL << 3)
#endif

typedef struct QuotaRead {
        Filesystem *fs;
        uint64_t status_flags;
        uint64_t status_generation;
        bool have_status;
} QuotaRead;

static int quota_item(const struct btrfs_ioctl_search_header *h, const void *data, void *userdata) {
        QuotaRead *q = userdata;
        Subvolume *sv;

        if (h->type == BTRFS_QGROUP_STATUS_KEY && h->len >= sizeof(struct btrfs_qgroup_status_item)) {
                struct btrfs_qgroup_status_item st;

                memcpy(&st, data, sizeof(st));
                q->status_flags = le64toh(st.flags);
                q->status_generation = le64toh(st.generation);
                q->have_status = true;
                return 0;
        }
        /* Level-0 qgroups only: their id is the subvolume id. */
        if (h->offset >> BTRFS_QGROUP_LEVEL_SHIFT != 0)
                return 0;
        sv = filesystem_find_subvolume(q->fs, h->offset);
        if (!sv)
                return 0;  /* the qgroup of a subvolume deleted meanwhile */
        if (h->type == BTRFS_QGROUP_INFO_KEY && h->len >= sizeof(struct btrfs_qgroup_info_item)) {
                struct btrfs_qgroup_info_item info;

                memcpy(&info, data, sizeof(info));
                sv->usage.referenced = le64toh(info.rfer);
                sv->usage.exclusive = le64toh(info.excl);
        } else if (h->type == BTRFS_QGROUP_LIMIT_KEY && h->len >= sizeof(struct btrfs_qgroup_limit_item)) {
                struct btrfs_qgroup_limit_item limit;
                uint64_t flags;

                memcpy(&limit, data, sizeof(limit));
                flags = le64toh(limit.flags);
                sv->usage.referenced_limit = flags & BTRFS_QGROUP_LIMIT_MAX_RFER ? le64toh(limit.max_rfer) : USAGE_UNKNOWN;
                sv->usage.exclusive_limit = flags & BTRFS_QGROUP_LIMIT_MAX_EXCL ? le64toh(limit.max_excl) : USAGE_UNKNOWN;
        }
        return 0;
}

int btrfs_read_quotas(int fd, Filesystem *fs, uint64_t now_usec) {
        QuotaRead q = { .fs = fs };
        UsageSource source;
        int r;

        for (size_t i = 0; i < fs->n_subvolumes; i++)
                fs->subvolumes[i].usage = USAGE_NONE;
        /* All status, info and limit items have objectid 0. */
        r = btrfs_tree_search(fd, NULL, BTRFS_QUOTA_TREE_OBJECTID, 0, 0, BTRFS_QGROUP_STATUS_KEY, BTRFS_QGROUP_LIMIT_KEY,
                              0, quota_item, &q);
        if (r == -ENOENT || (r >= 0 && !q.have_status)) {
                /* No quota tree: quotas are off. */
                fs->quota_mode = QUOTA_MODE_DISABLED;
                fs->quota_consistent = true;
                fs->usage_generation = fs->generation;
                fs->usage_read_usec = now_usec;
                return 0;
        }
        if (r < 0)
                return r;
        fs->quota_mode = q.status_flags & BTRFS_QGROUP_STATUS_FLAG_SIMPLE_MODE ? QUOTA_MODE_SIMPLE : QUOTA_MODE_QGROUP;
        fs->quota_consistent = !(q.status_flags & (BTRFS_QGROUP_STATUS_FLAG_INCONSISTENT | BTRFS_QGROUP_STATUS_FLAG_RESCAN));
        /* The status item is rewritten by every commit: it tells which
         * transaction the figures belong to. */
        fs->usage_generation = q.status_generation;
        fs->usage_read_usec = now_usec;
        source = fs->quota_mode == QUOTA_MODE_SIMPLE ? USAGE_SOURCE_SIMPLE_QUOTA : USAGE_SOURCE_QGROUP;
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                Usage *u = &fs->subvolumes[i].usage;

                if (u->referenced == USAGE_UNKNOWN)
                        continue;  /* no qgroup for this subvolume */
                u->source = source;
                u->consistent = fs->quota_consistent;
                u->updated_usec = now_usec;
        }
        return 0;
}

/* The fsid of the btrfs that @fd is on (opened or O_PATH), or -ENOTTY
 * when the fd does not reach btrfs's ioctls: only directories and regular
 * files have btrfs's file operations, and no ioctl goes to anything else
 * (a device driver, say). */
static int fd_read_fsid(int fd, mode_t type, uint8_t ret[16]) {
        _cleanup_close_ int reopened = -1;
        char proc[32];
        int r;

        if (!S_ISDIR(type) && !S_ISREG(type))
                return -ENOTTY;
        r = btrfs_read_fsid(fd, ret);
        if (r != -EBADF)
                return r;
        /* O_PATH: ioctls need an opened file.  Reopening a btrfs directory
         * or regular file is harmless: nothing is read, and O_NONBLOCK
         * keeps a lease break from making us wait. */
        if (S_ISDIR(type))
                reopened = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
        else {
                snprintf(proc, sizeof proc, "/proc/self/fd/%i", fd);
                reopened = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        }
        if (reopened < 0)
                return -ENOTTY;
        return btrfs_read_fsid(reopened, ret);
}

int btrfs_identify_fd(int fd, bool unique_mount_id, FdIdentity *ret) {
        unsigned mnt_mask = unique_mount_id ? STATX_MNT_ID_UNIQUE_COMPAT : STATX_MNT_ID_COMPAT;
        struct statx_compat stx = {};
        FdIdentity id = {};
        struct statfs sfs;
        int r;

        /* statx() first, from cached attributes only: a client's fd may be
         * on FUSE or NFS, where asking the file system could block us on a
         * server that never answers.  Only btrfs (and bcachefs) report
         * STATX_SUBVOL. */
        if (sys_statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_SUBVOL_COMPAT | STATX_INO | STATX_TYPE | mnt_mask,
                      &stx) < 0)
                return -errno;
        id.dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
        if (!(stx.stx_mask & STATX_SUBVOL_COMPAT)) {
                /* The empty directory a snapshot leaves for a nested
                 * subvolume (inode 2 on the superblock's device) has none
                 * either; the caller knows which devices are btrfs. */
                if (S_ISDIR(stx.stx_mode) && stx.stx_ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID) {
                        *ret = id;
                        return -ENOENT;
                }
                return -EMEDIUMTYPE;
        }
        /* A local file system with subvolumes: statfs() is safe now. */
        if (fstatfs(fd, &sfs) < 0)
                return -errno;
        if ((uint32_t) sfs.f_type != BTRFS_SUPER_MAGIC)
                return -EMEDIUMTYPE;
        id.subvolume_id = stx.stx_subvol;
        id.ino = stx.stx_ino;
        id.mode = stx.stx_mode;
        id.mount_id = stx.stx_mask & mnt_mask ? stx.stx_mnt_id : 0;
        r = fd_read_fsid(fd, stx.stx_mode, id.fsid);
        if (r < 0 && r != -ENOTTY)
                return r;
        id.have_fsid = r >= 0;
        *ret = id;
        return 0;
}
