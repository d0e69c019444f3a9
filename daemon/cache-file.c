/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "cache-file.h"
#include "util.h"

enum { HEADER_SIZE = 24, TRAILER_SIZE = 8, MAGIC_SIZE = 8 };

static uint64_t fnv1a(const uint8_t *p, size_t n) {
        uint64_t h = 0xcbf29ce484222325ULL;

        for (size_t i = 0; i < n; i++)
                h = (h ^ p[i]) * 0x100000001b3ULL;
        return h;
}

int cache_put(CacheBuffer *b, const void *p, size_t n) {
        if (grow_array(&b->data, &b->allocated, b->size + n, 1) < 0)
                return -ENOMEM;
        memcpy(b->data + b->size, p, n);
        b->size += n;
        return 0;
}

int cache_put_u64(CacheBuffer *b, uint64_t v) {
        v = htole64(v);
        return cache_put(b, &v, sizeof v);
}

int cache_put_u32(CacheBuffer *b, uint32_t v) {
        v = htole32(v);
        return cache_put(b, &v, sizeof v);
}

const uint8_t *cache_get_bytes(CacheBuffer *b, size_t n) {
        const uint8_t *p;

        if (b->overrun || b->size - b->pos < n) {
                b->overrun = true;
                return NULL;
        }
        p = b->data + b->pos;
        b->pos += n;
        return p;
}

void cache_get(CacheBuffer *b, void *p, size_t n) {
        const uint8_t *q = cache_get_bytes(b, n);

        if (q)
                memcpy(p, q, n);
        else
                memset(p, 0, n);
}

uint64_t cache_get_u64(CacheBuffer *b) {
        uint64_t v;
        cache_get(b, &v, sizeof v);
        return le64toh(v);
}

uint32_t cache_get_u32(CacheBuffer *b) {
        uint32_t v;
        cache_get(b, &v, sizeof v);
        return le32toh(v);
}

int cache_begin(CacheBuffer *b, const char magic[8], uint32_t version, uint32_t count) {
        int r = 0;

        r |= cache_put(b, magic, MAGIC_SIZE);
        r |= cache_put_u32(b, version);
        r |= cache_put_u32(b, count);
        r |= cache_put_u64(b, 0);  /* payload size, filled in when written */
        return r < 0 ? -ENOMEM : 0;
}

int cache_file_write(const char *dir, const char *name, CacheBuffer *b) {
        _cleanup_free_ char *final = path_join(dir, name), *tmp = NULL;
        _cleanup_free_ uint8_t *data = NULL;
        _cleanup_close_ int fd = -1, dfd = -1;
        uint64_t payload;
        int r;

        if (b->size < HEADER_SIZE) {
                free(b->data);
                return -EINVAL;
        }
        payload = htole64(b->size - HEADER_SIZE);
        memcpy(b->data + MAGIC_SIZE + 8, &payload, sizeof payload);
        r = cache_put_u64(b, fnv1a(b->data, b->size));
        data = b->data;
        if (r < 0)
                return r;
        if (!final || asprintf(&tmp, "%s.XXXXXX", final) < 0)
                return -ENOMEM;

        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (size_t done = 0; done < b->size;) {
                ssize_t k = write(fd, b->data + done, b->size - done);
                if (k < 0) {
                        r = -errno;
                        goto fail;
                }
                done += (size_t) k;
        }
        /* 0600 (mkostemp's mode): the scan cache lists where every subvolume's
         * data lies on disk, which is nobody else's business. */
        if (fchmod(fd, 0600) < 0 || fsync(fd) < 0 || rename(tmp, final) < 0) {
                r = -errno;
                goto fail;
        }
        /* Make the rename itself durable. */
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0)
                (void) fsync(dfd);
        return 0;
fail:
        (void) unlink(tmp);
        return r;
}

static int read_whole(const char *path, CacheBuffer *ret) {
        /* O_NONBLOCK: a FIFO put in its place must not hang us. */
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        _cleanup_free_ uint8_t *data = NULL;
        struct stat st;
        size_t done = 0;

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (S_ISDIR(st.st_mode))
                return -EISDIR;
        if (!S_ISREG(st.st_mode))
                return -EBADMSG;
        data = malloc((size_t) st.st_size ?: 1);
        if (!data)
                return -ENOMEM;
        while (done < (size_t) st.st_size) {
                ssize_t k = read(fd, data + done, (size_t) st.st_size - done);
                if (k < 0)
                        return -errno;
                if (k == 0)
                        break;
                done += (size_t) k;
        }
        *ret = (CacheBuffer) { .data = TAKE_PTR(data), .size = done };
        return 0;
}

/* Removes the temporary files (NAME.XXXXXX) of writes that a crash cut
 * short: nothing else would, and each crash would leave one more. */
static void remove_leftovers(const char *dir, const char *name) {
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        size_t n = strlen(name);
        struct dirent *de;
        DIR *d;

        if (dfd < 0 || !(d = fdopendir(dfd)))
                return;
        dfd = -1;  /* closedir() closes it */
        while ((de = readdir(d)))
                if (strncmp(de->d_name, name, n) == 0 && de->d_name[n] == '.' && strlen(de->d_name + n + 1) == 6 &&
                    unlinkat(dirfd(d), de->d_name, 0) >= 0)
                        log_debug("Removed %s/%s, left by a write that did not end.", dir, de->d_name);
        closedir(d);
}

int cache_file_read(const char *dir, const char *name, const char magic[8], uint32_t version, CacheBuffer *ret,
                    uint32_t *ret_count) {
        _cleanup_free_ char *path = path_join(dir, name);
        CacheBuffer b = {};
        char m[MAGIC_SIZE];
        uint64_t hash;
        uint32_t count;
        int r;

        if (!path)
                return -ENOMEM;
        remove_leftovers(dir, name);
        r = read_whole(path, &b);
        if (r < 0)
                return r;
        r = -EBADMSG;
        if (b.size < HEADER_SIZE + TRAILER_SIZE)
                goto fail;
        cache_get(&b, m, sizeof m);
        if (memcmp(m, magic, MAGIC_SIZE) != 0)
                goto fail;
        if (cache_get_u32(&b) != version) {
                r = -EPROTONOSUPPORT;
                goto fail;
        }
        count = cache_get_u32(&b);
        if (cache_get_u64(&b) != b.size - HEADER_SIZE - TRAILER_SIZE)
                goto fail;
        memcpy(&hash, b.data + b.size - TRAILER_SIZE, sizeof hash);
        if (le64toh(hash) != fnv1a(b.data, b.size - TRAILER_SIZE))
                goto fail;
        b.size -= TRAILER_SIZE;
        *ret = b;
        *ret_count = count;
        return 0;
fail:
        free(b.data);
        return r;
}

void cache_file_log_load_error(const char *what, const char *dir, int r) {
        if (r == -ENOENT || r >= 0)
                return;
        if (r == -EPROTONOSUPPORT)
                log_info("Ignoring the %s cache in %s: it was written by another version.", what, dir);
        else if (r == -EBADMSG)
                log_warning("Ignoring the %s cache in %s: it is truncated or corrupted.", what, dir);
        else
                log_warning_errno(r, "Ignoring the %s cache in %s: %m", what, dir);
}

bool cache_file_log_write(const char *what, const char *dir, int r, bool failed_before) {
        if (r < 0 && !failed_before)
                log_warning_errno(r, "Cannot write the %s cache in %s, going on without: %m", what, dir);
        else if (r >= 0 && failed_before)
                log_info("Writing the %s cache in %s works again.", what, dir);
        return r < 0;
}
