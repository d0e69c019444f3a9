#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The GNOME Files extension through the real libnautilus-extension-4:
tests/client/nautilus-provider loads the module as Nautilus does and feeds
its providers files on loop-mounted btrfs filesystems, as an ordinary
user, with the real subvold on the test's bus.  Columns, the properties
section and the menu item are checked against btrfs-progs; the one
exception is what df would show, which is what subvold's GetStatfs says
(its rules are subvold's own)."""

import os
import re
import subprocess

from harness import (SANITIZER_MARKERS, SUBVOLUME_IFACE, Btrfs, Bus, Daemon, as_user, btrfs_rootid,
                     btrfs_subvolume_list, btrfs_subvolume_show, main, run, snapshot, subvolume_create, wait_for)
from test_clients import DaemonTest
from test_scan import ScanPause

MODULE = os.environ.get("SUBVOLD_NAUTILUS_MODULE", "")
PROVIDER = os.environ.get("SUBVOLD_NAUTILUS_PROVIDER", "")
UNKNOWN = 2**64 - 1


def format_size(n):
    """g_format_size() with its default flags: SI units, one decimal, a
    no-break space before the unit; the formatting Nautilus uses."""
    if n < 1000:
        return "1 byte" if n == 1 else f"{n} bytes"
    for unit, factor in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12), ("PB", 1e15), ("EB", 1e18)):
        if n < factor * 1000 or unit == "EB":
            return f"{n / factor:.1f}\u00a0{unit}"


def qgroups(mountpoint):
    """id -> (referenced, exclusive, max referenced, max exclusive) from
    `btrfs qgroup show --raw` (None for no limit)."""
    out = run("btrfs", "qgroup", "show", "--raw", "-r", "-e", mountpoint).decode()
    num = lambda s: None if s == "none" else int(s)
    return {int(f[0][2:]): tuple(num(x) for x in f[1:5])
            for f in (line.split() for line in out.splitlines()) if f and f[0].startswith("0/")}


def unescape(s):
    """Undoes g_strescape()."""
    return s.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode()


def rootid(path):
    """The subvolume id of @path by btrfs-progs, which opens it for
    writing: a file's is its directory's (a read-only snapshot refuses)."""
    return btrfs_rootid(path if os.path.isdir(path) else os.path.dirname(path))


def df_figures(bus, path):
    """What df would say for @path's subvolume by subvold's GetStatfs, read
    over the bus: size, used, available."""
    obj = bus.call("/org/subvold/Subvold1", "org.subvold.Subvold1.Manager", "GetSubvolumeByPath", "s", path)[0]
    s = {k: v["data"] for k, v in bus.call(obj, SUBVOLUME_IFACE, "GetStatfs")[0].items()}
    return (format_size(s["blocks"] * s["bsize"]), format_size((s["blocks"] - s["bfree"]) * s["bsize"]),
            format_size(s["bavail"] * s["bsize"]))


