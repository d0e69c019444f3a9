/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <sys/param.h>
#include <time.h>
#include <systemd/sd-daemon.h>

#include "bus-manager.h"
#include "bus-objects.h"
#include "bus-util.h"
#include "cache-file.h"
#include "discover.h"
#include "usage-cache.h"
#include "manager.h"
#include "util.h"

int manager_new(MountSource source, const char *cache_dir, uint64_t exit_idle_usec, size_t max_message_size,
                const ScannerOptions *scan_options, Manager **ret) {
        Manager *m = calloc(1, sizeof(Manager));
        int r;

        if (!m)
                return -ENOMEM;
        m->mount_source = source;
        m->exit_idle_usec = exit_idle_usec;
        m->max_message_size = max_message_size;
        if (cache_dir && !(m->cache_dir = strdup(cache_dir))) {
                manager_free(m);
                return -ENOMEM;
        }
        m->scan_options = *scan_options;
        m->scan_options.cache_dir = m->cache_dir;
        r = sd_event_new(&m->event);
        if (r < 0) {
                manager_free(m);
                return r;
        }
        *ret = m;
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        sd_event_source_disable_unref(m->refresh_timer);
        sd_event_source_disable_unref(m->idle_timer);
        bus_space_free(m->bus_space);  /* before the scanner: its queries are in the scanner's maps */
        watch_free(m->watch);
        scanner_free(m->scanner);
        bus_files_free(m->bus_files);
        bus_fds_free(m->bus_fds);
        sd_bus_flush_close_unref(m->bus);
        sd_event_unref(m->event);
        model_free(m->model);
        free(m->cache_dir);
        free(m);
        return NULL;
}

static uint64_t now_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

/* Whether @new read any usage from the kernel that @old did not have. */
static bool usage_was_read(const Model *old, const Model *new) {
        for (size_t i = 0; i < new->n_filesystems; i++) {
                const Filesystem *fs = new->filesystems[i];
                const Filesystem *o = old ? model_find_filesystem(old, fs->uuid) : NULL;

                if (fs->usage_read_usec != 0 && (!o || o->usage_read_usec != fs->usage_read_usec))
                        return true;
        }
        return false;
}

static void manager_save_cache(Manager *m) {
        int r;

        if (!m->cache_dir)
                return;
        r = usage_cache_save(m->cache_dir, m->model);
        /* Not one line per refresh. */
        m->cache_write_failed = cache_file_log_write("usage", m->cache_dir, r, m->cache_write_failed);
}

static int on_refresh_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        int r;

        r = manager_refresh(m);
        if (r < 0)
                log_warning_errno(r, "Refresh failed, keeping the previous model: %m");
        return 0;
}

static bool refresh_due(Manager *m) {
        int enabled;

        return m->refresh_timer && sd_event_source_get_enabled(m->refresh_timer, &enabled) > 0;
}

/* The earliest time the rate limit lets the next refresh run, with
 * @burst of the bucket's REFRESH_BURST refreshes at hand. */
static uint64_t refresh_allowed(const Manager *m, unsigned burst) {
        uint64_t slack = (burst - 1) * REFRESH_INTERVAL_USEC;

        return m->refresh_budget > slack ? m->refresh_budget - slack : 0;
}

static void schedule_refresh(Manager *m, uint64_t delay_usec, unsigned burst) {
        uint64_t now, when, armed;
        int r, enabled;

        r = sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                goto fail;
        when = MAX(now + delay_usec, refresh_allowed(m, burst));
        /* For the log: whether the refresh is for new figures alone. */
        if (burst > 1)
                m->refresh_usage_only = false;
        else if (!refresh_due(m))
                m->refresh_usage_only = true;
        if (!m->refresh_timer) {
                /* A new time source is a one-shot already.  Accuracy 1 ms,
                 * not sd-event's default of 250 ms: a change waits for this
                 * timer before it reaches the bus. */
                r = sd_event_add_time(m->event, &m->refresh_timer, CLOCK_MONOTONIC, when, 1000, on_refresh_timer, m);
                if (r < 0)
                        goto fail;
                return;
        }
        /* Already due sooner: that refresh will see this change too. */
        r = sd_event_source_get_enabled(m->refresh_timer, &enabled);
        if (r > 0 && sd_event_source_get_time(m->refresh_timer, &armed) >= 0 && armed <= when)
                return;
        r = sd_event_source_set_time(m->refresh_timer, when);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->refresh_timer, SD_EVENT_ONESHOT);
        if (r >= 0)
                return;
fail:
        log_warning_errno(r, "Failed to schedule a refresh: %m");
}

void manager_schedule_refresh(Manager *m, uint64_t delay_usec) {
        schedule_refresh(m, delay_usec, REFRESH_BURST);
}

void manager_schedule_usage_refresh(Manager *m, uint64_t delay_usec) {
        schedule_refresh(m, delay_usec, 1);
}

