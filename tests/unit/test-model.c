/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The model with a fake backend: filesystems and subvolumes built by hand,
 * a mount table from a mountinfo text. */
#include <glib.h>

#include "model.h"
#include "util.h"

static const uint8_t UUID_A[16] = { 0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };

static void add(Filesystem *fs, uint64_t id, uint64_t parent, const char *path, uint8_t uuid_byte,
                uint8_t parent_uuid_byte) {
        Subvolume sv = { .id = id, .parent_id = parent, .path = strdup(path) };

        sv.uuid[0] = uuid_byte;
        sv.parent_uuid[0] = parent_uuid_byte;
        g_assert_nonnull(filesystem_add_subvolume(fs, &sv));
}

/* 33 is a bind of what /mnt/vol/nested shows anyway, as systemd makes in
 * a unit's namespace (see Mount.rebind). */
static const char table[] =
        "20 1 0:20 / / rw - ext4 /dev/vda rw\n"
        "30 20 0:40 / /mnt rw master:7 - btrfs /dev/loop0 rw\n"
        "31 20 0:40 /vol /srv/vol rw - btrfs /dev/loop0 rw\n"
        "32 30 0:41 / /mnt/vol/dir rw - tmpfs tmpfs rw\n"
        "33 30 0:40 /vol/nested /mnt/vol/nested rw master:7 - btrfs /dev/loop0 rw\n";

static Model *build(void) {
        _cleanup_fclose_ FILE *f = fmemopen((void *) table, sizeof(table) - 1, "r");
        Model *m = model_new();
        Filesystem *fs = filesystem_new(UUID_A);
        MountTable t;

        /* added out of order on purpose: the model sorts */
        add(fs, 260, 5, "/snap", 4, 2);          /* snapshot of /vol */
        add(fs, 5, 0, "/", 0, 0);
        add(fs, 256, 5, "/vol", 2, 0);
        add(fs, 257, 256, "/vol/nested", 3, 0);
        add(fs, 258, 256, "/vol/dir/deep", 5, 0);
        add(fs, 261, 5, "/orphan", 6, 99);       /* snapshot of something deleted */
        g_assert_cmpint(filesystem_index(fs), ==, 0);
        g_assert_cmpint(model_add_filesystem(m, fs), ==, 0);

        g_assert_cmpint(mount_table_parse_mountinfo(f, &t), ==, 0);
        g_assert_cmpint(model_set_mounts(m, &t), ==, 0);
        model_attach_mount(m, 1, fs);
        model_attach_mount(m, 2, fs);
        model_attach_mount(m, 4, fs);
        g_assert_cmpint(model_finish(m), ==, 0);
        return m;
}

static void assert_strv(char **l, const char *first, ...) {
        va_list ap;
        size_t i = 0;

        va_start(ap, first);
        for (const char *s = first; s; s = va_arg(ap, const char *), i++) {
                g_assert_nonnull(l);
                g_assert_cmpstr(l[i], ==, s);
        }
        va_end(ap);
        g_assert_true(!l || !l[i]);
}

static void test_lookups(void) {
        _cleanup_(model_freep) Model *m = build();
        Filesystem *fs = model_find_filesystem(m, UUID_A);
        Subvolume *sv;

        g_assert_nonnull(fs);
        g_assert_cmpuint(fs->n_subvolumes, ==, 6);
        for (size_t i = 1; i < fs->n_subvolumes; i++)
                g_assert_cmpuint(fs->subvolumes[i - 1].id, <, fs->subvolumes[i].id);
        g_assert_cmpstr(filesystem_find_subvolume(fs, 257)->path, ==, "/vol/nested");
        g_assert_null(filesystem_find_subvolume(fs, 999));
        g_assert_cmpuint(filesystem_find_subvolume_by_path(fs, "/vol/nested/a/b")->id, ==, 257);
        g_assert_cmpuint(filesystem_find_subvolume_by_path(fs, "/vol/dir")->id, ==, 256);
        g_assert_cmpuint(filesystem_find_subvolume_by_path(fs, "/volume")->id, ==, 5);

        sv = filesystem_find_subvolume(fs, 260);
        g_assert_nonnull(sv->snapshot_source);
        g_assert_cmpuint(sv->snapshot_source->id, ==, 256);
        g_assert_null(filesystem_find_subvolume(fs, 261)->snapshot_source);
        g_assert_null(filesystem_find_subvolume(fs, 256)->snapshot_source);
}

/* Subvolume @id's access paths, kept until the next call. */
static char **access_paths(const Filesystem *fs, uint64_t id) {
        static char **last;

        strv_free(last);
        last = subvolume_access_paths(filesystem_find_subvolume(fs, id));
        g_assert_nonnull(last);
        return last;
}

