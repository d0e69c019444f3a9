/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Which subvolumes refer to which data extents of one filesystem, kept so
 * that exclusive bytes follow every change without re-reading the
 * subvolumes that did not change.
 *
 * Per extent (its disk byte number): its size on disk, how many
 * subvolumes refer to it and the sum of their ids; while one subvolume
 * does, that sum is its id.  Per subvolume: its extents, referenced and
 * exclusive bytes.  About 40 bytes per extent in the map plus 16 per
 * (subvolume, extent) pair. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct DataExtent {
        uint64_t bytenr;
        uint64_t bytes;          /* on disk: compressed size for compressed extents */
} DataExtent;

typedef struct ExtentUser {
        uint64_t id;             /* subvolume id */
        uint64_t generation, change_generation;  /* of the tree that was read */
        uint64_t inodes, referenced, exclusive;
        uint64_t scanned_usec;   /* when the tree was read */
        /* Read while the running transaction could still change it: read
         * again once the root tree shows that transaction committed (its
         * fingerprint moved); see scanner.c. */
        bool tentative;
        uint64_t tentative_fingerprint;
        DataExtent *extents;     /* sorted by bytenr, distinct */
        size_t n_extents;
} ExtentUser;

typedef struct ExtentMap {
        struct ExtentSlot *slots;   /* open addressing, bytenr 0 = empty */
        size_t n_slots, n_used;
        ExtentUser *users;          /* sorted by id */
        size_t n_users, allocated_users;
} ExtentMap;

void extent_map_done(ExtentMap *m);

/* Replaces what subvolume @id refers to with @extents (sorted, distinct;
 * ownership taken) and @inodes; the exclusive bytes of every subvolume
 * sharing an extent with it are adjusted.  Returns 0 or -ENOMEM. */
int extent_map_set_user(ExtentMap *m, uint64_t id, uint64_t generation, uint64_t change_generation,
                        uint64_t inodes, uint64_t scanned_usec, DataExtent *extents, size_t n_extents);

/* Forgets subvolume @id (deleted): its extents stop counting. */
void extent_map_remove_user(ExtentMap *m, uint64_t id);

const ExtentUser *extent_map_find_user(const ExtentMap *m, uint64_t id);

/* Number of distinct extents in the map. */
static inline size_t extent_map_size(const ExtentMap *m) {
        return m->n_used;
}
