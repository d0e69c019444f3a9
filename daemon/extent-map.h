/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Which subvolumes refer to which data extents of one filesystem, kept so
 * that exclusive bytes follow every change without re-reading the
 * subvolumes that did not change.
 *
 * Per extent (its disk byte number): its size on disk, how many
 * subvolumes refer to it and the sum of their ids; while one subvolume
 * does, that sum is its id.  Per subvolume: its extents, referenced and
 * exclusive bytes.  The extents of a subvolume are kept packed (see
 * below): a snapshot of a large subvolume costs a few bytes per extent,
 * not a copy of its extent table.  The benchmark measures the cost. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct DataExtent {
        uint64_t bytenr;
        uint64_t bytes;          /* on disk: compressed size for compressed extents */
        uint64_t ram_bytes;      /* decompressed: the extent's whole length in files */
} DataExtent;

typedef struct ExtentUser {
        uint64_t id;             /* subvolume id */
        uint64_t generation, change_generation;  /* of the tree that was read */
        uint64_t inodes, referenced, exclusive;
        uint64_t logical_referenced;  /* as referenced, with each extent's ram_bytes */
        uint64_t scanned_usec;   /* when the tree was read */
        /* Created in a transaction that may still be running when it was
         * read: read again once the root tree shows a commit (its
         * fingerprint moved); see scanner.c. */
        bool tentative;
        /* The family it belongs to as a snapshot: an index in the map's
         * families (0: none).  Beside the bool, in what was padding. */
        uint32_t family;
        uint64_t tentative_fingerprint;
        /* The extents, sorted by bytenr and distinct, packed: per extent
         * the distance from the previous bytenr, the size and ram_bytes
         * less the size (zigzag: it may be less, as for a preallocated
         * extent nothing says otherwise), each a LEB128 varint.  Also the
         * scan cache's format. */
        uint8_t *packed;
        size_t packed_size, n_extents;
        uint64_t list_version;   /* moves whenever its extents are set */
        /* Figures about its snapshots as of the last complete state
         * (scanner.c), not kept in the scan cache; UINT64_MAX until then. */
        uint64_t written, snapshots_exclusive;
} ExtentUser;

/* The snapshots of one source subvolume (those whose ParentUuid is its
 * Uuid), and the bytes of the extents that only they refer to: its
 * SnapshotsExclusiveBytes, kept up to date with every reference that
 * comes or goes, as exclusive bytes are.  Each extent's slot keeps the
 * sum and the sum of squares of its referrers' family indexes: all of
 * them are in family F exactly when the sum is users * F and the sum of
 * squares users * F * F (the squared deviations from F sum to 0), exact
 * while users * F * F fits 64 bits: below EXTENT_FAMILIES_MAX families and
 * EXTENT_USERS_MAX users per map; past that the figures are unknown. */
#define EXTENT_FAMILIES_MAX (1u << 20)
#define EXTENT_USERS_MAX (1u << 24)

typedef struct ExtentFamily {
        uint64_t source;         /* the source's id; 0: a free index */
        uint64_t members;
        uint64_t exclusive;
        /* The source's WrittenBytes as the scanner last worked it out:
         * against snapshot written_newest, with the lists of both at
         * these versions. */
        uint64_t written, written_newest, written_version, written_newest_version;
} ExtentFamily;

typedef struct ExtentQuery ExtentQuery;

typedef struct ExtentMap {
        struct ExtentSlot *slots;   /* open addressing, bytenr 0 = empty */
        size_t n_slots, n_used;
        ExtentUser *users;          /* sorted by id */
        size_t n_users, allocated_users;
        size_t packed_bytes;        /* of all users' packed extents */
        ExtentQuery *query;         /* the one whose counts are in the table now */
        ExtentFamily *families;     /* by index; [0] unused */
        size_t n_families, allocated_families;
        struct ExtentFamilyKey *family_keys;  /* source -> index, sorted by source */
        size_t n_family_keys, allocated_family_keys;
        uint32_t *free_families;    /* indexes to give again */
        size_t n_free_families, allocated_free_families;
        uint64_t list_versions;     /* the last ExtentUser.list_version given */
} ExtentMap;

void extent_map_done(ExtentMap *m);

/* Replaces what subvolume @id refers to with @extents (sorted, distinct;
 * freed here) and @inodes; the exclusive bytes of every subvolume sharing
 * an extent with it are adjusted.  Returns 0 or -ENOMEM. */
int extent_map_set_user(ExtentMap *m, uint64_t id, uint64_t generation, uint64_t change_generation,
                        uint64_t inodes, uint64_t scanned_usec, DataExtent *extents, size_t n_extents);

/* The same with the extents already packed (ownership taken), as read
 * back from the scan cache: -EBADMSG unless @packed holds exactly
 * @n_extents extents in ascending order. */
