/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/btrfs_tree.h>
#include <linux/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "kernel-compat.h"
#include "versions.h"
#include "util.h"

/* Paths inside a subvolume: as long as subvold publishes subvolume paths. */
#define VERSION_PATH_MAX SUBVOLUME_PATH_MAX

void file_versions_free(FileVersion *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i].path);
        free(v);
}

void deleted_files_free(DeletedFile *d, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(d[i].name);
        free(d);
}

/* Where a file is in one member of the family. */
typedef struct Found {
        char *path;
        bool by_inode;
        BtrfsInode inode;
} Found;

static void found_done(Found *f) {
        free(f->path);
        *f = (Found) {};
}

/* The entry at @path (relative, normalized) in subvolume @tree, walking
 * its directories; -ENOENT if a component is missing or leads into
 * another subvolume. */
static void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

static int resolve_path(int fd, uint64_t tree, const char *path, BtrfsDirEntry *ret) {
        BtrfsDirEntry e = { .ino = BTRFS_FIRST_FREE_OBJECTID, .type = BTRFS_FT_DIR };

        for (const char *p = path; *p;) {
                size_t len = strcspn(p, "/");
                int r;

                if (e.type != BTRFS_FT_DIR)
                        return -ENOENT;
                r = btrfs_dir_lookup(fd, tree, e.ino, p, len, &e);
                if (r < 0)
                        return r;
                if (e.subvolume)
                        return -ENOENT;
                p += len + (p[len] == '/');
        }
        *ret = e;
        return 0;
}

static bool same_kind(uint32_t mode, bool dir) {
        return dir ? S_ISDIR(mode) : S_ISREG(mode);
}

/* The current file (@cur at @cur_path) in @member: by inode number and
 * generation, else by path.  Without @with_path, an inode match costs one
 * tree search and leaves ret->path NULL. */
static int find_in_member(int fd, uint64_t member, const BtrfsInode *cur, const char *cur_path, bool with_path,
                          Found *ret) {
        bool dir = S_ISDIR(cur->mode);
        BtrfsDirEntry e;
        Found f = {};
        int r;

        r = btrfs_read_inode(fd, member, cur->ino, &f.inode);
        if (r >= 0 && f.inode.generation == cur->generation && same_kind(f.inode.mode, dir)) {
                r = with_path ? btrfs_inode_path(fd, member, cur->ino, VERSION_PATH_MAX, &f.path) : 0;
                if (r >= 0) {
                        f.by_inode = true;
                        *ret = f;
                        return 0;
                }
        }
        if (r < 0 && r != -ENOENT && r != -ENAMETOOLONG)
                return r;
        r = resolve_path(fd, member, cur_path, &e);
        if (r < 0)
                return r;
        if (e.type != (dir ? BTRFS_FT_DIR : BTRFS_FT_REG_FILE))
                return -ENOENT;
        r = btrfs_read_inode(fd, member, e.ino, &f.inode);
        if (r < 0)
                return r;
        f.path = strdup(cur_path);
        if (!f.path)
                return -ENOMEM;
        *ret = f;
        return 0;
}

/* The root directory of subvolume @member, mounted or not (O_PATH): by
 * file handle (inode 256 of that tree), on the mount @fs_fd is on. */