/* A refresh for the scanner's new figures alone, on a host where they
 * are all subvold's own and the last read left nothing to retry: the
 * watch saw nothing move in the kernel since the model was read, so the
 * model stays and only its figures change.  Reading it again cost 110 to
 * 165 ms of CPU at 100,000 subvolumes, and the scanner publishes once or
 * twice after each change.  Quota figures are the kernel's: with quotas
 * on, the whole model is read again. */
static int manager_refresh_figures(Manager *m) {
        _cleanup_(model_figures_freep) ModelFigures *before = model_figures_save(m->model);
        bool scanned;

        if (!before)
                return -ENOMEM;
        scanned = scanner_update(m->scanner, m->model);
        log_debug("Refresh at %" PRIu64 " us for new usage; %s.", m->last_refresh,
                  refresh_due(m) ? "another is due" : "none due");
        log_debug("Kept the model, new figures only.");
        if (m->bus)
                bus_objects_emit_figures(m->bus, before, m->model);
        if (scanned)
                manager_save_cache(m);
        return 0;
}

int manager_refresh(Manager *m) {
        _cleanup_(model_freep) Model *old = NULL;
        Model *new = NULL;
        bool usage_only = false, pending, scanned;
        int r;

        /* Not when Refresh() comes before the timer: that stays armed. */
        if (!refresh_due(m)) {
                usage_only = m->refresh_usage_only;
                m->refresh_usage_only = false;
        }
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &m->last_refresh);
        m->refresh_budget = MAX(m->refresh_budget, m->last_refresh) + REFRESH_INTERVAL_USEC;
        if (usage_only && !m->model_incomplete && m->scanner && m->model && model_is_scanned_only(m->model))
                return manager_refresh_figures(m);
        r = discover_model(m->mount_source, m->model, now_usec(), &new, &pending, &m->model_incomplete);
        if (r < 0) {
                /* The mount table unreadable for now (listmount() out of
                 * memory, say): whatever asked for this refresh would be
                 * lost, as nothing else need come.  Try again. */
                manager_schedule_refresh(m, REFRESH_INTERVAL_USEC);
                return r;
        }
        scanned = m->scanner && scanner_update(m->scanner, new);
        old = m->model;
        m->model = new;
        /* For the tests (-v): each refresh on subvold's own clock, logged
         * before its signals go out, and whether another one is due. */
        log_debug("Refresh at %" PRIu64 " us for %s; %s.", m->last_refresh, usage_only ? "new usage" : "a change",
                  pending || refresh_due(m) ? "another is due" : "none due");
        if (m->bus)
                bus_objects_emit_changes(m->bus, old, new);
        if (scanned || usage_was_read(old, new))
                manager_save_cache(m);
        if (pending)
                manager_schedule_usage_refresh(m, USAGE_READ_INTERVAL_USEC);
        if (m->watch)
                watch_update(m->watch);
        /* The old model's thousands of small blocks lie between the new
         * model's: glibc only gives back the top of the heap by itself,
         * malloc_trim() also the free pages in between (1.3 MiB of 12 at
         * 10,000 subvolumes).  Refreshes follow changes only, so this costs
         * nothing at rest. */
        old = model_free(old);
        (void) malloc_trim(0);
        return 0;
}

/* The first model: usage comes from the persisted cache where it is still
 * valid, so that the first answers need not wait for the kernel. */
static int manager_load(Manager *m) {
        _cleanup_(model_freep) Model *cached = NULL;
        int r;

        if (m->cache_dir) {
                r = usage_cache_load(m->cache_dir, &cached);
                cache_file_log_load_error("usage", m->cache_dir, r);
        }
        m->model = TAKE_PTR(cached);
        r = manager_refresh(m);
        if (r < 0) {
                /* Not a reason to stay off the bus: publish nothing until
                 * the retry manager_refresh() scheduled can read the mounts
                 * (the cached usage is read again from the kernel then). */
                log_warning_errno(r, "Starting with no filesystems, reading the mounts again shortly: %m");
                model_free(m->model);
                m->model = model_new();
                if (!m->model)
                        return log_error_errno(ENOMEM, "Failed to allocate the model: %m");
        }
        return 0;
}

static void on_scan_results(void *userdata) {
        /* Published with the next refresh (at most one a second). */
        manager_schedule_usage_refresh(userdata, 50 * 1000);
}

static void on_watch_change(void *userdata, bool mounts) {
        Manager *m = userdata;

        /* Not with the refresh (at most one a second): the filesystem of a
         * umount must be let go of at once. */
        if (mounts && m->scanner)
                scanner_mounts_changed(m->scanner, m->model ? m->model->mounts.source : m->mount_source);
        /* A short delay gathers a burst of changes into one refresh. */
        manager_schedule_refresh(m, 50 * 1000);
}

/* sd-bus hands its synthesized Disconnected signal to the filters before
 * it leaves the loop: say why we are going. */
static int on_bus_disconnected(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        if (sd_bus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected") > 0 && !m->disconnected) {
                m->disconnected = true;
                log_info("Disconnected from the bus, exiting.");
        }
        return 0;
}

/* ---- exit when idle ---- */

