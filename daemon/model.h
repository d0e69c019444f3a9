/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The published model: btrfs filesystems keyed by UUID, their subvolumes
 * keyed by id, and the mount table used to turn paths into subvolumes.
 * Pure data; the kernel side (discover.c) fills it, the bus side reads it. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "mounts.h"

typedef struct Filesystem Filesystem;
struct ExtentMap;

/* "Unknown" for sizes and counts, and "no limit" for limits: the systemd
 * convention, so 0 always means zero. */
#define USAGE_UNKNOWN UINT64_MAX

/* Subvolumes with longer paths are not published: every object must fit
 * in a bus message, whatever names and nesting a user chose.  Four times
 * PATH_MAX, so nothing a path-based tool can reach is left out. */
#define SUBVOLUME_PATH_MAX (16 * 1024)

typedef enum UsageSource {
        USAGE_SOURCE_NONE,
        USAGE_SOURCE_QGROUP,
        USAGE_SOURCE_SIMPLE_QUOTA,
        USAGE_SOURCE_SCAN,
        _USAGE_SOURCE_MAX,
} UsageSource;

typedef enum QuotaMode {
        QUOTA_MODE_DISABLED,
        QUOTA_MODE_QGROUP,
        QUOTA_MODE_SIMPLE,
        _QUOTA_MODE_MAX,
} QuotaMode;

/* What a subvolume costs, as far as it is known. */
typedef struct Usage {
        uint64_t referenced;           /* bytes */
        uint64_t exclusive;            /* bytes */
        uint64_t inodes;
        uint64_t referenced_limit;     /* bytes, USAGE_UNKNOWN: no limit */
        uint64_t exclusive_limit;      /* bytes, USAGE_UNKNOWN: no limit */
        UsageSource source;
        bool consistent;
        uint64_t updated_usec;         /* when read; 0: never */
} Usage;

#define USAGE_NONE ((Usage) { USAGE_UNKNOWN, USAGE_UNKNOWN, USAGE_UNKNOWN, USAGE_UNKNOWN, USAGE_UNKNOWN, \
                              USAGE_SOURCE_NONE, true, 0 })

/* The numbers statfs() reports, in the units it uses. */
typedef struct StatfsInfo {
        uint64_t block_size;
        uint64_t blocks, blocks_free, blocks_available;
        uint64_t files, files_free;
        uint64_t name_max;
        uint64_t flags;
} StatfsInfo;

typedef struct Subvolume {
        Filesystem *filesystem;
        uint64_t id;
        uint64_t parent_id;            /* 0 for the top level */
        char *path;                    /* from the top level, "/" for the top level */
        uint8_t uuid[16];
        uint8_t parent_uuid[16];       /* set: this is a snapshot */
        uint8_t received_uuid[16];
        uint64_t generation;
        uint64_t change_generation;    /* ctransid */
        uint64_t creation_generation;  /* otransid */
        uint64_t creation_usec;        /* otime */
        bool read_only;
        const struct Subvolume *snapshot_source;  /* same filesystem, or NULL */
        /* The top of the snapshot chain this one is in (following
         * snapshot_source up): the same for every member of a family of
         * subvolumes linked by ParentUuid, in either direction. */
        const struct Subvolume *family_root;
        Usage usage;
        /* From the scanner's extent map (quotas off), USAGE_UNKNOWN
         * otherwise: bytes referenced and not by its newest snapshot,
         * what deleting all of its snapshots would free, and what it
         * references as uncompressed bytes. */
        uint64_t written_bytes;
        uint64_t snapshots_exclusive_bytes;
        uint64_t logical_referenced_bytes;  /* referenced, uncompressed */
        uint64_t path_hash;            /* see filesystem_find_subvolume_by_path() */
} Subvolume;

struct Filesystem {
        uint8_t uuid[16];
        char *label;
        char **devices;                /* NULL-terminated */
        char **mount_points;           /* sorted, NULL-terminated */
        StatfsInfo statfs;             /* of the mount it was read through */
        uint64_t generation;
        uint64_t root_fingerprint;     /* see btrfs_read_root_fingerprint() */
        QuotaMode quota_mode;
        bool quota_consistent;
        uint64_t usage_read_usec;      /* when usage was last read from the kernel */
        uint64_t usage_generation;     /* the committed transaction that usage is from */
        double scan_progress;          /* share of subvolumes measured at their current state */
        /* Which subvolume refers to which data extent, for the questions
         * about sets of subvolumes the bus answers: the scanner's, set by
         * scanner_update() for the model it updates, NULL when it has
         * none (quotas on, not measured).  Valid while this model is the
         * current one. */
        struct ExtentMap *extent_map;
        /* The mounts that show it (indexes into mount_table, in table
         * order, reachable ones only): where subvolume_access_paths()
         * looks.  Empty in a model read from the cache. */
        const MountTable *mount_table;
        size_t *mount_indexes, n_mount_indexes;
        Subvolume *subvolumes;         /* sorted by id */
        size_t n_subvolumes, allocated;
        uint32_t *path_index;          /* open addressing by path_hash: index + 1, 0 = empty */
        size_t n_path_slots;           /* a power of two, at least twice n_subvolumes */
};

typedef struct Model {
        MountTable mounts;
        Filesystem **mount_filesystem; /* per mount: its filesystem, or NULL */
        Filesystem **filesystems;      /* sorted by UUID */
        size_t n_filesystems, allocated;
} Model;

Model *model_new(void);
Model *model_free(Model *m);
static inline void model_freep(Model **m) {
        model_free(*m);
}

