/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The btrfs tree-search item walkers (fs-btrfs.c) on crafted answers.  This
 * file's btrfs_tree_search_ioctl() replaces the daemon's (a weak symbol)
 * and answers every search from the input, so the daemon's public
 * functions run exactly as on the kernel's answers: the walk over a
 * buffer, the continuation after it, and each item parser.
 *
 * Input: one byte choosing the function, then the answers in order, each
 * a little-endian u32 nr_items, a u16 length and that many bytes of
 * buffer (search headers and items, as the kernel writes them).  When the
 * input runs out, a search finds nothing more. */
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/limits.h>

#include "fs-btrfs.h"
#include "fuzz-util.h"

static FuzzInput input;

int btrfs_tree_search_ioctl(int fd, struct btrfs_ioctl_search_args_v2 *args) {
        uint32_t nr_items = (uint32_t) fuzz_take(&input, 4);
        size_t len = (size_t) fuzz_take(&input, 2);

        if (len > input.left)
                len = input.left;
        if (len > args->buf_size)
                len = args->buf_size;
        /* Bytes the answer leaves unwritten are whatever the last one left. */
        memcpy(args->buf, input.p, len);
        input.p += len, input.left -= len;
        args->key.nr_items = input.left + len > 0 ? nr_items : 0;
        return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        log_max_level = 0;
        return 0;
}

static bool extent_array_too_big(size_t bytes, void *userdata) {
        return bytes <= 1024 * 1024;
}

static int count_entry(const char *name, size_t len, const BtrfsDirEntry *e, void *userdata) {
        if (len == 0 || len > NAME_MAX)
                abort();
        ++*(size_t *) userdata;
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const uint8_t uuid[16] = { 1 };
        _cleanup_close_ int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        uint8_t which;

        if (size < 1 || fd < 0)
                return 0;
        which = data[0];
        input = (FuzzInput) { data + 1, size - 1 };
        switch (which % 8) {
        case 0: {
                ScanControl control = { .may_grow = extent_array_too_big };
                DataExtent *extents = NULL;
                size_t n = 0;
                uint64_t inodes;

                if (btrfs_scan_subvolume(fd, NULL, 256, &control, &inodes, &extents, &n) < 0)
                        break;
                /* Sorted and distinct, as the extent map needs them. */
                for (size_t i = 1; i < n; i++)
                        if (extents[i - 1].bytenr >= extents[i].bytenr)
                                abort();
                free(extents);
                break;
        }
        case 1: {
                /* The root tree, then the quota tree, as discovery reads them. */
                _cleanup_(filesystem_freep) Filesystem *fs = filesystem_new(uuid);

                if (!fs)
                        abort();
                if (btrfs_read_subvolumes(fd, fs) < 0 || filesystem_index(fs) < 0)
                        break;
                for (size_t i = 0; i < fs->n_subvolumes; i++) {
                        const Subvolume *sv = &fs->subvolumes[i];

                        if (sv->path[0] != '/' || strlen(sv->path) > SUBVOLUME_PATH_MAX ||
                            !filesystem_find_subvolume_by_path(fs, sv->path))
                                abort();
                }
                (void) btrfs_read_quotas(fd, fs, 1);
                break;
        }
        case 2: {
                uint64_t hash;
                (void) btrfs_read_root_fingerprint(fd, 1, &hash);
                break;
        }
        case 3: {
                BtrfsInode inode;
                (void) btrfs_read_inode(fd, 5, 257, &inode);
                break;
        }
        case 4: {
                _cleanup_free_ char *path = NULL;

                if (btrfs_inode_path(fd, 5, 258, PATH_MAX, &path) >= 0 && strlen(path) >= PATH_MAX)
                        abort();
                break;
        }
        case 5: {
                BtrfsDirEntry e;
                (void) btrfs_dir_lookup(fd, 5, 256, "f1", 2, &e);
                break;
        }
        case 6: {
                size_t n = 0;
                (void) btrfs_dir_list(fd, 5, 256, count_entry, &n);
                break;
        }
        case 7: {
                bool closed;
                (void) btrfs_transaction_closed(fd, 1, &closed);
                break;
        }
        }
        return 0;
}
