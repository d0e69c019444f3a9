/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The scan cache: what is written is read back whole, and a file cut
 * short or damaged anywhere is refused, never half-read. */
#include <fcntl.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <unistd.h>

#include "scan-cache.h"
#include "util.h"

#define K 4096ULL

static DataExtent *extents(size_t n, uint64_t first, uint64_t step) {
        DataExtent *e = calloc(n ?: 1, sizeof(DataExtent));

        for (size_t i = 0; i < n; i++)
                e[i] = (DataExtent) { .bytenr = first + i * step, .bytes = K * (1 + i % 3) };
        return e;
}

/* Two filesystems: one with a subvolume and a snapshot sharing half of it
 * (the snapshot read inside a running transaction), one empty. */
static void fill(ScanCacheFs fss[2]) {
        memset(fss, 0, 2 * sizeof(ScanCacheFs));
        memset(fss[0].uuid, 0xaa, 16);
        memset(fss[1].uuid, 0xbb, 16);
        g_assert_cmpint(extent_map_set_user(&fss[0].map, 256, 10, 9, 5, 1111, extents(100, 1 << 20, 4 * K), 100), ==, 0);
        g_assert_cmpint(extent_map_set_user(&fss[0].map, 300, 12, 12, 3, 2222, extents(100, (1 << 20) + 200 * K, 4 * K),
                                            100), ==, 0);
        g_assert_cmpint(extent_map_set_user(&fss[0].map, 5, 12, 12, 1, 3333, extents(0, 0, 0), 0), ==, 0);
        ExtentUser *u = (ExtentUser *) extent_map_find_user(&fss[0].map, 300);
        u->tentative = true;
        u->tentative_fingerprint = 0x1234567890abcdefULL;
}

static void assert_same_map(const ExtentMap *a, const ExtentMap *b) {
        g_assert_cmpuint(a->n_users, ==, b->n_users);
        g_assert_cmpuint(extent_map_size(a), ==, extent_map_size(b));
        for (size_t i = 0; i < a->n_users; i++) {
                const ExtentUser *x = &a->users[i], *y = &b->users[i];

                g_assert_cmpuint(x->id, ==, y->id);
                g_assert_cmpuint(x->generation, ==, y->generation);
                g_assert_cmpuint(x->change_generation, ==, y->change_generation);
                g_assert_cmpuint(x->inodes, ==, y->inodes);
                g_assert_cmpuint(x->referenced, ==, y->referenced);
                g_assert_cmpuint(x->exclusive, ==, y->exclusive);
                g_assert_cmpuint(x->scanned_usec, ==, y->scanned_usec);
                g_assert_cmpint(x->tentative, ==, y->tentative);
                g_assert_cmpuint(x->tentative_fingerprint, ==, y->tentative_fingerprint);
                g_assert_cmpmem(x->packed, x->packed_size, y->packed, y->packed_size);
        }
}

static void done(ScanCacheFs *fss, size_t n) {
        for (size_t i = 0; i < n; i++)
                extent_map_done(&fss[i].map);
}

static char *save(ScanCacheFs fss[2]) {
        const ScanCacheFs *list[] = { &fss[0], &fss[1] };
        char *dir = g_dir_make_tmp("test-scan-cache-XXXXXX", NULL);

        g_assert_nonnull(dir);
        g_assert_cmpint(scan_cache_save(dir, list, 2), ==, 0);
        return dir;
}

static void cleanup(char *dir) {
        g_autofree char *path = g_build_filename(dir, SCAN_CACHE_FILE, NULL);

        g_unlink(path);
        g_rmdir(dir);
        g_free(dir);
}

static void test_round_trip(void) {
        ScanCacheFs fss[2], *loaded = NULL;
        char *dir;
        size_t n = 0;

        fill(fss);
        /* The snapshot shares 50 of the subvolume's 100 extents. */
        g_assert_cmpuint(extent_map_size(&fss[0].map), ==, 150);
        dir = save(fss);
        g_assert_cmpint(scan_cache_load(dir, &loaded, &n), ==, 0);
        g_assert_cmpuint(n, ==, 2);
        for (size_t i = 0; i < 2; i++) {
                g_assert_cmpmem(loaded[i].uuid, 16, fss[i].uuid, 16);
                assert_same_map(&loaded[i].map, &fss[i].map);
        }
        done(loaded, n);
        free(loaded);
        done(fss, 2);
        cleanup(dir);
}

static void test_no_file(void) {
        char *dir = g_dir_make_tmp("test-scan-cache-XXXXXX", NULL);
        ScanCacheFs *loaded = NULL;
        size_t n = 0;

        g_assert_cmpint(scan_cache_load(dir, &loaded, &n), ==, -ENOENT);
        cleanup(dir);
}

/* Rewrites the file in place: no rename and no truncation to zero, either
 * of which makes ext4 flush to disk at close, thousands of times here. */
static void overwrite(const char *path, const char *data, size_t size) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);

        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(pwrite(fd, data, size, 0), ==, (ssize_t) size);
        g_assert_cmpint(ftruncate(fd, (off_t) size), ==, 0);
        close(fd);
}

static void test_damaged(void) {
        ScanCacheFs fss[2], *loaded = NULL;
        g_autofree char *path = NULL, *data = NULL;
        char *dir;
        gsize size;
        size_t n;

        fill(fss);
        dir = save(fss);
        path = g_build_filename(dir, SCAN_CACHE_FILE, NULL);
        g_assert_true(g_file_get_contents(path, &data, &size, NULL));
        /* Cut short at every length. */
        for (gsize len = 0; len < size; len++) {
                overwrite(path, data, len);
                g_assert_cmpint(scan_cache_load(dir, &loaded, &n), ==, -EBADMSG);
        }
        /* One byte changed, anywhere (the version field says so instead). */
        for (gsize pos = 0; pos < size; pos++) {
                data[pos] ^= 0x20;
                overwrite(path, data, size);
                int r = scan_cache_load(dir, &loaded, &n);
                g_assert_cmpint(r, ==, pos >= 8 && pos < 12 ? -EPROTONOSUPPORT : -EBADMSG);
                data[pos] ^= 0x20;
        }
        done(fss, 2);
        cleanup(dir);
}

int main(int argc, char *argv[]) {
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/scan-cache/round-trip", test_round_trip);
        g_test_add_func("/scan-cache/no-file", test_no_file);
        g_test_add_func("/scan-cache/damaged", test_damaged);
        return g_test_run();
}
