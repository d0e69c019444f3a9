/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus-space.h"
#include "bus-util.h"
#include "extent-map.h"
#include "util.h"

typedef struct ExclusiveCall {
        sd_bus_message *message;
        uint8_t uuid[16];        /* of its filesystem: the model may be replaced between steps */
        uint64_t *ids;
        ExtentQuery query;
        unsigned steps;
} ExclusiveCall;

struct BusSpace {
        Model **model;
        size_t step_extents;     /* BUS_SPACE_STEP_EXTENTS; a test may make it smaller */
        sd_event_source *step;   /* on while calls wait */
        /* Test only (SUBVOLD_TEST_SPACE_PAUSE_FD): the read end of a pipe;
         * each byte read lets one step run, its end lets them all. */
        int pause_fd;
        /* In the order they came: calls[0] is worked on.  Each on its
         * own: the map holds a pointer to the query of the first. */
        ExclusiveCall **calls;
        size_t n_calls, allocated_calls;
};

/* The map the query of @c runs on now; NULL when its filesystem is gone
 * or not measured any more. */
static ExtentMap *call_map(BusSpace *b, const ExclusiveCall *c) {
        Filesystem *fs = *b->model ? model_find_filesystem(*b->model, c->uuid) : NULL;

        return fs ? fs->extent_map : NULL;
}

static void call_done(BusSpace *b, ExclusiveCall *c) {
        extent_query_done(call_map(b, c), &c->query);
        sd_bus_message_unref(c->message);
        free(c->ids);
}

BusSpace *bus_space_free(BusSpace *b) {
        if (!b)
                return NULL;
        for (size_t i = 0; i < b->n_calls; i++) {
                call_done(b, b->calls[i]);
                free(b->calls[i]);
        }
        free(b->calls);
        sd_event_source_disable_unref(b->step);
        closep(&b->pause_fd);
        free(b);
        return NULL;
}

/* Works on the first call for one step; answers it when it is over. */
static int on_step(sd_event_source *source, void *userdata) {
        BusSpace *b = userdata;
        ExclusiveCall *c = b->calls[0];
        ExtentMap *map = call_map(b, c);
        uint64_t bytes = UINT64_MAX;
        int r;

        if (!map)
                r = -ENOENT;  /* unmounted, or quotas turned on: unknown, as for a set not measured */
        else {
                r = extent_query_step(map, &c->query, b->step_extents, &bytes);
                if (r == 0 && c->query.restarts >= BUS_SPACE_MAX_RESTARTS)
                        r = extent_query_step(map, &c->query, SIZE_MAX, &bytes);
        }
        c->steps++;
        if (r == 0)
                return 0;  /* the source stays on */
        log_debug("GetExclusiveBytes of %zu subvolume(s) answered in %u step(s), %u restart(s).", c->query.n, c->steps,
                  c->query.restarts);
        if (r == -ENOENT)
                /* A member not measured any more (read again, deleted). */
                r = sd_bus_reply_method_return(c->message, "t", UINT64_MAX);
        else if (r > 0)
                r = sd_bus_reply_method_return(c->message, "t", bytes);
        else
                r = sd_bus_reply_method_errno(c->message, r, NULL);
        if (r < 0)
                log_debug_errno(r, "Cannot answer GetExclusiveBytes: %m");
        call_done(b, c);
        free(c);
        memmove(b->calls, b->calls + 1, --b->n_calls * sizeof(ExclusiveCall *));
        if (b->n_calls == 0)
                return sd_event_source_set_enabled(source, SD_EVENT_OFF);
        return 0;
}

static int on_step_allowed(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        char byte;

        if (read(fd, &byte, 1) < 0)
                return 0;  /* EAGAIN: not yet */
        return on_step(source, userdata);
}

int bus_space_new(sd_event *event, Model **model, BusSpace **ret) {
        BusSpace *b = calloc(1, sizeof(BusSpace));
        int r;

        if (!b)
                return -ENOMEM;
        b->model = model;
        b->step_extents = BUS_SPACE_STEP_EXTENTS;
        b->pause_fd = -1;
        /* Test only: many steps on a small filesystem, and steps the test
         * lets run one by one. */
        const char *e = getenv("SUBVOLD_TEST_SPACE_STEP_EXTENTS");
        uint64_t v;
        if (e && parse_u64(e, &v) >= 0 && v > 0 && v <= BUS_SPACE_STEP_EXTENTS)
                b->step_extents = (size_t) v;
        e = getenv("SUBVOLD_TEST_SPACE_PAUSE_FD");
        if (e) {
                if (parse_u64(e, &v) < 0 || v > INT_MAX || fcntl((int) v, F_SETFL, O_NONBLOCK) < 0) {
                        bus_space_free(b);
                        return log_error_errno(EBADF, "SUBVOLD_TEST_SPACE_PAUSE_FD=%s is no open fd.", e);
                }
                b->pause_fd = (int) v;
                r = sd_event_add_io(event, &b->step, b->pause_fd, EPOLLIN, on_step_allowed, b);
        } else
                r = sd_event_add_defer(event, &b->step, on_step, b);
        if (r >= 0)
                r = sd_event_source_set_enabled(b->step, SD_EVENT_OFF);
        if (r < 0) {
                bus_space_free(b);
                return r;
        }
        *ret = b;
        return 0;
}

int bus_space_exclusive_bytes(BusSpace *b, sd_bus_message *message, const Filesystem *fs, uint64_t *ids, size_t n,
                              sd_bus_error *error) {
        const char *sender = sd_bus_message_get_sender(message);
        size_t from_sender = 0;
        ExclusiveCall *c;
        int r;

        for (size_t i = 0; i < b->n_calls; i++) {
                const char *other = sd_bus_message_get_sender(b->calls[i]->message);
                if (sender && other && strcmp(sender, other) == 0)
                        from_sender++;
        }
        if (b->n_calls >= BUS_SPACE_MAX_PENDING || from_sender >= BUS_SPACE_MAX_PENDING_PER_SENDER) {
                free(ids);
                return sd_bus_error_set(error, SD_BUS_ERROR_LIMITS_EXCEEDED,
                                        "Too many GetExclusiveBytes calls are waiting; try again when one is answered.");
        }
        r = grow_array(&b->calls, &b->allocated_calls, b->n_calls + 1, sizeof(ExclusiveCall *));
        c = r < 0 ? NULL : malloc(sizeof(ExclusiveCall));
        if (!c) {
                free(ids);
                return -ENOMEM;
        }
        *c = (ExclusiveCall) { .message = sd_bus_message_ref(message), .ids = ids,
                               .query = { .ids = ids, .n = n } };
        b->calls[b->n_calls++] = c;
        memcpy(c->uuid, fs->uuid, 16);
        (void) sd_event_source_set_enabled(b->step, SD_EVENT_ON);  /* a defer source: cannot fail once made */
        return 1;
}
