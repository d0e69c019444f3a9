/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "usage-cache.h"
#include "util.h"

/* Layout, all integers little-endian:
 *   header     "SUBVOLDC", u32 version, u32 number of filesystems, u64 payload size
 *   payload    per filesystem: uuid[16], generation, usage generation, read time,
 *              u32 quota mode, u32 quota consistent, u64 number of subvolumes,
 *              then per subvolume (ascending ids): id, change generation,
 *              referenced, exclusive, inodes, referenced limit, exclusive
 *              limit, updated time, u32 source, u32 consistent
 *   trailer    u64 FNV-1a hash of header and payload */

static const char MAGIC[8] = { 'S', 'U', 'B', 'V', 'O', 'L', 'D', 'C' };
enum { HEADER_SIZE = 24, TRAILER_SIZE = 8 };

typedef struct Buffer {
        uint8_t *data;
        size_t size, allocated, pos;
        bool overrun;  /* a read went past the end */
} Buffer;

static uint64_t fnv1a(const uint8_t *p, size_t n) {
        uint64_t h = 0xcbf29ce484222325ULL;

        for (size_t i = 0; i < n; i++)
                h = (h ^ p[i]) * 0x100000001b3ULL;
        return h;
}

static int put(Buffer *b, const void *p, size_t n) {
        if (grow_array(&b->data, &b->allocated, b->size + n, 1) < 0)
                return -ENOMEM;
        memcpy(b->data + b->size, p, n);
        b->size += n;
        return 0;
}

static int put_u64(Buffer *b, uint64_t v) {
        v = htole64(v);
        return put(b, &v, sizeof v);
}

static int put_u32(Buffer *b, uint32_t v) {
        v = htole32(v);
        return put(b, &v, sizeof v);
}

static void get(Buffer *b, void *p, size_t n) {
        if (b->overrun || b->size - b->pos < n) {
                b->overrun = true;
                memset(p, 0, n);
                return;
        }
        memcpy(p, b->data + b->pos, n);
        b->pos += n;
}

static uint64_t get_u64(Buffer *b) {
        uint64_t v;
        get(b, &v, sizeof v);
        return le64toh(v);
}

static uint32_t get_u32(Buffer *b) {
        uint32_t v;
        get(b, &v, sizeof v);
        return le32toh(v);
}

static int serialize(const Model *m, Buffer *b) {
        int r = 0;  /* put*() return 0 or -ENOMEM, so OR-ing them keeps any failure */
        uint64_t payload;

        r |= put(b, MAGIC, sizeof MAGIC);
        r |= put_u32(b, USAGE_CACHE_VERSION);
        r |= put_u32(b, (uint32_t) m->n_filesystems);
        r |= put_u64(b, 0);  /* payload size, filled in below */
        for (size_t i = 0; i < m->n_filesystems; i++) {
                const Filesystem *fs = m->filesystems[i];

                r |= put(b, fs->uuid, 16);
                r |= put_u64(b, fs->generation);
                r |= put_u64(b, fs->usage_generation);
                r |= put_u64(b, fs->usage_read_usec);
                r |= put_u32(b, fs->quota_mode);
                r |= put_u32(b, fs->quota_consistent);
                r |= put_u64(b, fs->n_subvolumes);
                for (size_t j = 0; j < fs->n_subvolumes; j++) {
                        const Subvolume *sv = &fs->subvolumes[j];
                        const Usage *u = &sv->usage;

                        r |= put_u64(b, sv->id);
                        r |= put_u64(b, sv->change_generation);
                        r |= put_u64(b, u->referenced);
                        r |= put_u64(b, u->exclusive);
                        r |= put_u64(b, u->inodes);
                        r |= put_u64(b, u->referenced_limit);
                        r |= put_u64(b, u->exclusive_limit);
                        r |= put_u64(b, u->updated_usec);
                        r |= put_u32(b, u->source);
                        r |= put_u32(b, u->consistent);
                }
        }
        if (r < 0)
                return -ENOMEM;
        payload = htole64(b->size - HEADER_SIZE);
        memcpy(b->data + 16, &payload, sizeof payload);
        return put_u64(b, fnv1a(b->data, b->size));
}

