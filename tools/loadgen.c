/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * loadgen - many concurrent clients of subvold, and one that never reads.
 *
 * usage: loadgen [--connections=N] [--seconds=S] [--gmo-ms=MS] [--stable=PREFIX]... [--slow-subscriber]
 *
 * Connects to the system bus ($DBUS_SYSTEM_BUS_ADDRESS) N times (default
 * 64), one thread per connection, and for S seconds (default 30) calls
 * back to back, picking at random: GetSubvolumeByFd and GetStatfsByFd
 * (an fd on the subvolume's first AccessPaths entry), Properties.Get
 * (ReferencedBytes) and GetAll of the Subvolume interface, and
 * GetSubvolumeByPath (that access path).  One more connection calls
 * GetManagedObjects every MS milliseconds (default 1000) and takes the
 * subvolumes it lists as the targets from then on; when subvold refuses it
 * (LimitsExceeded: too many objects for one reply, "refused"), that
 * connection pages through each filesystem's GetSubvolumes instead.
 *
 * A target is stable when its object path starts with one of the
 * --stable prefixes and its Path does not contain "churn"; the others may
 * really go away while called.  An error is "gone" (documented, counted
 * apart) when its target is not stable and it is UnknownObject,
 * UnknownInterface, UnknownMethod, or subvold's NotFound or NotBtrfs (its
 * mount went, its path is on another filesystem now); every other error
 * is a failure.  An fd that cannot be opened (the subvolume went) is no
 * call.
 *
 * --slow-subscriber adds a connection that subscribes to every signal of
 * org.subvold.Subvold1 and reads nothing until the end; then it reads what
 * reached it and says whether the bus had disconnected it.
 *
 * Output, one line per call kind:
 *   kind=K calls=N per_s=X p50_us= p99_us= max_us= gone=N refused=N failed=N
 * then "error kind=K name=NAME stable=0|1 count=N" per error seen, and
 *   slow_subscriber signals=N disconnected=0|1
 * Exits 1 when any call failed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <systemd/sd-bus.h>

#define DEST "org.subvold.Subvold1"
#define MANAGER "/org/subvold/Subvold1"
#define MANAGER_IFACE "org.subvold.Subvold1.Manager"
#define SUBVOLUME_IFACE "org.subvold.Subvold1.Subvolume"

enum { K_BY_FD, K_STATFS_BY_FD, K_GET, K_GET_ALL, K_BY_PATH, K_GMO, _K_MAX };
static const char *const kind_names[_K_MAX] = {
        "GetSubvolumeByFd", "GetStatfsByFd", "Get", "GetAll", "GetSubvolumeByPath", "GetManagedObjects",
};

typedef struct Target {
        char *object, *access;  /* access: NULL when no mount reaches it */
        bool stable;
} Target;

typedef struct ErrorCount {
        int kind;
        char *name;
        bool stable;
        uint64_t count;
} ErrorCount;

typedef struct Stats {
        uint32_t *usec[_K_MAX];
        size_t n[_K_MAX], allocated[_K_MAX];
        uint64_t gone[_K_MAX], refused[_K_MAX], failed[_K_MAX];
        ErrorCount *errors;
        size_t n_errors;
} Stats;

static unsigned arg_connections = 64, arg_seconds = 30, arg_gmo_ms = 1000;
static char **arg_stable;
static size_t n_stable;
static bool arg_slow;

static pthread_mutex_t targets_lock = PTHREAD_MUTEX_INITIALIZER;
static Target *targets;
static size_t n_targets;
static atomic_bool stopping;

static void *xrealloc(void *p, size_t size) {
        p = realloc(p, size);
        if (!p) {
                fprintf(stderr, "loadgen: out of memory\n");
                exit(2);
        }
        return p;
}

