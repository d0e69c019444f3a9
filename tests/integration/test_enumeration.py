#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Every published filesystem and subvolume property against btrfs-progs
and the kernel, on two real filesystems: one mounted twice, one with only a
subvolume mounted (so some subvolumes are reachable through no mount)."""

import os
import subprocess

from harness import (ROOT, FS_IFACE, MANAGER_IFACE, MANAGER_PATH, SUBVOLUME_IFACE, Btrfs, Bus, Daemon,
                     TestCase, btrfs_rootid, btrfs_subvolume_list, btrfs_subvolume_show, bytestring,
                     display_path, main, root_items, run, snapshot, subvolume_create, superblock_generation,
                     wait_for)

WEIRD_NAMES = [b"with space", b"new\nline", b"bad\xffname"]


class EnumerationTest(TestCase):
    def setUp(self):
        super().setUp()
        # Filesystem A: top level on a/, subvolume "vol" also on a-sv/.
        self.a = Btrfs(self, "a", label="alpha")
        a = self.a.mount(self.path("a"))
        subvolume_create(f"{a}/vol")
        subvolume_create(f"{a}/vol/nested")
        os.mkdir(f"{a}/vol/dir")
        subvolume_create(f"{a}/vol/dir/deep")
        for name in WEIRD_NAMES:
            subvolume_create(os.fsencode(a) + b"/" + name)
        os.mkdir(f"{a}/snaps")
        snapshot(f"{a}/vol", f"{a}/snaps/vol-ro", readonly=True)
        snapshot(f"{a}/vol", f"{a}/snaps/vol-rw")
        # A snapshot whose source is gone.
        subvolume_create(f"{a}/gone")
        snapshot(f"{a}/gone", f"{a}/orphan-snap", readonly=True)
        run("btrfs", "subvolume", "delete", "-c", f"{a}/gone")
        run("btrfs", "subvolume", "sync", a)
        # A received subvolume: ReceivedUuid set.
        os.mkdir(f"{a}/recv")
        send = subprocess.Popen(["btrfs", "-q", "send", f"{a}/snaps/vol-ro"], stdout=subprocess.PIPE)
        run("btrfs", "-q", "receive", f"{a}/recv", stdin=send.stdout)
        send.stdout.close()
        self.assertEqual(send.wait(), 0)
        self.a.mount(self.path("a-sv"), "subvol=vol")

        # Filesystem B: only "data" is mounted; "hidden" and the top level
        # are reachable through no mount.
        self.b = Btrfs(self, "b")
        top = self.b.mount(self.path("b-top"))
        subvolume_create(f"{top}/data")
        subvolume_create(f"{top}/data/inner")
        subvolume_create(f"{top}/hidden")
        self.b.umount(top)
        self.b.mount(self.path("b"), "subvol=data")
        os.sync()

        # Access paths expected from the layout above (then also checked
        # against the kernel below).
        p = self.path
        self.expected_access = {
            (self.a, b"/"): [p("a")],
            (self.a, b"/vol"): [p("a-sv"), p("a", "vol")],
            (self.a, b"/vol/nested"): [p("a-sv", "nested"), p("a", "vol", "nested")],
            (self.a, b"/vol/dir/deep"): [p("a-sv", "dir", "deep"), p("a", "vol", "dir", "deep")],
            (self.a, b"/snaps/vol-ro"): [p("a", "snaps", "vol-ro")],
            (self.a, b"/snaps/vol-rw"): [p("a", "snaps", "vol-rw")],
            (self.a, b"/orphan-snap"): [p("a", "orphan-snap")],
            (self.a, b"/recv/vol-ro"): [p("a", "recv", "vol-ro")],
            (self.b, b"/"): [],
            (self.b, b"/data"): [p("b")],
            (self.b, b"/data/inner"): [p("b", "inner")],
            (self.b, b"/hidden"): [],
        }
        for name in WEIRD_NAMES:
            self.expected_access[(self.a, b"/" + name)] = [os.fsencode(p("a")) + b"/" + name]

        self.bus = Bus(self)

    def published(self, *args, source="listmount()"):
        """Our two filesystems' objects, read by a daemon that says it took
        its mount table from @source."""
        daemon = Daemon(self, self.bus, *args)
        self.assertIn(f"mounts from {source}.", daemon.log())
        # Usage comes in as the scanner finishes: wait for it, and leave out
        # when it was read, which differs from run to run.
        for fs in (self.a, self.b):
            wait_for(lambda: self.bus.get(fs.object_path, FS_IFACE, "ScanProgress") == 1.0, "the scan")
        # Reading the mount table leaves nothing open (leaked FILEs stay
        # reachable through glibc's list, so LeakSanitizer cannot see them).
        readers = lambda: sum("mountinfo" in os.readlink(f"/proc/{daemon.proc.pid}/fd/{fd}")
                              for fd in os.listdir(f"/proc/{daemon.proc.pid}/fd"))
        before = readers()
        for _ in range(3):
            self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
        self.assertEqual(readers(), before, "mount table reads leave fds open")
        objects = self.bus.managed_objects()
        daemon.stop()
        for value in objects.values():
            value.get(SUBVOLUME_IFACE, {}).pop("UsageUpdated", None)
        return {path: value for path, value in objects.items()
                if path.startswith((self.a.object_path, self.b.object_path))}

    def check_model(self, objects):
        for fs in (self.a, self.b):
            self.check_filesystem(objects, fs)
            self.check_subvolumes(objects, fs)
        # Nothing else: two filesystem objects and every subvolume, top levels included.
        self.assertEqual(len(objects), 2 + sum(1 + len(btrfs_subvolume_list(fs.mounts[0])) for fs in (self.a, self.b)))

    def test_model_matches_btrfs_progs_and_kernel(self):
        """With listmount(), which this kernel has."""
        self.check_model(self.published())

    def test_mountinfo_fallback_gives_the_same_model(self):
        """With /proc/self/mountinfo, as under the shipped unit: against the
        same truth, and the same model as with listmount()."""
        objects = self.published("--mountinfo", source="/proc/self/mountinfo")
        self.check_model(objects)
        self.assertEqual(objects, self.published())

    def snapshots_page(self, subvolume, start, count):
        """One GetSnapshots page, asked for as the bus's ordinary user:
        ([(id, properties)], next id)."""
        entries, next_id = self.bus.call(subvolume, SUBVOLUME_IFACE, "GetSnapshots", "tu", str(start), str(count))
        return [(props["Id"]["data"], {k: v["data"] for k, v in props.items()})
                for _, props in entries.items()], next_id

    def test_snapshots_of_each_subvolume_match_btrfs_progs(self):
        """GetSnapshots on every subvolume, paged one, three and 1,000 at a
        time: exactly the subvolumes btrfs-progs gives its UUID as parent
        UUID, in id order, each once; a snapshot's own snapshots are not
        its source's."""
        a = self.a.mounts[0]
        snapshot(f"{a}/snaps/vol-rw", f"{a}/snaps/vol-rw-of-rw", readonly=True)
        for i in range(4):
            snapshot(f"{a}/vol", f"{a}/snaps/vol-{i}", readonly=True)
        snapshot(a, f"{a}/snaps/top")
        daemon = Daemon(self, self.bus)
        listed = btrfs_subvolume_list(a)
        top = btrfs_subvolume_show(a, 5)["UUID"]
        listed[5] = dict(uuid="" if top == b"-" else top.decode(), parent_uuid="", path=b"")
        checked = 0
        for sid, truth in listed.items():
            path = f"{self.a.object_path}/{sid}"
            expected = sorted(i for i, s in listed.items() if truth["uuid"] and s["parent_uuid"] == truth["uuid"])
            for count in (1, 3, 1000):
                with self.subTest(subvolume=truth["path"], count=count):
                    got, start = [], 0
                    while True:
                        page, start = self.snapshots_page(path, start, count)
                        self.assertLessEqual(len(page), count)
                        got += page
                        if start == 0:
                            break
                        self.assertTrue(page, "an empty page before the last")
                    self.assertEqual([i for i, _ in got], expected)
                    for i, props in got:
                        self.assertEqual(props["SnapshotSource"], path)
                        self.assertEqual(bytestring(props["Path"]), b"/" + listed[i]["path"])
            checked += len(expected) > 0
        self.assertGreaterEqual(checked, 3, "vol, snaps/vol-rw and the top level have snapshots")
        self.assertEqual(self.bus.error_name(f"{self.a.object_path}/5", SUBVOLUME_IFACE, "GetSnapshots",
                                             "uint64 0", "uint32 0"), "org.subvold.Subvold1.Error.InvalidArgument")
        daemon.stop()

    def check_filesystem(self, objects, fs):
        props = objects[fs.object_path][FS_IFACE]
        mp = fs.mounts[0]
        label = run("btrfs", "filesystem", "label", mp).decode().strip()
        st = os.statvfs(mp)
        self.assertEqual(props["Uuid"], fs.uuid)
        self.assertEqual(props["Label"], label)
        self.assertEqual(props["Type"], "btrfs")
        self.assertEqual([bytestring(d) for d in props["Devices"]], [os.fsencode(fs.device)])
        self.assertEqual([bytestring(d) for d in props["MountPoints"]], sorted(os.fsencode(m) for m in fs.mounts))
        self.assertEqual(props["Size"], st.f_blocks * st.f_frsize)
        self.assertEqual(props["Free"], st.f_bfree * st.f_frsize)
        self.assertEqual(props["Generation"], superblock_generation(fs.device))

    def check_subvolumes(self, objects, fs):
        mp = fs.mounts[0]
        listed = btrfs_subvolume_list(mp)
        items = root_items(fs.device)
        by_uuid = {v["uuid"]: k for k, v in listed.items()}
        top = btrfs_subvolume_show(mp, 5)
        listed[5] = dict(parent=0, path=b"", uuid="" if top["UUID"] == b"-" else top["UUID"].decode(),
                         parent_uuid="", received_uuid="", generation=int(top["Generation"]))
        self.assertEqual(sorted(items), sorted(listed), "dump-tree and subvolume list disagree")

        for subvolume_id, truth in listed.items():
            path = f"{fs.object_path}/{subvolume_id}"
            self.assertIn(path, objects, f"subvolume {subvolume_id} ({truth['path']!r}) not published")
            props = objects[path][SUBVOLUME_IFACE]
            full = b"/" + truth["path"]
            with self.subTest(subvolume=full):
                self.assertEqual(props["Filesystem"], fs.object_path)
                self.assertEqual(props["Id"], subvolume_id)
                self.assertEqual(props["ParentId"], truth["parent"])
                self.assertEqual(bytestring(props["Path"]), full)
                self.assertEqual(bytestring(props["Name"]), full.rsplit(b"/", 1)[1] or b"/")
                self.assertEqual(props["DisplayPath"], display_path(full))
                self.assertEqual(props["Uuid"], truth["uuid"])
                self.assertEqual(props["ParentUuid"], truth["parent_uuid"])
                self.assertEqual(props["ReceivedUuid"], truth["received_uuid"])
                self.assertEqual(props["IsSnapshot"], truth["parent_uuid"] != "")
                source = by_uuid.get(truth["parent_uuid"])
                self.assertEqual(props["SnapshotSource"], f"{fs.object_path}/{source}" if source else "/")
                self.assertEqual(props["Generation"], items[subvolume_id]["generation"])
                self.assertEqual(props["Generation"], truth["generation"])
                self.assertEqual(props["ChangeGeneration"], items[subvolume_id]["ctransid"])
                self.assertEqual(props["CreationTime"], items[subvolume_id]["otime_usec"])
                self.assertEqual(props["ReadOnly"], items[subvolume_id]["readonly"])
                flags = btrfs_subvolume_show(mp, subvolume_id)["Flags"]
                self.assertEqual(props["ReadOnly"], b"readonly" in flags)

                access = [bytestring(p) for p in props["AccessPaths"]]
                self.assertEqual(access, sorted(os.fsencode(p) for p in self.expected_access[(fs, full)]))
                for p in access:
                    self.assertEqual(btrfs_rootid(p), subvolume_id)
                    self.assertEqual(os.stat(p).st_ino, 256, "an access path must be the subvolume's root")

        # The layout's special cases, spelled out.
        snap = objects[f"{self.a.object_path}/{by_uuid_path(listed, b'snaps/vol-ro')}"][SUBVOLUME_IFACE] \
            if fs is self.a else None
        if snap:
            self.assertTrue(snap["IsSnapshot"] and snap["ReadOnly"])
            orphan = objects[f"{self.a.object_path}/{by_uuid_path(listed, b'orphan-snap')}"][SUBVOLUME_IFACE]
            self.assertTrue(orphan["IsSnapshot"])
            self.assertNotEqual(orphan["ParentUuid"], "")
            self.assertEqual(orphan["SnapshotSource"], "/")
            received = objects[f"{self.a.object_path}/{by_uuid_path(listed, b'recv/vol-ro')}"][SUBVOLUME_IFACE]
            self.assertEqual(received["ReceivedUuid"], snap["Uuid"])


def by_uuid_path(listed, path):
    return next(k for k, v in listed.items() if v["path"] == path)


if __name__ == "__main__":
    main()
