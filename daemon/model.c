/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <sys/random.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "model.h"
#include "util.h"

Model *model_new(void) {
        return calloc(1, sizeof(Model));
}

Model *model_free(Model *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n_filesystems; i++)
                filesystem_free(m->filesystems[i]);
        free(m->filesystems);
        free(m->mount_filesystem);
        mount_table_done(&m->mounts);
        free(m);
        return NULL;
}

Filesystem *filesystem_new(const uint8_t uuid[16]) {
        Filesystem *fs = calloc(1, sizeof(Filesystem));

        if (fs) {
                memcpy(fs->uuid, uuid, 16);
                fs->scan_progress = 1.0;
        }
        return fs;
}

Filesystem *filesystem_free(Filesystem *fs) {
        if (!fs)
                return NULL;
        for (size_t i = 0; i < fs->n_subvolumes; i++)
                free(fs->subvolumes[i].path);
        free(fs->subvolumes);
        free(fs->mount_indexes);
        free(fs->path_index);
        free(fs->label);
        strv_free(fs->devices);
        strv_free(fs->mount_points);
        free(fs);
        return NULL;
}

Subvolume *filesystem_add_subvolume(Filesystem *fs, Subvolume *sv) {
        Subvolume *n;

        if (grow_array(&fs->subvolumes, &fs->allocated, fs->n_subvolumes + 1, sizeof(Subvolume)) < 0) {
                free(TAKE_PTR(sv->path));
                return NULL;
        }
        n = &fs->subvolumes[fs->n_subvolumes++];
        *n = *sv;
        n->filesystem = fs;
        n->snapshot_source = NULL;
        n->written_bytes = n->snapshots_exclusive_bytes = n->logical_referenced_bytes = USAGE_UNKNOWN;
        sv->path = NULL;
        return n;
}

static int cmp_filesystem(const void *a, const void *b) {
        return memcmp((*(Filesystem * const *) a)->uuid, (*(Filesystem * const *) b)->uuid, 16);
}

int model_add_filesystem(Model *m, Filesystem *fs) {
        if (model_find_filesystem(m, fs->uuid)) {
                filesystem_free(fs);
                return -EEXIST;
        }
        if (grow_array(&m->filesystems, &m->allocated, m->n_filesystems + 1, sizeof(Filesystem *)) < 0) {
                filesystem_free(fs);
                return -ENOMEM;
        }
        m->filesystems[m->n_filesystems++] = fs;
        qsort(m->filesystems, m->n_filesystems, sizeof(Filesystem *), cmp_filesystem);
        return 0;
}

int model_set_mounts(Model *m, MountTable *mounts) {
        Filesystem **owners = calloc(mounts->n_mounts ?: 1, sizeof(Filesystem *));

        if (!owners)
                return -ENOMEM;
        mount_table_done(&m->mounts);
        free(m->mount_filesystem);
        m->mounts = *mounts;
        *mounts = (MountTable) {};
        m->mount_filesystem = owners;
        return 0;
}

void model_attach_mount(Model *m, size_t index, Filesystem *fs) {
        m->mount_filesystem[index] = fs;
}

Filesystem *model_find_filesystem(const Model *m, const uint8_t uuid[16]) {
        for (size_t i = 0; i < m->n_filesystems; i++)
                if (memcmp(m->filesystems[i]->uuid, uuid, 16) == 0)
                        return m->filesystems[i];
        return NULL;
}

const Mount *model_find_mount(const Model *m, uint64_t id, Filesystem **ret_fs) {
        for (size_t i = 0; i < m->mounts.n_mounts; i++)
                if (m->mounts.mounts[i].id == id) {
                        *ret_fs = m->mount_filesystem[i];
                        return &m->mounts.mounts[i];
                }
        return NULL;
}

bool model_is_btrfs_device(const Model *m, dev_t dev) {
        for (size_t i = 0; i < m->mounts.n_mounts; i++) {
                const Mount *mount = &m->mounts.mounts[i];
                if (mount->is_btrfs && makedev(mount->dev_major, mount->dev_minor) == dev)
                        return true;
        }
        return false;
}