static uint64_t now_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void record(Stats *s, int kind, uint64_t usec) {
        if (s->n[kind] == s->allocated[kind]) {
                s->allocated[kind] = s->allocated[kind] ? 2 * s->allocated[kind] : 1024;
                s->usec[kind] = xrealloc(s->usec[kind], s->allocated[kind] * sizeof(uint32_t));
        }
        s->usec[kind][s->n[kind]++] = usec > UINT32_MAX ? UINT32_MAX : (uint32_t) usec;
}

static bool documented_gone(const char *name) {
        return strcmp(name, "org.freedesktop.DBus.Error.UnknownObject") == 0 ||
               strcmp(name, "org.freedesktop.DBus.Error.UnknownInterface") == 0 ||
               strcmp(name, "org.freedesktop.DBus.Error.UnknownMethod") == 0 ||
               strcmp(name, "org.subvold.Subvold1.Error.NotFound") == 0 ||
               /* an unmounted filesystem's path is on another one now */
               strcmp(name, "org.subvold.Subvold1.Error.NotBtrfs") == 0;
}

static void count_error(Stats *s, int kind, const char *name, bool stable) {
        if (!stable && documented_gone(name))
                s->gone[kind]++;
        else if (kind == K_GMO && strcmp(name, "org.freedesktop.DBus.Error.LimitsExceeded") == 0)
                s->refused[kind]++;  /* documented: too many objects for one reply */
        else
                s->failed[kind]++;
        for (size_t i = 0; i < s->n_errors; i++)
                if (s->errors[i].kind == kind && s->errors[i].stable == stable && strcmp(s->errors[i].name, name) == 0) {
                        s->errors[i].count++;
                        return;
                }
        s->errors = xrealloc(s->errors, (s->n_errors + 1) * sizeof(ErrorCount));
        s->errors[s->n_errors++] = (ErrorCount) { kind, strdup(name), stable, 1 };
}

/* ---- the targets, from GetManagedObjects ---- */

static void targets_free(Target *t, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(t[i].object);
                free(t[i].access);
        }
        free(t);
}

static bool is_stable(const char *object, const char *path) {
        if (strstr(path, "churn"))
                return false;
        for (size_t i = 0; i < n_stable; i++)
                if (strncmp(object, arg_stable[i], strlen(arg_stable[i])) == 0)
                        return true;
        return false;
}

/* Reads the variant of property @name: Path, and the first entry of
 * AccessPaths; skips the others. */
static int read_value(sd_bus_message *m, const char *name, char **ret_path, char **ret_access) {
        const void *p;
        size_t n;
        int r;

        if (strcmp(name, "Path") == 0) {
                r = sd_bus_message_enter_container(m, 'v', "ay");
                if (r >= 0)
                        r = sd_bus_message_read_array(m, 'y', &p, &n);
                if (r >= 0 && !(*ret_path = strndup(p, n)))
                        r = -ENOMEM;
                return r < 0 ? r : sd_bus_message_exit_container(m);
        }
        if (strcmp(name, "AccessPaths") != 0)
                return sd_bus_message_skip(m, "v");
        r = sd_bus_message_enter_container(m, 'v', "aay");
        if (r >= 0)
                r = sd_bus_message_enter_container(m, 'a', "ay");
        while (r >= 0 && (r = sd_bus_message_read_array(m, 'y', &p, &n)) > 0)
                if (!*ret_access && !(*ret_access = strndup(p, n)))
                        r = -ENOMEM;
        if (r >= 0)
                r = sd_bus_message_exit_container(m);
        return r < 0 ? r : sd_bus_message_exit_container(m);
}

/* Reads one a{sv} of the Subvolume interface. */
static int read_subvolume(sd_bus_message *m, char **ret_path, char **ret_access) {
        const char *name;
        int r;

        for (r = sd_bus_message_enter_container(m, 'a', "{sv}"); r >= 0;) {
                r = sd_bus_message_enter_container(m, 'e', "sv");
                if (r <= 0)
                        break;
                r = sd_bus_message_read(m, "s", &name);
                if (r >= 0)
                        r = read_value(m, name, ret_path, ret_access);
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        }
        return r < 0 ? r : sd_bus_message_exit_container(m);
}