int usage_cache_save(const char *dir, const Model *m) {
        _cleanup_free_ char *tmp = path_join(dir, USAGE_CACHE_FILE ".XXXXXX");
        _cleanup_free_ char *final = path_join(dir, USAGE_CACHE_FILE);
        _cleanup_free_ uint8_t *data = NULL;
        _cleanup_close_ int fd = -1, dfd = -1;
        Buffer b = {};
        int r;

        if (!tmp || !final)
                return -ENOMEM;
        r = serialize(m, &b);
        data = b.data;
        if (r < 0)
                return r;

        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (size_t done = 0; done < b.size;) {
                ssize_t k = write(fd, b.data + done, b.size - done);
                if (k < 0) {
                        r = -errno;
                        goto fail;
                }
                done += (size_t) k;
        }
        if (fchmod(fd, 0644) < 0 || fsync(fd) < 0 || rename(tmp, final) < 0) {
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

static int read_file(const char *path, Buffer *ret) {
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
        *ret = (Buffer) { .data = TAKE_PTR(data), .size = done };
        return 0;
}

static int deserialize(Buffer *b, Model *m) {
        char magic[sizeof MAGIC];
        uint64_t payload, hash;
        uint32_t n_fs;

        if (b->size < HEADER_SIZE + TRAILER_SIZE)
                return -EBADMSG;
        get(b, magic, sizeof magic);
        if (memcmp(magic, MAGIC, sizeof MAGIC) != 0)
                return -EBADMSG;
        if (get_u32(b) != USAGE_CACHE_VERSION)
                return -EPROTONOSUPPORT;
        n_fs = get_u32(b);
        payload = get_u64(b);
        if (payload != b->size - HEADER_SIZE - TRAILER_SIZE)
                return -EBADMSG;
        memcpy(&hash, b->data + b->size - TRAILER_SIZE, sizeof hash);
        if (le64toh(hash) != fnv1a(b->data, b->size - TRAILER_SIZE))
                return -EBADMSG;
        b->size -= TRAILER_SIZE;

        for (uint32_t i = 0; i < n_fs; i++) {
                _cleanup_(filesystem_freep) Filesystem *fs = NULL;
                uint8_t uuid[16];
                uint64_t n_sv;
                int r;

                get(b, uuid, sizeof uuid);
                fs = filesystem_new(uuid);
                if (!fs)
                        return -ENOMEM;
                fs->generation = get_u64(b);
                fs->usage_generation = get_u64(b);
                fs->usage_read_usec = get_u64(b);
                fs->quota_mode = get_u32(b);
                fs->quota_consistent = get_u32(b);
                n_sv = get_u64(b);
                if (fs->quota_mode >= _QUOTA_MODE_MAX || n_sv > (b->size - b->pos) / 72)
                        return -EBADMSG;
                for (uint64_t j = 0; j < n_sv; j++) {
                        Subvolume sv = {};
                        Usage *u = &sv.usage;

                        /* One statement per field: the order of reads matters. */
                        sv.id = get_u64(b);
                        sv.change_generation = get_u64(b);
                        u->referenced = get_u64(b);
                        u->exclusive = get_u64(b);
                        u->inodes = get_u64(b);
                        u->referenced_limit = get_u64(b);
                        u->exclusive_limit = get_u64(b);
                        u->updated_usec = get_u64(b);
                        u->source = get_u32(b);
                        u->consistent = get_u32(b);
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
        _cleanup_free_ char *path = path_join(dir, USAGE_CACHE_FILE);
        _cleanup_(model_freep) Model *m = model_new();
        Buffer b = {};
        int r;

        if (!path || !m)
                return -ENOMEM;
        r = read_file(path, &b);
        if (r < 0)
                return r;
        r = deserialize(&b, m);
        free(b.data);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}
