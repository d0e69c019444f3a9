/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <sys/fanotify.h>

#include "fs-btrfs.h"
#include "kernel-compat.h"
#include "util.h"
#include "watch.h"

/* What the generation timer knows of one published filesystem. */
typedef struct Probe {
        uint8_t uuid[16];
        int sysfs_fd;                   /* its sysfs generation, -1: not available */
        /* The model's generation and root fingerprint, when they were found
         * unchanged after that transaction had closed: until the generation
         * moves, nothing needs a mount. */
        bool quiet;
        uint64_t quiet_generation, quiet_fingerprint;
} Probe;

struct Watch {
        sd_event *event;
        Model **model;
        watch_callback_t on_change;
        void *userdata;
        int fanotify_fd, mountinfo_fd;
        sd_event_source *fanotify_source, *mountinfo_source, *generation_timer;
        Probe *probes;                  /* one per filesystem of the model, in its order (by UUID) */
        size_t n_probes;
};

static int on_fanotify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Watch *w = userdata;
        uint8_t buf[4096];

        /* Which mounts came or went does not matter: the refresh reads the
         * whole mount table (a few µs).  Just drain the queue. */
        while (read(fd, buf, sizeof buf) > 0)
                ;
        w->on_change(w->userdata, true);
        return 0;
}

static int on_mountinfo(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Watch *w = userdata;

        /* The poll that woke us consumed the event: nothing to read. */
        w->on_change(w->userdata, true);
        return 0;
}

static Probe *probe_find(Probe *probes, size_t n, const uint8_t uuid[16]) {
        size_t lo = 0, hi = n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = memcmp(probes[mid].uuid, uuid, 16);

                if (c == 0)
                        return &probes[mid];
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

/* Whether @fs changed since the model was read: its generation moved (a new
 * transaction: something was written), or within the running transaction
 * the root tree's subvolume items changed (created, deleted, renamed,
 * flipped read-only).  The first needs only sysfs; the second a private
 * clone of @mount, a tree search and a close that unmounts the clone (some
 * 25 µs), and only until that transaction has closed. */
static bool filesystem_moved(const MountTable *t, const Mount *mount, const Filesystem *fs, Probe *p) {
        _cleanup_close_ int fd = -1;
        uint64_t generation, fingerprint;
        char buf[UUID_STRING_MAX];
        bool closed;

        if (p && p->sysfs_fd >= 0) {
                if (btrfs_sysfs_read_generation(p->sysfs_fd, &generation) < 0)
                        closep(&p->sysfs_fd);  /* gone with the last mount, most likely: ask the mount */
                else if (generation != fs->generation)
                        return true;
                else if (p->quiet && p->quiet_generation == fs->generation &&
                         p->quiet_fingerprint == fs->root_fingerprint)
                        return false;
        }
        if (btrfs_open_mount(mount, t->source, &fd) < 0)
                return true;  /* it changed under us: let the refresh find out how */
        /* Closed before the fingerprint is taken: then it saw the last change
         * the transaction took. */
        if (btrfs_transaction_closed(fd, fs->generation, &closed) < 0)
                closed = false;
        if (btrfs_read_generation(fd, &generation) < 0 || generation != fs->generation ||
            btrfs_read_root_fingerprint(fd, generation, &fingerprint) < 0 || fingerprint != fs->root_fingerprint)
                return true;
        log_debug("Read the root tree of %s at generation %" PRIu64 " (transaction %s).",
                  uuid_format(fs->uuid, buf), generation, closed ? "closed" : "open");
        if (p && closed) {
                p->quiet = true;
                p->quiet_generation = generation;
                p->quiet_fingerprint = fingerprint;
        }
        return false;
}

/* Whether any published filesystem changed. */
static bool generations_moved(Watch *w, const Model *model) {
        const MountTable *t = &model->mounts;
        size_t checked = 0;

        /* One reachable mount per filesystem is enough. */
        for (size_t i = 0; i < t->n_mounts && checked < model->n_filesystems; i++) {
                const Filesystem *fs = model->mount_filesystem[i];
                bool seen = false;

                if (!fs)
                        continue;
                for (size_t j = 0; j < i && !seen; j++)
                        seen = model->mount_filesystem[j] == fs;
                if (seen || !mount_table_is_reachable(t, &t->mounts[i]))
                        continue;
                checked++;
                if (filesystem_moved(t, &t->mounts[i], fs, probe_find(w->probes, w->n_probes, fs->uuid)))
                        return true;
        }
        return false;
}

static int on_generation_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Watch *w = userdata;
        int r;

        if (*w->model && generations_moved(w, *w->model))
                w->on_change(w->userdata, false);
        r = sd_event_source_set_time(s, usec + WATCH_GENERATION_INTERVAL_USEC);
        if (r < 0)
                log_warning_errno(r, "Failed to re-arm the generation timer: %m");
        return 0;
}

