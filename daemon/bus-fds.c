/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>

#include "bus-fds.h"
#include "util.h"

/* A message held until its fds are swapped for /dev/null. */
typedef struct Held {
        sd_bus_message *message;
        int fds[16];             /* dbus-daemon passes 16 at the most by default */
        size_t n_fds, done;
} Held;

typedef struct Helper {
        pthread_t thread;
        bool started;
        int slot;                /* the fd to swap; -1: idle */
        bool took;               /* it has read @slot and is about to swap it */
} Helper;

struct BusFds {
        sd_bus_slot *filter;
        sd_event_source *release;  /* runs after the held messages were dispatched */
        sd_event_source *wakeup;   /* a helper came free */
        int wakeup_fd;
        int devnull;
        Held *held;
        size_t n_held, allocated_held;

        pthread_mutex_t lock;
        pthread_cond_t changed;
        bool stop;
        Helper helpers[BUS_FDS_MAX_STUCK];
};

static void *helper_run(void *userdata) {
        BusFds *f = ((void **) userdata)[0];
        Helper *h = ((void **) userdata)[1];
        uint64_t one = 1;

        free(userdata);
        pthread_mutex_lock(&f->lock);
        for (;;) {
                int slot;

                while (!f->stop && h->slot < 0)
                        pthread_cond_wait(&f->changed, &f->lock);
                if (f->stop)
                        break;
                slot = h->slot;
                h->took = true;
                pthread_cond_broadcast(&f->changed);
                pthread_mutex_unlock(&f->lock);
                /* /dev/null takes the slot at once; then the client's file
                 * is closed here, however long its flush takes. */
                (void) dup3(f->devnull, slot, 0);
                pthread_mutex_lock(&f->lock);
                h->slot = -1;
                h->took = false;
                (void) write(f->wakeup_fd, &one, sizeof one);
        }
        pthread_mutex_unlock(&f->lock);
        return NULL;
}

/* Under lock: an idle helper, started if need be, or NULL. */
static Helper *helper_get(BusFds *f) {
        for (size_t i = 0; i < BUS_FDS_MAX_STUCK; i++) {
                Helper *h = &f->helpers[i];
                void **args;

                if (h->started && h->slot < 0)
                        return h;
                if (h->started)
                        continue;
                args = malloc(2 * sizeof(void *));
                if (!args)
                        return NULL;
                args[0] = f;
                args[1] = h;
                h->slot = -1;
                if (pthread_create(&h->thread, NULL, helper_run, args) != 0) {
                        free(args);
                        return NULL;
                }
                h->started = true;
                return h;
        }
        return NULL;
}

/* Swaps @fd for /dev/null without closing the client's file here.
 * -EBUSY: every helper is stuck; try again when one comes free. */