static int parse_objects(sd_bus_message *reply, Target **ret, size_t *ret_n) {
        Target *t = NULL;
        size_t n = 0;
        int r;

        r = sd_bus_message_enter_container(reply, 'a', "{oa{sa{sv}}}");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "oa{sa{sv}}")) > 0) {
                const char *object;

                r = sd_bus_message_read(reply, "o", &object);
                if (r >= 0)
                        r = sd_bus_message_enter_container(reply, 'a', "{sa{sv}}");
                while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sa{sv}")) > 0) {
                        const char *iface;

                        r = sd_bus_message_read(reply, "s", &iface);
                        if (r < 0)
                                break;
                        if (strcmp(iface, SUBVOLUME_IFACE) == 0) {
                                char *path = NULL, *access = NULL;

                                r = read_subvolume(reply, &path, &access);
                                if (r >= 0) {
                                        t = xrealloc(t, (n + 1) * sizeof(Target));
                                        t[n++] = (Target) { strdup(object), access, is_stable(object, path ?: "") };
                                        access = NULL;
                                }
                                free(path);
                                free(access);
                        } else
                                r = sd_bus_message_skip(reply, "a{sv}");
                        if (r >= 0)
                                r = sd_bus_message_exit_container(reply);
                }
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
        }
        if (r < 0) {
                targets_free(t, n);
                return r;
        }
        *ret = t;
        *ret_n = n;
        return 0;
}

/* Adds the subvolumes of one GetSubvolumes page (a{oa{sv}}) to @t. */
static int parse_page(sd_bus_message *reply, Target **t, size_t *n) {
        int r;

        r = sd_bus_message_enter_container(reply, 'a', "{oa{sv}}");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "oa{sv}")) > 0) {
                char *path = NULL, *access = NULL;
                const char *object;

                r = sd_bus_message_read(reply, "o", &object);
                if (r >= 0)
                        r = read_subvolume(reply, &path, &access);
                if (r >= 0) {
                        *t = xrealloc(*t, (*n + 1) * sizeof(Target));
                        (*t)[(*n)++] = (Target) { strdup(object), access, is_stable(object, path ?: "") };
                        access = NULL;
                        r = sd_bus_message_exit_container(reply);
                }
                free(path);
                free(access);
        }
        return r < 0 ? r : sd_bus_message_exit_container(reply);
}

/* The subvolumes of every filesystem, page by page: what a client does
 * once GetManagedObjects is refused (LimitsExceeded, past some thousands
 * of subvolumes). */
static int page_objects(sd_bus *bus, Target **ret, size_t *ret_n) {
        sd_bus_message *filesystems = NULL;
        Target *t = NULL;
        size_t n = 0;
        const char *fs;
        int r;

        r = sd_bus_get_property(bus, DEST, MANAGER, MANAGER_IFACE, "Filesystems", NULL, &filesystems, "ao");
        if (r >= 0)
                r = sd_bus_message_enter_container(filesystems, 'a', "o");
        while (r >= 0 && (r = sd_bus_message_read(filesystems, "o", &fs)) > 0) {
                uint64_t next = 0;

                do {
                        sd_bus_message *page = NULL;

                        r = sd_bus_call_method(bus, DEST, fs, "org.subvold.Subvold1.Filesystem", "GetSubvolumes", NULL,
                                               &page, "tu", next, UINT32_MAX);
                        if (r >= 0)
                                r = parse_page(page, &t, &n);
                        if (r >= 0)
                                r = sd_bus_message_read(page, "t", &next);
                        sd_bus_message_unref(page);
                } while (r >= 0 && next != 0);
        }
        sd_bus_message_unref(filesystems);
        if (r < 0) {
                targets_free(t, n);
                return r;
        }
        *ret = t;
        *ret_n = n;
        return 0;
}