int extent_map_set_user_packed(ExtentMap *m, uint64_t id, uint64_t generation, uint64_t change_generation,
                               uint64_t inodes, uint64_t scanned_usec, uint8_t *packed, size_t packed_size,
                               size_t n_extents);

/* Walks the packed extents of @u. */
typedef struct ExtentIter {
        const uint8_t *p, *end;
        uint64_t bytenr;
} ExtentIter;

static inline ExtentIter extent_iter(const ExtentUser *u) {
        /* A new user has no list yet: NULL + 0 is undefined in C. */
        return (ExtentIter) { .p = u->packed, .end = u->packed ? u->packed + u->packed_size : NULL };
}

/* The next extent into *@ret; false at the end or at bad data. */
bool extent_iter_next(ExtentIter *it, DataExtent *ret);

/* Makes user @id a snapshot of subvolume @source (0: of none that is
 * measured): O(its extents) when that changes, O(log users) otherwise.
 * Returns 1 when it moved, 0 when it was in that family already (or is
 * no user), or -ENOMEM / -E2BIG (more families than the sums allow): then
 * it is in no family. */
int extent_map_set_family(ExtentMap *m, uint64_t id, uint64_t source);

/* The family of @source's snapshots; NULL when none is in the map. */
ExtentFamily *extent_map_family(const ExtentMap *m, uint64_t source);

/* What deleting every snapshot of @source would free (its family's
 * exclusive bytes); 0 when it has none in the map. */
uint64_t extent_map_family_exclusive(const ExtentMap *m, uint64_t source);

/* The source whose family @u is in, or 0. */
static inline uint64_t extent_user_family_source(const ExtentMap *m, const ExtentUser *u) {
        return u->family ? m->families[u->family].source : 0;
}

/* Forgets subvolume @id (deleted): its extents stop counting. */
void extent_map_remove_user(ExtentMap *m, uint64_t id);

const ExtentUser *extent_map_find_user(const ExtentMap *m, uint64_t id);

/* Bytes of the extents @u refers to and @since does not (ZFS's
 * written@snapshot): one merge walk of the two lists, O(extents of
 * both), no table lookups. */
uint64_t extent_map_written_since(const ExtentUser *u, const ExtentUser *since);

/* Bytes of the extents that a set of users refer to and no other user
 * does: what deleting them all would free.  One walk of their lists with
 * one table lookup per extent, and one over the distinct extents met
 * (noted in an array of 8 bytes per distinct extent while the query
 * runs): O(sum of their extents), done in steps of a bounded number of
 * extents, so that an event loop can serve others in between.
 *
 * The query keeps its counts in the table's scratch counters, so one
 * query at a time per map.  A change of the map (a user set or removed,
 * the map freed, another query) takes them back and the query starts
 * over at its next step: its answer is always that of one state of the
 * map. */
struct ExtentQuery {
        const uint64_t *ids;     /* the set: distinct user ids (the caller's) */
        size_t n;
        /* Progress; all 0 for a query not begun. */
        size_t member;           /* walking ids[member] ... */
        ExtentIter it;
        bool walking;
        size_t summed;           /* ... then the distinct extents met, seen[summed ..) */
        uint64_t bytes;
        struct ExtentSlot **seen;
        size_t n_seen, allocated_seen;
        unsigned restarts;       /* how often a change of the map took its counts */
};

/* Runs @q on @m for about @budget extents.  Returns 1 with the answer in
 * *@ret, 0 when there is more to do (call again, with the same map as it
 * is then), -ENOENT when a member is not a user of @m (not measured, or
 * gone since), -ENOMEM.  After a result other than 0, @q is over: call
 * extent_query_done(). */
int extent_query_step(ExtentMap *m, ExtentQuery *q, size_t budget, uint64_t *ret);

/* Takes @q's counts back from @m (which may be NULL when the map is
 * gone: its table went with it) and frees its memory.  @q may be run
 * again from the start. */
void extent_query_done(ExtentMap *m, ExtentQuery *q);

/* Into *@ret, the answer for the @n users of @set (distinct, of @m), at
 * once: a query run to its end. */
int extent_map_exclusive_of(ExtentMap *m, const ExtentUser *const *set, size_t n, uint64_t *ret);

/* Number of distinct extents in the map. */
static inline size_t extent_map_size(const ExtentMap *m) {
        return m->n_used;
}

/* The memory the map holds: its table, its users and their extents. */
size_t extent_map_memory(const ExtentMap *m);

/* The most extent_map_memory() can rise above what it is now, at any
 * moment, while extent_map_set_user() makes @extents (sorted, distinct)
 * those of user @id: the new packed list (the old one goes only after
 * it), new table slots (with both tables alive while one is copied into
 * the other) and a larger user array. */
size_t extent_map_growth(const ExtentMap *m, uint64_t id, const DataExtent *extents, size_t n);
