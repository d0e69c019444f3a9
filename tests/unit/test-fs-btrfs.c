/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The parts of the btrfs backend that need no btrfs: the fsid folding
 * statfs() uses, and refusing fds that are not on btrfs. */
#include <fcntl.h>
#include <glib.h>
#include <sys/socket.h>

#include "fs-btrfs.h"
#include "util.h"

static void test_fold_fsid(void) {
        /* fsid words (big-endian) 0x00112233 0x44556677 0x8899aabb 0xccddeeff */
        const uint8_t u[16] = { 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff };

        /* val[0] = w0 ^ w2 ^ (id >> 32), val[1] = w1 ^ w3 ^ (u32) id */
        g_assert_cmphex(btrfs_fold_fsid(u, 5), ==, (uint64_t) 0x8888888888888888ULL ^ 5);
        g_assert_cmphex(btrfs_fold_fsid(u, 0x100000100ULL), ==,
                        (uint64_t) (0x88888888U ^ 1) << 32 | (0x88888888U ^ 0x100));
}

static void test_identify_refuses_non_btrfs(void) {
        int fds[2], s, f;
        uint64_t id, folded;
        dev_t dev;

        g_assert_cmpint(pipe2(fds, O_CLOEXEC), ==, 0);
        g_assert_cmpint(btrfs_identify_fd(fds[0], &id, &folded, &dev), ==, -EMEDIUMTYPE);
        close(fds[0]);
        close(fds[1]);
        s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        g_assert_cmpint(btrfs_identify_fd(s, &id, &folded, &dev), ==, -EMEDIUMTYPE);
        close(s);
        f = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        g_assert_cmpint(btrfs_identify_fd(f, &id, &folded, &dev), ==, -EMEDIUMTYPE);
        close(f);
        g_assert_cmpint(btrfs_identify_fd(-1, &id, &folded, &dev), ==, -EBADF);
}

int main(int argc, char *argv[]) {
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/fs-btrfs/fold-fsid", test_fold_fsid);
        g_test_add_func("/fs-btrfs/identify-refuses-non-btrfs", test_identify_refuses_non_btrfs);
        return g_test_run();
}
