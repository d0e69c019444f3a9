/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "cache-file.h"
#include "usage-cache.h"
#include "util.h"

/* In the frame of cache-file.h, magic "SUBVOLDC", count = number of
 * filesystems; the payload holds, per filesystem: uuid[16], generation,
 * usage generation, read time, u32 quota mode, u32 quota consistent, u64
 * number of subvolumes, then per subvolume (ascending ids): id, change
 * generation, referenced, exclusive, inodes, referenced limit, exclusive
 * limit, updated time, u32 source, u32 consistent. */

static const char MAGIC[8] = { 'S', 'U', 'B', 'V', 'O', 'L', 'D', 'C' };

static int serialize(const Model *m, CacheBuffer *b) {
        int r = cache_begin(b, MAGIC, USAGE_CACHE_VERSION, (uint32_t) m->n_filesystems);

        for (size_t i = 0; i < m->n_filesystems; i++) {
                const Filesystem *fs = m->filesystems[i];

                r |= cache_put(b, fs->uuid, 16);
                r |= cache_put_u64(b, fs->generation);
                r |= cache_put_u64(b, fs->usage_generation);
                r |= cache_put_u64(b, fs->usage_read_usec);
                r |= cache_put_u32(b, fs->quota_mode);
                r |= cache_put_u32(b, fs->quota_consistent);
                r |= cache_put_u64(b, fs->n_subvolumes);
                for (size_t j = 0; j < fs->n_subvolumes; j++) {
                        const Subvolume *sv = &fs->subvolumes[j];
                        const Usage *u = &sv->usage;

                        r |= cache_put_u64(b, sv->id);
                        r |= cache_put_u64(b, sv->change_generation);
                        r |= cache_put_u64(b, u->referenced);
                        r |= cache_put_u64(b, u->exclusive);
                        r |= cache_put_u64(b, u->inodes);
                        r |= cache_put_u64(b, u->referenced_limit);
                        r |= cache_put_u64(b, u->exclusive_limit);
                        r |= cache_put_u64(b, u->updated_usec);
                        r |= cache_put_u32(b, u->source);
                        r |= cache_put_u32(b, u->consistent);
                }
        }
        return r < 0 ? -ENOMEM : 0;
}

int usage_cache_save(const char *dir, const Model *m) {
        CacheBuffer b = {};
        int r;

        r = serialize(m, &b);
        if (r < 0) {
                free(b.data);
                return r;
        }
        return cache_file_write(dir, USAGE_CACHE_FILE, &b);
}

static int deserialize(CacheBuffer *b, uint32_t n_fs, Model *m) {
        for (uint32_t i = 0; i < n_fs; i++) {
                _cleanup_(filesystem_freep) Filesystem *fs = NULL;
                uint8_t uuid[16];
                uint64_t n_sv;
                int r;

                cache_get(b, uuid, sizeof uuid);
                fs = filesystem_new(uuid);
                if (!fs)
                        return -ENOMEM;
                fs->generation = cache_get_u64(b);
                fs->usage_generation = cache_get_u64(b);
                fs->usage_read_usec = cache_get_u64(b);
                fs->quota_mode = cache_get_u32(b);
                fs->quota_consistent = cache_get_u32(b);
                n_sv = cache_get_u64(b);
                if (fs->quota_mode >= _QUOTA_MODE_MAX || n_sv > (b->size - b->pos) / 72)
                        return -EBADMSG;
                for (uint64_t j = 0; j < n_sv; j++) {
                        Subvolume sv = {};
                        Usage *u = &sv.usage;

                        /* One statement per field: the order of reads matters. */
                        sv.id = cache_get_u64(b);
                        sv.change_generation = cache_get_u64(b);
                        u->referenced = cache_get_u64(b);
                        u->exclusive = cache_get_u64(b);
                        u->inodes = cache_get_u64(b);
                        u->referenced_limit = cache_get_u64(b);
                        u->exclusive_limit = cache_get_u64(b);
                        u->updated_usec = cache_get_u64(b);
                        u->source = cache_get_u32(b);
                        u->consistent = cache_get_u32(b);
                        /* Ascending ids, so lookups can bisect without sorting. */
                        if (sv.usage.source >= _USAGE_SOURCE_MAX ||
                            (fs->n_subvolumes > 0 && fs->subvolumes[fs->n_subvolumes - 1].id >= sv.id))
                                return -EBADMSG;
                        if (!filesystem_add_subvolume(fs, &sv))
                                return -ENOMEM;
                }
                if (b->overrun)
                        return -EBADMSG;
                r = model_add_filesystem(m, TAKE_PTR(fs));
                if (r < 0)
                        return r == -EEXIST ? -EBADMSG : r;
        }
        return b->overrun || b->pos != b->size ? -EBADMSG : 0;
}

int usage_cache_load(const char *dir, Model **ret) {
        _cleanup_(model_freep) Model *m = model_new();
        CacheBuffer b = {};
        uint32_t n_fs;
        int r;

        if (!m)
                return -ENOMEM;
        r = cache_file_read(dir, USAGE_CACHE_FILE, MAGIC, USAGE_CACHE_VERSION, &b, &n_fs);
        if (r < 0)
                return r;
        r = deserialize(&b, n_fs, m);
        free(b.data);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}
