/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <sys/fanotify.h>

#include "fs-btrfs.h"
#include "kernel-compat.h"
#include "util.h"
#include "watch.h"

struct Watch {
        sd_event *event;
        Model **model;
        watch_callback_t on_change;
        void *userdata;
        int fanotify_fd, mountinfo_fd;
        sd_event_source *fanotify_source, *mountinfo_source, *generation_timer;
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

/* Whether any published filesystem changed: its generation moved (a new
 * transaction: something was written), or within the running transaction
 * the root tree's subvolume items changed (created, deleted, renamed,
 * flipped read-only). */
static bool generations_moved(const Model *model) {
        const MountTable *t = &model->mounts;
        size_t checked = 0;

        /* One reachable mount per filesystem is enough. */
        for (size_t i = 0; i < t->n_mounts && checked < model->n_filesystems; i++) {
                const Filesystem *fs = model->mount_filesystem[i];
                _cleanup_close_ int fd = -1;
                uint64_t generation, fingerprint;
                bool seen = false;

                if (!fs)
                        continue;
                for (size_t j = 0; j < i && !seen; j++)
                        seen = model->mount_filesystem[j] == fs;
                if (seen || !mount_table_is_reachable(t, &t->mounts[i]))
                        continue;
                checked++;
                if (btrfs_open_mount(&t->mounts[i], t->source, &fd) < 0)
                        return true;  /* it changed under us: let the refresh find out how */
                if (btrfs_read_generation(fd, &generation) < 0 || generation != fs->generation ||
                    btrfs_read_root_fingerprint(fd, generation, &fingerprint) < 0 ||
                    fingerprint != fs->root_fingerprint)
                        return true;
        }
        return false;
}

static int on_generation_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Watch *w = userdata;
        int r;

        if (*w->model && generations_moved(*w->model))
                w->on_change(w->userdata, false);
        r = sd_event_source_set_time(s, usec + WATCH_GENERATION_INTERVAL_USEC);
        if (r < 0)
                log_warning_errno(r, "Failed to re-arm the generation timer: %m");
        return 0;
}

void watch_update(Watch *w) {
        bool want = *w->model && (*w->model)->n_filesystems > 0;
        int r;

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
                                      now + WATCH_GENERATION_INTERVAL_USEC, 0, on_generation_timer, w);
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
        sd_event_unref(w->event);
        free(w);
        return NULL;
}
