/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * failing-disk - a FUSE file system serving one file, MOUNTPOINT/disk, whose
 * contents are IMAGE's, and which fails on command: a disk for a loop
 * device that starts returning I/O errors (this kernel has no
 * device-mapper, so no dm-error or dm-flakey).
 *
 * usage: failing-disk MOUNTPOINT IMAGE
 *
 * Lines on stdin: "fail" makes every read, write and fsync of the file fail
 * with EIO, "heal" serves it again; each is answered by a line "ok".
 * Opened with direct_io, so that no page cache of FUSE's answers reads
 * instead of the server.
 */
#define FUSE_USE_VERSION 34
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include "one-file-fuse.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int image_fd = -1;
static atomic_bool failing;

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fi->direct_io = 1;
        fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
        char *buf;
        ssize_t k;

        if (failing) {
                fuse_reply_err(req, EIO);
                return;
        }
        buf = malloc(size ?: 1);
        if (!buf) {
                fuse_reply_err(req, ENOMEM);
                return;
        }
        k = pread(image_fd, buf, size, off);
        if (k < 0)
                fuse_reply_err(req, errno);
        else
                fuse_reply_buf(req, buf, (size_t) k);
        free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi) {
        ssize_t k;

        if (failing) {
                fuse_reply_err(req, EIO);
                return;
        }
        k = pwrite(image_fd, buf, size, off);
        if (k < 0)
                fuse_reply_err(req, errno);
        else
                fuse_reply_write(req, (size_t) k);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
        fuse_reply_err(req, failing ? EIO : fdatasync(image_fd) < 0 ? errno : 0);
}

static void *read_commands(void *userdata) {
        char line[64];

        while (fgets(line, sizeof line, stdin)) {
                if (strcmp(line, "fail\n") == 0)
                        failing = true;
                else if (strcmp(line, "heal\n") == 0)
                        failing = false;
                else
                        continue;
                printf("ok\n");
                fflush(stdout);
        }
        return NULL;
}

static const struct fuse_lowlevel_ops ops = {
        .lookup = one_file_lookup, .getattr = one_file_getattr, .open = op_open, .read = op_read, .write = op_write,
        .fsync = op_fsync,
};

int main(int argc, char *argv[]) {
        struct stat st;

        if (argc != 3) {
                fprintf(stderr, "usage: %s MOUNTPOINT IMAGE\n", argv[0]);
                return 2;
        }
        image_fd = open(argv[2], O_RDWR | O_CLOEXEC);
        if (image_fd < 0 || fstat(image_fd, &st) < 0) {
                perror(argv[2]);
                return 1;
        }
        one_file_name = "disk";
        one_file_mode = 0600;
        one_file_size = st.st_size;
        return one_file_serve(argv[0], argv[1], false, &ops, sizeof ops, read_commands, 8);
}
