/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "discover.h"
#include "fs-btrfs.h"
#include "util.h"

/* @prev's subvolume @id, for ids asked in ascending order (as the arrays
 * are sorted): *cursor only moves forward, so that a pass over all of
 * them is one walk of each array rather than a binary search each. */
static const Subvolume *find_next(const Filesystem *prev, uint64_t id, size_t *cursor) {
        while (*cursor < prev->n_subvolumes && prev->subvolumes[*cursor].id < id)
                (*cursor)++;
        return *cursor < prev->n_subvolumes && prev->subvolumes[*cursor].id == id ? &prev->subvolumes[*cursor] : NULL;
}

/* Whether @prev's usage of @fs can be served without asking the kernel:
 * the filesystem has not moved since the usage was read, the figures are
 * from a committed transaction, and every subvolume is the same. */
static bool usage_unchanged(const Filesystem *fs, const Filesystem *prev) {
        if (prev->usage_read_usec == 0 || prev->generation != fs->generation ||
            prev->usage_generation != fs->generation)
                return false;
        for (size_t i = 0, cursor = 0; i < fs->n_subvolumes; i++) {
                const Subvolume *p = find_next(prev, fs->subvolumes[i].id, &cursor);
                if (!p || p->change_generation != fs->subvolumes[i].change_generation)
                        return false;
        }
        return true;
}

static void usage_copy(Filesystem *fs, const Filesystem *prev) {
        fs->quota_mode = prev->quota_mode;
        fs->quota_consistent = prev->quota_consistent;
        fs->usage_read_usec = prev->usage_read_usec;
        fs->usage_generation = prev->usage_generation;
        for (size_t i = 0, cursor = 0; i < fs->n_subvolumes; i++) {
                const Subvolume *p = find_next(prev, fs->subvolumes[i].id, &cursor);
                fs->subvolumes[i].usage = p ? p->usage : USAGE_NONE;
        }
}

/* Fills in the usage of @fs, from @prev or from the kernel.  Returns 1 when
 * the figures are knowingly stale and should be read again later. */
static int discover_usage(int fd, Filesystem *fs, const Filesystem *prev, uint64_t now_usec) {
        int r;

        if (prev && usage_unchanged(fs, prev)) {
                usage_copy(fs, prev);
                return 0;
        }
        if (prev && prev->usage_read_usec > 0 && now_usec - prev->usage_read_usec < USAGE_READ_INTERVAL_USEC) {
                usage_copy(fs, prev);
                return 1;
        }
        r = btrfs_read_quotas(fd, fs, now_usec);
        if (r < 0)
                return r;
        /* Quota figures change at commit: until the running transaction is
         * committed they may still move. */
        return fs->usage_generation != fs->generation;
}

static int discover_filesystem(int fd, const uint8_t uuid[16], Filesystem **ret) {
        _cleanup_(filesystem_freep) Filesystem *fs = filesystem_new(uuid);
        int r;

        if (!fs)
                return -ENOMEM;
        /* Subvolumes created or deleted meanwhile are simply seen or not
         * (the next refresh sees them): that fails nothing here. */
        r = btrfs_read_filesystem(fd, fs);
        if (r >= 0)
                r = filesystem_index(fs);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(fs);
        return 0;
}

/* Whether the mount with @id was left out of @previous although it was a
 * reachable btrfs then too: it failed before, and said so. */
static bool failed_before(const Model *previous, uint64_t id) {
        if (!previous)
                return false;
        for (size_t j = 0; j < previous->mounts.n_mounts; j++) {
                const Mount *p = &previous->mounts.mounts[j];

                if (p->id == id)
                        return p->is_btrfs && !previous->mount_filesystem[j] &&
                                mount_table_is_reachable(&previous->mounts, p);
        }
        return false;
}

/* What discover_mount() says beside 0: read again later, for usage or
 * for the whole filesystem. */
enum { DISCOVER_PENDING = 1, DISCOVER_FAILED = 2 };