class Provider:
    """tests/client/nautilus-provider, run as @user on @bus."""

    def __init__(self, test, bus, user):
        self.test = test
        self.stderr_path = test.path(f"provider-{len(os.listdir(test.tmp))}.log")
        self.stderr = open(self.stderr_path, "wb")
        env = dict(bus.env, TZ="UTC")
        env.pop("G_MESSAGES_DEBUG", None)
        self.proc = subprocess.Popen([PROVIDER, MODULE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, **as_user(user))
        self.ended = False
        test.stack.callback(self._cleanup)

    def command(self, *words):
        self.proc.stdin.write(" ".join(words) + "\n")
        self.proc.stdin.flush()
        lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"nautilus-provider ended during {words}:\n{self.log()}")
            line = line.rstrip("\n")
            if line == "end":
                return [[unescape(f) for f in l.split("\t")] for l in lines]
            lines.append(line)

    def info(self, path):
        (row,) = self.command("info", path)
        self.test.assertEqual(row[0], "info")
        return dict(zip(("subvolume", "size", "exclusive", "snapshot"), row[1:]))

    def props(self, path):
        """{title: {name: value}} of the models for @path."""
        models, current = {}, None
        for row in self.command("props", path):
            if row[0] == "model":
                current = models.setdefault(row[1], {})
            else:
                self.test.assertNotIn(row[1], current, "an item twice")
                current[row[1]] = row[2]
        return models

    def menu(self, path):
        return [row[1] for row in self.command("menu", path)]

    def log(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def end(self):
        """Ends it (EOF) and asserts a clean exit: status 0, no sanitizer
        report, and nothing on stderr at all (no warning)."""
        self.ended = True
        self.proc.stdin.close()
        rc = self.proc.wait(60)
        self.proc.stdout.close()
        self.stderr.close()
        log = self.log()
        for marker in SANITIZER_MARKERS:
            self.test.assertNotIn(marker.decode(), log)
        self.test.assertEqual(rc, 0, log)
        self.test.assertEqual(log, "", "the extension said something")

    def _cleanup(self):
        if not self.ended:
            self.proc.kill()
            self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.stderr.close()


class BusCalls:
    """dbus-monitor on the test's bus (root may monitor it): the method
    calls of one name, counted."""

    def __init__(self, test, bus, member):
        self.path = test.path(f"monitor-{member}.log")
        self.out = open(self.path, "wb")
        self.proc = subprocess.Popen(["dbus-monitor", "--system", f"type='method_call',member='{member}'"],
                                     env=bus.env, stdout=self.out, stderr=subprocess.DEVNULL)
        test.stack.callback(self._stop)
        # It is monitoring once the bus took its name away (BecomeMonitor).
        wait_for(lambda: b"NameLost" in self.text(), "dbus-monitor to be monitoring")
        self.member = member

    def text(self):
        with open(self.path, "rb") as f:
            return f.read()

    def count(self):
        return len(re.findall(rb"^method call .*member=" + self.member.encode() + rb"$", self.text(), re.M))

    def _stop(self):
        self.proc.terminate()
        self.proc.wait()
        self.out.close()


class ProviderTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "desk", size="1G", label="desk")
        # noatime: reading a directory would otherwise rewrite metadata,
        # and the qgroup figures would move under the test.
        self.mnt = mnt = self.fs.mount(self.path("desk"), "noatime")
        subvolume_create(f"{mnt}/home")
        os.makedirs(f"{mnt}/home/dir")
        os.makedirs(f"{mnt}/snaps")
        with open(f"{mnt}/home/doc.txt", "wb") as f:
            f.write(os.urandom(1 << 20))
        with open(f"{mnt}/home/dir/gone.txt", "w") as f:
            f.write("gone soon\n")
        run("btrfs", "quota", "enable", mnt)
        run("btrfs", "quota", "rescan", "-w", mnt)
        run("btrfs", "qgroup", "limit", str(300 << 20), f"{mnt}/home")
        run("btrfs", "qgroup", "limit", "-e", str(200 << 20), f"{mnt}/home")
        snapshot(f"{mnt}/home", f"{mnt}/snaps/home-1", readonly=True)
        with open(f"{mnt}/home/doc.txt", "ab") as f:
            f.write(os.urandom(2 << 20))
        snapshot(f"{mnt}/home", f"{mnt}/snaps/home-2")
        # A second btrfs without quotas, whose usage stays unknown: its
        # scanner is held before its first tree.
        self.plain = Btrfs(self, "plain", size="512M")
        self.plain_mnt = self.plain.mount(self.path("plain"))
        subvolume_create(f"{self.plain_mnt}/vol")
        with open(f"{self.plain_mnt}/vol/file", "wb") as f:
            f.write(b"x" * 5000)
        # A file on no btrfs at all.
        self.elsewhere = self.path("elsewhere.txt")
        with open(self.elsewhere, "w") as f:
            f.write("not on btrfs\n")
        for p in (mnt, self.plain_mnt):
            os.chmod(p, 0o755)
        os.sync()
        self.bus = Bus(self)
        pause = ScanPause(self)
        self.daemon = Daemon(self, self.bus, **pause.daemon_args())

    def subvolume_path(self, mnt, path):
        """DisplayPath of the subvolume holding @path, from btrfs-progs."""
        sid = rootid(path)
        return "/" if sid == 5 else "/" + btrfs_subvolume_list(mnt)[sid]["path"].decode()

    def expected_info(self, mnt, path, quota=None):
        """What the columns must say for @path: the usage only for a
        subvolume's root directory, and only where quotas know it."""
        sid = rootid(path)
        root = os.stat(path, follow_symlinks=False).st_ino == 256
        size = exclusive = snapshot_of = ""
        if root and quota:
            size, exclusive = format_size(quota[sid][0]), format_size(quota[sid][1])
        listed = btrfs_subvolume_list(mnt).get(sid)
        if listed and listed["parent_uuid"]:
            source = [i for i, s in btrfs_subvolume_list(mnt).items() if s["uuid"] == listed["parent_uuid"]]
            snapshot_of = f"yes, of /{btrfs_subvolume_list(mnt)[source[0]]['path'].decode()}" if source else "yes"
        return dict(subvolume=self.subvolume_path(mnt, path), size=size, exclusive=exclusive, snapshot=snapshot_of)

    def wait_for_info(self, provider, path, want):
        got = []
        try:
            wait_for(lambda: got.append(provider.info(path)) or got[-1] == want, f"the columns of {path}", timeout=60)
        except AssertionError:
            self.assertEqual(got[-1], want)

    def statfs(self, path):
        return df_figures(self.bus, path)

    def test_columns_properties_menu(self):
        mnt = self.mnt
        calls = BusCalls(self, self.bus, "GetSubvolumeByFd")
        provider = Provider(self, self.bus, self.bus.client)

        columns = provider.command("columns")
        self.assertEqual([(c[1], c[2]) for c in columns],
                         [("subvold_subvolume", "Subvolume"), ("subvold_size", "Subvolume size"),
                          ("subvold_exclusive", "Subvolume exclusive"), ("subvold_snapshot", "Snapshot")])

        # The columns, against btrfs-progs: every file until they agree
        # (qgroup figures reach subvold with its next read).
        files = [mnt, f"{mnt}/home", f"{mnt}/home/doc.txt", f"{mnt}/home/dir", f"{mnt}/home/dir/gone.txt",
                 f"{mnt}/snaps", f"{mnt}/snaps/home-1", f"{mnt}/snaps/home-1/doc.txt", f"{mnt}/snaps/home-2",
                 f"{mnt}/snaps/home-2/dir"]
        quota = qgroups(mnt)
        for path in files:
            want = self.expected_info(mnt, path, quota)
            self.wait_for_info(provider, path, want)
        # Sizes are figures, never left out for a root with quotas on.
        self.assertNotEqual(provider.info(f"{mnt}/home")["size"], "")
        self.assertEqual(provider.info(f"{mnt}/snaps/home-1")["snapshot"], "yes, of /home")

        # Unknown usage (quotas off, the scanner held) is empty, never 0.
        vol = f"{self.plain_mnt}/vol"
        self.assertEqual(provider.info(vol), dict(subvolume="/vol", size="", exclusive="", snapshot=""))
        self.assertEqual(provider.info(f"{vol}/file")["subvolume"], "/vol")
        # No btrfs: nothing at all.
        self.assertEqual(provider.info(self.elsewhere), dict(subvolume="-", size="-", exclusive="-", snapshot="-"))

        # One GetSubvolumeByFd per subvolume, whatever the number of files.
        subvolumes = {(self.fs.uuid, rootid(p)) for p in files} | {(self.plain.uuid, rootid(vol))}
        for path in files:
            provider.info(path)
        self.assertEqual(calls.count(), len(subvolumes))

        # Properties: the subvolume, its filesystem, snapshot, read-only,
        # creation, usage with its source, limits, and df by GetStatfs.
        show = btrfs_subvolume_show(mnt, rootid(f"{mnt}/home"))
        quota = qgroups(mnt)
        home = rootid(f"{mnt}/home")
        props = provider.props(f"{mnt}/home/doc.txt")
        self.assertEqual(list(props), ["Subvolume"])
        size, used, avail = self.statfs(f"{mnt}/home/doc.txt")
        self.assertEqual(props["Subvolume"], {
            "Subvolume": "/home",
            "Filesystem": f"desk ({self.fs.uuid})",
            "Snapshot of": "not a snapshot",
            "Read-only": "no",
            "Created": show["Creation time"].decode()[:19],
            "Referenced": format_size(quota[home][0]),
            "Exclusive": format_size(quota[home][1]),
            "Usage from": "btrfs quotas",
            "Referenced limit": format_size(300 << 20),
            "Exclusive limit": format_size(200 << 20),
            "df: size": size, "df: used": used, "df: available": avail,
        })
        snap = provider.props(f"{mnt}/snaps/home-1/doc.txt")["Subvolume"]
        limit = quota[rootid(f"{mnt}/snaps/home-1")][2]  # a snapshot's qgroup starts with its source's limits
        self.assertEqual((snap["Subvolume"], snap["Snapshot of"], snap["Read-only"], snap["Referenced limit"]),
                         ("/snaps/home-1", "/home", "yes", format_size(limit) if limit else "none"))
        unknown = provider.props(f"{vol}/file")["Subvolume"]
        self.assertEqual((unknown["Referenced"], unknown["Exclusive"], unknown["Usage from"]),
                         ("unknown", "unknown", "unknown"))
        # A file on no btrfs: a section that says so when asked before the
        # view looked (Nautilus asks for it synchronously), none after.
        other = self.path("other.txt")
        with open(other, "w") as f:
            f.write("x\n")
        self.assertEqual(provider.props(other), {"Subvolume": {"Subvolume": "not on a btrfs subvolume that subvold knows"}})
        self.assertEqual(provider.props(self.elsewhere), {})

        # The menu: for one regular file or directory on a subvolume.
        self.assertEqual(provider.menu(f"{mnt}/home/doc.txt"), ["Previous Versions…"])
        self.assertEqual(provider.menu(f"{mnt}/home/dir"), ["Previous Versions…"])
        self.assertEqual(provider.menu(self.elsewhere), [])

        # PropertiesChanged refreshes what is shown: more data in /home,
        # and Nautilus is told to ask again; no new lookup for it.
        with open(f"{mnt}/home/more", "wb") as f:
            f.write(os.urandom(4 << 20))
        os.sync()
        before = calls.count()
        provider.command("invalidated", f"{mnt}/home")
        want = self.expected_info(mnt, f"{mnt}/home", qgroups(mnt))
        self.wait_for_info(provider, f"{mnt}/home", want)
        self.assertEqual(calls.count(), before)
        provider.end()

    def test_without_subvold(self):
        """No subvold on the bus: nothing added, nothing said."""
        self.daemon.stop()
        provider = Provider(self, self.bus, self.bus.client)
        none = dict(subvolume="-", size="-", exclusive="-", snapshot="-")
        self.assertEqual(provider.info(f"{self.mnt}/home"), none)
        self.assertEqual(provider.info(f"{self.mnt}/home/doc.txt"), none)
        self.assertEqual(provider.menu(f"{self.mnt}/home/doc.txt"), [])
        provider.end()


if __name__ == "__main__":
    main()
