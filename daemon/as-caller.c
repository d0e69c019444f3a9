/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <limits.h>
#include <sys/syscall.h>

#include "as-caller.h"
#include "util.h"

void caller_done(Caller *c) {
        free(c->groups);
        *c = (Caller) {};
}

/* setfsuid()/setfsgid() report failure only by not changing: an invalid
 * id (-1) changes nothing and returns the current one. */
static bool set_fsuid(uid_t uid) {
        syscall(SYS_setfsuid, uid);
        return (uid_t) syscall(SYS_setfsuid, (uid_t) -1) == uid;
}

static bool set_fsgid(gid_t gid) {
        syscall(SYS_setfsgid, gid);
        return (gid_t) syscall(SYS_setfsgid, (gid_t) -1) == gid;
}

/* Back to subvold's own credentials (root, no supplementary groups, as
 * systemd and the tests start it), in the reverse order of the switch. */
static void leave(void) {
        if (!set_fsuid(0) || syscall(SYS_setgroups, 0, NULL) < 0 || !set_fsgid(0)) {
                log_error("Cannot switch back to subvold's own credentials; aborting.");
                abort();
        }
}

/* Opens @path beneath @dirfd one component at a time, every one with
 * O_NOFOLLOW: no symbolic link is followed, and "." and ".." are refused,
 * so the walk cannot leave @dirfd.  (openat2()'s RESOLVE_BENEATH would do
 * the same in one call, but systemd's RestrictSUIDSGID= filters openat2()
 * out, with ENOSYS, since it cannot look at its flags.)  Each lookup
 * checks search permission on the directory it starts from. */
static int open_beneath(int dirfd, const char *path, int flags) {
        _cleanup_close_ int cur = -1;
        const char *p = *path ? path : ".";

        for (;;) {
                size_t len = strcspn(p, "/");
                char name[NAME_MAX + 1];
                int fd;

                if (len == 0 || len > NAME_MAX || (p[len] && (len == 1 && p[0] == '.')) ||
                    (len == 2 && p[0] == '.' && p[1] == '.'))
                        return -EINVAL;
                memcpy(name, p, len);
                name[len] = 0;
                if (!p[len]) {  /* the file itself */
                        fd = openat(cur >= 0 ? cur : dirfd, name, flags);
                        return fd < 0 ? -errno : fd;
                }
                fd = openat(cur >= 0 ? cur : dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                closep(&cur);
                cur = fd;
                p += len + 1;
        }
}

int as_caller_openat(const Caller *caller, int dirfd, const char *path, int flags) {
        int r;

        flags |= O_NOFOLLOW | O_CLOEXEC | (flags & O_PATH ? 0 : O_NOCTTY);
        /* fsgid and groups first: once the fsuid is the caller's, this
         * thread may no longer have the right to change them. */
        if (!set_fsgid(caller->gid) || syscall(SYS_setgroups, caller->n_groups, caller->groups) < 0 ||
            !set_fsuid(caller->uid)) {
                r = -EPERM;
                leave();
                return log_error_errno(r, "Cannot switch to the caller's credentials: %m");
        }
        r = open_beneath(dirfd, path, flags);
        leave();
        return r;
}
