/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <endian.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>

#include "fuzz-util.h"

static char scratch[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static void scratch_remove(void) {
        (void) nftw(scratch, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_scratch_dir(void) {
        if (scratch[0])
                return scratch;
        snprintf(scratch, sizeof scratch, "%s/subvold-fuzz.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(scratch))
                abort();
        atexit(scratch_remove);
        return scratch;
}

int fuzz_write_cache(const char *dir, const char *name, const char magic[8], uint32_t version,
                     const uint8_t *data, size_t size) {
        _cleanup_free_ char *path = path_join(dir, name);
        CacheBuffer b = {};
        uint32_t count;

        if (!path || size < 1)
                return -1;
        if (data[0] & 1) {
                _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

                if (fd < 0 || (size > 1 && write(fd, data + 1, size - 1) != (ssize_t) (size - 1)))
                        abort();
                return 0;
        }
        if (size < 5)
                return -1;
        memcpy(&count, data + 1, 4);
        if (cache_begin(&b, magic, version, le32toh(count)) < 0 || cache_put(&b, data + 5, size - 5) < 0 ||
            cache_file_write(dir, name, &b) < 0)
                abort();
        return 0;
}

int fuzz_read_file(const char *dir, const char *name, uint8_t **ret, size_t *ret_size) {
        _cleanup_free_ char *path = path_join(dir, name);
        _cleanup_fclose_ FILE *f = path ? fopen(path, "re") : NULL;
        char *buf = NULL;
        size_t size = 0;
        FILE *mem;

        if (!f)
                return -1;
        mem = open_memstream(&buf, &size);
        if (!mem)
                return -1;
        for (int c; (c = fgetc(f)) != EOF;)
                fputc(c, mem);
        fclose(mem);
        *ret = (uint8_t *) buf;
        *ret_size = size;
        return 0;
}

uint64_t fuzz_take(FuzzInput *in, size_t n) {
        uint64_t v = 0;

        for (size_t i = 0; i < n && i < 8; i++)
                if (in->left > 0) {
                        v |= (uint64_t) *in->p++ << (8 * i);
                        in->left--;
                }
        return v;
}

char *fuzz_string(const uint8_t *p, size_t n) {
        char *s = malloc(n + 1);

        if (!s)
                abort();
        memcpy(s, p, n);
        s[n] = 0;
        return s;
}
