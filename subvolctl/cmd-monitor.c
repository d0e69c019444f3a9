/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* monitor: subvold's signals as events, each saying what changed.
 *
 * subvold's PropertiesChanged carries new values only; monitor keeps the
 * last value of every property of every object (read once at start and
 * when subvold starts) to print old -> new, and only what did change. */
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "subvolctl.h"

typedef struct Monitor {
        Object *objects;  /* sorted by path */
        size_t n, allocated;
} Monitor;

static int cmp_path(const void *key, const void *o) {
        return strcmp(key, ((const Object *) o)->path);
}

static Object *monitor_find(Monitor *m, const char *path) {
        return bsearch(path, m->objects, m->n, sizeof(Object), cmp_path);
}

/* Takes @o over, replacing an object of the same path. */
static int monitor_add(Monitor *m, Object *o) {
        size_t lo = 0, hi = m->n;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                int c = strcmp(o->path, m->objects[mid].path);

                if (c == 0) {
                        object_done(&m->objects[mid]);
                        m->objects[mid] = *o;
                        return 0;
                }
                if (c < 0)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        if (grow_array(&m->objects, &m->allocated, m->n + 1, sizeof(Object)) < 0)
                return -ENOMEM;
        memmove(&m->objects[lo + 1], &m->objects[lo], (m->n - lo) * sizeof(Object));
        m->objects[lo] = *o;
        m->n++;
        return 0;
}

static void monitor_remove(Monitor *m, Object *o) {
        size_t i = (size_t) (o - m->objects);

        object_done(o);
        memmove(&m->objects[i], &m->objects[i + 1], (m->n - i - 1) * sizeof(Object));
        m->n--;
}

static void monitor_clear(Monitor *m) {
        for (size_t i = 0; i < m->n; i++)
                object_done(&m->objects[i]);
        m->n = 0;
}

/* What subvold has now, without printing it. */
static int monitor_load(Monitor *m, sd_bus *bus) {
        Objects o;
        int r = load_objects(bus, &o);

        if (r < 0)
                return r;
        monitor_clear(m);
        for (size_t i = 0; r >= 0 && i < o.n_fss + o.n_svs; i++) {
                Object *x = i < o.n_fss ? &o.fss[i] : &o.svs[i - o.n_fss];

                r = monitor_add(m, x);
                if (r >= 0)
                        *x = (Object) {};  /* taken over */
        }
        objects_done(&o);
        return r;
}

