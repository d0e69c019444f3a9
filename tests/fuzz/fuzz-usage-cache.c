/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* usage_cache_load() (usage-cache.c, cache-file.c) on any file: it either
 * refuses it or loads a model that saves and loads again to the same
 * bytes. */
#include "fuzz-util.h"
#include "usage-cache.h"

static const char MAGIC[8] = { 'S', 'U', 'B', 'V', 'O', 'L', 'D', 'C' };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        log_max_level = 0;
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *dir = fuzz_scratch_dir();
        _cleanup_(model_freep) Model *m = NULL, *again = NULL;
        _cleanup_free_ uint8_t *first = NULL, *second = NULL;
        size_t first_size, second_size;
        int r;

        if (fuzz_write_cache(dir, USAGE_CACHE_FILE, MAGIC, USAGE_CACHE_VERSION, data, size) < 0)
                return 0;
        r = usage_cache_load(dir, &m);
        if (r < 0) {
                if (r != -EBADMSG && r != -EPROTONOSUPPORT)
                        abort();  /* the file is there and readable */
                return 0;
        }
        /* What was loaded is a model like any: it saves, and the saved file
         * loads to a model that saves to the very same bytes. */
        if (usage_cache_save(dir, m) < 0 || fuzz_read_file(dir, USAGE_CACHE_FILE, &first, &first_size) < 0)
                abort();
        if (usage_cache_load(dir, &again) < 0 || usage_cache_save(dir, again) < 0 ||
            fuzz_read_file(dir, USAGE_CACHE_FILE, &second, &second_size) < 0)
                abort();
        if (first_size != second_size || memcmp(first, second, first_size) != 0)
                abort();
        return 0;
}
