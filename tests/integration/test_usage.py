#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Per-subvolume usage from btrfs quotas, statfs for subvolumes, and the
usage cache, against btrfs-progs (`btrfs qgroup show --raw`) and statvfs()."""

import fcntl
import os
import stat
import struct
import subprocess

from harness import (ROOT, GDBUS_CLIENT, MANAGER_IFACE, MANAGER_PATH, SUBVOLUME_IFACE, FS_IFACE, Btrfs, Bus, Churn, Daemon,
                     TestCase, btrfs_rootid, main, run, snapshot, subvolume_create, wait_for, write_random,
                     qgroup_show as harness_qgroup_show)

UNKNOWN = 2**64 - 1
BTRFS_IOC_QUOTA_CTL = 0xC0109428  # _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
QUOTA_CTL_ENABLE_SIMPLE_QUOTA = 4
USAGE_PROPS = ("ReferencedBytes", "ExclusiveBytes", "ReferencedLimitBytes", "ExclusiveLimitBytes")


def qgroup_show(mountpoint):
    """btrfs-progs' level-0 qgroups, with UNKNOWN for no limit, as subvold publishes it."""
    return harness_qgroup_show(mountpoint, unlimited=UNKNOWN)


class UsageTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs", size="1G")
        self.mnt = self.fs.mount(self.path("mnt"))
        subvolume_create(f"{self.mnt}/vol")
        write_random(f"{self.mnt}/vol/data", 4 << 20)
        subvolume_create(f"{self.mnt}/other")
        write_random(f"{self.mnt}/other/data", 1 << 20)
        self.cache = self.path("cache")
        os.mkdir(self.cache)
        self.bus = Bus(self)

    def start(self, *args):
        self.daemon = Daemon(self, self.bus, "--cache-dir", self.cache, *args)
        return self.daemon

    def tearDown(self):
        if hasattr(self, "daemon") and not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def subvolume(self, name):
        return f"{self.fs.object_path}/{btrfs_rootid(os.path.join(self.mnt, name))}"

    def objects(self):
        return {p: v for p, v in self.bus.managed_objects().items() if p.startswith(self.fs.object_path)}

    def refresh(self):
        self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)

    def statfs(self, path):
        return {k: v["data"] for k, v in self.bus.call(path, SUBVOLUME_IFACE, "GetStatfs")[0].items()}

    def enable_qgroups(self):
        run("btrfs", "quota", "enable", self.mnt)
        run("btrfs", "quota", "rescan", "-w", self.mnt)
        os.sync()

    def assert_usage_matches_btrfs_progs(self, source):
        truth = qgroup_show(self.mnt)
        objects = self.objects()
        subvolumes = {p: v[SUBVOLUME_IFACE] for p, v in objects.items() if SUBVOLUME_IFACE in v}
        self.assertEqual({s["Id"] for s in subvolumes.values()}, set(truth))
        for props in subvolumes.values():
            with self.subTest(subvolume=props["Id"]):
                self.assertEqual(tuple(props[p] for p in USAGE_PROPS), truth[props["Id"]])
                self.assertEqual(props["UsageSource"], source)
                self.assertEqual(props["Inodes"], UNKNOWN)
                self.assertGreater(props["UsageUpdated"], 0)
        return objects

    def test_quotas_off(self):
        """Without quotas, usage comes from subvold's own scanner
        (tests/integration/test_scan.py checks its figures)."""
        self.start()
        wait_for(lambda: self.bus.get(self.fs.object_path, FS_IFACE, "ScanProgress") == 1.0, "the scan")
        objects = self.objects()
        fs = objects[self.fs.object_path][FS_IFACE]
        self.assertEqual((fs["QuotaMode"], fs["QuotaConsistent"]), ("disabled", True))
        st = os.statvfs(self.mnt)
        self.assertEqual((fs["Size"], fs["Used"], fs["Free"], fs["Available"]),
                         (st.f_blocks * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize,
                          st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize))
        for path, v in objects.items():
            if SUBVOLUME_IFACE in v:
                props = v[SUBVOLUME_IFACE]
                self.assertEqual([props["ReferencedLimitBytes"], props["ExclusiveLimitBytes"]], [UNKNOWN] * 2)
                self.assertEqual(props["UsageSource"], "scan")
                self.assertNotEqual(props["Inodes"], UNKNOWN)
        # Without limits: used is what the subvolume references, free the
        # filesystem's (test_df holds each rule); files are the inodes.
        vol = objects[self.subvolume("vol")][SUBVOLUME_IFACE]
        sf = self.statfs(self.subvolume("vol"))
        self.assertEqual((sf["bsize"], sf["blocks"] - sf["bfree"], sf["bfree"], sf["bavail"], sf["namelen"],
                          sf["flags"]),
                         (st.f_bsize, -(-vol["ReferencedBytes"] // st.f_bsize), st.f_bfree, st.f_bavail,
                          st.f_namemax, st.f_flag))
        self.assertEqual((sf["files"], sf["ffree"], sf["source"], sf["referenced"]),
                         (vol["Inodes"], 0, "scan", vol["ReferencedBytes"]))
        # Reading never enables quotas.
        self.assertFalse(os.path.exists(f"/sys/fs/btrfs/{self.fs.uuid}/qgroups"))

    def test_qgroups_and_limits(self):
        self.enable_qgroups()
        run("btrfs", "qgroup", "limit", str(100 << 20), f"{self.mnt}/vol")
        run("btrfs", "qgroup", "limit", "-e", str(2 << 20), f"{self.mnt}/other")
        snapshot(f"{self.mnt}/vol", f"{self.mnt}/snap", readonly=True)
        write_random(f"{self.mnt}/vol/more", 1 << 20)
        os.sync()
        self.start()
        objects = self.assert_usage_matches_btrfs_progs("qgroup")
        fs = objects[self.fs.object_path][FS_IFACE]
        self.assertEqual((fs["QuotaMode"], fs["QuotaConsistent"]), ("qgroup", True))

        # statfs: a referenced limit that binds is the size; free is what is
        # left under it.
        st = os.statvfs(self.mnt)
        bs = st.f_bsize
        rfer, excl, rlimit, elimit = qgroup_show(self.mnt)[btrfs_rootid(f"{self.mnt}/vol")]
        sf = self.statfs(self.subvolume("vol"))
        self.assertEqual(sf["blocks"], rlimit // bs)
        self.assertEqual(sf["bfree"], min((rlimit - rfer) // bs, st.f_bfree))
        self.assertEqual(sf["bavail"], min((rlimit - rfer) // bs, st.f_bavail))
        self.assertEqual((sf["referenced"], sf["exclusive"], sf["source"], sf["consistent"]),
                         (rfer, excl, "qgroup", True))
        # An exclusive limit only narrows free space.
        rfer, excl, rlimit, elimit = qgroup_show(self.mnt)[btrfs_rootid(f"{self.mnt}/other")]
        sf = self.statfs(self.subvolume("other"))
        self.assertEqual(sf["blocks"] - sf["bfree"], -(-rfer // bs))
        self.assertEqual(sf["bavail"], min(max(elimit - excl, 0) // bs, st.f_bavail))
        # btrfs gave the snapshot its source's limit.
        rfer, excl, rlimit, elimit = qgroup_show(self.mnt)[btrfs_rootid(f"{self.mnt}/snap")]
        self.assertEqual(rlimit, 100 << 20)
        self.assertEqual(self.statfs(self.subvolume("snap"))["blocks"], rlimit // bs)
        # No limit: the filesystem's free space.
        rfer = qgroup_show(self.mnt)[5][0]
        sf = self.statfs(f"{self.fs.object_path}/5")
        self.assertEqual((sf["blocks"], sf["bfree"], sf["bavail"]),
                         (-(-rfer // bs) + st.f_bfree, st.f_bfree, st.f_bavail))

        # The same through an fd, as a GLib client asks.
        p = self.bus.run(GDBUS_CLIENT, "statfs-by-fd", f"{self.mnt}/vol/data", check=True)
        out = p.stdout.decode().split()
        self.assertEqual(out[:2], ["ok", self.subvolume("vol")])
        fields = dict(kv.split("=", 1) for kv in out[2:])
        self.assertEqual(int(fields["blocks"].split()[-1]), (100 << 20) // bs)
        self.assertEqual(fields["source"], "'qgroup'")

    def test_limit_larger_than_free_space(self):
        self.enable_qgroups()
        run("btrfs", "qgroup", "limit", str(100 << 30), f"{self.mnt}/vol")
        os.sync()
        self.start()
        st = os.statvfs(self.mnt)
        sf = self.statfs(self.subvolume("vol"))
        # The filesystem binds, not the limit: used plus the filesystem's free.
        rfer = qgroup_show(self.mnt)[btrfs_rootid(f"{self.mnt}/vol")][0]
        self.assertEqual(sf["blocks"], -(-rfer // st.f_bsize) + st.f_bfree)
        self.assertEqual((sf["bfree"], sf["bavail"]), (st.f_bfree, st.f_bavail))

    def test_simple_quotas(self):
        fd = os.open(self.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, BTRFS_IOC_QUOTA_CTL, struct.pack("QQ", QUOTA_CTL_ENABLE_SIMPLE_QUOTA, 0))
        finally:
            os.close(fd)
        write_random(f"{self.mnt}/vol/after", 2 << 20)
        os.sync()
        self.start()
        objects = self.assert_usage_matches_btrfs_progs("simple-quota")
        self.assertEqual(objects[self.fs.object_path][FS_IFACE]["QuotaMode"], "simple")

    def test_inconsistent_then_rescanned(self):
        self.enable_qgroups()
        # Shared extents make the quick accounting update impossible, so
        # btrfs marks its figures inconsistent instead.
        snapshot(f"{self.mnt}/vol", f"{self.mnt}/snap", readonly=True)
        run("btrfs", "qgroup", "create", "1/100", self.mnt)
        run("btrfs", "qgroup", "assign", "--no-rescan", f"0/{btrfs_rootid(self.mnt + '/vol')}", "1/100", self.mnt)
        os.sync()
        self.start()
        objects = self.objects()
        self.assertFalse(objects[self.fs.object_path][FS_IFACE]["QuotaConsistent"])
        self.assertFalse(objects[self.subvolume("vol")][SUBVOLUME_IFACE]["UsageConsistent"])
        run("btrfs", "quota", "rescan", "-w", self.mnt)
        os.sync()
        wait_for(lambda: self.refresh() or self.bus.get(self.fs.object_path, FS_IFACE, "QuotaConsistent"),
                 "consistent quotas")
        self.assertTrue(self.bus.get(self.subvolume("vol"), SUBVOLUME_IFACE, "UsageConsistent"))
        self.assert_usage_matches_btrfs_progs("qgroup")

    def test_warm_cache_across_restart(self):
        self.enable_qgroups()
        self.start()
        first = self.objects()
        self.daemon.stop()
        # Written, and readable by root alone (whatever the umask).
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.cache, "usage.cache")).st_mode), 0o600)
        # Nothing changed: the restarted daemon serves the cached figures
        # (same read time) without reading quotas again.
        self.start()
        self.assertEqual(self.objects(), first)
        # Something changed: read again (once the once-a-second limit
        # allows; subvold re-reads by itself then).
        before = first[self.subvolume("vol")][SUBVOLUME_IFACE]["UsageUpdated"]
        write_random(f"{self.mnt}/vol/new", 1 << 20)
        os.sync()
        self.refresh()
        wait_for(lambda: self.bus.get(self.subvolume("vol"), SUBVOLUME_IFACE, "UsageUpdated") > before,
                 "usage to be read again")
        self.assert_usage_matches_btrfs_progs("qgroup")

    def damaged_cache_case(self, damage, expected_log):
        """Starts once to write a cache, damages it, and checks that the next
        start ignores it with one log line, serves correct figures and writes
        a good cache again."""
        self.enable_qgroups()
        self.start()
        self.daemon.stop()
        cache_file = os.path.join(self.cache, "usage.cache")
        damage(cache_file)
        write_random(f"{self.mnt}/vol/new", 1 << 20)  # so the figures must be read again
        os.sync()
        self.start()
        log = self.daemon.log()
        self.assertEqual(log.count("usage cache"), 1, log)
        self.assertIn(expected_log, log)
        self.assert_usage_matches_btrfs_progs("qgroup")
        self.daemon.stop()
        return cache_file

    def test_truncated_cache(self):
        def damage(path):
            os.truncate(path, os.path.getsize(path) // 2)
        path = self.damaged_cache_case(damage, "truncated or corrupted")
        self.assert_cache_good(path)

    def test_corrupted_cache(self):
        def damage(path):
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) // 2)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0xff]))
        path = self.damaged_cache_case(damage, "truncated or corrupted")
        self.assert_cache_good(path)

    def test_foreign_version_cache(self):
        def damage(path):
            with open(path, "r+b") as f:
                f.seek(8)
                f.write(struct.pack("<I", 99))
        path = self.damaged_cache_case(damage, "another version")
        self.assert_cache_good(path)

    def test_unreadable_cache(self):
        def damage(path):
            os.unlink(path)
            os.symlink("/etc/passwd", path)  # subvold does not follow links
        path = self.damaged_cache_case(damage, "Too many levels of symbolic links")
        self.assertFalse(os.path.islink(path))
        self.assert_cache_good(path)

    def assert_cache_good(self, path):
        """The rebuilt cache is used by the next start without a complaint."""
        self.start()
        self.assertNotIn("usage cache", self.daemon.log())

    def test_read_only_cache_directory(self):
        run("mount", "-t", "tmpfs", "-o", "ro", "tmpfs", self.cache)
        self.stack.callback(run, "umount", self.cache, check=False)
        self.enable_qgroups()
        self.start()
        self.assert_usage_matches_btrfs_progs("qgroup")
        self.assertEqual(self.daemon.log().count("Cannot write the usage cache"), 1, self.daemon.log())

    def test_full_cache_directory(self):
        run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", self.cache)
        self.stack.callback(run, "umount", self.cache, check=False)
        subprocess.run(["dd", "if=/dev/zero", f"of={self.cache}/filler", "bs=4k", "count=64"],
                       stderr=subprocess.DEVNULL)
        self.enable_qgroups()
        self.start()
        self.assert_usage_matches_btrfs_progs("qgroup")
        self.assertIn("Cannot write the usage cache", self.daemon.log())
        self.assertFalse([f for f in os.listdir(self.cache) if f.startswith("usage.cache.")],
                         "temporary file left behind")

    def test_subvolumes_deleted_while_reading(self):
        self.enable_qgroups()
        self.start()
        def step(i):
            subvolume_create(f"{self.mnt}/churn{i}")
            write_random(f"{self.mnt}/churn{i}/f", 64 << 10)
            run("btrfs", "subvolume", "delete", f"{self.mnt}/churn{i}")

        churn = Churn(self, step)
        try:
            for _ in range(30):
                self.refresh()
                self.objects()
        finally:
            failures = churn.stop()
        self.assertEqual(failures, [])
        run("btrfs", "subvolume", "sync", self.mnt)
        run("btrfs", "quota", "rescan", "-w", self.mnt)
        os.sync()
        # subvold reads again by itself once the once-a-second limit allows.
        wait_for(lambda: self.refresh() or set(qgroup_show(self.mnt)) == {
            p["Id"] for p in (v.get(SUBVOLUME_IFACE) for v in self.objects().values()) if p}
            and self.usage_settled(), "usage to settle")
        self.assert_usage_matches_btrfs_progs("qgroup")

    def usage_settled(self):
        truth = qgroup_show(self.mnt)
        return all(tuple(v[SUBVOLUME_IFACE][p] for p in USAGE_PROPS) == truth.get(v[SUBVOLUME_IFACE]["Id"])
                   for v in self.objects().values() if SUBVOLUME_IFACE in v)


if __name__ == "__main__":
    main()