static int open_member_root(int fs_fd, uint64_t member) {
        union {
                struct file_handle fh;
                uint8_t room[sizeof(struct file_handle) + 20];
        } h = { .fh = { .handle_bytes = 20, .handle_type = 0x4d } };  /* FILEID_BTRFS_WITHOUT_PARENT */
        uint64_t objectid = BTRFS_FIRST_FREE_OBJECTID;
        BtrfsInode root;
        uint32_t generation;
        int r, fd;

        r = btrfs_read_inode(fs_fd, member, BTRFS_FIRST_FREE_OBJECTID, &root);
        if (r < 0)
                return r;
        /* The handle: objectid, root (subvolume) id, 32-bit generation. */
        generation = (uint32_t) root.generation;
        memcpy(h.fh.f_handle, &objectid, 8);
        memcpy(h.fh.f_handle + 8, &member, 8);
        memcpy(h.fh.f_handle + 16, &generation, 4);
        fd = open_by_handle_at(fs_fd, &h.fh, O_PATH | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static uint64_t statx_usec(const struct statx_timestamp_compat *t) {
        return t->tv_sec > 0 ? (uint64_t) t->tv_sec * 1000000 + t->tv_nsec / 1000 : 0;
}

/* The metadata of an open file as the kernel has it now: the tree's own
 * items lag behind by up to a transaction (btrfs delays inode updates). */
static int fd_inode(int fd, uint64_t *ret_subvolume, BtrfsInode *inode) {
        struct statx_compat stx = {};
        unsigned mask = STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE | STATX_NLINK | STATX_MTIME | STATX_CTIME;

        if (sys_statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, mask | STATX_SUBVOL_COMPAT, &stx) < 0)
                return -errno;
        if (!(stx.stx_mask & STATX_SUBVOL_COMPAT))
                return -EMEDIUMTYPE;
        *ret_subvolume = stx.stx_subvol;
        inode->ino = stx.stx_ino;
        inode->mode = stx.stx_mode;
        inode->size = stx.stx_size;
        inode->nlink = stx.stx_nlink;
        inode->mtime_usec = statx_usec(&stx.stx_mtime);
        inode->ctime_usec = statx_usec(&stx.stx_ctime);
        return 0;
}

/* Opens @path in @root as the caller and checks that it is what the tree
 * said (inode @ino of @member): the tree may have changed since.  *@inode
 * gets what the kernel says of it now (its generation stays). */
static int open_checked(const VersionsQuery *q, int root, uint64_t member, const char *path, BtrfsInode *inode,
                        uint8_t type) {
        int flags = type == BTRFS_FT_REG_FILE ? O_RDONLY | O_NONBLOCK :
                    type == BTRFS_FT_DIR ? O_RDONLY | O_DIRECTORY : O_PATH;
        uint64_t ino = inode->ino, subvolume = 0;
        int fd = as_caller_openat(q->caller, root, *path ? path : ".", flags);

        if (fd < 0)
                return fd;
        if (fd_inode(fd, &subvolume, inode) < 0 || subvolume != member || inode->ino != ino) {
                close(fd);
                return -ENOENT;
        }
        /* Reads through the returned fd should block as usual. */
        if (flags & O_NONBLOCK)
                (void) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        return fd;
}

/* Whether the caller may open @path of @member.  Being refused is an
 * answer; anything else is worth a line in the log. */
static bool caller_may_open(const VersionsQuery *q, uint64_t member, const char *path, BtrfsInode *inode,
                            uint8_t type) {
        _cleanup_close_ int root = open_member_root(q->fs_fd, member);
        int fd;

        if (root < 0) {
                log_warning_errno(root, "Cannot open the root of subvolume %" PRIu64 ": %m", member);
                return false;
        }
        fd = open_checked(q, root, member, path, inode, type);
        if (fd < 0 && fd != -EACCES && fd != -ENOENT && fd != -EPERM)
                log_warning_errno(fd, "Cannot open a file of subvolume %" PRIu64 " as the caller: %m", member);
        if (fd < 0)
                return false;
        close(fd);
        return true;
}

/* Opens @path of @member as the caller, in a mount of its own. */
static int open_in_private_mount(const VersionsQuery *q, uint64_t member, const char *path, BtrfsInode *inode,
                                 uint8_t type) {
        _cleanup_close_ int root = -1, tree = -1;
        struct mount_attr attr = {
                .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        };

        _cleanup_close_ int pin = -1;
        int r;

        /* A detached bind of the member's root: nobody else sees it, and
         * it lives as long as an fd inside it.  open_tree() clones only
         * from a mount in our namespace, not from a clone: the mount
         * itself is held for these two calls. */
        r = btrfs_pin_mount(q->mount, q->source, q->fsid, &pin);
        if (r < 0)
                return r;
        root = open_member_root(pin, member);
        if (root < 0)
                return root;
        tree = sys_open_tree(root, "", AT_EMPTY_PATH | OPEN_TREE_CLONE_COMPAT | O_CLOEXEC);
        r = tree < 0 ? -errno : 0;
        closep(&pin);
        pin = -1;
        if (r < 0)
                return r;
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
                return -errno;
        return open_checked(q, tree, member, path, inode, type);
}

int versions_current(const VersionsQuery *q, BtrfsInode *ret) {
        BtrfsInode item;
        uint64_t subvolume;
        int r;

        /* The caller's own fd says what the file is now; its generation,
         * which never changes, comes from its inode item. */
        r = fd_inode(q->file_fd, &subvolume, ret);
        if (r < 0)
                return r;
        if (subvolume != q->subvolume || ret->ino != q->ino)
                return -ESTALE;
        r = btrfs_read_inode(q->fs_fd, q->subvolume, q->ino, &item);
        if (r < 0)
                return r;
        ret->generation = item.generation;
        return 0;
}

/* The current file or directory, and its path. */
static int find_current(const VersionsQuery *q, bool dir, BtrfsInode *ret, char **ret_path) {
        int r = versions_current(q, ret);

        if (r < 0)
                return r;
        if (!same_kind(ret->mode, dir))
                return dir ? -ENOTDIR : -EISDIR;
        return btrfs_inode_path(q->fs_fd, q->subvolume, q->ino, VERSION_PATH_MAX, ret_path);
}

static bool same_version(const BtrfsInode *a, const BtrfsInode *b) {
        return a->ino == b->ino && a->generation == b->generation && a->size == b->size &&
               a->ctime_usec == b->ctime_usec;
}

int versions_list(const VersionsQuery *q, bool all, FileVersion **ret, size_t *ret_n) {
        _cleanup_free_ char *cur_path = NULL;
        FileVersion *v = NULL;
        size_t n = 0, allocated = 0;
        BtrfsInode cur;
        int r;

        r = find_current(q, false, &cur, &cur_path);
        if (r < 0)
                return r;
        BtrfsInode last = {};  /* as the tree has the last version listed */

        for (size_t i = 0; i < q->n_members; i++) {
                Found f = {};

                /* Most members hold a version seen already: one tree search
                 * tells, and only a new version is looked at further. */
                r = find_in_member(q->fs_fd, q->members[i], &cur, cur_path, false, &f);
                if (r >= 0 && !all && n > 0 && same_version(&last, &f.inode))
                        r = -EEXIST;
                if (r >= 0 && !f.path) {
                        found_done(&f);
                        r = find_in_member(q->fs_fd, q->members[i], &cur, cur_path, true, &f);
                }
                if (r == -ENOMEM)
                        goto fail;
                if (r < 0) {
                        found_done(&f);
                        continue;
                }
                BtrfsInode tree = f.inode;
                if (!caller_may_open(q, q->members[i], f.path, &f.inode, BTRFS_FT_REG_FILE)) {
                        found_done(&f);
                        continue;
                }
                last = tree;
                if (grow_array(&v, &allocated, n + 1, sizeof(FileVersion)) < 0) {
                        found_done(&f);
                        r = -ENOMEM;
                        goto fail;
                }
                v[n++] = (FileVersion) { .member = q->members[i], .path = f.path, .by_inode = f.by_inode,
                                         .inode = f.inode, .same_as_current = same_version(&f.inode, &cur) };
        }
        *ret = v;
        *ret_n = n;
        return 0;
fail:
        file_versions_free(v, n);
        return r;
}

int versions_open(const VersionsQuery *q, uint64_t member, int *ret_fd) {
        _cleanup_free_ char *cur_path = NULL;
        Found f = {};
        BtrfsInode cur;
        int r, fd;

        r = find_current(q, false, &cur, &cur_path);
        if (r < 0)
                return r;
        r = find_in_member(q->fs_fd, member, &cur, cur_path, true, &f);
        if (r < 0)
                return r;
        fd = open_in_private_mount(q, member, f.path, &f.inode, BTRFS_FT_REG_FILE);
        found_done(&f);
        if (fd < 0)
                return fd == -EACCES || fd == -EPERM ? -ENOENT : fd;
        *ret_fd = fd;
        return 0;
}

/* ---- deleted files ---- */

/* Names, sorted, to look up. */
typedef struct NameSet {
        char **names;
        size_t n, allocated;
} NameSet;

static void name_set_done(NameSet *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->names[i]);
        free(s->names);
        *s = (NameSet) {};
}