static int cmp_subvolume_id(const void *a, const void *b) {
        uint64_t x = ((const Subvolume *) a)->id, y = ((const Subvolume *) b)->id;
        return x < y ? -1 : x > y;
}

Subvolume *filesystem_find_subvolume(const Filesystem *fs, uint64_t id) {
        Subvolume key = { .id = id };

        if (fs->n_subvolumes == 0)
                return NULL;
        return bsearch(&key, fs->subvolumes, fs->n_subvolumes, sizeof(Subvolume), cmp_subvolume_id);
}

/* ---- paths to subvolumes ----
 *
 * A path is looked up as each of its prefixes that end at a component,
 * deepest first.  The hash of every prefix comes from one pass over the
 * path: a polynomial hash modulo the prime 2^61 - 1, extended byte by
 * byte.  So a lookup costs time linear in the path's length, however many
 * components it has (a sorted array cost a string comparison per
 * component: quadratic).  The base is random per process, so that nobody
 * can choose names that collide. */

#define PATH_HASH_PRIME ((1ULL << 61) - 1)
static uint64_t path_hash_base;

static uint64_t path_hash_step(uint64_t h, unsigned char c) {
        __uint128_t x = (__uint128_t) h * path_hash_base + c + 1u;
        uint64_t r = (uint64_t) (x & PATH_HASH_PRIME) + (uint64_t) (x >> 61);

        r = (r & PATH_HASH_PRIME) + (r >> 61);
        return r >= PATH_HASH_PRIME ? r - PATH_HASH_PRIME : r;
}

static void path_hash_init(void) {
        uint64_t b = 0;

        if (path_hash_base != 0)
                return;
        if (getrandom(&b, sizeof b, GRND_NONBLOCK) != sizeof b)
                b = (uint64_t) time(NULL) * 0x9e3779b97f4a7c15ULL ^ (uint64_t) (uintptr_t) &b;
        /* A base below 2^8 would let short strings collide trivially. */
        path_hash_base = 256 + b % (PATH_HASH_PRIME - 256);
}

static uint64_t path_hash(const char *path, size_t len) {
        uint64_t h = 0;

        for (size_t i = 0; i < len; i++)
                h = path_hash_step(h, (unsigned char) path[i]);
        return h;
}

static Subvolume *filesystem_find_exact_path(const Filesystem *fs, const char *path, size_t len, uint64_t hash) {
        size_t mask = fs->n_path_slots - 1;

        if (fs->n_path_slots == 0)
                return NULL;
        for (size_t i = (size_t) hash & mask; fs->path_index[i] != 0; i = (i + 1) & mask) {
                Subvolume *sv = &fs->subvolumes[fs->path_index[i] - 1];

                if (sv->path_hash == hash && strncmp(sv->path, path, len) == 0 && sv->path[len] == 0)
                        return sv;
        }
        return NULL;
}

Subvolume *filesystem_find_subvolume_by_path(const Filesystem *fs, const char *fs_path) {
        size_t len = strlen(fs_path), n = 0;
        _cleanup_free_ struct { uint64_t hash; size_t len; } *prefixes = NULL;
        uint64_t h = 0;

        if (len == 0 || fs_path[0] != '/')
                return NULL;
        /* "/", then every prefix that ends before a '/' or at the end. */
        prefixes = malloc((len / 2 + 2) * sizeof(*prefixes));
        if (!prefixes)
                return NULL;
        for (size_t i = 0; i < len; i++) {
                h = path_hash_step(h, (unsigned char) fs_path[i]);
                if (i == 0 || fs_path[i + 1] == '/' || fs_path[i + 1] == 0)
                        prefixes[n++] = (typeof(*prefixes)) { h, i + 1 };
        }
        while (n-- > 0) {
                Subvolume *sv = filesystem_find_exact_path(fs, fs_path, prefixes[n].len, prefixes[n].hash);
                if (sv)
                        return sv;
        }
        return NULL;
}

