/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <linux/openat2.h>
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

int as_caller_openat(const Caller *caller, int dirfd, const char *path, int flags) {
        struct open_how how = {
                /* openat2() refuses O_NOCTTY with O_PATH. */
                .flags = (uint64_t) flags | O_NOFOLLOW | O_CLOEXEC | (flags & O_PATH ? 0 : O_NOCTTY),
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        int fd, r;

        /* fsgid and groups first: once the fsuid is the caller's, this
         * thread may no longer have the right to change them. */
        if (!set_fsgid(caller->gid) || syscall(SYS_setgroups, caller->n_groups, caller->groups) < 0 ||
            !set_fsuid(caller->uid)) {
                r = -EPERM;
                leave();
                return log_error_errno(r, "Cannot switch to the caller's credentials: %m");
        }
        fd = (int) syscall(SYS_openat2, dirfd, *path ? path : ".", &how, sizeof how);
        r = fd < 0 ? -errno : fd;
        leave();
        return r;
}
