/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The parts of the btrfs backend that need no btrfs: refusing fds that
 * are not on btrfs; parsing tree-search answers (this file's
 * btrfs_tree_search_ioctl() replaces the daemon's weak one). */
#include <endian.h>
#include <fcntl.h>
#include <glib.h>
#include <linux/btrfs_tree.h>
#include <sys/socket.h>

#include "fs-btrfs.h"
#include "model.h"
#include "util.h"

#define NAME "name-at-the-end"

static unsigned searches;

/* The first answer fills the whole buffer: the top level's root item,
 * subvolume 256's, then its back reference, whose name (not
 * NUL-terminated, as on disk) ends exactly at the buffer's end.  Then
 * nothing more. */
int btrfs_tree_search_ioctl(int fd, struct btrfs_ioctl_search_args_v2 *args) {
        struct btrfs_ioctl_search_header h;
        struct btrfs_root_ref ref = { .dirid = htole64(BTRFS_FIRST_FREE_OBJECTID),
                                      .name_len = htole16(strlen(NAME)) };
        size_t top = sizeof(struct btrfs_root_item), off = 0,
               item = args->buf_size - 3 * sizeof h - top - sizeof ref - strlen(NAME);

        if (searches++ > 0) {
                args->key.nr_items = 0;
                return 0;
        }
        memset(args->buf, 0, args->buf_size);
        h = (struct btrfs_ioctl_search_header) { .objectid = BTRFS_FS_TREE_OBJECTID, .type = BTRFS_ROOT_ITEM_KEY,
                                                 .len = top };
        memcpy(args->buf, &h, sizeof h);
        off = sizeof h + top;
        h = (struct btrfs_ioctl_search_header) { .objectid = 256, .type = BTRFS_ROOT_ITEM_KEY, .len = item };
        memcpy(args->buf + off, &h, sizeof h);
        off += sizeof h + item;
        h = (struct btrfs_ioctl_search_header) { .objectid = 256, .type = BTRFS_ROOT_BACKREF_KEY,
                                                 .offset = BTRFS_FS_TREE_OBJECTID,
                                                 .len = sizeof ref + strlen(NAME) };
        memcpy(args->buf + off, &h, sizeof h);
        memcpy(args->buf + off + sizeof h, &ref, sizeof ref);
        memcpy(args->buf + off + sizeof h + sizeof ref, NAME, strlen(NAME));
        g_assert_cmpuint(off + sizeof h + sizeof ref + strlen(NAME), ==, args->buf_size);
        args->key.nr_items = 3;
        return 0;
}

/* Names are copied as bytes: a C-string copy of one that ends the buffer
 * reads past it (ASan with strict_string_checks saw it under test_load). */
static void test_name_at_the_end_of_the_buffer(void) {
        static const uint8_t uuid[16] = { 1 };
        _cleanup_(filesystem_freep) Filesystem *fs = filesystem_new(uuid);
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        const Subvolume *sv;

        g_assert_nonnull(fs);
        g_assert_cmpint(btrfs_read_subvolumes(fd, fs), >=, 0);
        g_assert_cmpint(filesystem_index(fs), >=, 0);
        sv = filesystem_find_subvolume(fs, 256);
        g_assert_nonnull(sv);
        g_assert_cmpstr(sv->path, ==, "/" NAME);
        close(fd);
}

static void test_identify_refuses_non_btrfs(void) {
        int fds[2], s, f;
        FdIdentity id;

        g_assert_cmpint(pipe2(fds, O_CLOEXEC), ==, 0);
        g_assert_cmpint(btrfs_identify_fd(fds[0], true, &id), ==, -EMEDIUMTYPE);
        close(fds[0]);
        close(fds[1]);
        s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        g_assert_cmpint(btrfs_identify_fd(s, true, &id), ==, -EMEDIUMTYPE);
        close(s);
        f = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        g_assert_cmpint(btrfs_identify_fd(f, true, &id), ==, -EMEDIUMTYPE);
        close(f);
        g_assert_cmpint(btrfs_identify_fd(-1, true, &id), ==, -EBADF);
}

int main(int argc, char *argv[]) {
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/fs-btrfs/identify-refuses-non-btrfs", test_identify_refuses_non_btrfs);
        g_test_add_func("/fs-btrfs/name-at-the-end-of-the-buffer", test_name_at_the_end_of_the_buffer);
        return g_test_run();
}
