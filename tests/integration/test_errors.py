#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Bad input gets a named error, and the daemon keeps serving everyone.
Clients are busctl (paths, Refresh) and the GDBus client (fds)."""

import os
import subprocess

from harness import (FS_IFACE, GDBUS_CLIENT, MANAGER_IFACE, MANAGER_PATH, ROOT, Btrfs, Bus, BusError, Churn, Daemon,
                     TestCase, btrfs_rootid, btrfs_subvolume_list, main, run, snapshot,
                     subvolume_create, wait_for)

ERR = "org.subvold.Subvold1.Error."


class ErrorsTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs")
        mnt = self.mnt = self.fs.mount(self.path("mnt"))
        subvolume_create(f"{mnt}/vol")
        subvolume_create(f"{mnt}/vol/nested")
        os.mkdir(f"{mnt}/vol/dir")
        subvolume_create(f"{mnt}/vol/dir/deep")
        with open(f"{mnt}/vol/file", "w") as f:
            f.write("x")
        os.mkfifo(f"{mnt}/vol/fifo")
        snapshot(f"{mnt}/vol", f"{mnt}/snap", readonly=True)
        self.tmpfs = self.path("tmpfs")
        os.mkdir(self.tmpfs)
        run("mount", "-t", "tmpfs", "tmpfs", self.tmpfs)
        self.stack.callback(run, "umount", self.tmpfs, check=False)
        with open(f"{self.tmpfs}/file", "w") as f:
            f.write("x")

    def start(self, shipped_policy=True, env=None):
        self.bus = Bus(self, shipped_policy=shipped_policy)
        self.daemon = Daemon(self, self.bus, env=env)

    def object_for(self, path):
        # btrfs-progs cannot open FIFOs or files on read-only snapshots: ask
        # about their directory, which is in the same subvolume.
        if not os.path.isdir(path):
            path = os.path.dirname(path)
        return f"{self.fs.object_path}/{btrfs_rootid(path)}"

    def by_path(self, path, user=None):
        try:
            return self.bus.call(MANAGER_PATH, MANAGER_IFACE, "GetSubvolumeByPath", "s", path, user=user)[0]
        except BusError as e:
            return str(e)

    def by_fd(self, kind, file=None, user=None):
        p = self.bus.run(GDBUS_CLIENT, "by-fd", kind, *([file] if file else []), user=user, check=True)
        return p.stdout.decode().strip()

    def assert_still_serving(self):
        self.assertTrue(self.daemon.alive(), self.daemon.log())
        self.assertEqual(self.by_path(f"{self.mnt}/vol"), self.object_for(f"{self.mnt}/vol"))

    def test_get_subvolume_by_fd(self):
        self.start()
        mnt = self.mnt
        for kind, file in [("file", f"{mnt}/vol/file"), ("opath", f"{mnt}/vol/file"), ("file", f"{mnt}/vol"),
                           ("file", f"{mnt}/vol/nested"), ("file", f"{mnt}/vol/dir/deep"),
                           ("file", f"{mnt}/vol/fifo"), ("opath", f"{mnt}/snap/file"), ("file", mnt)]:
            with self.subTest(kind=kind, file=file):
                self.assertEqual(self.by_fd(kind, file), "ok " + self.object_for(file))
                self.assertEqual(self.by_fd(kind, file, user=ROOT), "ok " + self.object_for(file))
        bad = [(("pipe",), "NotBtrfs"), (("socket",), "NotBtrfs"), (("file", f"{self.tmpfs}/file"), "NotBtrfs"),
               (("file", "/proc/self/status"), "NotBtrfs"), (("opath", "/proc/self/status"), "NotBtrfs"),
               # a snapshot leaves an empty placeholder where its source had a nested subvolume
               (("file", f"{mnt}/snap/nested"), "NotFound"),
               # a handle that points to no fd
               (("no-fd",), "InvalidArgument")]
        for args, error in bad:
            with self.subTest(args=args):
                self.assertEqual(self.by_fd(*args), "error " + ERR + error)
                self.assert_still_serving()

    def test_fd_from_another_mount_namespace(self):
        """A file the daemon cannot reach by path: mounted only in the
        client's private mount namespace."""
        self.start()
        private = self.path("private")
        os.mkdir(private)
        script = (f"mount {self.fs.device} {private} && "
                  f"exec {GDBUS_CLIENT} by-fd file {private}/vol/dir/deep")
        out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                             env=self.bus.env, stdout=subprocess.PIPE, check=True).stdout.decode().strip()
        self.assertEqual(out, "ok " + self.object_for(f"{self.mnt}/vol/dir/deep"))
        self.assertFalse(os.path.ismount(private))

    def test_unknown_filesystem_by_fd(self):
        """A btrfs that is not mounted in the daemon's namespace at all."""
        self.start()
        other = Btrfs(self, "other")
        private = self.path("other")
        os.mkdir(private)
        script = f"mount {other.device} {private} && exec {GDBUS_CLIENT} by-fd file {private}"
        out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                             env=self.bus.env, stdout=subprocess.PIPE, check=True).stdout.decode().strip()
        self.assertEqual(out, "error " + ERR + "NotFound")
        self.assert_still_serving()

    def test_get_subvolume_by_path(self):
        self.start()
        mnt = self.mnt
        good = {f"{mnt}/vol": f"{mnt}/vol", f"{mnt}/vol/": f"{mnt}/vol",
                f"{mnt}/vol/nested/../dir/./deep": f"{mnt}/vol/dir/deep",
                f"{mnt}/vol/file": f"{mnt}/vol", mnt: mnt, f"{mnt}/snap/nested": f"{mnt}/snap",
                # not looked at on disk: a missing file resolves to the subvolume that would hold it
                f"{mnt}/vol/nested/does-not-exist": f"{mnt}/vol/nested"}
        for path, holder in good.items():
            with self.subTest(path=path):
                self.assertEqual(self.by_path(path), self.object_for(holder))
                self.assertEqual(self.by_path(path, user=ROOT), self.object_for(holder))
        bad = {"": "InvalidArgument", "relative/path": "InvalidArgument", "./x": "InvalidArgument",
               f"{self.tmpfs}/file": "NotBtrfs", f"{self.tmpfs}/does-not-exist": "NotBtrfs",
               "/proc/self/status": "NotBtrfs"}
        for path, error in bad.items():
            with self.subTest(path=path):
                self.assertEqual(self.error_name(path), ERR + error)
                self.assert_still_serving()

    def error_name(self, path):
        return self.bus.error_name(MANAGER_PATH, MANAGER_IFACE, "GetSubvolumeByPath", path)

    def test_over_mount_hides_subvolume(self):
        """A tmpfs over a directory hides the subvolume below it: both
        AccessPaths and GetSubvolumeByPath follow the mount tree."""
        cover = f"{self.mnt}/vol/dir"
        run("mount", "-t", "tmpfs", "tmpfs", cover)
        self.stack.callback(run, "umount", cover, check=False)
        self.start()
        deep_object = f"{self.fs.object_path}/{self.deep_id()}"
        self.assertEqual(self.bus.get(deep_object, "org.subvold.Subvold1.Subvolume", "AccessPaths"), [])
        self.assertEqual(self.error_name(f"{cover}/deep"), ERR + "NotBtrfs")

    def deep_id(self):
        out = run("btrfs", "subvolume", "list", self.mnt).decode()
        return next(int(line.split()[1]) for line in out.splitlines() if line.endswith("path vol/dir/deep"))

    def test_refresh_privileges(self):
        """Refresh: root only, by bus policy and again in the daemon."""
        self.start(shipped_policy=True)
        self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
        self.assertEqual(self.bus.error_name(MANAGER_PATH, MANAGER_IFACE, "Refresh"),
                         "org.freedesktop.DBus.Error.AccessDenied")
        # Unprivileged reads are allowed by the shipped policy.
        objects = self.bus.call(MANAGER_PATH, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")[0]
        self.assertTrue(self.fs.object_path in objects, "unprivileged GetManagedObjects misses our filesystem")
        self.assert_still_serving()

    def test_refresh_checks_credentials_itself(self):
        """With a bus that allows everything, the daemon still refuses."""
        self.start(shipped_policy=False)
        self.assertEqual(self.bus.error_name(MANAGER_PATH, MANAGER_IFACE, "Refresh"), ERR + "AccessDenied")
        self.assert_still_serving()

    def test_refresh_sees_changes(self):
        """Refresh() publishes what changed.  Nothing else may: the test-only
        switch turns the watch (mount events, generation timer) off, and the
        scanner's first run, whose results come with refreshes, is over."""
        self.start(env={"SUBVOLD_TEST_NO_WATCH": "1"})
        wait_for(lambda: self.bus.get(self.fs.object_path, FS_IFACE, "ScanProgress") == 1.0, "the first scan")
        subvolume_create(f"{self.mnt}/later")
        new_object = self.object_for(f"{self.mnt}/later")
        self.assertFalse(new_object in self.bus.managed_objects(), "published before Refresh")
        self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
        self.assertTrue(new_object in self.bus.managed_objects(), "not published after Refresh")
        run("btrfs", "subvolume", "delete", "-c", f"{self.mnt}/later")
        self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
        self.assertFalse(new_object in self.bus.managed_objects(), "still published after deletion")

    def test_refresh_under_churn(self):
        """Subvolumes vanishing and a filesystem unmounted while subvold
        enumerates: it keeps answering and ends with the kernel's model."""
        self.start()
        other = Btrfs(self, "churn")
        where = self.path("churn")
        os.mkdir(where)
        self.stack.callback(lambda: os.path.ismount(where) and run("umount", where))
        def step(i):
            subvolume_create(f"{self.mnt}/churn{i}")
            run("mount", other.device, where)
            run("btrfs", "subvolume", "delete", f"{self.mnt}/churn{i}")
            run("umount", where)

        churn = Churn(self, step)
        try:
            for _ in range(40):
                self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
                self.bus.managed_objects()
                self.assertTrue(self.daemon.alive(), self.daemon.log())
        finally:
            failures = churn.stop()
        self.assertEqual(failures, [])
        self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
        objects = self.bus.managed_objects()
        published = {int(p.rsplit("/", 1)[1]) for p in objects if p.startswith(self.fs.object_path + "/")}
        self.assertEqual(published, {5, *btrfs_subvolume_list(self.mnt)})
        self.assertFalse(any(p.startswith(other.object_path) for p in objects), "unmounted filesystem published")
        self.assert_still_serving()

    def tearDown(self):
        # Every test ends with a clean SIGTERM exit (and no sanitizer report).
        if hasattr(self, "daemon") and not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()


if __name__ == "__main__":
    main()
