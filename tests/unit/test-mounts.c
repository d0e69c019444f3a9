/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <glib.h>
#include <sched.h>
#include <sys/mount.h>

#include "kernel-compat.h"
#include "mounts.h"
#include "util.h"

static void test_parse_line(void) {
        Mount m;

        g_assert_cmpint(mountinfo_parse_line("47 27 0:40 /sv1/dir/deep /tmp/with\\040space rw,relatime shared:1 "
                                             "master:2 - btrfs /dev/loop0 rw,subvolid=258\n", &m), ==, 0);
        g_assert_cmpuint(m.id, ==, 47);
        g_assert_cmpuint(m.parent_id, ==, 27);
        g_assert_cmpuint(m.dev_major, ==, 0);
        g_assert_cmpuint(m.dev_minor, ==, 40);
        g_assert_true(m.is_btrfs);
        g_assert_cmpstr(m.root, ==, "/sv1/dir/deep");
        g_assert_cmpstr(m.point, ==, "/tmp/with space");
        g_assert_cmpstr(m.fstype, ==, "btrfs");
        g_assert_cmpstr(m.source, ==, "/dev/loop0");
        g_assert_cmpuint(m.master, ==, 2);
        mount_done(&m);

        /* no optional fields; a non-btrfs type */
        g_assert_cmpint(mountinfo_parse_line("1 0 0:2 / / rw - tmpfs none rw", &m), ==, 0);
        g_assert_false(m.is_btrfs);
        g_assert_cmpuint(m.master, ==, 0);
        mount_done(&m);

        g_assert_cmpint(mountinfo_parse_line("", &m), ==, -EINVAL);
        g_assert_cmpint(mountinfo_parse_line("1 0 0:2 / / rw tmpfs none rw", &m), ==, -EINVAL);
        g_assert_cmpint(mountinfo_parse_line("x 0 0:2 / / rw - tmpfs none rw", &m), ==, -EINVAL);
        g_assert_cmpint(mountinfo_parse_line("1 0 02 / / rw - tmpfs none rw", &m), ==, -EINVAL);
        g_assert_cmpint(mountinfo_parse_line("1 0 0:2 / / rw master:x - tmpfs none rw", &m), ==, -EINVAL);
}

static void test_unescape(void) {
        char s[] = "a\\011b\\012c\\134d\\040e\\xyz\\9";

        mountinfo_unescape(s);
        g_assert_cmpstr(s, ==, "a\tb\nc\\d e\\xyz\\9");
}

static void test_path_startswith(void) {
        g_assert_cmpstr(path_startswith("/a/b", "/a"), ==, "/b");
        g_assert_cmpstr(path_startswith("/a", "/a"), ==, "");
        g_assert_null(path_startswith("/ab", "/a"));
        g_assert_cmpstr(path_startswith("/a", "/"), ==, "/a");
        g_assert_cmpstr(path_startswith("/", "/"), ==, "");
}

/* A table with the cases resolution must get right: a btrfs mount, an
 * over-mount on a directory inside it, two mounts stacked on one mount
 * point, and a mount hidden because its parent's directory was over-mounted. */
static const char table[] =
        "20 1 0:20 / / rw - ext4 /dev/vda rw\n"
        "30 20 0:40 / /mnt rw - btrfs /dev/loop0 rw\n"
        "31 30 0:41 / /mnt/vol/dir rw - tmpfs tmpfs rw\n"
        "40 20 0:40 /vol /srv rw - btrfs /dev/loop0 rw\n"
        "41 40 0:42 / /srv rw - tmpfs tmpfs rw\n"
        "50 20 0:40 / /data rw - btrfs /dev/loop0 rw\n"
        "51 50 0:40 /vol /data/sub rw - btrfs /dev/loop0 rw\n"
        "52 20 0:43 / /data rw - tmpfs tmpfs rw\n"
        "garbage line\n";

static void test_table_resolve(void) {
        _cleanup_fclose_ FILE *f = fmemopen((void *) table, sizeof(table) - 1, "r");
        MountTable t;
        const char *rest;
        const Mount *m;

        g_assert_cmpint(mount_table_parse_mountinfo(f, &t), ==, 0);
        g_assert_cmpuint(t.n_mounts, ==, 8);
        g_assert_cmpuint(t.mounts[t.root_index].id, ==, 20);

        m = mount_table_resolve(&t, "/mnt/vol/x", &rest);
        g_assert_cmpuint(m->id, ==, 30);
        g_assert_cmpstr(rest, ==, "/vol/x");
        m = mount_table_resolve(&t, "/mnt/vol/dir/deep", &rest);
        g_assert_cmpuint(m->id, ==, 31);
        g_assert_cmpstr(rest, ==, "/deep");
        m = mount_table_resolve(&t, "/mnt/vol/directory", &rest);
        g_assert_cmpuint(m->id, ==, 30);
        /* stacked: the tmpfs on top of /srv wins */
        g_assert_cmpuint(mount_table_resolve(&t, "/srv/x", NULL)->id, ==, 41);
        /* /data/sub hangs below mount 50, which the tmpfs 52 hides */
        g_assert_cmpuint(mount_table_resolve(&t, "/data/sub/x", NULL)->id, ==, 52);
        g_assert_cmpuint(mount_table_resolve(&t, "/etc", NULL)->id, ==, 20);

        g_assert_true(mount_table_is_reachable(&t, &t.mounts[1]));   /* 30 */
        g_assert_false(mount_table_is_reachable(&t, &t.mounts[3]));  /* 40, under 41 */
        g_assert_false(mount_table_is_reachable(&t, &t.mounts[6]));  /* 51, parent hidden */
        g_assert_true(mount_table_is_reachable(&t, &t.mounts[7]));   /* 52 */
        mount_table_done(&t);
}