/* Indexes the subvolumes (sorted by id by now) by path. */
static int filesystem_index_paths(Filesystem *fs) {
        size_t slots = 8;

        path_hash_init();
        while (slots < 2 * fs->n_subvolumes)
                slots *= 2;
        free(fs->path_index);
        fs->path_index = calloc(slots, sizeof(uint32_t));
        if (!fs->path_index)
                return -ENOMEM;
        fs->n_path_slots = slots;
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                Subvolume *sv = &fs->subvolumes[i];
                size_t j;

                sv->path_hash = path_hash(sv->path, strlen(sv->path));
                for (j = (size_t) sv->path_hash & (slots - 1); fs->path_index[j] != 0; j = (j + 1) & (slots - 1))
                        ;
                fs->path_index[j] = (uint32_t) (i + 1);
        }
        return 0;
}

static int cmp_subvolume_uuid(const void *a, const void *b) {
        return memcmp((*(Subvolume * const *) a)->uuid, (*(Subvolume * const *) b)->uuid, 16);
}

/* Sets each subvolume's family root, in time linear in the number of
 * subvolumes however long the chains: each chain is walked up to the first
 * subvolume whose root is known, then down again setting it.  A loop (only
 * a damaged filesystem has one) counts as its own root. */
static void filesystem_link_families(Filesystem *fs) {
        for (size_t i = 0; i < fs->n_subvolumes; i++)
                fs->subvolumes[i].family_root = NULL;
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                Subvolume *sv = &fs->subvolumes[i];
                const Subvolume *top = sv, *root;
                size_t steps = 0;

                while (!top->family_root && top->snapshot_source && steps++ < fs->n_subvolumes)
                        top = top->snapshot_source;
                root = top->family_root ?: top;
                for (Subvolume *s = sv; s && !s->family_root; s = (Subvolume *) s->snapshot_source)
                        s->family_root = root;
        }
}

/* Links each snapshot to its source, when that still exists. */
static int filesystem_link_snapshots(Filesystem *fs) {
        _cleanup_free_ Subvolume **by_uuid = calloc(fs->n_subvolumes ?: 1, sizeof(Subvolume *));

        if (!by_uuid)
                return -ENOMEM;
        for (size_t i = 0; i < fs->n_subvolumes; i++)
                by_uuid[i] = &fs->subvolumes[i];
        qsort(by_uuid, fs->n_subvolumes, sizeof(Subvolume *), cmp_subvolume_uuid);
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                Subvolume *sv = &fs->subvolumes[i], key, *k = &key, **found;

                if (uuid_is_null(sv->parent_uuid))
                        continue;
                memcpy(key.uuid, sv->parent_uuid, 16);
                found = bsearch(&k, by_uuid, fs->n_subvolumes, sizeof(Subvolume *), cmp_subvolume_uuid);
                sv->snapshot_source = found && *found != sv ? *found : NULL;
        }
        filesystem_link_families(fs);
        return 0;
}

int filesystem_index(Filesystem *fs) {
        int r;

        if (fs->n_subvolumes == 0)
                return 0;
        if (fs->n_subvolumes >= UINT32_MAX)
                return -E2BIG;
        /* The root tree search returns them in id order already. */
        for (size_t i = 1; i < fs->n_subvolumes; i++)
                if (fs->subvolumes[i - 1].id >= fs->subvolumes[i].id) {
                        qsort(fs->subvolumes, fs->n_subvolumes, sizeof(Subvolume), cmp_subvolume_id);
                        break;
                }
        r = filesystem_index_paths(fs);
        if (r < 0)
                return r;
        return filesystem_link_snapshots(fs);
}

/* The path under @mount's mount point that shows @sv, if the mount shows a
 * directory it is in (*ret NULL otherwise), whether or not anything
 * mounted later hides it. */
static int mount_path(const Mount *mount, const Subvolume *sv, char **ret) {
        const char *rest = path_startswith(sv->path, mount->root);

        if (!rest) {
                *ret = NULL;
                return 0;
        }
        *ret = *rest ? path_join(mount->point, rest) : strdup(mount->point);
        return *ret ? 0 : -ENOMEM;
}

