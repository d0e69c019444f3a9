#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""df for subvolumes with ZFS's meaning (GetStatfs, GetStatfsByFd and
`subvolctl df`, as an ordinary user through the shipped policy): used is
what the subvolume references, avail what the filesystem and the
subvolume's limits leave, size the two together.  Ground truth: statvfs()
of the filesystem, `btrfs qgroup show --raw`, and the fixture's own sizes
(incompressible files written whole)."""

import json
import os

from harness import (ROOT, GDBUS_CLIENT, MANAGER_IFACE, MANAGER_PATH, SUBVOLUME_IFACE, FS_IFACE, Btrfs, Bus, Daemon,
                     TestCase, btrfs_rootid, main, qgroup_show, run, subvolume_create, wait_for, write_random)

SUBVOLCTL = os.environ.get("SUBVOLCTL", "")
UNKNOWN = 2**64 - 1
MiB = 1 << 20


def expected_statfs(st, referenced, room=None):
    """The rules of the XML from the filesystem's statvfs(), the bytes the
    subvolume references and the bytes its limits leave (None: no limit)."""
    bs = st.f_bsize
    used = -(-referenced // bs)
    bfree = st.f_bfree if room is None else min(st.f_bfree, room // bs)
    bavail = st.f_bavail if room is None else min(st.f_bavail, room // bs)
    return {"bsize": bs, "blocks": used + bfree, "bfree": bfree, "bavail": bavail, "namelen": st.f_namemax}


def df_json_expected(st, referenced, room=None):
    """What `subvolctl --json df` says for the same figures, in bytes."""
    e = expected_statfs(st, referenced, room)
    used, avail = (e["blocks"] - e["bfree"]) * e["bsize"], e["bavail"] * e["bsize"]
    return {"size": e["blocks"] * e["bsize"], "used": used, "available": avail,
            "use_percent": -(-used * 100 // (used + avail)) if used + avail else 0}


class DfTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs", size="1G", label="data")
        self.mnt = self.fs.mount(self.path("mnt"))
        write_random(f"{self.mnt}/top", MiB // 2)
        self.sizes = {"/": MiB // 2}
        for name, size in (("home", 3 * MiB), ("srv", MiB)):
            subvolume_create(f"{self.mnt}/{name}")
            write_random(f"{self.mnt}/{name}/data", size)
            self.sizes["/" + name] = size
        # /srv is also mounted on its own: df lists what is mounted.
        self.srv = self.fs.mount(self.path("srv"), "subvol=srv")
        os.sync()  # the scanner reads what is on disk
        self.bus = Bus(self)

    def tearDown(self):
        if hasattr(self, "daemon") and not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def object(self, name):
        return f"{self.fs.object_path}/{btrfs_rootid(self.mnt + name)}"

    def statfs(self, name):
        return {k: v["data"] for k, v in self.bus.call(self.object(name), SUBVOLUME_IFACE, "GetStatfs")[0].items()}

    def ctl(self, *args, rc=0):
        p = self.bus.run(SUBVOLCTL, *args)
        self.assertEqual(p.returncode, rc, f"subvolctl {args}: {p.stderr.decode(errors='replace')}")
        return p.stdout.decode()

    def df_json(self, *args):
        return {r["path"]: r for r in json.loads(self.ctl("--json", "df", *args))
                if r["object"].startswith(self.fs.object_path + "/")}

    def table(self, *args):
        """`subvolctl df` as a table: its header's words and {subvolume: fields}."""
        lines = self.ctl("df", *args).splitlines()
        return lines[0].split(), {l.split()[0]: l.split() for l in lines[1:]}

    def assert_converges(self, what, check):
        """Runs @check (which raises AssertionError on a mismatch) until it
        passes: subvold serves the filesystem's statfs() from its last read,
        and btrfs may commit a transaction in between; a Refresh reads it
        again."""
        last = []

        def attempt():
            self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
            try:
                check(os.statvfs(self.mnt))
                return True
            except AssertionError as e:
                last[:] = [e]
                return False

        try:
            wait_for(attempt, what)
        except AssertionError:
            raise last[0] if last else AssertionError(what)

    def wait_scanned(self):
        wait_for(lambda: self.bus.get(self.fs.object_path, FS_IFACE, "ScanProgress") == 1.0, "the scan")

    def test_measured_by_the_scanner(self):
        """Quotas off, no limits: used is what the scanner measured, free
        and available the filesystem's, size the two; files the inodes."""
        self.daemon = Daemon(self, self.bus)
        self.wait_scanned()

        def check(st):
            for name, size in self.sizes.items():
                sf = self.statfs(name)
                self.assertEqual((sf["referenced"], sf["source"]), (size, "scan"), name)
                self.assertEqual({k: sf[k] for k in ("bsize", "blocks", "bfree", "bavail", "namelen")},
                                 expected_statfs(st, size), name)
                self.assertEqual((sf["blocks"] - sf["bfree"]) * sf["bsize"], size, f"{name}: df's Used")
                # The root directory and one file.
                self.assertEqual((sf["files"], sf["ffree"]), (2, 0), name)
            rows = self.df_json("--all")
            self.assertEqual(set(rows), set(self.sizes))
            for name, size in self.sizes.items():
                self.assertEqual({k: rows[name][k] for k in ("size", "used", "available", "use_percent")},
                                 df_json_expected(st, size), name)
                self.assertEqual((rows[name]["inodes"], rows[name]["inodes_free"], rows[name]["source"]),
                                 (2, None, "scan"))
        self.assert_converges("statfs and df to match statvfs() and the fixture", check)

        # Like df, only what is mounted, and where; --all: every subvolume.
        rows = self.df_json()
        self.assertEqual({p: (r["mounted"], r["mounted_on"]) for p, r in rows.items()},
                         {"/": (True, self.mnt), "/srv": (True, self.srv)})
        self.assertEqual((self.df_json("--all")["/home"]["mounted"], self.df_json("--all")["/home"]["mounted_on"]),
                         (False, self.mnt + "/home"))
        header, rows = self.table("--all")
        self.assertEqual(header, ["SUBVOLUME", "SIZE", "USED", "AVAIL", "USE%", "RATIO", "MOUNTED", "ON"])
        self.assertEqual(rows["/home"][2], "3.0M")
        self.assertEqual(rows["/home"][5], "1.00x")  # nothing compressed
        self.assertEqual(rows["/srv"][6], self.srv)
        header, rows = self.table()
        self.assertEqual(set(rows), {"/", "/srv"})
        # Inodes, as df -i: no free count (btrfs has no inode table).
        header, rows = self.table("-i", "--all")
        self.assertEqual(header, ["SUBVOLUME", "INODES", "IUSED", "IFREE", "IUSE%", "MOUNTED", "ON"])
        self.assertEqual(rows["/home"][1:5], ["2", "2", "-", "-"])
        header, rows = self.table("--bytes", "--output=subvolume,fs,source,used,target", "--all")
        self.assertEqual(header, ["SUBVOLUME", "FILESYSTEM", "SOURCE", "USED", "MOUNTED", "ON"])
        self.assertEqual(rows["/home"], ["/home", "data", "scan", str(3 * MiB), self.mnt + "/home"])
        self.assertIn("Unknown column", self.bus.run(SUBVOLCTL, "df", "--output=size,nosuch").stderr.decode())
        self.ctl("df", "--output=size,nosuch", rc=2)

        # By fd: the same rules, the filesystem's figures read fresh.
        def by_fd(st):
            out = self.bus.run(GDBUS_CLIENT, "statfs-by-fd", f"{self.srv}/data", check=True).stdout.decode().split()
            self.assertEqual(out[:2], ["ok", self.object("/srv")])
            fields = {k: v.split()[-1].strip("'") for k, v in (kv.split("=", 1) for kv in out[2:])}
            e = expected_statfs(st, MiB)
            self.assertEqual({k: int(fields[k]) for k in ("blocks", "bfree", "bavail")},
                             {k: e[k] for k in ("blocks", "bfree", "bavail")})
            self.assertEqual(self.df_json(f"{self.srv}/data")["/srv"]["used"], MiB)
        self.assert_converges("GetStatfsByFd to match statvfs()", by_fd)

    def test_quota_limits(self):
        """Quotas on: used is the qgroup's referenced bytes; a referenced
        limit that binds is the size; an exclusive limit narrows free space
        only; a limit beyond the filesystem's free space leaves the
        filesystem's; an exceeded limit leaves nothing, size = used."""
        for name, size in (("full", 3 * MiB), ("big", MiB)):
            subvolume_create(f"{self.mnt}/{name}")
            write_random(f"{self.mnt}/{name}/data", size)
        run("btrfs", "quota", "enable", self.mnt)
        run("btrfs", "quota", "rescan", "-w", self.mnt)
        run("btrfs", "qgroup", "limit", str(100 * MiB), f"{self.mnt}/home")
        run("btrfs", "qgroup", "limit", "-e", str(2 * MiB), f"{self.mnt}/srv")
        run("btrfs", "qgroup", "limit", str(2 * MiB), f"{self.mnt}/full")  # already exceeded
        run("btrfs", "qgroup", "limit", str(100 << 30), f"{self.mnt}/big")  # more than the filesystem
        os.sync()
        truth = qgroup_show(self.mnt)
        room = lambda limit, used: None if limit is None else max(limit - used, 0)
        names = ("/", "/home", "/srv", "/full", "/big")
        self.daemon = Daemon(self, self.bus)

        def check(st):
            rows = self.df_json("--all")
            for name in names:
                rfer, excl, max_rfer, max_excl = truth[btrfs_rootid(self.mnt + name)]
                rooms = [r for r in (room(max_rfer, rfer), room(max_excl, excl)) if r is not None]
                left = min(rooms) if rooms else None
                sf = self.statfs(name)
                self.assertEqual((sf["referenced"], sf["exclusive"], sf["source"]), (rfer, excl, "qgroup"), name)
                self.assertEqual({k: sf[k] for k in ("bsize", "blocks", "bfree", "bavail", "namelen")},
                                 expected_statfs(st, rfer, left), name)
                # btrfs does not count inodes per qgroup: unknown.
                self.assertEqual((sf["files"], sf["ffree"]), (0, 0), name)
                self.assertEqual({k: rows[name][k] for k in ("size", "used", "available", "use_percent")},
                                 df_json_expected(st, rfer, left), name)
                self.assertIsNone(rows[name]["inodes"])
            bs = st.f_bsize
            # The binding referenced limit is the size; the one beyond the
            # filesystem is not; the exceeded one is full.
            self.assertEqual(rows["/home"]["size"], 100 * MiB)
            self.assertEqual(rows["/big"]["size"], truth[btrfs_rootid(self.mnt + "/big")][0] + st.f_bfree * bs)
            self.assertEqual((rows["/full"]["available"], rows["/full"]["use_percent"], rows["/full"]["size"]),
                             (0, 100, rows["/full"]["used"]))
            self.assertLess(rows["/srv"]["available"], MiB)  # 2 MiB exclusive limit, 1 MiB of data and its tree
        self.assert_converges("statfs and df to match statvfs() and the qgroups", check)
        header, rows = self.table("-i", "--all")
        self.assertEqual(rows["/home"][1:5], ["-", "-", "-", "-"])
        header, rows = self.table("--all")
        self.assertEqual(rows["/home"][1], "100M")
        self.assertEqual(rows["/full"][3:5], ["0B", "100%"])

    def test_unknown_usage(self):
        """Before the scanner measured a subvolume, the reply says so and
        df shows no figure for size, used and use%, never the filesystem's;
        once measured, the subvolume's."""
        read_end, write_end = os.pipe()
        self.stack.callback(lambda: os.close(write_end) if write_end >= 0 else None)
        # The scanner waits for a byte on the pipe before its first tree.
        self.daemon = Daemon(self, self.bus, env={"SUBVOLD_TEST_SCAN_PAUSE_FD": str(read_end)},
                             pass_fds=(read_end,))
        os.close(read_end)

        def check(st):
            sf = self.statfs("/home")
            self.assertEqual((sf["source"], sf["referenced"]), ("none", UNKNOWN))
            self.assertEqual((sf["blocks"], sf["bfree"], sf["bavail"]), (st.f_bfree, st.f_bfree, st.f_bavail))
            self.assertEqual((sf["files"], sf["ffree"]), (0, 0))
            row = self.df_json("--all")["/home"]
            self.assertEqual((row["size"], row["used"], row["use_percent"], row["inodes"], row["source"]),
                             (None, None, None, None, "none"))
            self.assertEqual(row["available"], st.f_bavail * st.f_bsize)
        self.assert_converges("df with the usage unknown", check)
        header, rows = self.table("--all")
        self.assertEqual(rows["/home"][1:5], ["-", "-", rows["/home"][3], "-"])
        self.assertNotEqual(rows["/home"][3], "-")
        self.assertEqual(self.table("-i", "--all")[1]["/home"][1:5], ["-", "-", "-", "-"])
        os.close(write_end)  # EOF: the scanner reads on
        write_end = -1  # for the cleanup
        self.wait_scanned()
        self.assertEqual(self.df_json("--all")["/home"]["used"], 3 * MiB)


if __name__ == "__main__":
    main()