static void set_targets(Target *t, size_t n) {
        Target *old;
        size_t n_old;

        pthread_mutex_lock(&targets_lock);
        old = targets, n_old = n_targets;
        targets = t, n_targets = n;
        pthread_mutex_unlock(&targets_lock);
        targets_free(old, n_old);
}

/* Calls GetManagedObjects; on success the subvolumes it lists become the targets. */
static void managed_objects(sd_bus *bus, Stats *s) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        uint64_t start = now_usec();
        Target *t;
        size_t n;
        int r;

        r = sd_bus_call_method(bus, DEST, MANAGER, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", &error,
                               &reply, "");
        if (r < 0) {
                count_error(s, K_GMO, error.name ?: strerror(-r), true);
                if (sd_bus_error_has_name(&error, "org.freedesktop.DBus.Error.LimitsExceeded")) {
                        if (page_objects(bus, &t, &n) >= 0)
                                set_targets(t, n);
                        else
                                count_error(s, K_GMO, "paging through GetSubvolumes failed", true);
                } else
                        fprintf(stderr, "loadgen: GetManagedObjects failed: %s\n", error.message ?: strerror(-r));
                sd_bus_error_free(&error);
                return;
        }
        record(s, K_GMO, now_usec() - start);
        if (parse_objects(reply, &t, &n) >= 0)
                set_targets(t, n);
        else {
                fprintf(stderr, "loadgen: cannot parse the GetManagedObjects reply\n");
                count_error(s, K_GMO, "unparsable reply", true);
        }
        sd_bus_message_unref(reply);
}

/* ---- the clients ---- */

static bool pick(unsigned *seed, Target *ret) {
        bool found = false;

        pthread_mutex_lock(&targets_lock);
        if (n_targets > 0) {
                const Target *t = &targets[(size_t) rand_r(seed) % n_targets];
                *ret = (Target) { strdup(t->object), t->access ? strdup(t->access) : NULL, t->stable };
                found = true;
        }
        pthread_mutex_unlock(&targets_lock);
        return found;
}

static void one_call(sd_bus *bus, Stats *s, unsigned *seed) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        unsigned roll = (unsigned) rand_r(seed) % 100;
        int kind = roll < 20 ? K_BY_FD : roll < 35 ? K_STATFS_BY_FD : roll < 60 ? K_GET : roll < 80 ? K_GET_ALL : K_BY_PATH;
        uint64_t start;
        Target t;
        int r, fd = -1;

        if (!pick(seed, &t))
                return;
        if ((kind == K_BY_FD || kind == K_STATFS_BY_FD || kind == K_BY_PATH) && !t.access)
                kind = K_GET;  /* no mount reaches it */
        if (kind == K_BY_FD || kind == K_STATFS_BY_FD) {
                fd = open(t.access, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0) {
                        /* Gone with its subvolume or its mount: no call. */
                        if (t.stable)
                                count_error(s, kind, "open() of a stable subvolume failed", true);
                        goto done;
                }
        }
        start = now_usec();
        switch (kind) {
        case K_BY_FD:
                r = sd_bus_call_method(bus, DEST, MANAGER, MANAGER_IFACE, "GetSubvolumeByFd", &error, &reply, "h", fd);
                break;
        case K_STATFS_BY_FD:
                r = sd_bus_call_method(bus, DEST, MANAGER, MANAGER_IFACE, "GetStatfsByFd", &error, &reply, "h", fd);
                break;
        case K_GET:
                r = sd_bus_call_method(bus, DEST, t.object, "org.freedesktop.DBus.Properties", "Get", &error, &reply,
                                       "ss", SUBVOLUME_IFACE, "ReferencedBytes");
                break;
        case K_GET_ALL:
                r = sd_bus_call_method(bus, DEST, t.object, "org.freedesktop.DBus.Properties", "GetAll", &error,
                                       &reply, "s", SUBVOLUME_IFACE);
                break;
        default:
                r = sd_bus_call_method(bus, DEST, MANAGER, MANAGER_IFACE, "GetSubvolumeByPath", &error, &reply, "s",
                                       t.access);
                break;
        }
        if (r < 0)
                count_error(s, kind, error.name ?: strerror(-r), t.stable);
        else
                record(s, kind, now_usec() - start);