char **subvolume_access_paths(const Subvolume *sv) {
        const Filesystem *fs = sv->filesystem;
        char **l = calloc(1, sizeof(char *));
        size_t n = 0;

        for (size_t i = 0; l && i < fs->n_mount_indexes; i++) {
                const Mount *mount = &fs->mount_table->mounts[fs->mount_indexes[i]];
                char *p;

                if (mount_path(mount, sv, &p) < 0)
                        return strv_free(l);
                if (!p)
                        continue;
                if (mount_table_resolve(fs->mount_table, p, NULL) != mount) {
                        free(p);  /* hidden by what is mounted on it or above */
                        continue;
                }
                if (strv_consume(&l, &n, p) < 0)
                        return strv_free(l);
        }
        strv_sort(l);
        strv_uniq(l);
        return l;
}

size_t subvolume_access_paths_bound(const Subvolume *sv, size_t per_path) {
        const Filesystem *fs = sv->filesystem;
        size_t n = 0;

        for (size_t i = 0; i < fs->n_mount_indexes; i++) {
                const Mount *mount = &fs->mount_table->mounts[fs->mount_indexes[i]];
                const char *rest = path_startswith(sv->path, mount->root);

                if (rest)
                        n += per_path + strlen(mount->point) + 1 + strlen(rest) + 1;
        }
        return n;
}

bool filesystem_access_unchanged(const Filesystem *a, const Filesystem *b) {
        if (!a->mount_table || !b->mount_table)
                return !a->mount_table && !b->mount_table;
        return a->n_mount_indexes == b->n_mount_indexes &&
               memcmp(a->mount_indexes, b->mount_indexes, a->n_mount_indexes * sizeof(size_t)) == 0 &&
               mount_table_equal(a->mount_table, b->mount_table);
}

int model_finish(Model *m) {
        for (size_t i = 0; i < m->mounts.n_mounts; i++) {
                const Mount *mount = &m->mounts.mounts[i];
                Filesystem *fs = m->mount_filesystem[i];
                size_t *indexes;

                if (!fs || !mount_table_is_reachable(&m->mounts, mount))
                        continue;
                /* The host's view: systemd's binds in subvold's private
                 * namespace are no mount points (see Mount.rebind).  The
                 * paths through them are the host's paths, so they still
                 * count for AccessPaths. */
                if (!mount->rebind) {
                        size_t n = strv_length(fs->mount_points);

                        if (strv_extend(&fs->mount_points, &n, mount->point) < 0)
                                return -ENOMEM;
                }
                indexes = reallocarray(fs->mount_indexes, fs->n_mount_indexes + 1, sizeof(size_t));
                if (!indexes)
                        return -ENOMEM;
                fs->mount_indexes = indexes;
                fs->mount_indexes[fs->n_mount_indexes++] = i;
                fs->mount_table = &m->mounts;
        }
        for (size_t i = 0; i < m->n_filesystems; i++) {
                strv_sort(m->filesystems[i]->mount_points);
                strv_uniq(m->filesystems[i]->mount_points);
        }
        return 0;
}

ModelFigures *model_figures_save(const Model *m) {
        _cleanup_(model_figures_freep) ModelFigures *f =
                calloc(1, sizeof(ModelFigures) + m->n_filesystems * sizeof(f->filesystems[0]));

        if (!f)
                return NULL;
        f->n_filesystems = m->n_filesystems;
        for (size_t i = 0; i < m->n_filesystems; i++) {
                const Filesystem *fs = m->filesystems[i];
                SubvolumeFigures *svs = calloc(fs->n_subvolumes ?: 1, sizeof(SubvolumeFigures));

                if (!svs)
                        return NULL;
                f->filesystems[i].scan_progress = fs->scan_progress;
                f->filesystems[i].subvolumes = svs;
                for (size_t j = 0; j < fs->n_subvolumes; j++)
                        svs[j] = subvolume_figures(&fs->subvolumes[j]);
        }
        return TAKE_PTR(f);
}

ModelFigures *model_figures_free(ModelFigures *f) {
        if (!f)
                return NULL;
        for (size_t i = 0; i < f->n_filesystems; i++)
                free(f->filesystems[i].subvolumes);
        free(f);
        return NULL;
}

