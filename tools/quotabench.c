/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* quotabench MNT RUNS: times subvold's own quota read (btrfs_read_quotas():
 * one tree search of the quota tree), and, for comparison, reading the same
 * figures from sysfs (/sys/fs/btrfs/<fsid>/qgroups/0_<id>/...), the other
 * way the kernel offers.  Checks that both give the same numbers.
 * Prints: ioctl_ms=<median> sysfs_ms=<median> qgroups=<n> mismatches=<n> */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fs-btrfs.h"
#include "model.h"
#include "util.h"

static double now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
        qsort(v, n, sizeof *v, cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t read_u64(const char *path) {
        char buf[32] = {};
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t k;

        if (fd < 0)
                return USAGE_UNKNOWN;
        k = read(fd, buf, sizeof buf - 1);
        close(fd);
        return k > 0 ? strtoull(buf, NULL, 10) : USAGE_UNKNOWN;
}

int main(int argc, char *argv[]) {
        _cleanup_(filesystem_freep) Filesystem *fs = NULL;
        char hex[UUID_STRING_MAX], path[512];
        int runs, fd, mismatches = 0, qgroups = 0;
        double *t_ioctl, *t_sysfs;
        uint8_t uuid[16];

        if (argc != 3) {
                fprintf(stderr, "usage: %s MNT RUNS\n", argv[0]);
                return 2;
        }
        runs = atoi(argv[2]);
        fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || btrfs_read_fsid(fd, uuid) < 0 || !(fs = filesystem_new(uuid)) ||
            btrfs_read_filesystem(fd, fs) < 0 || filesystem_index(fs) < 0) {
                perror(argv[1]);
                return 1;
        }
        uuid_format(uuid, hex);
        t_ioctl = calloc(runs, sizeof(double));
        t_sysfs = calloc(runs, sizeof(double));

        for (int i = 0; i < runs; i++) {
                double t0 = now_ms();
                if (btrfs_read_quotas(fd, fs, 1) < 0 || fs->quota_mode == QUOTA_MODE_DISABLED) {
                        fprintf(stderr, "quotas are not enabled on %s\n", argv[1]);
                        return 1;
                }
                t_ioctl[i] = now_ms() - t0;
        }
        for (int i = 0; i < runs; i++) {
                double t0 = now_ms();
                mismatches = qgroups = 0;
                snprintf(path, sizeof path, "/sys/fs/btrfs/%s/qgroups/inconsistent", hex);
                (void) read_u64(path);
                for (size_t j = 0; j < fs->n_subvolumes; j++) {
                        const Subvolume *sv = &fs->subvolumes[j];
                        static const char *const files[] = { "referenced", "exclusive", "max_referenced", "max_exclusive" };
                        uint64_t v[4];

                        for (int k = 0; k < 4; k++) {
                                snprintf(path, sizeof path, "/sys/fs/btrfs/%s/qgroups/0_%llu/%s", hex,
                                         (unsigned long long) sv->id, files[k]);
                                v[k] = read_u64(path);
                        }
                        qgroups++;
                        mismatches += v[0] != sv->usage.referenced || v[1] != sv->usage.exclusive;
                }
                t_sysfs[i] = now_ms() - t0;
        }
        printf("ioctl_ms=%.3f sysfs_ms=%.3f qgroups=%d mismatches=%d\n", median(t_ioctl, runs),
               median(t_sysfs, runs), qgroups, mismatches);
        close(fd);
        free(t_ioctl);
        free(t_sysfs);
        return mismatches != 0;
}
