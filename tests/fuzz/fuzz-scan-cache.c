/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scan_cache_load() (scan-cache.c, cache-file.c, extent-map.c) on any
 * file: it either refuses it or loads extent maps that are consistent
 * (every user's packed extents walk to their count; removing every user
 * leaves no extent) and save and load again to the same bytes. */
#include "fuzz-util.h"
#include "scan-cache.h"

static const char MAGIC[8] = { 'S', 'U', 'B', 'V', 'O', 'L', 'D', 'S' };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        log_max_level = 0;
        return 0;
}

static void free_all(ScanCacheFs *fss, size_t n) {
        for (size_t i = 0; i < n; i++)
                extent_map_done(&fss[i].map);
        free(fss);
}

static void save_and_read(const char *dir, ScanCacheFs *fss, size_t n, uint8_t **ret, size_t *ret_size) {
        _cleanup_free_ const ScanCacheFs **list = calloc(n ?: 1, sizeof(*list));

        if (!list)
                abort();
        for (size_t i = 0; i < n; i++)
                list[i] = &fss[i];
        if (scan_cache_save(dir, list, n) < 0 || fuzz_read_file(dir, SCAN_CACHE_FILE, ret, ret_size) < 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *dir = fuzz_scratch_dir();
        _cleanup_free_ uint8_t *first = NULL, *second = NULL;
        size_t first_size, second_size, n, n_again;
        ScanCacheFs *fss, *again;
        int r;

        if (fuzz_write_cache(dir, SCAN_CACHE_FILE, MAGIC, SCAN_CACHE_VERSION, data, size) < 0)
                return 0;
        r = scan_cache_load(dir, &fss, &n);
        if (r < 0) {
                if (r != -EBADMSG && r != -EPROTONOSUPPORT)
                        abort();
                return 0;
        }
        save_and_read(dir, fss, n, &first, &first_size);
        if (scan_cache_load(dir, &again, &n_again) < 0 || n_again != n)
                abort();
        save_and_read(dir, again, n_again, &second, &second_size);
        free_all(again, n_again);
        if (first_size != second_size || memcmp(first, second, first_size) != 0)
                abort();

        for (size_t i = 0; i < n; i++) {
                ExtentMap *map = &fss[i].map;

                for (size_t j = 0; j < map->n_users; j++) {
                        ExtentIter it = extent_iter(&map->users[j]);
                        DataExtent e;
                        size_t count = 0;

                        while (extent_iter_next(&it, &e))
                                count++;
                        if (count != map->users[j].n_extents || it.p != it.end ||
                            map->users[j].exclusive > map->users[j].referenced)
                                abort();
                }
                (void) extent_map_memory(map);
                while (map->n_users > 0)
                        extent_map_remove_user(map, map->users[map->n_users - 1].id);
                if (extent_map_size(map) != 0)
                        abort();
        }
        free_all(fss, n);
        return 0;
}