Filesystem *filesystem_new(const uint8_t uuid[16]);
Filesystem *filesystem_free(Filesystem *fs);
static inline void filesystem_freep(Filesystem **fs) {
        filesystem_free(*fs);
}

/* Adds a subvolume, copying *sv and taking ownership of sv->path.  Returns
 * the new element (valid until the next add) or NULL on ENOMEM. */
Subvolume *filesystem_add_subvolume(Filesystem *fs, Subvolume *sv);

/* The paths under the mount points of @sv's filesystem that reach @sv,
 * sorted and distinct (NULL-terminated; NULL: out of memory).  Worked out
 * when asked, not kept: at 100,000 subvolumes keeping them cost 6 MiB. */
char **subvolume_access_paths(const Subvolume *sv);
/* At least the bytes of those paths with their NULs, plus @per_path for
 * each, without working them out. */
size_t subvolume_access_paths_bound(const Subvolume *sv, size_t per_path);
/* Whether every subvolume has the same access paths in @a as at the same
 * path in @b, as far as that can be told from the mounts alone. */
bool filesystem_access_unchanged(const Filesystem *a, const Filesystem *b);

/* Takes ownership of @fs.  Returns 0, -EEXIST or -ENOMEM (fs freed). */
int model_add_filesystem(Model *m, Filesystem *fs);

/* Takes ownership of the mount table (*mounts is emptied). */
int model_set_mounts(Model *m, MountTable *mounts);
/* Records that mount number @index belongs to @fs (already added). */
void model_attach_mount(Model *m, size_t index, Filesystem *fs);

/* Sorts the subvolumes and links snapshots to their sources.  Call when
 * all subvolumes of @fs are added, before looking any up. */
int filesystem_index(Filesystem *fs);

/* Derives what depends on several parts: mount points and access paths.
 * Call once, when everything is added and indexed. */
int model_finish(Model *m);

Filesystem *model_find_filesystem(const Model *m, const uint8_t uuid[16]);
/* The mount with id @id (as the table numbers them) and its filesystem
 * (NULL if it has none), or NULL. */
const Mount *model_find_mount(const Model *m, uint64_t id, Filesystem **ret_fs);
/* Whether @dev is the superblock device of a btrfs mount in the table. */
bool model_is_btrfs_device(const Model *m, dev_t dev);
Subvolume *filesystem_find_subvolume(const Filesystem *fs, uint64_t id);
/* The deepest subvolume whose path is @fs_path or above it (@fs_path
 * absolute and normalized).  Linear in the length of @fs_path, however many
 * components it has. */
Subvolume *filesystem_find_subvolume_by_path(const Filesystem *fs, const char *fs_path);

typedef enum ResolveResult {
        RESOLVE_OK,
        RESOLVE_INVALID,     /* not absolute, or empty */
        RESOLVE_NOT_BTRFS,   /* the path lies on a mount that is not btrfs */
        RESOLVE_NOT_FOUND,   /* btrfs, but not in the model */
} ResolveResult;

/* The figures the scanner sets in a model (scanner_update()), saved
 * before it runs on a model that stays, to tell afterwards what moved. */
typedef struct SubvolumeFigures {
        Usage usage;
        uint64_t written_bytes, snapshots_exclusive_bytes, logical_referenced_bytes;
} SubvolumeFigures;

typedef struct ModelFigures {
        size_t n_filesystems;
        struct {
                double scan_progress;
                SubvolumeFigures *subvolumes;   /* in the filesystem's order */
        } filesystems[];
} ModelFigures;

ModelFigures *model_figures_save(const Model *m);
ModelFigures *model_figures_free(ModelFigures *f);
static inline void model_figures_freep(ModelFigures **f) {
        model_figures_free(*f);
}
SubvolumeFigures subvolume_figures(const Subvolume *sv);
/* Whether @sv's figures are @f: what the bus signals when they differ. */
bool subvolume_figures_equal(const SubvolumeFigures *f, const Subvolume *sv);
/* Whether every filesystem's usage is measured by subvold (no quotas). */
bool model_is_scanned_only(const Model *m);

/* Resolves @path against the mount table and the subvolume paths only,
 * without touching the filesystem.  "." and ".." are resolved lexically. */
ResolveResult model_resolve_path(const Model *m, const char *path, Subvolume **ret);

/* Normalizes an absolute path lexically: collapses "//", ".", "..".
 * Returns a new string, or NULL with errno EINVAL (not absolute) or ENOMEM. */
char *path_normalize(const char *path);

/* Returns the name of the path's last component ("/" for "/"). */
const char *path_last_component(const char *path);

/* statfs() for one subvolume, as df should show it, with ZFS's meaning:
 * used is what the subvolume references, free what the filesystem and the
 * subvolume's limits leave, size the two together (see the XML). */
StatfsInfo subvolume_statfs(const Subvolume *sv, const StatfsInfo *fs);

const char *usage_source_to_string(UsageSource s);
const char *quota_mode_to_string(QuotaMode m);

/* Returns a copy of @s that any D-Bus implementation accepts as a string:
 * bytes that are not valid UTF-8, ASCII control characters and Unicode
 * noncharacters (which sd-bus refuses) are written as \xNN, byte by byte. */
char *display_escape(const char *s);
/* The same, and with @c1_controls U+0080 to U+009F too (terminals act on
 * them), with @blanks spaces too. */
char *escape_text(const char *s, bool c1_controls, bool blanks);
/* The length of the valid UTF-8 sequence at @s (no noncharacters), or 0
 * when it is not one. */
size_t utf8_sequence_length(const unsigned char *s);