SubvolumeFigures subvolume_figures(const Subvolume *sv) {
        return (SubvolumeFigures) { sv->usage, sv->written_bytes, sv->snapshots_exclusive_bytes,
                                    sv->logical_referenced_bytes };
}

/* UsageUpdated is left out: it moves on every read, and would make every
 * subvolume signal after every commit (it emits no change signal). */
static bool usage_equal(const Usage *a, const Usage *b) {
        return a->referenced == b->referenced && a->exclusive == b->exclusive && a->inodes == b->inodes &&
               a->referenced_limit == b->referenced_limit && a->exclusive_limit == b->exclusive_limit &&
               a->source == b->source && a->consistent == b->consistent;
}

bool subvolume_figures_equal(const SubvolumeFigures *f, const Subvolume *sv) {
        return usage_equal(&f->usage, &sv->usage) && f->written_bytes == sv->written_bytes &&
               f->snapshots_exclusive_bytes == sv->snapshots_exclusive_bytes &&
               f->logical_referenced_bytes == sv->logical_referenced_bytes;
}

bool model_is_scanned_only(const Model *m) {
        for (size_t i = 0; i < m->n_filesystems; i++)
                if (m->filesystems[i]->quota_mode != QUOTA_MODE_DISABLED)
                        return false;
        return true;
}

char *path_normalize(const char *path) {
        _cleanup_free_ char *out = NULL;
        size_t n = 0;

        if (!path || path[0] != '/') {
                errno = EINVAL;
                return NULL;
        }
        out = malloc(strlen(path) + 2);
        if (!out)
                return NULL;
        for (const char *p = path; *p;) {
                size_t len;

                while (*p == '/')
                        p++;
                len = strcspn(p, "/");
                if (len == 0 || (len == 1 && p[0] == '.')) {
                        /* nothing */
                } else if (len == 2 && p[0] == '.' && p[1] == '.') {
                        /* drop the last component; ".." at "/" stays at "/" */
                        while (n > 0 && out[--n] != '/')
                                ;
                } else {
                        out[n++] = '/';
                        memcpy(out + n, p, len);
                        n += len;
                }
                p += len;
        }
        if (n == 0)
                out[n++] = '/';
        out[n] = 0;
        return TAKE_PTR(out);
}

const char *path_last_component(const char *path) {
        const char *slash = strrchr(path, '/');

        return !slash || slash[1] == 0 ? path : slash + 1;
}

ResolveResult model_resolve_path(const Model *m, const char *path, Subvolume **ret) {
        _cleanup_free_ char *norm = NULL, *fs_path = NULL;
        const char *rest;
        const Mount *mount;
        Filesystem *fs;
        Subvolume *sv;

        if (!path || path[0] != '/')
                return RESOLVE_INVALID;
        norm = path_normalize(path);
        if (!norm)
                return RESOLVE_INVALID;
        mount = mount_table_resolve(&m->mounts, norm, &rest);
        if (!mount)
                return RESOLVE_NOT_FOUND;
        if (!mount->is_btrfs)
                return RESOLVE_NOT_BTRFS;
        fs = m->mount_filesystem[mount - m->mounts.mounts];
        if (!fs)
                return RESOLVE_NOT_FOUND;
        fs_path = *rest ? path_join(mount->root, rest) : strdup(mount->root);
        if (!fs_path)
                return RESOLVE_NOT_FOUND;
        sv = filesystem_find_subvolume_by_path(fs, fs_path);
        if (!sv)
                return RESOLVE_NOT_FOUND;
        *ret = sv;
        return RESOLVE_OK;
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
        return a < b ? a : b;
}

/* Bytes left under a limit, or USAGE_UNKNOWN when there is no limit or
 * the usage it limits is unknown. */
static uint64_t room_under(uint64_t limit, uint64_t used) {
        if (limit == USAGE_UNKNOWN || used == USAGE_UNKNOWN)
                return USAGE_UNKNOWN;
        return limit > used ? limit - used : 0;
}

