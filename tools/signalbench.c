/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* signalbench - how long a change to a btrfs takes to reach a client of
 * subvold as a signal: five kinds of change (create, snapshot, read-only
 * flip, rename, delete), each timed from the return of the kernel call that
 * made it to the arrival of the signal that tells it, as a client subscribed
 * to subvold's signals receives it.
 *
 * usage: signalbench ADDRESS FS_OBJECT MOUNTPOINT ROUNDS GAP_MS
 *   FS_OBJECT: subvold's object path of the filesystem at MOUNTPOINT.
 *   Between two changes it waits GAP_MS plus a random 0 to GAP_MS/2, so
 *   that the changes do not fall in step with subvold's timers.
 * prints a row per kind: kind n median_ms p90_ms p99_ms max_ms, then
 * a line "timeouts=N" (signals that did not come within 10 s). */
#define _GNU_SOURCE
#include <btrfsutil.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <systemd/sd-bus.h>

#define TIMEOUT_USEC (10 * 1000000ULL)

enum { CREATE, SNAPSHOT, READ_ONLY, RENAME, DELETE, N_KINDS };
static const char *const kind_name[N_KINDS] = { "create", "snapshot", "read-only", "rename", "delete" };

/* What the next signal must be to end the wait. */
static struct {
        const char *member;    /* InterfacesAdded, InterfacesRemoved or PropertiesChanged */
        char path[256];        /* the object it is about */
        const char *property;  /* for PropertiesChanged */
        uint64_t seen_usec;    /* 0 until it came */
} awaited;

static uint64_t now_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void die(const char *what, int r) {
        fprintf(stderr, "signalbench: %s: %s\n", what, strerror(r < 0 ? -r : r));
        exit(1);
}

static bool properties_name(sd_bus_message *m, const char *property) {
        const char *interface, *name;
        bool found = false;

        if (sd_bus_message_read(m, "s", &interface) < 0 || sd_bus_message_enter_container(m, 'a', "{sv}") < 0)
                return false;
        while (!found && sd_bus_message_enter_container(m, 'e', "sv") > 0) {
                if (sd_bus_message_read(m, "s", &name) < 0)
                        return false;
                found = strcmp(name, property) == 0;
                if (sd_bus_message_skip(m, "v") < 0 || sd_bus_message_exit_container(m) < 0)
                        return false;
        }
        if (found)
                return true;
        if (sd_bus_message_exit_container(m) < 0 || sd_bus_message_enter_container(m, 'a', "s") < 0)
                return false;
        while (sd_bus_message_read(m, "s", &name) > 0)
                if (strcmp(name, property) == 0)
                        return true;
        return false;
}

static int on_signal(sd_bus_message *m, void *userdata __attribute__((unused)),
                     sd_bus_error *error __attribute__((unused))) {
        const char *path;

        if (awaited.seen_usec || !awaited.member || strcmp(sd_bus_message_get_member(m), awaited.member) != 0)
                return 0;
        if (awaited.property) {
                if (strcmp(sd_bus_message_get_path(m), awaited.path) != 0 || !properties_name(m, awaited.property))
                        return 0;
        } else if (sd_bus_message_read(m, "o", &path) < 0 || strcmp(path, awaited.path) != 0)
                return 0;
        awaited.seen_usec = now_usec();
        return 0;
}

/* Drops whatever came before the change: the next signal that matches must be about it. */
static void drain(sd_bus *bus) {
        while (sd_bus_process(bus, NULL) > 0)
                ;
}

static void expect(const char *member, const char *fs_object, uint64_t id, const char *property) {
        awaited.member = member;
        awaited.property = property;
        awaited.seen_usec = 0;
        snprintf(awaited.path, sizeof awaited.path, "%s/%" PRIu64, fs_object, id);
}

/* The time from @changed until the awaited signal, in µs; 0 on a timeout. */
static uint64_t wait_signal(sd_bus *bus, uint64_t changed) {
        int r;

        while (!awaited.seen_usec) {
                uint64_t now = now_usec();

                if (now >= changed + TIMEOUT_USEC) {
                        fprintf(stderr, "signalbench: no %s for %s\n", awaited.member, awaited.path);
                        awaited.member = NULL;
                        return 0;
                }
                r = sd_bus_process(bus, NULL);
                if (r < 0)
                        die("reading the bus", r);
                if (r == 0 && (r = sd_bus_wait(bus, changed + TIMEOUT_USEC - now)) < 0)
                        die("waiting on the bus", r);
        }
        awaited.member = NULL;
        return awaited.seen_usec - changed;
}

static uint64_t subvolume_id(const char *path) {
        uint64_t id;

        if (btrfs_util_subvolume_id(path, &id) != BTRFS_UTIL_OK)
                die(path, errno);
        return id;
}

