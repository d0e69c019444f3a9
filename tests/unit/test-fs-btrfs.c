/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The parts of the btrfs backend that need no btrfs: refusing fds that
 * are not on btrfs. */
#include <fcntl.h>
#include <glib.h>
#include <sys/socket.h>

#include "fs-btrfs.h"
#include "util.h"

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
        return g_test_run();
}
