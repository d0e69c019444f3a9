#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Who may do what, through exactly the bus policy `meson install` ships, on
a bus that denies method calls by default like a real system bus: every
method the XML marks org.subvold.Subvold1.CallableBy "everyone" works for an
ordinary user, every "root" one is refused to them, every property is
readable by them, and the README's drop-in keeps GetManagedObjects from
them."""

import os
import re
import xml.etree.ElementTree as ET

from harness import (BUS_NAME, FS_IFACE, GDBUS_CLIENT, MANAGER_IFACE, MANAGER_PATH, ROOT, SOURCE_DIR,
                     SUBVOLUME_IFACE, Btrfs, Bus, Daemon, TestCase, btrfs_rootid, main, snapshot, subvolume_create)

CALLABLE_BY = "org.subvold.Subvold1.CallableBy"
SUBVOLCTL = os.environ.get("SUBVOLCTL", "")
FILES_IFACE = "org.subvold.Subvold1.Files"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"


def xml_interfaces():
    """Interface -> ({method: callable-by}, [property names]) from the XML."""
    root = ET.parse(os.path.join(SOURCE_DIR, "dbus", "org.subvold.Subvold1.xml")).getroot()
    result = {}
    for iface in root.iter("interface"):
        methods = {}
        for m in iface.iter("method"):
            values = [a.get("value") for a in m.findall("annotation") if a.get("name") == CALLABLE_BY]
            methods[m.get("name")] = values[0] if values else None
        result[iface.get("name")] = (methods, [p.get("name") for p in iface.iter("property")])
    return result


def readme_drop_in():
    """The drop-in the README shows under "Who can learn what"."""
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        text = f.read()
    section = text[text.index("### Who can learn what"):]
    return re.search(r"```xml\n(.*?)```", section, re.S)[1]


class AccessTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs")
        self.mnt = self.fs.mount(self.path("mnt"))
        subvolume_create(f"{self.mnt}/vol")
        with open(f"{self.mnt}/vol/file", "w") as f:
            f.write("data")
        with open(f"{self.mnt}/vol/gone", "w") as f:
            f.write("gone")
        snapshot(f"{self.mnt}/vol", f"{self.mnt}/snap", readonly=True)
        os.unlink(f"{self.mnt}/vol/gone")
        self.vol = f"{self.fs.object_path}/{btrfs_rootid(self.mnt + '/vol')}"
        self.snap = f"{self.fs.object_path}/{btrfs_rootid(self.mnt + '/snap')}"

    def start(self, **bus_args):
        self.bus = Bus(self, **bus_args)
        self.daemon = Daemon(self, self.bus)

    def tearDown(self):
        if hasattr(self, "daemon") and not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def objects(self):
        return {MANAGER_IFACE: MANAGER_PATH, FILES_IFACE: MANAGER_PATH, FS_IFACE: self.fs.object_path,
                SUBVOLUME_IFACE: self.vol}

    def call(self, iface, method, user):
        """Calls @method with good arguments as @user: returns None on
        success, else the D-Bus error name."""
        file, vol = f"{self.mnt}/vol/file", f"{self.mnt}/vol"
        by_fd = {"GetSubvolumeByFd": ("by-fd", "file", file), "GetStatfsByFd": ("statfs-by-fd", file),
                 "GetFileIdentity": ("files", method, file), "CompareFiles": ("files", method, file, file),
                 "ListFileVersions": ("files", method, file), "OpenFileVersion": ("files", method, file, self.snap),
                 "ListDeletedFiles": ("files", method, vol),
                 "OpenDeletedFile": ("files", method, vol, "gone", self.snap)}
        if method in by_fd:
            out = self.bus.run(GDBUS_CLIENT, *by_fd[method], user=user, check=True).stdout.decode()
            return None if out.startswith("ok") else out.split()[1]
        args = {
            (MANAGER_IFACE, "GetSubvolumeByPath"): [f"{self.mnt}/vol/file"],
            (MANAGER_IFACE, "GetSubvolumeByPathBytes"): [f"b'{self.mnt}/vol/file'"],
            (MANAGER_IFACE, "Refresh"): [],
            (FS_IFACE, "GetSubvolumes"): ["uint64 0", "uint32 100"],
            (FS_IFACE, "GetExclusiveBytes"): [f"['{self.vol}', '{self.snap}']"],
            (SUBVOLUME_IFACE, "GetStatfs"): [],
            (SUBVOLUME_IFACE, "GetWrittenSince"): [self.snap],
            (SUBVOLUME_IFACE, "GetSnapshots"): ["uint64 0", "uint32 100"],
        }
        self.assertIn((iface, method), args, f"the test does not know how to call {iface}.{method}: teach it")
        p = self.bus.run("gdbus", "call", "--system", "--dest", BUS_NAME, "--object-path", self.objects()[iface],
                         "--method", f"{iface}.{method}", *args[(iface, method)], user=user)
        if p.returncode == 0:
            return None
        return re.search(r"GDBus\.Error:([\w.]+)", p.stderr.decode(errors="replace"))[1]

    def test_policy_matches_xml(self):
        self.start()
        user = self.bus.client
        for iface, (methods, props) in xml_interfaces().items():
            for method, callable_by in methods.items():
                with self.subTest(method=f"{iface}.{method}"):
                    self.assertIn(callable_by, ("everyone", "root"), f"{method} has no {CALLABLE_BY} annotation")
                    self.assertIsNone(self.call(iface, method, ROOT))
                    self.assertEqual(self.call(iface, method, user), None if callable_by == "everyone" else
                                     ACCESS_DENIED)
            path = self.objects()[iface]
            for prop in props:
                with self.subTest(property=f"{iface}.{prop}"):
                    self.bus.busctl("get-property", BUS_NAME, path, iface, prop, user=user)
            self.bus.busctl("introspect", BUS_NAME, path, user=user)
            _, out, _ = self.bus.busctl("--json=short", "call", BUS_NAME, path, "org.freedesktop.DBus.Properties",
                                        "GetAll", "s", iface, user=user)
            self.assertTrue(all(p in out.decode() for p in props))
        self.bus.managed_objects(user=user)

    def test_readme_drop_in_keeps_everything_from_users(self):
        self.start(local_policy=readme_drop_in())
        get_managed_objects = (MANAGER_PATH, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
        self.assertEqual(self.bus.error_name(*get_managed_objects), ACCESS_DENIED)
        self.assertEqual(self.bus.error_name(self.fs.object_path, FS_IFACE, "GetSubvolumes", "uint64 0", "uint32 9"),
                         ACCESS_DENIED)
        self.assertNotEqual(self.bus.busctl("get-property", BUS_NAME, self.vol, SUBVOLUME_IFACE, "DisplayPath",
                                            check=False)[0], 0)
        # Root keeps everything.
        self.assertIn(self.vol, self.bus.managed_objects(user=ROOT))
        self.assertEqual(self.bus.get(self.vol, SUBVOLUME_IFACE, "DisplayPath", user=ROOT), "/vol")
        # subvolctl says so, and exits 1: subvold (here the bus) refused.
        p = self.bus.run(SUBVOLCTL, "list")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("Rejected send message", p.stderr.decode())
        self.assertEqual(self.bus.run(SUBVOLCTL, "list", user=ROOT).returncode, 0)


if __name__ == "__main__":
    main()