done:
        if (fd >= 0)
                close(fd);
        sd_bus_error_free(&error);
        sd_bus_message_unref(reply);
        free(t.object);
        free(t.access);
}

static int connect_bus(sd_bus **ret) {
        int r = sd_bus_open_system(ret);

        if (r < 0)
                fprintf(stderr, "loadgen: cannot connect to the bus: %s\n", strerror(-r));
        return r;
}

static void *client(void *userdata) {
        Stats *s = userdata;
        unsigned seed = (unsigned) (uintptr_t) s ^ (unsigned) now_usec();
        sd_bus *bus;

        if (connect_bus(&bus) < 0) {
                count_error(s, K_GET, "connect", true);
                return NULL;
        }
        while (!stopping)
                one_call(bus, s, &seed);
        sd_bus_flush_close_unref(bus);
        return NULL;
}

static void *object_manager(void *userdata) {
        Stats *s = userdata;
        sd_bus *bus;

        if (connect_bus(&bus) < 0) {
                count_error(s, K_GMO, "connect", true);
                return NULL;
        }
        while (!stopping) {
                managed_objects(bus, s);
                for (unsigned waited = 0; waited < arg_gmo_ms && !stopping; waited += 10)
                        usleep(10 * 1000);
        }
        sd_bus_flush_close_unref(bus);
        return NULL;
}

/* ---- the report ---- */

static int compare_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        return x < y ? -1 : x > y;
}

static uint32_t rank(const uint32_t *v, size_t n, unsigned percent) {
        size_t i = (n * percent + 99) / 100;
        return n ? v[i ? i - 1 : 0] : 0;
}