/* subvold's namespace under its unit (as read there, trimmed): systemd's
 * bind for CacheDirectory= is a rebind; binds that show another directory,
 * of another filesystem than their parent's, stacked on the parent's mount
 * point, of the host's own namespace or of another peer group are not. */
static const char unit_table[] =
        "295 254 0:44 /@ / ro shared:60 master:1 - btrfs /dev/loop1 rw\n"
        "326 295 0:48 /@var /var ro shared:105 master:11 - btrfs /dev/loop2 rw\n"
        "327 326 0:48 /@var/cache/subvold /var/cache/subvold rw shared:106 master:11 - btrfs /dev/loop2 rw\n"
        "328 326 0:48 /@var/lib/x /var/other rw shared:107 master:11 - btrfs /dev/loop2 rw\n"
        "329 295 0:48 /@ /@ rw shared:108 master:1 - btrfs /dev/loop2 rw\n"
        "330 326 0:48 /@var /var rw shared:109 master:11 - btrfs /dev/loop2 rw\n"
        "331 326 0:48 /@var/spool /var/spool rw shared:110 - btrfs /dev/loop2 rw\n"
        "332 326 0:48 /@var/tmp /var/tmp rw shared:111 master:12 - btrfs /dev/loop2 rw\n";

static void test_rebind(void) {
        _cleanup_fclose_ FILE *f = fmemopen((void *) unit_table, sizeof(unit_table) - 1, "r");
        const bool rebind[] = { false, false, true, false, false, false, false, false };
        MountTable t;

        g_assert_cmpint(mount_table_parse_mountinfo(f, &t), ==, 0);
        g_assert_cmpuint(t.n_mounts, ==, ELEMENTSOF(rebind));
        for (size_t i = 0; i < t.n_mounts; i++)
                g_assert_cmpint(t.mounts[i].rebind, ==, rebind[i]);
        mount_table_done(&t);
}

/* mountinfo is read in pieces: an id freed and given to a new mount in
 * between shows twice, and here closes a loop in the parent links (found
 * by fuzz-mountinfo; the walk went round it for ever). */
static const char reused_id_table[] =
        "1 0 0:1 / / rw - ext4 /dev/a rw\n"
        "2 1 0:1 / /a rw - ext4 /dev/a rw\n"
        "1 2 0:1 / /a/b rw - ext4 /dev/a rw\n";

static void test_reused_id(void) {
        _cleanup_fclose_ FILE *f = fmemopen((void *) reused_id_table, sizeof(reused_id_table) - 1, "r");
        const char *rest;
        MountTable t;

        g_assert_cmpint(mount_table_parse_mountinfo(f, &t), ==, 0);
        g_assert_nonnull(mount_table_resolve(&t, "/a/b/c", &rest));
        mount_table_done(&t);
}

/* Whether this kernel answers listmount() (Linux 6.8). */
static bool listmount_works(void) {
        struct mnt_id_req_compat req = { .size = MNT_ID_REQ_SIZE_VER0, .mnt_id = LSMT_ROOT_COMPAT };
        uint64_t id;

        return sys_listmount(&req, &id, 1, 0) >= 0;
}

static void test_read_live(void) {
        MountTable a, b;

        /* Both sources see the same mount points in this namespace (and the
         * same peer groups).  The automatic choice is listmount() wherever
         * the kernel has it: else this would compare mountinfo with itself. */
        g_assert_cmpint(mount_table_read(MOUNT_SOURCE_MOUNTINFO, &a), ==, 0);
        g_assert_cmpint(a.source, ==, MOUNT_SOURCE_MOUNTINFO);
        g_assert_cmpint(mount_table_read(MOUNT_SOURCE_AUTO, &b), ==, 0);
        if (listmount_works())
                g_assert_cmpint(b.source, ==, MOUNT_SOURCE_LISTMOUNT);
        g_assert_cmpuint(a.n_mounts, ==, b.n_mounts);
        for (size_t i = 0; i < a.n_mounts; i++) {
                bool found = false;
                for (size_t j = 0; j < b.n_mounts && !found; j++)
                        found = streq(a.mounts[i].point, b.mounts[j].point) &&
                                streq(a.mounts[i].root, b.mounts[j].root) &&
                                streq(a.mounts[i].fstype, b.mounts[j].fstype) &&
                                a.mounts[i].master == b.mounts[j].master &&
                                a.mounts[i].rebind == b.mounts[j].rebind;
                g_assert_true(found);
        }
        g_assert_cmpstr(a.mounts[a.root_index].point, ==, "/");
        g_assert_cmpstr(b.mounts[b.root_index].point, ==, "/");
        mount_table_done(&a);
        mount_table_done(&b);
}

int main(int argc, char *argv[]) {
        g_test_init(&argc, &argv, NULL);
        /* The live test reads the table twice: in a namespace of its own,
         * other processes' mounts cannot change it in between (needs root;
         * otherwise it runs where it is). */
        if (unshare(CLONE_NEWNS) == 0)
                g_assert_cmpint(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), ==, 0);
        g_test_add_func("/mounts/parse-line", test_parse_line);
        g_test_add_func("/mounts/unescape", test_unescape);
        g_test_add_func("/mounts/path-startswith", test_path_startswith);
        g_test_add_func("/mounts/table-resolve", test_table_resolve);
        g_test_add_func("/mounts/rebind", test_rebind);
        g_test_add_func("/mounts/reused-id", test_reused_id);
        g_test_add_func("/mounts/read-live", test_read_live);
        return g_test_run();
}