static int swap_for_devnull(BusFds *f, int fd) {
        Helper *h;
        int flags = fcntl(fd, F_GETFD);

        if (flags < 0)
                return 0;  /* not open (any more): nothing to do */
        /* The mark that tells when the slot was swapped: dup3() without
         * O_CLOEXEC clears it. */
        if (!(flags & FD_CLOEXEC) && fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                return -errno;
        pthread_mutex_lock(&f->lock);
        h = helper_get(f);
        if (!h) {
                pthread_mutex_unlock(&f->lock);
                return -EBUSY;
        }
        h->slot = fd;
        pthread_cond_broadcast(&f->changed);
        while (h->slot >= 0 && !h->took)  /* it may be done already */
                pthread_cond_wait(&f->changed, &f->lock);
        pthread_mutex_unlock(&f->lock);
        /* The helper is about to call dup3(): the swap itself takes no time. */
        for (;;) {
                flags = fcntl(fd, F_GETFD);
                if (flags < 0 || !(flags & FD_CLOEXEC))
                        break;
                sched_yield();
        }
        (void) fcntl(fd, F_SETFD, FD_CLOEXEC);
        return 0;
}

/* Lets go of what can be let go of, in order. */
static void release_held(BusFds *f) {
        size_t n = 0;

        for (; n < f->n_held; n++) {
                Held *h = &f->held[n];

                while (h->done < h->n_fds && swap_for_devnull(f, h->fds[h->done]) != -EBUSY)
                        h->done++;
                if (h->done < h->n_fds)
                        break;  /* the wakeup goes on with it */
                sd_bus_message_unref(h->message);
        }
        memmove(f->held, f->held + n, (f->n_held - n) * sizeof(Held));
        f->n_held -= n;
}

static int on_release(sd_event_source *s, void *userdata) {
        release_held(userdata);
        return 0;
}

static int on_wakeup(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        uint64_t n;

        (void) read(fd, &n, sizeof n);
        release_held(userdata);
        return 0;
}

/* Collects the fds that the rest of the current container refers to;
 * what cannot hold one is skipped whole. */
static int collect_fds(sd_bus_message *m, Held *h) {
        for (;;) {
                const char *contents;
                char type, whole[SD_BUS_MAXIMUM_SIGNATURE_LENGTH + 3];
                int r = sd_bus_message_peek_type(m, &type, &contents);

                if (r <= 0)
                        return r;
                if (type == SD_BUS_TYPE_UNIX_FD) {
                        int fd;

                        r = sd_bus_message_read_basic(m, type, &fd);
                        if (r < 0)
                                return r;
                        for (size_t i = 0; i < h->n_fds && fd >= 0; i++)
                                if (h->fds[i] == fd)
                                        fd = -1;
                        if (fd >= 0 && h->n_fds < ELEMENTSOF(h->fds))
                                h->fds[h->n_fds++] = fd;
                } else if (!contents || !strpbrk(contents, "hv")) {
                        if (type == SD_BUS_TYPE_ARRAY)
                                snprintf(whole, sizeof whole, "a%s", contents);
                        else if (type == SD_BUS_TYPE_STRUCT)
                                snprintf(whole, sizeof whole, "(%s)", contents);
                        else if (type == SD_BUS_TYPE_DICT_ENTRY)
                                snprintf(whole, sizeof whole, "{%s}", contents);
                        else
                                snprintf(whole, sizeof whole, "%c", type);
                        r = sd_bus_message_skip(m, whole);
                } else {
                        r = sd_bus_message_enter_container(m, type, contents);
                        if (r >= 0)
                                r = collect_fds(m, h);
                        if (r >= 0)
                                r = sd_bus_message_exit_container(m);
                }
                if (r < 0)
                        return r;
        }
}

static int on_message(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        BusFds *f = userdata;
        const char *signature = sd_bus_message_get_signature(m, true);
        Held h = {};

        if (!signature || !strpbrk(signature, "hv"))
                return 0;
        if (collect_fds(m, &h) < 0 || h.n_fds == 0 || f->n_held >= BUS_FDS_MAX_HELD ||
            grow_array(&f->held, &f->allocated_held, f->n_held + 1, sizeof(Held)) < 0) {
                (void) sd_bus_message_rewind(m, true);
                return 0;
        }
        (void) sd_bus_message_rewind(m, true);
        h.message = sd_bus_message_ref(m);
        f->held[f->n_held++] = h;
        (void) sd_event_source_set_enabled(f->release, SD_EVENT_ONESHOT);
        return 0;  /* dispatched as usual */
}

int bus_fds_new(sd_bus *bus, sd_event *event, BusFds **ret) {
        BusFds *f = calloc(1, sizeof(BusFds));
        int r;

        if (!f)
                return -ENOMEM;
        pthread_mutex_init(&f->lock, NULL);
        pthread_cond_init(&f->changed, NULL);
        f->devnull = open("/dev/null", O_RDWR | O_CLOEXEC | O_NOCTTY);
        f->wakeup_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (f->devnull < 0 || f->wakeup_fd < 0) {
                r = -errno;
                goto fail;
        }
        r = sd_event_add_io(event, &f->wakeup, f->wakeup_fd, EPOLLIN, on_wakeup, f);
        if (r >= 0)
                r = sd_event_add_defer(event, &f->release, on_release, f);
        if (r >= 0)
                r = sd_event_source_set_enabled(f->release, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_bus_add_filter(bus, &f->filter, on_message, f);
        if (r < 0)
                goto fail;
        *ret = f;
        return 0;
fail:
        bus_fds_free(f);
        return r;
}

BusFds *bus_fds_free(BusFds *f) {
        bool stuck = false;

        if (!f)
                return NULL;
        sd_bus_slot_unref(f->filter);
        sd_event_source_disable_unref(f->release);
        sd_event_source_disable_unref(f->wakeup);
        pthread_mutex_lock(&f->lock);
        f->stop = true;
        pthread_cond_broadcast(&f->changed);
        for (size_t i = 0; i < BUS_FDS_MAX_STUCK; i++)
                stuck = stuck || (f->helpers[i].started && f->helpers[i].slot >= 0);
        pthread_mutex_unlock(&f->lock);
        if (stuck) {
                /* A helper still waits for a close and uses @f when that
                 * ends, and what is held may be as slow to close.  The
                 * process is on its way out: leave them be. */
                for (size_t i = 0; i < BUS_FDS_MAX_STUCK; i++)
                        if (f->helpers[i].started)
                                pthread_detach(f->helpers[i].thread);
                return NULL;
        }
        for (size_t i = 0; i < BUS_FDS_MAX_STUCK; i++)
                if (f->helpers[i].started)
                        pthread_join(f->helpers[i].thread, NULL);
        for (size_t i = 0; i < f->n_held; i++)
                sd_bus_message_unref(f->held[i].message);
        free(f->held);
        pthread_cond_destroy(&f->changed);
        pthread_mutex_destroy(&f->lock);
        closep(&f->devnull);
        closep(&f->wakeup_fd);
        free(f);
        return NULL;
}
