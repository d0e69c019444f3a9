/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Previous versions of a file, and deleted files of a directory, in the
 * snapshots of its family, read from the snapshots' trees (mounted or
 * not) and shown only where the caller could have opened them there.
 *
 * A file is found in another member of its family by its inode (number
 * and generation: found after a rename) or else as a regular file at the
 * same path from the subvolume's root (editors that save by writing a new
 * file and renaming it over the old one).  Every open as the caller goes
 * through as-caller.h, beneath the snapshot's root directory, so that the
 * kernel checks search permission on every directory from there down and
 * the file's own mode and ACLs, as the snapshot records them.
 *
 * Everything here does I/O and may take long (a family of thousands of
 * snapshots): it runs in a worker thread, never in the event loop. */

#include <stdbool.h>
#include <stdint.h>

#include "as-caller.h"
#include "fs-btrfs.h"

/* Where and what to look for: the caller's file (or directory) and the
 * other members of its family. */
typedef struct VersionsQuery {
        int file_fd;             /* the caller's file or directory */
        int fs_fd;               /* a directory on the file's filesystem */
        const Mount *mount;      /* a mount of it, for the private mounts */
        MountSource source;
        const uint8_t *fsid;
        uint64_t subvolume;      /* holding the file */
        uint64_t ino;
        const uint64_t *members; /* the family but @subvolume, oldest first */
        size_t n_members;
        const Caller *caller;
} VersionsQuery;

typedef struct FileVersion {
        uint64_t member;         /* the subvolume that holds this version */
        char *path;              /* from its root */
        bool by_inode;           /* matched by inode, else by path */
        BtrfsInode inode;
        bool same_as_current;
} FileVersion;

typedef struct DeletedFile {
        char *name;
        uint8_t type;            /* BTRFS_FT_* */
        uint64_t member;         /* the newest member that has it */
        BtrfsInode inode;
} DeletedFile;

void file_versions_free(FileVersion *v, size_t n);
void deleted_files_free(DeletedFile *d, size_t n);

/* The inode behind the query (the caller's own file), as it is now. */
int versions_current(const VersionsQuery *q, BtrfsInode *ret);

/* The versions of the file in the members the caller may read them in,
 * oldest first; consecutive ones that are the same version (inode number
 * and generation, size, change time) collapsed into the oldest unless
 * @all.  -ENOTDIR/-EISDIR for a file of the wrong kind. */
int versions_list(const VersionsQuery *q, bool all, FileVersion **ret, size_t *ret_n);

/* Opens the version in @member read-only, as the caller, in a private,
 * detached, read-only, nosuid, nodev, noexec mount of that member, whose
 * root is the member's root (".." cannot leave it).  -ENOENT when it has
 * no version there the caller may read. */
int versions_open(const VersionsQuery *q, uint64_t member, int *ret_fd);

/* What the members hold in the query's directory that it no longer has,
 * each once (from the newest member that has it and lets the caller see
 * it), sorted by name. */
int versions_deleted(const VersionsQuery *q, DeletedFile **ret, size_t *ret_n);

/* Opens entry @name of the directory's version in @member, as
 * versions_open() does. */
int versions_open_deleted(const VersionsQuery *q, const char *name, uint64_t member, int *ret_fd);