static int cmp_name(const void *a, const void *b) {
        return strcmp(*(char * const *) a, *(char * const *) b);
}

static bool name_set_has(const NameSet *s, const char *name) {
        return s->n > 0 && bsearch(&name, s->names, s->n, sizeof(char *), cmp_name);
}

/* Adds (unsorted); name_set_sort() before looking up. */
static int name_set_add(NameSet *s, const char *name, size_t len) {
        char *copy;

        if (grow_array(&s->names, &s->allocated, s->n + 1, sizeof(char *)) < 0 || !(copy = memdup_suffix0(name, len)))
                return -ENOMEM;
        s->names[s->n++] = copy;
        return 0;
}

static void name_set_sort(NameSet *s) {
        if (s->n > 1)
                qsort(s->names, s->n, sizeof(char *), cmp_name);
}

/* The names in the caller's directory, as the kernel lists them now (its
 * index items in the tree lag behind, like inode items). */
static int current_names(const VersionsQuery *q, NameSet *ret) {
        _cleanup_close_ int fd = openat(q->file_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_(closedirp) DIR *d = NULL;
        struct dirent *de;

        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d)
                return -errno;
        fd = -1;
        while ((errno = 0, de = readdir(d)))
                if (!streq(de->d_name, ".") && !streq(de->d_name, "..") &&
                    name_set_add(ret, de->d_name, strlen(de->d_name)) < 0)
                        return -ENOMEM;
        if (errno != 0)
                return -errno;
        name_set_sort(ret);
        return 0;
}