static int on_bus_message(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &m->last_activity);
        return 0;  /* let it be dispatched as usual */
}

static int on_idle_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        int r;

        if (usec < m->last_activity + m->exit_idle_usec) {
                /* Something happened since: wait for the rest of the quiet period. */
                r = sd_event_source_set_time(s, m->last_activity + m->exit_idle_usec);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                return r;
        }
        /* Give the name up first, so that the bus activates a new instance
         * for the next call, then answer what is already queued. */
        log_info("Idle for %" PRIu64 " s, exiting; the next call starts subvold again.",
                 m->exit_idle_usec / 1000000);
        r = sd_bus_release_name(m->bus, SUBVOLD_BUS_NAME);
        if (r < 0)
                log_warning_errno(r, "Failed to release the bus name: %m");
        while (sd_bus_process(m->bus, NULL) > 0)
                ;
        return sd_event_exit(m->event, 0);
}

static int manager_watch_idle(Manager *m) {
        int r;

        if (m->exit_idle_usec == 0)
                return 0;
        r = sd_bus_add_filter(m->bus, NULL, on_bus_message, m);
        if (r < 0)
                return r;
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &m->last_activity);
        return sd_event_add_time(m->event, &m->idle_timer, CLOCK_MONOTONIC, m->last_activity + m->exit_idle_usec,
                                 0, on_idle_timer, m);
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        log_info("Received %s, exiting.", strsignal((int) si->ssi_signo));
        return sd_event_exit(m->event, 0);
}

int manager_start(Manager *m) {
        sigset_t mask;
        int r;

        /* sd-event wants the signals blocked before it can watch them. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(errno, "Failed to block signals: %m");
        r = sd_event_add_signal(m->event, NULL, SIGTERM, on_signal, m);
        if (r >= 0)
                r = sd_event_add_signal(m->event, NULL, SIGINT, on_signal, m);
        if (r < 0)
                return log_error_errno(r, "Failed to watch signals: %m");

        r = scanner_new(m->event, &m->scan_options, on_scan_results, m, &m->scanner);
        if (r < 0)
                return log_error_errno(r, "Failed to start the scanner: %m");
        r = manager_load(m);
        if (r < 0)
                return r;

        r = sd_bus_open_system(&m->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m");
        r = bus_space_new(m->event, &m->model, &m->bus_space);
        if (r < 0)
                return log_error_errno(r, "Failed to set up GetExclusiveBytes: %m");
        r = bus_manager_register(m->bus, m);
        if (r >= 0)
                r = bus_objects_register(m->bus, &m->model, m->bus_space, m->max_message_size);
        if (r < 0)
                return log_error_errno(r, "Failed to register D-Bus objects: %m");
        r = sd_bus_attach_event(m->bus, m->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m");
        r = bus_fds_new(m->bus, m->event, &m->bus_fds);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the release of passed fds: %m");
        r = bus_files_new(m->bus, m->event, &m->model, &m->bus_files);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the Files interface: %m");
        /* Leave the loop (and exit cleanly) when the bus goes away. */
        r = sd_bus_set_exit_on_disconnect(m->bus, true);
        if (r >= 0)
                r = sd_bus_add_filter(m->bus, NULL, on_bus_disconnected, m);
        if (r < 0)
                return log_error_errno(r, "Failed to set exit-on-disconnect: %m");
        /* Test-only: without the watch, only Refresh() and the scanner
         * publish anything new, so that a test can tell which did. */
        if (!getenv("SUBVOLD_TEST_NO_WATCH")) {
                r = watch_new(m->event, &m->model, on_watch_change, m, &m->watch);
                if (r < 0)
                        return log_error_errno(r, "Failed to watch for changes: %m");
        }
        r = manager_watch_idle(m);
        if (r < 0)
                return log_error_errno(r, "Failed to set up exit-when-idle: %m");
        r = sd_bus_request_name(m->bus, SUBVOLD_BUS_NAME, 0);
        if (r == -EEXIST)
                return log_error_errno(r, "subvold is already running: another process owns " SUBVOLD_BUS_NAME
                                       " on this bus.");
        if (r < 0)
                return log_error_errno(r, "Failed to acquire the bus name " SUBVOLD_BUS_NAME ": %m");

        log_info("Publishing %zu btrfs filesystem(s) as " SUBVOLD_BUS_NAME "; mounts from %s.",
                 m->model->n_filesystems,
                 m->model->mounts.source == MOUNT_SOURCE_LISTMOUNT ? "listmount()" : "/proc/self/mountinfo");
        (void) sd_notify(false, "READY=1\nSTATUS=Publishing subvolumes.");
        return 0;
}

int manager_run(Manager *m) {
        int r = sd_event_loop(m->event);

        /* sd-bus ends the loop with EXIT_FAILURE when the bus goes away
         * (exit-on-disconnect).  Status 0 then, as for SIGTERM: a bus
         * service without a bus has nothing to do, and a new bus
         * activates us anew. */
        if (r > 0 && m->disconnected)
                r = 0;
        (void) sd_notify(false, "STOPPING=1");
        return r;
}
