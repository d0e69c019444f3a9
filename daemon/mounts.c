/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/sysmacros.h>

#include "kernel-compat.h"
#include "mounts.h"
#include "util.h"

#ifndef BTRFS_SUPER_MAGIC
#define BTRFS_SUPER_MAGIC 0x9123683e
#endif

void mount_done(Mount *m) {
        free(m->fstype);
        free(m->source);
        free(m->root);
        free(m->point);
        *m = (Mount) {};
}

void mount_table_done(MountTable *t) {
        for (size_t i = 0; i < t->n_mounts; i++)
                mount_done(&t->mounts[i]);
        free(t->mounts);
        *t = (MountTable) {};
}

static int mount_table_add(MountTable *t, Mount *m) {
        if (grow_array(&t->mounts, &t->allocated, t->n_mounts + 1, sizeof(Mount)) < 0) {
                mount_done(m);
                return -ENOMEM;
        }
        t->mounts[t->n_mounts++] = *m;
        *m = (Mount) {};
        return 0;
}

/* @m's parent mount, or NULL when it is not in the table (or is @m). */
static const Mount *mount_table_parent(const MountTable *t, const Mount *m) {
        for (size_t i = 0; i < t->n_mounts; i++)
                if (&t->mounts[i] != m && t->mounts[i].id == m->parent_id)
                        return &t->mounts[i];
        return NULL;
}

/* The root is the mount on "/" whose parent is not in the table (or is
 * itself); of several, the last one (stacked mounts on "/" are children). */
static int mount_table_find_root(MountTable *t) {
        for (size_t i = 0; i < t->n_mounts; i++)
                if (streq(t->mounts[i].point, "/") && !mount_table_parent(t, &t->mounts[i])) {
                        t->root_index = i;
                        return 0;
                }
        return -ENOENT;
}

/* See Mount.rebind.  It leads nowhere new, and inside the private namespace
 * nothing tells systemd's from the same bind made on the host: both are
 * slaves of the host's peer group, as their parent is, and the host's table
 * (/proc/1/mountinfo) is hidden by ProtectProc=.  So under the unit a rebind
 * the host has is left out too; in the host's own namespace (no master) it
 * counts. */
static bool mount_is_rebind(const Mount *m, const Mount *parent) {
        const char *below, *root_below;

        if (!parent || m->master == 0 || m->master != parent->master ||
            parent->dev_major != m->dev_major || parent->dev_minor != m->dev_minor)
                return false;
        below = path_startswith(m->point, parent->point);
        root_below = path_startswith(m->root, parent->root);
        /* Stacked on the parent's own mount point, it is a mount point the
         * host has anyway. */
        return below && *below && root_below && streq(below, root_below);
}

/* Hands a complete table over to *ret once its root is found; frees it
 * otherwise. */
static int mount_table_finish(MountTable *t, MountTable *ret) {
        int r = mount_table_find_root(t);

        if (r < 0) {
                mount_table_done(t);
                return r;
        }
        /* Once here rather than on every use: the generation timer asks
         * twice a second, and each answer walks the mount tree. */
        for (size_t i = 0; i < t->n_mounts; i++) {
                Mount *m = &t->mounts[i];

                m->reachable = mount_table_resolve(t, m->point, NULL) == m;
                m->rebind = mount_is_rebind(m, mount_table_parent(t, m));
        }
        *ret = *t;
        return 0;
}

/* ---- listmount()/statmount() ---- */

enum { STATMOUNT_SIZE_MAX = 1 << 20 };

static int statmount_one(uint64_t id, struct statmount_compat **buf, size_t *size) {
        struct mnt_id_req_compat req = {
                .size = MNT_ID_REQ_SIZE_VER0,
                .mnt_id = id,
                .param = STATMOUNT_SB_BASIC_COMPAT | STATMOUNT_MNT_BASIC_COMPAT | STATMOUNT_MNT_ROOT_COMPAT |
                         STATMOUNT_MNT_POINT_COMPAT | STATMOUNT_FS_TYPE_COMPAT | STATMOUNT_SB_SOURCE_COMPAT,
        };

        for (;;) {
                if (sys_statmount(&req, *buf, *size, 0) >= 0)
                        return 0;
                if (errno != EOVERFLOW)
                        return -errno;
                /* Strings did not fit: grow and ask again.  Four paths of
                 * PATH_MAX fit in 64 KiB; a kernel that wants more forever
                 * must not have us double until malloc() fails. */
                if (*size >= STATMOUNT_SIZE_MAX)
                        return -EOVERFLOW;
                free(*buf);
                *size *= 2;
                *buf = malloc(*size);
                if (!*buf)
                        return -ENOMEM;
        }
}

/* The string at @offset of @sm's strings, or "" when its @bit is clear
 * (the kernel clears it for an empty string); NULL with errno EBADMSG
 * when it does not end inside the @size bytes of @sm. */
