/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "cache-file.h"
#include "scan-cache.h"
#include "util.h"

/* In the frame of cache-file.h, magic "SUBVOLDS", count = number of
 * filesystems; the payload holds, per filesystem: uuid[16], u64 number of
 * subvolumes, then per subvolume (ascending ids): id, generation, change
 * generation, inodes, scan time, tentative (0 or 1), tentative
 * fingerprint, number of extents, size of the packed extents, and the
 * packed extents as in ExtentUser.  A tentative user stays tentative: it
 * is read again unless the root tree still shows the same fingerprint. */

static const char MAGIC[8] = { 'S', 'U', 'B', 'V', 'O', 'L', 'D', 'S' };
enum { USER_HEADER_SIZE = 9 * 8 };

int scan_cache_save(const char *dir, const ScanCacheFs *const *fss, size_t n) {
        CacheBuffer b = {};
        int r = cache_begin(&b, MAGIC, SCAN_CACHE_VERSION, (uint32_t) n);

        for (size_t i = 0; i < n; i++) {
                const ExtentMap *map = &fss[i]->map;

                r |= cache_put(&b, fss[i]->uuid, 16);
                r |= cache_put_u64(&b, map->n_users);
                for (size_t j = 0; j < map->n_users; j++) {
                        const ExtentUser *u = &map->users[j];

                        r |= cache_put_u64(&b, u->id);
                        r |= cache_put_u64(&b, u->generation);
                        r |= cache_put_u64(&b, u->change_generation);
                        r |= cache_put_u64(&b, u->inodes);
                        r |= cache_put_u64(&b, u->scanned_usec);
                        r |= cache_put_u64(&b, u->tentative);
                        r |= cache_put_u64(&b, u->tentative_fingerprint);
                        r |= cache_put_u64(&b, u->n_extents);
                        r |= cache_put_u64(&b, u->packed_size);
                        r |= cache_put(&b, u->packed, u->packed_size);
                }
        }
        if (r < 0) {
                free(b.data);
                return -ENOMEM;
        }
        return cache_file_write(dir, SCAN_CACHE_FILE, &b);
}

static int read_map(CacheBuffer *b, ExtentMap *map) {
        uint64_t n_users = cache_get_u64(b), last_id = 0;

        if (n_users > cache_left(b) / USER_HEADER_SIZE)
                return -EBADMSG;
        for (uint64_t j = 0; j < n_users; j++) {
                uint64_t id, generation, change_generation, inodes, scanned, tentative, fingerprint, n_extents, size;
                const uint8_t *data;
                uint8_t *packed;
                int r;

                /* One statement per field: the order of reads matters. */
                id = cache_get_u64(b);
                generation = cache_get_u64(b);
                change_generation = cache_get_u64(b);
                inodes = cache_get_u64(b);
                scanned = cache_get_u64(b);
                tentative = cache_get_u64(b);
                fingerprint = cache_get_u64(b);
                n_extents = cache_get_u64(b);
                size = cache_get_u64(b);
                /* Ascending ids; every extent takes two bytes at least. */
                if (b->overrun || (j > 0 && id <= last_id) || tentative > 1 || size > cache_left(b) ||
                    n_extents > size / 2)
                        return -EBADMSG;
                data = cache_get_bytes(b, size);
                packed = malloc(size ?: 1);
                if (!packed)
                        return -ENOMEM;
                memcpy(packed, data, size);
                r = extent_map_set_user_packed(map, id, generation, change_generation, inodes, scanned, packed,
                                               size, n_extents);
                if (r < 0)
                        return r;
                ExtentUser *u = (ExtentUser *) extent_map_find_user(map, id);
                u->tentative = tentative;
                u->tentative_fingerprint = fingerprint;
                last_id = id;
        }
        return 0;
}

static void free_all(ScanCacheFs *fss, size_t n) {
        for (size_t i = 0; i < n; i++)
                extent_map_done(&fss[i].map);
        free(fss);
}

int scan_cache_load(const char *dir, ScanCacheFs **ret, size_t *ret_n) {
        ScanCacheFs *fss = NULL;
        CacheBuffer b = {};
        uint32_t n;
        size_t done = 0;
        int r;

        r = cache_file_read(dir, SCAN_CACHE_FILE, MAGIC, SCAN_CACHE_VERSION, &b, &n);
        if (r < 0)
                return r;
        r = -EBADMSG;
        if (n > cache_left(&b) / 24)
                goto fail;
        fss = calloc(n ?: 1, sizeof(ScanCacheFs));
        if (!fss) {
                r = -ENOMEM;
                goto fail;
        }
        for (; done < n; done++) {
                cache_get(&b, fss[done].uuid, 16);
                for (size_t i = 0; i < done; i++)
                        if (memcmp(fss[i].uuid, fss[done].uuid, 16) == 0)
                                goto fail;  /* the same filesystem twice */
                r = read_map(&b, &fss[done].map);
                if (r < 0) {
                        done++;  /* what it read so far is freed too */
                        goto fail;
                }
                r = -EBADMSG;
        }
        if (b.overrun || b.pos != b.size)
                goto fail;
        free(b.data);
        *ret = fss;
        *ret_n = n;
        return 0;
fail:
        free_all(fss, done);
        free(b.data);
        return r;
}