static void test_mount_points_and_access_paths(void) {
        _cleanup_(model_freep) Model *m = build();
        Filesystem *fs = model_find_filesystem(m, UUID_A);
        const Subvolume *deep = filesystem_find_subvolume(fs, 258);

        assert_strv(fs->mount_points, "/mnt", "/srv/vol", NULL);  /* not the rebind */
        assert_strv(access_paths(fs, 5), "/mnt", NULL);
        assert_strv(access_paths(fs, 256), "/mnt/vol", "/srv/vol", NULL);
        assert_strv(access_paths(fs, 257), "/mnt/vol/nested", "/srv/vol/nested", NULL);
        /* /mnt/vol/dir is over-mounted by a tmpfs: only the other mount reaches it */
        assert_strv(access_paths(fs, 258), "/srv/vol/dir/deep", NULL);
        assert_strv(access_paths(fs, 260), "/mnt/snap", NULL);
        assert_strv(access_paths(fs, 261), "/mnt/orphan", NULL);
        /* The bound counts the hidden path too: "/mnt/vol/dir/deep" and
         * "/srv/vol/dir/deep" with their NULs. */
        g_assert_cmpuint(subvolume_access_paths_bound(deep, 0), >=, 2 * sizeof("/srv/vol/dir/deep"));
}

/* The same mounts tell that nothing changed; another mount point on top of
 * one of them, or one mount fewer, does not. */
static void test_access_unchanged(void) {
        _cleanup_(model_freep) Model *a = build(), *b = build(), *c = build();
        Filesystem *fa = model_find_filesystem(a, UUID_A), *fb = model_find_filesystem(b, UUID_A);
        Filesystem *fc = model_find_filesystem(c, UUID_A);

        g_assert_true(filesystem_access_unchanged(fa, fb));
        free(b->mounts.mounts[3].point);
        b->mounts.mounts[3].point = strdup("/mnt/snap");
        g_assert_false(filesystem_access_unchanged(fa, fb));
        fc->n_mount_indexes--;
        g_assert_false(filesystem_access_unchanged(fa, fc));
}

static void test_resolve(void) {
        _cleanup_(model_freep) Model *m = build();
        Subvolume *sv = NULL;

        g_assert_cmpint(model_resolve_path(m, "/mnt/vol/nested/file", &sv), ==, RESOLVE_OK);
        g_assert_cmpuint(sv->id, ==, 257);
        g_assert_cmpint(model_resolve_path(m, "/srv/vol/../vol//nested/.", &sv), ==, RESOLVE_OK);
        g_assert_cmpuint(sv->id, ==, 257);
        g_assert_cmpint(model_resolve_path(m, "/mnt", &sv), ==, RESOLVE_OK);
        g_assert_cmpuint(sv->id, ==, 5);
        g_assert_cmpint(model_resolve_path(m, "/srv/vol/dir/deep", &sv), ==, RESOLVE_OK);
        g_assert_cmpuint(sv->id, ==, 258);
        g_assert_cmpint(model_resolve_path(m, "/mnt/vol/dir/deep", &sv), ==, RESOLVE_NOT_BTRFS);
        g_assert_cmpint(model_resolve_path(m, "/etc/passwd", &sv), ==, RESOLVE_NOT_BTRFS);
        g_assert_cmpint(model_resolve_path(m, "relative", &sv), ==, RESOLVE_INVALID);
        g_assert_cmpint(model_resolve_path(m, "", &sv), ==, RESOLVE_INVALID);
}

static void test_resolve_unknown_filesystem(void) {
        _cleanup_(model_freep) Model *m = build();
        Subvolume *sv = NULL;

        /* a btrfs mount whose filesystem could not be read */
        m->mount_filesystem[2] = NULL;
        g_assert_cmpint(model_resolve_path(m, "/srv/vol/x", &sv), ==, RESOLVE_NOT_FOUND);
}

static void test_normalize(void) {
        static const char *cases[][2] = {
                { "/", "/" },           { "//", "/" },         { "/a/", "/a" },
                { "/a//b/./c", "/a/b/c" }, { "/a/../b", "/b" }, { "/..", "/" },
                { "/a/b/../../..", "/" }, { "/a/.b/..c", "/a/.b/..c" },
        };

        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
                _cleanup_free_ char *s = path_normalize(cases[i][0]);
                g_assert_cmpstr(s, ==, cases[i][1]);
        }
        g_assert_null(path_normalize("a/b"));
        g_assert_null(path_normalize(""));
        g_assert_cmpstr(path_last_component("/a/b"), ==, "b");
        g_assert_cmpstr(path_last_component("/"), ==, "/");
}

static void test_display_escape(void) {
        static const char *cases[][2] = {
                { "/plain", "/plain" },
                { "/new\nline", "/new\\x0aline" },
                { "/bad\xffname", "/bad\\xffname" },
                { "/caf\xc3\xa9", "/caf\xc3\xa9" },
                { "/over\xc0\xaflong", "/over\\xc0\\xaflong" },
                { "/sur\xed\xa0\x80", "/sur\\xed\\xa0\\x80" },
                { "/cut\xe2\x82", "/cut\\xe2\\x82" },
                { "/emoji\xf0\x9f\x98\x80", "/emoji\xf0\x9f\x98\x80" },
                { "/del\x7f", "/del\\x7f" },
        };

        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
                _cleanup_free_ char *s = display_escape(cases[i][0]);
                g_assert_cmpstr(s, ==, cases[i][1]);
                g_assert_true(g_utf8_validate(s, -1, NULL));
        }
}