static void probes_free(Probe *probes, size_t n) {
        for (size_t i = 0; i < n; i++)
                closep(&probes[i].sysfs_fd);
        free(probes);
}

/* One probe per filesystem of the model: kept for those it had (sorted by
 * UUID, as the model's), opened for new ones, closed for the others. */
static void probes_update(Watch *w) {
        const Model *model = *w->model;
        size_t n = model ? model->n_filesystems : 0;
        Probe *probes = n > 0 ? calloc(n, sizeof(Probe)) : NULL;

        if (n > 0 && !probes) {
                log_warning("Out of memory for the filesystems' sysfs probes; asking their mounts.");
                n = 0;
        }
        for (size_t i = 0; i < n; i++) {
                const Filesystem *fs = model->filesystems[i];
                Probe *old = probe_find(w->probes, w->n_probes, fs->uuid);
                uint64_t generation;

                if (old) {
                        probes[i] = *old;
                        old->sysfs_fd = -1;
                        if (probes[i].sysfs_fd >= 0)
                                continue;
                }
                probes[i] = (Probe) { .sysfs_fd = btrfs_sysfs_open_generation(fs->uuid) };
                memcpy(probes[i].uuid, fs->uuid, 16);
                /* Behind the model's, it cannot be this filesystem's. */
                if (probes[i].sysfs_fd >= 0 && (btrfs_sysfs_read_generation(probes[i].sysfs_fd, &generation) < 0 ||
                                                generation < fs->generation))
                        closep(&probes[i].sysfs_fd);
        }
        probes_free(w->probes, w->n_probes);
        w->probes = probes;
        w->n_probes = n;
}

void watch_update(Watch *w) {
        bool want = *w->model && (*w->model)->n_filesystems > 0;
        int r;

        probes_update(w);

        r = sd_event_source_set_enabled(w->generation_timer, want ? SD_EVENT_ON : SD_EVENT_OFF);
        if (r < 0)
                log_warning_errno(r, "Failed to switch the generation timer: %m");
}

/* fanotify mount events need Linux 6.15 and CAP_SYS_ADMIN; without them
 * mountinfo alone still sees every change, only less precisely. */
static int watch_fanotify(Watch *w) {
        int r;

        w->fanotify_fd = fanotify_init(FAN_REPORT_MNT_COMPAT | FAN_NONBLOCK | FAN_CLOEXEC, 0);
        if (w->fanotify_fd < 0)
                return log_debug_errno(errno, "fanotify mount events unavailable (%m), relying on mountinfo.");
        if (fanotify_mark(w->fanotify_fd, FAN_MARK_ADD | FAN_MARK_MNTNS_COMPAT,
                          FAN_MNT_ATTACH_COMPAT | FAN_MNT_DETACH_COMPAT, AT_FDCWD, "/proc/self/ns/mnt") < 0) {
                r = log_debug_errno(errno, "fanotify mount events unavailable (%m), relying on mountinfo.");
                closep(&w->fanotify_fd);
                w->fanotify_fd = -1;
                return r;
        }
        return sd_event_add_io(w->event, &w->fanotify_source, w->fanotify_fd, EPOLLIN, on_fanotify, w);
}

int watch_new(sd_event *event, Model **model, watch_callback_t on_change, void *userdata, Watch **ret) {
        Watch *w = calloc(1, sizeof(Watch));
        uint64_t now;
        int r;

        if (!w)
                return -ENOMEM;
        *w = (Watch) { .event = sd_event_ref(event), .model = model, .on_change = on_change,
                       .userdata = userdata, .fanotify_fd = -1, .mountinfo_fd = -1 };

        (void) watch_fanotify(w);

        w->mountinfo_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        if (w->mountinfo_fd < 0) {
                r = -errno;
                goto fail;
        }
        r = sd_event_add_io(event, &w->mountinfo_source, w->mountinfo_fd, EPOLLPRI, on_mountinfo, w);
        if (r < 0)
                goto fail;

        r = sd_event_now(event, CLOCK_MONOTONIC, &now);
        if (r >= 0)
                r = sd_event_add_time(event, &w->generation_timer, CLOCK_MONOTONIC,
                                      now + WATCH_GENERATION_INTERVAL_USEC, WATCH_GENERATION_ACCURACY_USEC,
                                      on_generation_timer, w);
        if (r < 0)
                goto fail;
        watch_update(w);
        *ret = w;
        return 0;
fail:
        watch_free(w);
        return r;
}

Watch *watch_free(Watch *w) {
        if (!w)
                return NULL;
        sd_event_source_disable_unref(w->generation_timer);
        sd_event_source_disable_unref(w->mountinfo_source);
        sd_event_source_disable_unref(w->fanotify_source);
        closep(&w->mountinfo_fd);
        closep(&w->fanotify_fd);
        probes_free(w->probes, w->n_probes);
        sd_event_unref(w->event);
        free(w);
        return NULL;
}