static void pause_between(unsigned gap_ms) {
        usleep((useconds_t) (gap_ms + (unsigned) random() % (gap_ms / 2 + 1)) * 1000);
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static double percentile_ms(const uint64_t *v, size_t n, double p) {
        size_t i = (size_t) (p * (double) (n - 1) + 0.5);

        return n ? (double) v[i] / 1000.0 : 0;
}

/* Latencies per kind, in µs. */
static uint64_t *latency[N_KINDS];
static size_t n_latency[N_KINDS], timeouts;

/* Waits for the signal about @id that tells of a change made at @changed,
 * records how long it took, and lets the next change wait. */
static void measure(sd_bus *bus, int kind, uint64_t changed, const char *member, const char *fs_object,
                    uint64_t id, const char *property, unsigned gap_ms) {
        uint64_t us;

        expect(member, fs_object, id, property);
        us = wait_signal(bus, changed);
        if (us)
                latency[kind][n_latency[kind]++] = us;
        else
                timeouts++;
        pause_between(gap_ms);
}

int main(int argc, char **argv) {
        sd_bus *bus = NULL;
        const char *fs_object, *mnt;
        unsigned rounds, gap_ms;
        int r;

        if (argc != 6) {
                fprintf(stderr, "usage: signalbench ADDRESS FS_OBJECT MOUNTPOINT ROUNDS GAP_MS\n");
                return 2;
        }
        fs_object = argv[2];
        mnt = argv[3];
        rounds = (unsigned) strtoul(argv[4], NULL, 10);
        gap_ms = (unsigned) strtoul(argv[5], NULL, 10);
        for (int k = 0; k < N_KINDS; k++)
                if (!(latency[k] = calloc(rounds ? rounds : 1, sizeof(uint64_t))))
                        die("allocating", ENOMEM);
        srandom((unsigned) getpid());

        if ((r = sd_bus_new(&bus)) < 0 || (r = sd_bus_set_address(bus, argv[1])) < 0 ||
            (r = sd_bus_set_bus_client(bus, 1)) < 0 || (r = sd_bus_start(bus)) < 0)
                die("connecting to the bus", r);
        r = sd_bus_add_match(bus, NULL, "type='signal',sender='org.subvold.Subvold1'", on_signal, NULL);
        if (r < 0)
                die("subscribing", r);

        /* Each change: drop what came before, change, take the time, then
         * read the bus (nothing reads it in between, so the signal cannot
         * be missed while the object path is worked out). */
        for (unsigned i = 0; i < rounds; i++) {
                char a[4096], b[4096], s[4096];
                uint64_t t, id_a, id_s;

                snprintf(a, sizeof a, "%s/signalbench-%u", mnt, i);
                snprintf(b, sizeof b, "%s/signalbench-%u.renamed", mnt, i);
                snprintf(s, sizeof s, "%s/signalbench-%u.snapshot", mnt, i);

                drain(bus);
                if (btrfs_util_create_subvolume(a, 0, NULL, NULL) != BTRFS_UTIL_OK)
                        die(a, errno);
                t = now_usec();
                id_a = subvolume_id(a);
                measure(bus, CREATE, t, "InterfacesAdded", fs_object, id_a, NULL, gap_ms);

                drain(bus);
                if (btrfs_util_create_snapshot(a, s, 0, NULL, NULL) != BTRFS_UTIL_OK)
                        die(s, errno);
                t = now_usec();
                id_s = subvolume_id(s);
                measure(bus, SNAPSHOT, t, "InterfacesAdded", fs_object, id_s, NULL, gap_ms);

                drain(bus);
                if (btrfs_util_set_subvolume_read_only(s, true) != BTRFS_UTIL_OK)
                        die(s, errno);
                measure(bus, READ_ONLY, now_usec(), "PropertiesChanged", fs_object, id_s, "ReadOnly", gap_ms);

                drain(bus);
                if (rename(a, b) < 0)
                        die(b, errno);
                measure(bus, RENAME, now_usec(), "PropertiesChanged", fs_object, id_a, "Path", gap_ms);

                drain(bus);
                if (btrfs_util_delete_subvolume(b, 0) != BTRFS_UTIL_OK)
                        die(b, errno);
                measure(bus, DELETE, now_usec(), "InterfacesRemoved", fs_object, id_a, NULL, gap_ms);

                /* Not measured: only so that the rounds leave nothing behind. */
                drain(bus);
                if (btrfs_util_delete_subvolume(s, 0) != BTRFS_UTIL_OK)
                        die(s, errno);
                expect("InterfacesRemoved", fs_object, id_s, NULL);
                (void) wait_signal(bus, now_usec());
                pause_between(gap_ms);
        }

        for (int k = 0; k < N_KINDS; k++) {
                size_t n = n_latency[k];

                qsort(latency[k], n, sizeof(uint64_t), cmp_u64);
                printf("%s %zu %.1f %.1f %.1f %.1f\n", kind_name[k], n, percentile_ms(latency[k], n, 0.5),
                       percentile_ms(latency[k], n, 0.9), percentile_ms(latency[k], n, 0.99),
                       n ? (double) latency[k][n - 1] / 1000.0 : 0);
                free(latency[k]);
        }
        printf("timeouts=%zu\n", timeouts);
        sd_bus_flush_close_unref(bus);
        return timeouts ? 1 : 0;
}