int main(int argc, char *argv[]) {
        static const struct option options[] = {
                { "connections", required_argument, NULL, 'c' },
                { "seconds", required_argument, NULL, 's' },
                { "gmo-ms", required_argument, NULL, 'g' },
                { "stable", required_argument, NULL, 'S' },
                { "slow-subscriber", no_argument, NULL, 'l' },
                {}
        };
        sd_bus *slow = NULL, *bus = NULL;
        Stats *stats, total = {};
        pthread_t *threads;
        uint64_t start, elapsed, failed = 0;
        int c, r;

        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
                switch (c) {
                case 'c': arg_connections = (unsigned) atoi(optarg); break;
                case 's': arg_seconds = (unsigned) atoi(optarg); break;
                case 'g': arg_gmo_ms = (unsigned) atoi(optarg); break;
                case 'S':
                        arg_stable = xrealloc(arg_stable, (n_stable + 1) * sizeof(char *));
                        arg_stable[n_stable++] = optarg;
                        break;
                case 'l': arg_slow = true; break;
                default: return 2;
                }
        if (arg_connections == 0 || optind < argc) {
                fprintf(stderr, "usage: %s [--connections=N] [--seconds=S] [--gmo-ms=MS] [--stable=PREFIX]... "
                        "[--slow-subscriber]\n", argv[0]);
                return 2;
        }

        if (arg_slow) {
                /* Subscribes, then reads nothing: signals pile up in its socket and in the bus. */
                if (connect_bus(&slow) < 0)
                        return 2;
                r = sd_bus_call_method(slow, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                       "AddMatch", NULL, NULL, "s", "type='signal',sender='" DEST "'");
                if (r < 0) {
                        fprintf(stderr, "loadgen: AddMatch failed: %s\n", strerror(-r));
                        return 2;
                }
        }
        /* The first targets, before the clients start. */
        if (connect_bus(&bus) < 0)
                return 2;
        managed_objects(bus, &total);
        sd_bus_flush_close_unref(bus);
        if (n_targets == 0) {
                fprintf(stderr, "loadgen: no subvolumes to call\n");
                return 2;
        }

        stats = calloc(arg_connections + 1, sizeof(Stats));
        threads = calloc(arg_connections + 1, sizeof(pthread_t));
        if (!stats || !threads)
                return 2;
        start = now_usec();
        for (unsigned i = 0; i < arg_connections; i++)
                pthread_create(&threads[i], NULL, client, &stats[i]);
        pthread_create(&threads[arg_connections], NULL, object_manager, &stats[arg_connections]);
        while (now_usec() - start < (uint64_t) arg_seconds * 1000000)
                usleep(100 * 1000);
        stopping = true;
        for (unsigned i = 0; i <= arg_connections; i++)
                pthread_join(threads[i], NULL);
        elapsed = now_usec() - start;

        /* Merge. */
        for (unsigned i = 0; i <= arg_connections; i++) {
                Stats *s = &stats[i];

                for (int k = 0; k < _K_MAX; k++) {
                        for (size_t j = 0; j < s->n[k]; j++)
                                record(&total, k, s->usec[k][j]);
                        free(s->usec[k]);
                }
                /* count_error() counts gone and failed calls too. */
                for (size_t j = 0; j < s->n_errors; j++) {
                        for (uint64_t n = 0; n < s->errors[j].count; n++)
                                count_error(&total, s->errors[j].kind, s->errors[j].name, s->errors[j].stable);
                        free(s->errors[j].name);
                }
                free(s->errors);
        }
        for (int k = 0; k < _K_MAX; k++) {
                uint32_t *v = total.usec[k];
                size_t n = total.n[k];

                qsort(v, n, sizeof(uint32_t), compare_u32);
                printf("kind=%s calls=%zu per_s=%.0f p50_us=%u p99_us=%u max_us=%u gone=%" PRIu64 " refused=%" PRIu64
                       " failed=%" PRIu64 "\n", kind_names[k], n, n * 1e6 / (double) elapsed, rank(v, n, 50),
                       rank(v, n, 99), n ? v[n - 1] : 0, total.gone[k], total.refused[k], total.failed[k]);
                failed += total.failed[k];
        }
        for (size_t j = 0; j < total.n_errors; j++)
                printf("error kind=%s name=%s stable=%d count=%" PRIu64 "\n", kind_names[total.errors[j].kind],
                       total.errors[j].name, total.errors[j].stable, total.errors[j].count);

        if (slow) {
                /* Now read what reached it, and whether it is still connected. */
                uint64_t signals = 0;
                sd_bus_message *m = NULL;

                while ((r = sd_bus_process(slow, &m)) > 0) {
                        uint8_t type = 0;

                        if (m && sd_bus_message_get_type(m, &type) >= 0 && type == SD_BUS_MESSAGE_SIGNAL &&
                            !sd_bus_message_is_signal(m, "org.freedesktop.DBus.Local", "Disconnected"))
                                signals++;
                        m = sd_bus_message_unref(m);
                }
                printf("slow_subscriber signals=%" PRIu64 " disconnected=%d\n", signals, sd_bus_is_open(slow) <= 0);
                sd_bus_flush_close_unref(slow);
        }
        /* Everything freed: the sanitizer build checks loadgen for leaks too. */
        for (int k = 0; k < _K_MAX; k++)
                free(total.usec[k]);
        for (size_t j = 0; j < total.n_errors; j++)
                free(total.errors[j].name);
        free(total.errors);
        free(stats);
        free(threads);
        free(arg_stable);
        targets_free(targets, n_targets);
        fflush(stdout);
        return failed > 0;
}