StatfsInfo subvolume_statfs(const Subvolume *sv, const StatfsInfo *fs) {
        const Usage *u = &sv->usage;
        StatfsInfo st = *fs;
        uint64_t bs = fs->block_size ?: 1;
        uint64_t room = min_u64(room_under(u->referenced_limit, u->referenced),
                                room_under(u->exclusive_limit, u->exclusive));
        uint64_t used;

        /* Free and available space never exceed what the limits leave, nor
         * what the filesystem has. */
        if (room != USAGE_UNKNOWN) {
                st.blocks_free = min_u64(fs->blocks_free, room / bs);
                st.blocks_available = min_u64(fs->blocks_available, room / bs);
        }
        /* As ZFS does for a dataset: used is what the subvolume references
         * and the size is used plus free, so that df's Used is the
         * subvolume's own, whatever the limits and the rest of the
         * filesystem hold.  Unknown usage counts as nothing used; source
         * "none" says so. */
        used = u->referenced != USAGE_UNKNOWN ? u->referenced / bs + (u->referenced % bs != 0) : 0;
        st.blocks = used + st.blocks_free;
        /* btrfs allocates inodes dynamically: there is no free count.  A
         * subvolume holds at least its root directory, so 0 says unknown. */
        st.files = u->inodes != USAGE_UNKNOWN ? u->inodes : 0;
        st.files_free = 0;
        return st;
}

static const char *const usage_source_table[_USAGE_SOURCE_MAX] = {
        [USAGE_SOURCE_NONE] = "none",
        [USAGE_SOURCE_QGROUP] = "qgroup",
        [USAGE_SOURCE_SIMPLE_QUOTA] = "simple-quota",
        [USAGE_SOURCE_SCAN] = "scan",
};

static const char *const quota_mode_table[_QUOTA_MODE_MAX] = {
        [QUOTA_MODE_DISABLED] = "disabled",
        [QUOTA_MODE_QGROUP] = "qgroup",
        [QUOTA_MODE_SIMPLE] = "simple",
};

const char *usage_source_to_string(UsageSource s) {
        return s >= 0 && s < _USAGE_SOURCE_MAX ? usage_source_table[s] : "none";
}

const char *quota_mode_to_string(QuotaMode m) {
        return m >= 0 && m < _QUOTA_MODE_MAX ? quota_mode_table[m] : "disabled";
}

size_t utf8_sequence_length(const unsigned char *s) {
        size_t len;
        uint32_t c;

        if (s[0] < 0x80)
                return 1;
        if (s[0] >= 0xc2 && s[0] <= 0xdf)
                len = 2, c = s[0] & 0x1f;
        else if (s[0] >= 0xe0 && s[0] <= 0xef)
                len = 3, c = s[0] & 0x0f;
        else if (s[0] >= 0xf0 && s[0] <= 0xf4)
                len = 4, c = s[0] & 0x07;
        else
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                c = c << 6 | (s[i] & 0x3f);
        }
        /* Reject overlong forms, surrogates, values past U+10FFFF and the
         * noncharacters, which sd-bus refuses in strings. */
        if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > 0x10ffff ||
            (c >= 0xd800 && c <= 0xdfff) || (c >= 0xfdd0 && c <= 0xfdef) || (c & 0xfffe) == 0xfffe)
                return 0;
        return len;
}

char *escape_text(const char *s, bool c1_controls, bool blanks) {
        const unsigned char *p = (const unsigned char *) s;
        char *out = malloc(strlen(s) * 4 + 1), *o = out;

        if (!out)
                return NULL;
        while (*p) {
                size_t len = utf8_sequence_length(p);
                /* U+0080 to U+009F, the C1 controls: 8-bit CSI and friends. */
                bool c1 = c1_controls && len == 2 && p[0] == 0xc2 && p[1] < 0xa0;

                if (len == 0 || c1 || (len == 1 && (*p < 0x20 || *p == 0x7f || (blanks && *p == ' ')))) {
                        for (size_t i = 0; i < (c1 ? 2 : 1); i++)
                                o += sprintf(o, "\\x%02x", *p++);
                } else {
                        memcpy(o, p, len);
                        o += len;
                        p += len;
                }
        }
        *o = 0;
        return out;
}

char *display_escape(const char *s) {
        return escape_text(s, false, false);
}