static void test_duplicate_filesystem(void) {
        _cleanup_(model_freep) Model *m = model_new();

        g_assert_cmpint(model_add_filesystem(m, filesystem_new(UUID_A)), ==, 0);
        g_assert_cmpint(model_add_filesystem(m, filesystem_new(UUID_A)), ==, -EEXIST);
        g_assert_cmpuint(m->n_filesystems, ==, 1);
}

/* A 1000-block filesystem of 4 KiB blocks, 600 free, 500 available. */
static const StatfsInfo FS = { .block_size = 4096, .blocks = 1000, .blocks_free = 600, .blocks_available = 500,
                               .files = 0, .files_free = 0, .name_max = 255, .flags = 32 };

static StatfsInfo statfs_with(Usage u) {
        Subvolume sv = { .usage = u };
        return subvolume_statfs(&sv, &FS);
}

static void test_statfs_rules(void) {
        Usage u = USAGE_NONE;
        StatfsInfo st;

        /* ZFS's meaning: used = referenced, blocks = used + free.  The
         * filesystem: 1000 blocks, 600 free, 500 available.  Usage unknown:
         * nothing counted as used. */
        st = statfs_with(u);
        g_assert_cmpuint(st.blocks, ==, 600);
        g_assert_cmpuint(st.blocks_free, ==, 600);
        g_assert_cmpuint(st.blocks_available, ==, 500);
        g_assert_cmpuint(st.files, ==, 0);
        g_assert_cmpuint(st.name_max, ==, 255);
        g_assert_cmpuint(st.flags, ==, 32);

        /* Usage known, no limit: used plus the filesystem's free; files = inodes. */
        u.referenced = 40 * 4096, u.exclusive = 10 * 4096, u.inodes = 77;
        st = statfs_with(u);
        g_assert_cmpuint(st.blocks, ==, 640);
        g_assert_cmpuint(st.blocks_available, ==, 500);
        g_assert_cmpuint(st.files, ==, 77);
        g_assert_cmpuint(st.files_free, ==, 0);

        /* A referenced limit that binds is the size; free is what is left under it. */
        u.referenced_limit = 100 * 4096;
        st = statfs_with(u);
        g_assert_cmpuint(st.blocks, ==, 100);
        g_assert_cmpuint(st.blocks_free, ==, 60);
        g_assert_cmpuint(st.blocks_available, ==, 60);

        /* ... but free is never more than the filesystem has. */
        u.referenced_limit = 900 * 4096;
        st = statfs_with(u);
        g_assert_cmpuint(st.blocks, ==, 640);
        g_assert_cmpuint(st.blocks_free, ==, 600);
        g_assert_cmpuint(st.blocks_available, ==, 500);

        /* Over the limit: nothing left, never negative; size = used. */
        u.referenced_limit = 20 * 4096;
        st = statfs_with(u);
        g_assert_cmpuint(st.blocks, ==, 40);
        g_assert_cmpuint(st.blocks_free, ==, 0);
        g_assert_cmpuint(st.blocks_available, ==, 0);

        /* An exclusive limit narrows free space too, the tighter one wins. */
        u.referenced_limit = 100 * 4096, u.exclusive_limit = 30 * 4096;
        st = statfs_with(u);
        g_assert_cmpuint(st.blocks, ==, 60);
        g_assert_cmpuint(st.blocks_available, ==, 20);
        u.referenced_limit = USAGE_UNKNOWN;
        st = statfs_with(u);
        g_assert_cmpuint(st.blocks, ==, 60);
        g_assert_cmpuint(st.blocks_free, ==, 20);

        /* A limit without a known usage tells nothing. */
        u = USAGE_NONE;
        u.referenced_limit = 100 * 4096;
        st = statfs_with(u);
        g_assert_cmpuint(st.blocks, ==, 600);
        g_assert_cmpuint(st.blocks_available, ==, 500);
}

int main(int argc, char *argv[]) {
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/model/lookups", test_lookups);
        g_test_add_func("/model/mount-points-and-access-paths", test_mount_points_and_access_paths);
        g_test_add_func("/model/access-unchanged", test_access_unchanged);
        g_test_add_func("/model/resolve", test_resolve);
        g_test_add_func("/model/resolve-unknown-filesystem", test_resolve_unknown_filesystem);
        g_test_add_func("/model/normalize", test_normalize);
        g_test_add_func("/model/display-escape", test_display_escape);
        g_test_add_func("/model/duplicate-filesystem", test_duplicate_filesystem);
        g_test_add_func("/model/statfs-rules", test_statfs_rules);
        return g_test_run();
}
