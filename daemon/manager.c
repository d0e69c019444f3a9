/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <signal.h>
#include <systemd/sd-daemon.h>

#include "bus-manager.h"
#include "bus-objects.h"
#include "bus-util.h"
#include "discover.h"
#include "manager.h"
#include "util.h"

int manager_new(MountSource source, Manager **ret) {
        Manager *m = calloc(1, sizeof(Manager));
        int r;

        if (!m)
                return -ENOMEM;
        m->mount_source = source;
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
        sd_bus_flush_close_unref(m->bus);
        sd_event_unref(m->event);
        model_free(m->model);
        free(m);
        return NULL;
}

int manager_refresh(Manager *m) {
        _cleanup_(model_freep) Model *old = NULL;
        Model *new = NULL;
        int r;

        r = discover_model(m->mount_source, &new);
        if (r < 0)
                return r;
        old = m->model;
        m->model = new;
        if (m->bus)
                bus_objects_emit_changes(m->bus, old, new);
        return 0;
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

        r = manager_refresh(m);
        if (r < 0)
                return r;

        r = sd_bus_open_system(&m->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m");
        r = bus_manager_register(m->bus, m);
        if (r >= 0)
                r = bus_objects_register(m->bus, &m->model);
        if (r < 0)
                return log_error_errno(r, "Failed to register D-Bus objects: %m");
        r = sd_bus_attach_event(m->bus, m->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m");
        /* Leave the loop (and exit cleanly) when the bus goes away. */
        r = sd_bus_set_exit_on_disconnect(m->bus, true);
        if (r < 0)
                return log_error_errno(r, "Failed to set exit-on-disconnect: %m");
        r = sd_bus_request_name(m->bus, SUBVOLD_BUS_NAME, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to acquire the bus name " SUBVOLD_BUS_NAME ": %m");

        log_info("Publishing %zu btrfs filesystem(s) as " SUBVOLD_BUS_NAME ".", m->model->n_filesystems);
        (void) sd_notify(false, "READY=1\nSTATUS=Publishing subvolumes.");
        return 0;
}

int manager_run(Manager *m) {
        int r = sd_event_loop(m->event);

        (void) sd_notify(false, "STOPPING=1");
        return r;
}
