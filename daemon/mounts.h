/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The mount table of subvold's mount namespace, from listmount()/statmount()
 * or, where those are missing or filtered, from /proc/self/mountinfo. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum MountSource {
        MOUNT_SOURCE_AUTO,       /* listmount(), falling back to mountinfo */
        MOUNT_SOURCE_LISTMOUNT,
        MOUNT_SOURCE_MOUNTINFO,
} MountSource;

typedef struct Mount {
        /* Unique 64-bit ids from listmount(), or the old 32-bit ids from
         * mountinfo: only ever compared with ids from the same read. */
        uint64_t id, parent_id;
        unsigned dev_major, dev_minor;  /* the superblock's device */
        bool is_btrfs;
        bool reachable;  /* see mount_table_is_reachable() */
        uint64_t master;  /* the peer group this mount is a slave of, or 0 */
        /* A bind of the very directory its parent mount shows at this mount
         * point (below the parent's), a slave of the same peer group as the
         * parent: what systemd makes in a unit's private namespace, a copy
         * of the host's, to change flags (CacheDirectory=, ReadWritePaths=,
         * ...).  Not reported as a mount point (see model_finish()). */
        bool rebind;
        char *fstype;
        char *source;
        char *root;   /* the mounted directory, as a path inside the filesystem */
        char *point;  /* where it is mounted */
} Mount;

typedef struct MountTable {
        Mount *mounts;
        size_t n_mounts, allocated;
        MountSource source;  /* where the table came from (never AUTO) */
        size_t root_index;   /* the namespace's root mount */
} MountTable;

/* Reads the mount table.  With MOUNT_SOURCE_AUTO, listmount() is tried
 * first and mountinfo is used when it fails with ENOSYS or EPERM (old
 * kernel, seccomp filter).  Returns 0 or a negative errno; on failure *ret
 * is untouched. */
int mount_table_read(MountSource source, MountTable *ret);

/* Makes a Mount of one statmount() answer, @size bytes at @sm: -EBADMSG
 * when it is shorter than the struct or a string does not end inside it,
 * or -ENOMEM.  Exposed for the fuzz targets. */
struct statmount_compat;
int mount_from_statmount(const struct statmount_compat *sm, size_t size, Mount *ret);

/* Parses a whole mountinfo file; exposed for tests. */
int mount_table_parse_mountinfo(FILE *f, MountTable *ret);

/* Parses one line of /proc/PID/mountinfo (with or without trailing newline).
 * Returns 0, -EINVAL for a malformed line, or -ENOMEM. */
int mountinfo_parse_line(const char *line, Mount *ret);

/* Undoes mountinfo's octal escapes (\040 etc.) in place. */
void mountinfo_unescape(char *s);

void mount_done(Mount *m);
void mount_table_done(MountTable *t);

/* The mount that a lookup of the absolute, normalized @path goes through
 * last, following the mount tree from the root (so over-mounts hide what
 * lies below them).  *ret_rest receives the part of @path below that
 * mount's mount point ("" or "/..."). */
const Mount *mount_table_resolve(const MountTable *t, const char *path, const char **ret_rest);

/* Whether mount_table_resolve() answers the same in both, and the same
 * mounts are reachable. */
bool mount_table_equal(const MountTable *a, const MountTable *b);

/* Whether @m can be reached through its own mount point (it is neither
 * stacked under another mount nor hidden by an over-mount above it).
 * Worked out once, when the table is read. */
bool mount_table_is_reachable(const MountTable *t, const Mount *m);

/* Whether the absolute normalized path @prefix is @path or a directory above it.
 * Returns the rest of @path ("" or "/...") or NULL. */
const char *path_startswith(const char *path, const char *prefix);