static char *statmount_string(const struct statmount_compat *sm, size_t size, uint64_t bit, uint32_t offset) {
        size_t room = size - sizeof(*sm);

        if (!(sm->mask & bit))
                return strdup("");
        if (offset >= room || !memchr(sm->str + offset, 0, room - offset)) {
                errno = EBADMSG;
                return NULL;
        }
        return strdup(sm->str + offset);
}

int mount_from_statmount(const struct statmount_compat *sm, size_t size, Mount *ret) {
        Mount m = {};

        if (size < sizeof(*sm))
                return -EBADMSG;
        m.id = sm->mnt_id;
        m.parent_id = sm->mnt_parent_id;
        m.dev_major = sm->sb_dev_major;
        m.dev_minor = sm->sb_dev_minor;
        m.master = sm->mnt_master;
        m.is_btrfs = sm->sb_magic == BTRFS_SUPER_MAGIC;
        m.fstype = statmount_string(sm, size, STATMOUNT_FS_TYPE_COMPAT, sm->fs_type);
        m.source = m.fstype ? statmount_string(sm, size, STATMOUNT_SB_SOURCE_COMPAT, sm->sb_source) : NULL;
        m.root = m.source ? statmount_string(sm, size, STATMOUNT_MNT_ROOT_COMPAT, sm->mnt_root) : NULL;
        m.point = m.root ? statmount_string(sm, size, STATMOUNT_MNT_POINT_COMPAT, sm->mnt_point) : NULL;
        if (!m.point) {
                int r = errno == EBADMSG ? -EBADMSG : -ENOMEM;

                mount_done(&m);
                return r;
        }
        *ret = m;
        return 0;
}

static int mount_table_read_listmount(MountTable *ret) {
        _cleanup_free_ uint64_t *ids = NULL;
        _cleanup_free_ struct statmount_compat *sm = NULL;
        MountTable t = { .source = MOUNT_SOURCE_LISTMOUNT };
        size_t n_ids = 0, allocated = 0, sm_size = 4096;
        int r;

        /* Page through all mount ids; param is an exclusive cursor. */
        for (uint64_t last = 0;;) {
                struct mnt_id_req_compat req = { .size = MNT_ID_REQ_SIZE_VER0, .mnt_id = LSMT_ROOT_COMPAT, .param = last };
                int k;

                r = grow_array(&ids, &allocated, n_ids + 256, sizeof(uint64_t));
                if (r < 0)
                        return r;
                k = sys_listmount(&req, ids + n_ids, 256, 0);
                if (k < 0)
                        return -errno;
                n_ids += k;
                if (k < 256)
                        break;
                last = ids[n_ids - 1];
        }

        sm = malloc(sm_size);
        if (!sm)
                return -ENOMEM;
        for (size_t i = 0; i < n_ids; i++) {
                Mount m = {};

                r = statmount_one(ids[i], &sm, &sm_size);
                if (r == -ENOENT)
                        continue;  /* unmounted since listmount() */
                if (r < 0)
                        goto fail;
                r = mount_from_statmount(sm, sm_size, &m);
                if (r < 0)
                        goto fail;
                r = mount_table_add(&t, &m);
                if (r < 0)
                        goto fail;
        }
        return mount_table_finish(&t, ret);
fail:
        mount_table_done(&t);
        return r;
}

/* ---- /proc/self/mountinfo ---- */

