/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* spacebench: what the snapshot-space questions cost on the scanner's
 * extent map, without a filesystem (issue 15's benchmark).  A subvolume
 * of 500,000 extents and 1,000 snapshots of it, each sharing 1,000 of its
 * extents (a window that moves along) and holding 500 of its own: 1,000,000
 * distinct extents, 2,000,000 references.  Times, best of 5:
 *   exclusive_half   GetExclusiveBytes of every other snapshot (500), at once
 *   stepped_half     the same in steps of BUS_SPACE_STEP_EXTENTS, as subvold
 *                    answers it, and its longest step (step_max): how long
 *                    other calls may wait behind it
 *   written_since    GetWrittenSince of the subvolume and its newest snapshot
 *   delete_update    one snapshot deleted: the map updated (each family's
 *                    exclusive bytes with it) and the subvolume's
 *                    SnapshotsExclusiveBytes read (what scanner.c does
 *                    then; its WrittenBytes stays, the newest snapshot
 *                    being the same)
 *   rescan_update    one snapshot's tree read again (its list set anew)
 *   derive_whole_ms  for comparison, deriving SnapshotsExclusiveBytes
 *                    from scratch as before: a query over the family
 * Prints: <name>_ms=<milliseconds> ... */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bus-space.h"
#include "extent-map.h"

#define SOURCE_EXTENTS 500000
#define SNAPSHOTS 1000
#define SHARED 1000
#define OWN 500

static double now_ms(void) {
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double) t.tv_sec * 1e3 + (double) t.tv_nsec / 1e6;
}

static DataExtent *extent_array(size_t n) {
        DataExtent *e = calloc(n, sizeof(DataExtent));

        if (!e) {
                perror("spacebench");
                exit(1);
        }
        return e;
}

static void build(ExtentMap *m) {
        DataExtent *e = extent_array(SOURCE_EXTENTS);

        /* 4 KiB extents 8 KiB apart; each snapshot's own ones after the source's. */
        for (size_t i = 0; i < SOURCE_EXTENTS; i++)
                e[i] = (DataExtent) { .bytenr = (i + 1) * 8192, .bytes = 4096 };
        if (extent_map_set_user(m, 256, 1, 1, 1, 0, e, SOURCE_EXTENTS) < 0)
                exit(1);
        for (size_t s = 0; s < SNAPSHOTS; s++) {
                size_t first = s * (SOURCE_EXTENTS - SHARED) / SNAPSHOTS;

                e = extent_array(SHARED + OWN);
                for (size_t i = 0; i < SHARED; i++)
                        e[i] = (DataExtent) { .bytenr = (first + i + 1) * 8192, .bytes = 4096 };
                for (size_t i = 0; i < OWN; i++)
                        e[SHARED + i] = (DataExtent) { .bytenr = (SOURCE_EXTENTS + 1 + s * OWN + i) * 8192, .bytes = 4096 };
                if (extent_map_set_user(m, 257 + s, 1, 1, 1, 0, e, SHARED + OWN) < 0 ||
                    extent_map_set_family(m, 257 + s, 256) < 0)
                        exit(1);
        }
}

static double best(double a, double b) {
        return a < b ? a : b;
}

int main(void) {
        double exclusive_half = 1e9, stepped_half = 1e9, step_max = 1e9, written_since = 1e9, delete_update = 1e9,
               rescan_update = 1e9, derive_whole = 1e9;
        static uint64_t ids[SNAPSHOTS];
        static const ExtentUser *set[SNAPSHOTS];
        uint64_t bytes;

        for (int run = 0; run < 5; run++) {
                ExtentMap m = {};
                const ExtentUser *source;
                size_t n = 0;
                double t;

                build(&m);
                source = extent_map_find_user(&m, 256);
                for (size_t s = 0; s < SNAPSHOTS; s += 2)
                        set[n++] = extent_map_find_user(&m, 257 + s);
                t = now_ms();
                if (extent_map_exclusive_of(&m, set, n, &bytes) < 0)
                        return 1;
                exclusive_half = best(exclusive_half, now_ms() - t);

                uint64_t stepped = 0;
                double longest = 0, total = 0;
                ExtentQuery q = { .ids = ids, .n = n };
                int r;
                for (size_t i = 0; i < n; i++)
                        ids[i] = set[i]->id;
                do {
                        t = now_ms();
                        r = extent_query_step(&m, &q, BUS_SPACE_STEP_EXTENTS, &stepped);
                        t = now_ms() - t;
                        total += t;
                        longest = t > longest ? t : longest;
                } while (r == 0);
                extent_query_done(&m, &q);
                if (r < 0 || stepped != bytes)
                        return 1;
                stepped_half = best(stepped_half, total);
                step_max = best(step_max, longest);

                t = now_ms();
                bytes = extent_map_written_since(source, extent_map_find_user(&m, 256 + SNAPSHOTS));
                written_since = best(written_since, now_ms() - t);

                t = now_ms();
                n = 0;
                for (size_t s = 1; s < SNAPSHOTS; s++)
                        set[n++] = extent_map_find_user(&m, 257 + s);
                if (extent_map_exclusive_of(&m, set, n, &bytes) < 0)
                        return 1;
                derive_whole = best(derive_whole, now_ms() - t);

                t = now_ms();
                extent_map_remove_user(&m, 257);
                uint64_t family = extent_map_family_exclusive(&m, 256);
                delete_update = best(delete_update, now_ms() - t);
                if (family != bytes)
                        return 1;  /* kept and from scratch disagree */

                /* Snapshot 258 read again, as it was. */
                const ExtentUser *u = extent_map_find_user(&m, 258);
                DataExtent *again = extent_array(u->n_extents);
                ExtentIter it = extent_iter(u);
                for (size_t i = 0; extent_iter_next(&it, &again[i]); i++)
                        ;
                t = now_ms();
                if (extent_map_set_user(&m, 258, 2, 2, 1, 0, again, SHARED + OWN) < 0)
                        return 1;
                family = extent_map_family_exclusive(&m, 256);
                rescan_update = best(rescan_update, now_ms() - t);
                if (family != bytes)
                        return 1;
                extent_map_done(&m);
        }
        printf("exclusive_half_ms=%.1f stepped_half_ms=%.1f step_max_ms=%.2f written_since_ms=%.1f delete_update_ms=%.3f "
               "rescan_update_ms=%.3f derive_whole_ms=%.1f\n",
               exclusive_half, stepped_half, step_max, written_since, delete_update, rescan_update, derive_whole);
        return 0;
}
