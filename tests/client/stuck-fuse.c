/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * stuck-fuse - a FUSE file system whose FLUSH never answers one process.
 *
 * usage: stuck-fuse MOUNTPOINT PID
 *
 * Serves one regular file, MOUNTPOINT/file.  close() on a FUSE file waits
 * for the server to answer FLUSH, uninterruptibly; this server holds the
 * FLUSH of every thread of process PID (answering everybody else's) and
 * prints "held TID" for each.  A line "release" on stdin answers what is
 * held and holds nothing more.  It mounts with allow_other so that any
 * user may open the file.  Used to check that subvold never closes a
 * client's fd in its event loop.
 */
#define FUSE_USE_VERSION 34
#include <errno.h>
#include <fuse_lowlevel.h>
#include "one-file-fuse.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static pid_t held_pid;
static bool holding = true;
static fuse_req_t held[64];
static size_t n_held;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fuse_reply_open(req, fi);
}

/* The process a thread belongs to. */
static pid_t tgid_of(pid_t tid) {
        char path[64], line[256];
        pid_t tgid = 0;
        FILE *f;

        snprintf(path, sizeof path, "/proc/%d/status", (int) tid);
        f = fopen(path, "re");
        if (!f)
                return 0;
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "Tgid: %d", &tgid) == 1)
                        break;
        fclose(f);
        return tgid;
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        pid_t tid = fuse_req_ctx(req)->pid;

        pthread_mutex_lock(&lock);
        if (holding && tgid_of(tid) == held_pid && n_held < sizeof held / sizeof held[0]) {
                held[n_held++] = req;
                printf("held %d\n", (int) tid);
                fflush(stdout);
                req = NULL;
        }
        pthread_mutex_unlock(&lock);
        if (req)
                fuse_reply_err(req, 0);
}

static void *read_commands(void *userdata) {
        char line[64];

        while (fgets(line, sizeof line, stdin))
                if (strcmp(line, "release\n") == 0) {
                        pthread_mutex_lock(&lock);
                        holding = false;
                        for (size_t i = 0; i < n_held; i++)
                                fuse_reply_err(held[i], 0);
                        printf("released %zu\n", n_held);
                        fflush(stdout);
                        n_held = 0;
                        pthread_mutex_unlock(&lock);
                }
        return NULL;
}

static const struct fuse_lowlevel_ops ops = {
        .lookup = one_file_lookup, .getattr = one_file_getattr, .open = op_open, .flush = op_flush,
};

int main(int argc, char *argv[]) {
        if (argc != 3) {
                fprintf(stderr, "usage: %s MOUNTPOINT PID\n", argv[0]);
                return 2;
        }
        held_pid = (pid_t) atoi(argv[2]);
        one_file_name = "file";
        one_file_mode = 0644;
        /* Threads enough that held requests never stop the others. */
        return one_file_serve(argv[0], argv[1], true, &ops, sizeof ops, read_commands, 32);
}
