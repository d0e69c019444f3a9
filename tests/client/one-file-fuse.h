/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The FUSE test servers' file system: a root directory holding one regular
 * file (inode 2), named and sized by the server. */
#pragma once

#include <errno.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *one_file_name;
static mode_t one_file_mode;
static off_t one_file_size;

static void one_file_attr(fuse_ino_t ino, struct stat *st) {
        memset(st, 0, sizeof *st);
        st->st_ino = ino;
        st->st_mode = ino == FUSE_ROOT_ID ? S_IFDIR | 0755 : S_IFREG | one_file_mode;
        st->st_nlink = ino == FUSE_ROOT_ID ? 2 : 1;
        st->st_size = ino == FUSE_ROOT_ID ? 0 : one_file_size;
        st->st_blksize = 4096;
}

static void one_file_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
        struct fuse_entry_param e = { .ino = 2, .attr_timeout = 3600, .entry_timeout = 3600 };

        if (parent != FUSE_ROOT_ID || strcmp(name, one_file_name) != 0) {
                fuse_reply_err(req, ENOENT);
                return;
        }
        one_file_attr(2, &e.attr);
        fuse_reply_entry(req, &e);
}

static void one_file_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        struct stat st;

        one_file_attr(ino, &st);
        fuse_reply_attr(req, &st, 3600);
}

/* Mounts @ops on @mountpoint (any user may enter with @allow_other),
 * prints "mounted", reads commands from stdin with @commands in a thread
 * of its own and serves with up to @threads threads until unmounted. */
static int one_file_serve(const char *argv0, const char *mountpoint, bool allow_other,
                          const struct fuse_lowlevel_ops *ops, size_t ops_size, void *(*commands)(void *),
                          unsigned threads) {
        char *fuse_argv[] = { (char *) argv0, "-o", "allow_other", NULL };
        struct fuse_args args = FUSE_ARGS_INIT(allow_other ? 3 : 1, fuse_argv);
        struct fuse_loop_config *config;
        struct fuse_session *se;
        pthread_t thread;
        int r;

        se = fuse_session_new(&args, ops, ops_size, NULL);
        if (!se || fuse_session_mount(se, mountpoint) != 0)
                return 1;
        printf("mounted\n");
        fflush(stdout);
        pthread_create(&thread, NULL, commands, NULL);
        config = fuse_loop_cfg_create();
        fuse_loop_cfg_set_max_threads(config, threads);
        r = fuse_session_loop_mt(se, config);
        fuse_loop_cfg_destroy(config);
        fuse_session_unmount(se);
        fuse_session_destroy(se);
        return r == 0 ? 0 : 1;
}
