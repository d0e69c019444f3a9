/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The one place where subvold acts with a caller's credentials, so that the
 * kernel, not subvold, decides what the caller may open.
 *
 * as_caller_openat() switches the calling thread's filesystem credentials
 * (fsgid, supplementary groups, fsuid: per thread, with raw system calls;
 * glibc's wrappers would change every thread of the process) to the
 * caller's, opens, and switches back.  With an fsuid other than 0 the
 * kernel drops CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and the
 * other file capabilities from the thread's effective set, so mode bits
 * and POSIX ACLs apply as to the caller.  CAP_SYS_ADMIN stays, so nothing
 * but the open happens while switched.  LSMs (SELinux, AppArmor) still
 * judge subvold's own label. */

#include <stddef.h>
#include <sys/types.h>

typedef struct Caller {
        uid_t uid;
        gid_t gid;
        gid_t *groups;           /* supplementary, all of them */
        size_t n_groups;
} Caller;

void caller_done(Caller *c);

/* Opens @path (relative) beneath @dirfd as @caller: every directory from
 * @dirfd down must let the caller search it and the file must let the
 * caller open it with @flags; symbolic links are not followed and the
 * walk cannot leave @dirfd.  Returns the fd or a negative errno.  If the
 * thread's own credentials cannot be restored, subvold aborts rather than
 * go on with the caller's. */
int as_caller_openat(const Caller *caller, int dirfd, const char *path, int flags);