/* A mounted btrfs that cannot be read now (an I/O error, the kernel out of
 * memory, the mount going away) is left out and tried again with the next
 * refresh, a second later: nothing else would bring it back, as no change
 * of it need come.  Logged once while it keeps failing.  ESTALE is no
 * failure: the mount point is another mount than the table read a moment
 * ago says, a mount change whose own refresh follows (each new mount
 * would be warned about once otherwise). */
#define skip_mount(previous, mount, error, ...)                                                 \
        (log_errno_internal((error) == -ESTALE || failed_before(previous, (mount)->id) ?           \
                            LOG_LEVEL_DEBUG : LOG_LEVEL_WARNING, (error), __VA_ARGS__), DISCOVER_FAILED)

/* Adds the filesystem behind mount number @i to @model, or attaches the
 * mount to it when another mount already brought it in.  Returns
 * DISCOVER_PENDING when the filesystem's usage is pending (see
 * discover_usage()), DISCOVER_FAILED when it could not be read. */
static int discover_mount(Model *model, size_t i, const Model *previous, uint64_t now_usec) {
        const Mount *mount = &model->mounts.mounts[i];
        _cleanup_close_ int fd = -1;
        Filesystem *fs;
        uint8_t uuid[16];
        char buf[UUID_STRING_MAX];
        int r, pending;

        r = btrfs_open_mount(mount, model->mounts.source, &fd);
        if (r < 0)
                return skip_mount(previous, mount, r, "Skipping btrfs mount %s: cannot open it: %m", mount->point);
        r = btrfs_read_fsid(fd, uuid);
        if (r < 0)
                return skip_mount(previous, mount, r, "Skipping btrfs mount %s: BTRFS_IOC_FS_INFO failed: %m",
                                  mount->point);

        fs = model_find_filesystem(model, uuid);
        if (fs) {
                model_attach_mount(model, i, fs);
                return 0;
        }
        /* An ENOMEM here is the kernel's as often as ours: skipped too. */
        r = discover_filesystem(fd, uuid, &fs);
        if (r < 0)
                return skip_mount(previous, mount, r, "Skipping btrfs filesystem %s mounted on %s: %m",
                                  uuid_format(uuid, buf), mount->point);
        pending = discover_usage(fd, fs, previous ? model_find_filesystem(previous, uuid) : NULL, now_usec);
        if (pending < 0) {
                /* Published without usage; the next refresh tries again. */
                log_warning_errno(pending, "Failed to read the quotas of btrfs filesystem %s: %m",
                                  uuid_format(uuid, buf));
                pending = 0;
        }
        r = model_add_filesystem(model, fs);
        if (r < 0)
                return r;
        model_attach_mount(model, i, fs);
        return pending ? DISCOVER_PENDING : 0;
}

int discover_model(MountSource source, const Model *previous, uint64_t now_usec, Model **ret, bool *ret_pending,
                   bool *ret_failed) {
        _cleanup_(model_freep) Model *model = model_new();
        bool pending = false, failed = false;
        MountTable mounts;
        int r;

        if (!model)
                return -ENOMEM;
        r = mount_table_read(source, &mounts);
        if (r < 0)
                return log_error_errno(r, "Failed to read the mount table: %m");
        r = model_set_mounts(model, &mounts);
        if (r < 0) {
                mount_table_done(&mounts);
                return r;
        }
        for (size_t i = 0; i < model->mounts.n_mounts; i++) {
                const Mount *mount = &model->mounts.mounts[i];

                if (!mount->is_btrfs || !mount_table_is_reachable(&model->mounts, mount))
                        continue;
                r = discover_mount(model, i, previous, now_usec);
                if (r == -ENOMEM)
                        return r;
                pending = pending || r > 0;
                failed = failed || r == DISCOVER_FAILED;
        }
        r = model_finish(model);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(model);
        *ret_pending = pending;
        *ret_failed = failed;
        return 0;
}