/* "2026-12-04 16:06:15", and the same time for JSON. */
static uint64_t event_start(char buf[static 32]) {
        struct timespec ts;
        struct tm tm;

        clock_gettime(CLOCK_REALTIME, &ts);
        if (!localtime_r(&ts.tv_sec, &tm) || strftime(buf, 32, "%Y-%m-%d %H:%M:%S", &tm) == 0)
                strcpy(buf, "-");
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void json_event_head(uint64_t usec, const char *event, const Object *o) {
        json_begin_object();
        json_key("time");
        json_u64(usec);
        json_key("event");
        json_string(event);
        if (o) {
                json_key("type");
                json_string(o->schema->type);
                json_key("object");
                json_string(o->path);
        }
}

/* How text events name an object: its path and filesystem, or a
 * filesystem's name. */
static char *describe(const Monitor *m, const Object *o) {
        char *s = NULL;

        if (o->schema == &filesystem_schema) {
                _cleanup_free_ char *label = term_escape(obj_str(o, FS_LABEL_BYTES), false);
                return asprintf(&s, "filesystem %s%s%s%s", obj_str(o, FS_UUID), label && *label ? " (" : "",
                                label && *label ? label : "", label && *label ? ")" : "") < 0 ? NULL : s;
        }
        _cleanup_free_ char *path = term_escape(obj_str(o, SV_PATH), false);
        const Object *f = monitor_find((Monitor *) m, obj_str(o, SV_FILESYSTEM));
        _cleanup_free_ char *fs = f ? term_escape(*obj_str(f, FS_LABEL_BYTES) ? obj_str(f, FS_LABEL_BYTES) :
                                                                            obj_str(f, FS_UUID), false) : NULL;
        return asprintf(&s, "subvolume %s (id %" PRIu64 " on %s)", path ? path : "?", obj_u64(o, SV_ID),
                        fs ? fs : "?") < 0 ? NULL : s;
}

static void print_added_or_removed(Monitor *m, const Object *o, bool added) {
        char when[32];
        uint64_t usec = event_start(when);

        if (arg_json) {
                json_event_head(usec, added ? "added" : "removed", o);
                json_key("properties");
                object_print_json(o, NULL, false);
                json_end_object();
                json_done();
        } else {
                _cleanup_free_ char *what = describe(m, o);
                printf("%s %s %s\n", when, added ? "added" : "removed", what ? what : o->path);
                fflush(stdout);
        }
}

static int on_interfaces_added(Monitor *m, sd_bus_message *msg) {
        const char *path, *iface;
        int r;

        r = sd_bus_message_read(msg, "o", &path);
        if (r >= 0)
                r = sd_bus_message_enter_container(msg, 'a', "{sa{sv}}");
        while (r >= 0 && (r = sd_bus_message_enter_container(msg, 'e', "sa{sv}")) > 0) {
                const Schema *schema = NULL;
                Object o;

                r = sd_bus_message_read(msg, "s", &iface);
                if (r < 0)
                        break;
                schema = streq(iface, SUBVOLD_IFACE_SUBVOLUME) ? &subvolume_schema :
                         streq(iface, SUBVOLD_IFACE_FS) ? &filesystem_schema : NULL;
                if (!schema)
                        r = sd_bus_message_skip(msg, "a{sv}");
                else if ((r = object_init(&o, schema, path)) >= 0) {
                        r = object_read(&o, msg, NULL);
                        if (r >= 0)
                                print_added_or_removed(m, &o, true);
                        if (r < 0 || monitor_add(m, &o) < 0)
                                object_done(&o);
                }
                if (r >= 0)
                        r = sd_bus_message_exit_container(msg);
        }
        return r;
}

static int on_interfaces_removed(Monitor *m, sd_bus_message *msg) {
        const char *path;
        Object *o;
        int r = sd_bus_message_read(msg, "o", &path);

        if (r < 0)
                return r;
        o = monitor_find(m, path);
        if (o) {
                print_added_or_removed(m, o, false);
                monitor_remove(m, o);
        } else if (arg_json) {
                char when[32];
                json_event_head(event_start(when), "removed", NULL);
                json_key("object");
                json_string(path);
                json_end_object();
                json_done();
        } else {
                char when[32];
                event_start(when);
                printf("%s removed %s\n", when, path);
        }
        return 0;
}

static int on_properties_changed(Monitor *m, sd_bus_message *msg) {
        const char *iface, *path = sd_bus_message_get_path(msg);
        const Schema *schema;
        bool changed[_SV_MAX + _FS_MAX] = {}, differs[ELEMENTSOF(changed)] = {};
        Object *known, update;
        char when[32];
        uint64_t usec;
        int r;

        r = sd_bus_message_read(msg, "s", &iface);
        if (r < 0)
                return r;
        schema = streq(iface, SUBVOLD_IFACE_SUBVOLUME) ? &subvolume_schema :
                 streq(iface, SUBVOLD_IFACE_FS) ? &filesystem_schema : NULL;
        if (!schema)
                return 0;
        r = object_init(&update, schema, path);
        if (r >= 0)
                r = object_read(&update, msg, changed);
        if (r < 0) {
                object_done(&update);
                return r;
        }
        known = monitor_find(m, path);
        for (size_t i = 0; i < schema->n; i++)
                differs[i] = changed[i] && (!known || !value_equal(&known->values[i], &update.values[i],
                                                                   schema->properties[i].kind));
        usec = event_start(when);
        if (arg_json) {
                json_event_head(usec, "changed", &update);
                json_key("properties");
                object_print_json(&update, differs, false);
                if (known) {
                        json_key("old");
                        object_print_json(known, differs, false);
                }
                json_end_object();
                json_done();
        } else {
                _cleanup_free_ char *what = describe(m, known ? known : &update);

                printf("%s changed %s\n", when, what ? what : path);
                for (size_t i = 0; i < schema->n; i++) {
                        _cleanup_free_ char *old = NULL, *new = NULL;

                        if (!differs[i])
                                continue;
                        new = value_to_text(&update.values[i], schema->properties[i].kind);
                        if (known)
                                old = value_to_text(&known->values[i], schema->properties[i].kind);
                        printf("    %s: %s%s%s\n", schema->properties[i].dbus, old ? old : "", old ? " → " : "",
                               new ? new : "?");
                }
                fflush(stdout);
        }
        /* Keep the new values. */
        for (size_t i = 0; known && i < schema->n; i++)
                if (changed[i]) {
                        Value v = known->values[i];
                        known->values[i] = update.values[i];
                        update.values[i] = v;
                }
        object_done(&update);
        return 0;
}

static void print_daemon_state(bool running) {
        char when[32];
        uint64_t usec = event_start(when);

        if (arg_json) {
                json_event_head(usec, running ? "started" : "stopped", NULL);
                json_end_object();
                json_done();
        } else {
                printf("%s subvold %s\n", when, running ? "started" : "stopped; waiting for it to start again");
                fflush(stdout);
        }
}

static int on_signal(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Monitor *m = userdata;
        const char *member = sd_bus_message_get_member(msg);
        int r = 0;

        if (streq(member, "NameOwnerChanged")) {
                const char *name, *old, *new;

                if (sd_bus_message_read(msg, "sss", &name, &old, &new) < 0 || !streq(name, SUBVOLD_BUS_NAME))
                        return 0;
                print_daemon_state(*new);
                monitor_clear(m);
                if (*new)
                        r = monitor_load(m, sd_bus_message_get_bus(msg));
        } else if (streq(member, "InterfacesAdded"))
                r = on_interfaces_added(m, msg);
        else if (streq(member, "InterfacesRemoved"))
                r = on_interfaces_removed(m, msg);
        else if (streq(member, "PropertiesChanged"))
                r = on_properties_changed(m, msg);
        if (r < 0)
                fprintf(stderr, "Cannot follow a %s signal.\n", member);
        return 0;
}

int cmd_monitor(sd_bus *bus, int argc, char **argv) {
        Monitor m = {};
        sigset_t mask;
        int r, running;

        r = sd_bus_match_signal(bus, NULL, SUBVOLD_BUS_NAME, NULL, NULL, NULL, on_signal, &m);
        if (r >= 0)
                r = sd_bus_match_signal(bus, NULL, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                        "org.freedesktop.DBus", "NameOwnerChanged", on_signal, &m);
        if (r < 0) {
                fprintf(stderr, "Cannot subscribe to subvold's signals: %s\n", strerror(-r));
                return EXIT_FAILED;
        }
        /* Subscribed first, then looked: nothing falls in between.  Not
         * activated: monitoring should not start subvold. */
        running = 0;
        {
                _cleanup_(sd_bus_message_unrefp_) sd_bus_message *reply = NULL;
                r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                       "NameHasOwner", NULL, &reply, "s", SUBVOLD_BUS_NAME);
                if (r >= 0)
                        r = sd_bus_message_read(reply, "b", &running);
        }
        if (r < 0) {
                fprintf(stderr, "Cannot ask the bus whether subvold runs: %s\n", strerror(-r));
                return EXIT_NO_DAEMON;
        }
        if (!running)
                fprintf(stderr, "subvold is not running; waiting for it to start.\n");
        else if ((r = monitor_load(&m, bus)) < 0)
                return -r;
        if (!arg_json)
                fprintf(stderr, "Monitoring subvold; Ctrl-C to stop.\n");
        /* Stop cleanly on SIGINT/SIGTERM: wait for them as events. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        for (;;) {
                struct timespec zero = {};

                r = sd_bus_process(bus, NULL);
                if (r < 0) {
                        fprintf(stderr, "Connection to the bus lost: %s\n", strerror(-r));
                        r = EXIT_NO_DAEMON;
                        break;
                }
                if (sigtimedwait(&mask, NULL, &zero) > 0) {
                        r = EXIT_OK;
                        break;
                }
                if (r > 0)
                        continue;
                r = sd_bus_wait(bus, 200 * 1000);
                if (r < 0 && r != -EINTR) {
                        r = EXIT_NO_DAEMON;
                        break;
                }
        }
        monitor_clear(&m);
        free(m.objects);
        return r;
}