/* One member's directory, while its entries are looked at. */
typedef struct DeletedScan {
        const VersionsQuery *q;
        uint64_t member;
        const char *dir_path;
        const NameSet *current, *taken;
        DeletedFile *found;
        size_t n_found, allocated;
        int error;
} DeletedScan;

static int consider_entry(const char *name, size_t len, const BtrfsDirEntry *e, void *userdata) {
        DeletedScan *s = userdata;
        _cleanup_free_ char *copy = memdup_suffix0(name, len), *path = NULL;
        BtrfsInode inode;

        if (!copy)
                return -ENOMEM;
        /* A nested subvolume's versions are its own family's. */
        if (e->subvolume || name_set_has(s->current, copy) || name_set_has(s->taken, copy))
                return 0;
        if (asprintf(&path, "%s%s%s", s->dir_path, *s->dir_path ? "/" : "", copy) < 0) {
                path = NULL;
                return -ENOMEM;
        }
        if (btrfs_read_inode(s->q->fs_fd, s->member, e->ino, &inode) < 0 ||
            !caller_may_open(s->q, s->member, path, &inode, e->type))
                return 0;
        if (grow_array(&s->found, &s->allocated, s->n_found + 1, sizeof(DeletedFile)) < 0)
                return -ENOMEM;
        s->found[s->n_found++] = (DeletedFile) { .name = TAKE_PTR(copy), .type = e->type, .member = s->member,
                                                 .inode = inode };
        return 0;
}

static int cmp_deleted(const void *a, const void *b) {
        return strcmp(((const DeletedFile *) a)->name, ((const DeletedFile *) b)->name);
}

int versions_deleted(const VersionsQuery *q, DeletedFile **ret, size_t *ret_n) {
        _cleanup_free_ char *cur_path = NULL;
        _cleanup_(name_set_done) NameSet current = {}, taken = {};
        DeletedScan s = { .q = q, .current = &current, .taken = &taken };
        BtrfsInode cur;
        int r;

        r = find_current(q, true, &cur, &cur_path);
        if (r < 0)
                return r;
        r = current_names(q, &current);
        if (r < 0)
                return r;
        /* Newest first: each name from the newest member that has it. */
        for (size_t i = q->n_members; i-- > 0;) {
                Found f = {};
                size_t before = s.n_found;

                r = find_in_member(q->fs_fd, q->members[i], &cur, cur_path, true, &f);
                if (r == -ENOMEM)
                        goto fail;
                if (r < 0)
                        continue;
                s.member = q->members[i];
                s.dir_path = f.path;
                r = btrfs_dir_list(q->fs_fd, q->members[i], f.inode.ino, consider_entry, &s);
                found_done(&f);
                if (r == -ENOMEM)
                        goto fail;
                for (size_t j = before; j < s.n_found; j++)
                        if (name_set_add(&taken, s.found[j].name, strlen(s.found[j].name)) < 0) {
                                r = -ENOMEM;
                                goto fail;
                        }
                name_set_sort(&taken);
        }
        if (s.n_found > 1)
                qsort(s.found, s.n_found, sizeof(DeletedFile), cmp_deleted);
        *ret = s.found;
        *ret_n = s.n_found;
        return 0;
fail:
        deleted_files_free(s.found, s.n_found);
        return r;
}

int versions_open_deleted(const VersionsQuery *q, const char *name, uint64_t member, int *ret_fd) {
        _cleanup_free_ char *cur_path = NULL, *path = NULL;
        Found f = {};
        BtrfsDirEntry e;
        BtrfsInode cur;
        int r, fd;

        r = find_current(q, true, &cur, &cur_path);
        if (r < 0)
                return r;
        r = find_in_member(q->fs_fd, member, &cur, cur_path, true, &f);
        if (r < 0)
                return r;
        r = btrfs_dir_lookup(q->fs_fd, member, f.inode.ino, name, strlen(name), &e);
        if (r >= 0 && e.subvolume)
                r = -ENOENT;
        if (r >= 0 && asprintf(&path, "%s%s%s", f.path, *f.path ? "/" : "", name) < 0) {
                path = NULL;
                r = -ENOMEM;
        }
        found_done(&f);
        if (r < 0)
                return r;
        fd = open_in_private_mount(q, member, path, &(BtrfsInode) { .ino = e.ino }, e.type);
        if (fd < 0)
                return fd == -EACCES || fd == -EPERM ? -ENOENT : fd;
        *ret_fd = fd;
        return 0;
}