void mountinfo_unescape(char *s) {
        char *out = s;

        for (; *s; s++) {
                if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
                    s[3] >= '0' && s[3] <= '7') {
                        *out++ = (char) ((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
                        s += 3;
                } else
                        *out++ = *s;
        }
        *out = 0;
}

/* Returns the next space-separated field, NUL-terminating it in place. */
static char *next_field(char **p) {
        char *s = *p, *start;

        while (*s == ' ')
                s++;
        if (!*s)
                return NULL;
        start = s;
        while (*s && *s != ' ')
                s++;
        if (*s)
                *s++ = 0;
        *p = s;
        return start;
}

int mountinfo_parse_line(const char *line, Mount *ret) {
        _cleanup_free_ char *copy = strdup(line);
        char *p = copy, *f[6], *fstype, *source, *sep;
        uint64_t id, parent, master = 0;
        unsigned major, minor;
        Mount m = {};

        if (!copy)
                return -ENOMEM;
        copy[strcspn(copy, "\n")] = 0;
        /* id parent major:minor root point options [optional...] - fstype source superopts */
        for (size_t i = 0; i < ELEMENTSOF(f); i++)
                if (!(f[i] = next_field(&p)))
                        return -EINVAL;
        /* the optional fields up to "-": only "master:N" is of use here */
        while ((sep = next_field(&p)) && !streq(sep, "-"))
                if (strncmp(sep, "master:", 7) == 0 && parse_u64(sep + 7, &master) < 0)
                        return -EINVAL;
        fstype = next_field(&p);
        source = next_field(&p);
        if (!sep || !fstype || !source)
                return -EINVAL;

        if (parse_u64(f[0], &id) < 0 || parse_u64(f[1], &parent) < 0)
                return -EINVAL;
        if (sscanf(f[2], "%u:%u", &major, &minor) != 2)
                return -EINVAL;

        for (size_t i = 3; i <= 4; i++)
                mountinfo_unescape(f[i]);
        mountinfo_unescape(fstype);
        mountinfo_unescape(source);
        m = (Mount) {
                .id = id,
                .parent_id = parent,
                .dev_major = major,
                .dev_minor = minor,
                .master = master,
                .is_btrfs = streq(fstype, "btrfs"),
                .fstype = strdup(fstype),
                .source = strdup(source),
                .root = strdup(f[3]),
                .point = strdup(f[4]),
        };
        if (!m.fstype || !m.source || !m.root || !m.point) {
                mount_done(&m);
                return -ENOMEM;
        }
        *ret = m;
        return 0;
}

int mount_table_parse_mountinfo(FILE *f, MountTable *ret) {
        _cleanup_free_ char *line = NULL;
        MountTable t = { .source = MOUNT_SOURCE_MOUNTINFO };
        size_t size = 0;
        int r;

        while (getline(&line, &size, f) > 0) {
                Mount m;

                r = mountinfo_parse_line(line, &m);
                if (r == -EINVAL) {
                        log_warning("Ignoring malformed mountinfo line: %s", line);
                        continue;
                }
                if (r < 0)
                        goto fail;
                r = mount_table_add(&t, &m);
                if (r < 0)
                        goto fail;
        }
        return mount_table_finish(&t, ret);
fail:
        mount_table_done(&t);
        return r;
}

static int mount_table_read_mountinfo(MountTable *ret) {
        _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");

        if (!f)
                return -errno;
        return mount_table_parse_mountinfo(f, ret);
}

int mount_table_read(MountSource source, MountTable *ret) {
        int r;

        if (source == MOUNT_SOURCE_MOUNTINFO)
                return mount_table_read_mountinfo(ret);
        r = mount_table_read_listmount(ret);
        if (source == MOUNT_SOURCE_AUTO && (r == -ENOSYS || r == -EPERM)) {
                log_debug_errno(r, "listmount() unavailable (%m), reading /proc/self/mountinfo.");
                return mount_table_read_mountinfo(ret);
        }
        return r;
}

/* ---- path resolution ---- */

const char *path_startswith(const char *path, const char *prefix) {
        size_t n;

        if (streq(prefix, "/"))
                return streq(path, "/") ? "" : path;
        n = strlen(prefix);
        if (strncmp(path, prefix, n) != 0)
                return NULL;
        if (path[n] != 0 && path[n] != '/')
                return NULL;
        return path + n;
}

const Mount *mount_table_resolve(const MountTable *t, const char *path, const char **ret_rest) {
        const Mount *cur;

        if (t->n_mounts == 0)
                return NULL;
        cur = &t->mounts[t->root_index];
        /* Walk down the mount tree: at each step, the child mount with the
         * longest mount point above @path.  Mounts stacked on one mount
         * point are each other's children, so the walk ends on the top one.
         * At most one step per mount: mountinfo is read in pieces, and an id
         * freed and given again meanwhile can show twice and close a loop. */
        for (size_t steps = 0; steps < t->n_mounts; steps++) {
                const Mount *best = NULL;
                size_t best_len = 0;

                for (size_t i = 0; i < t->n_mounts; i++) {
                        const Mount *c = &t->mounts[i];
                        size_t len;

                        if (c == cur || c->parent_id != cur->id || !path_startswith(path, c->point))
                                continue;
                        len = strlen(c->point);
                        if (!best || len >= best_len) {
                                best = c;
                                best_len = len;
                        }
                }
                if (!best)
                        break;
                cur = best;
        }
        if (ret_rest)
                *ret_rest = path_startswith(path, cur->point);
        return cur;
}

bool mount_table_equal(const MountTable *a, const MountTable *b) {
        if (a->n_mounts != b->n_mounts || a->root_index != b->root_index)
                return false;
        for (size_t i = 0; i < a->n_mounts; i++) {
                const Mount *x = &a->mounts[i], *y = &b->mounts[i];

                if (x->id != y->id || x->parent_id != y->parent_id || x->reachable != y->reachable ||
                    !streq(x->point, y->point) || !streq(x->root, y->root))
                        return false;
        }
        return true;
}

bool mount_table_is_reachable(const MountTable *t, const Mount *m) {
        return m->reachable;
}
