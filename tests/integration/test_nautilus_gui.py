#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The GNOME Files extension in a real Nautilus: an ordinary user's
session (Xvfb, dbus-run-session, software rendering) on the test's system
bus with the real subvold; the extension as `meson install --destdir`
puts it, made visible to Nautilus by bind mounts in the test's private
mount namespace (the machine is left as it was).  tests/integration/
nautilus_session.py reads the list view's columns, the properties' Subvolume
section and the Previous Versions windows through AT-SPI; this test
checks them against btrfs-progs and the kernel.  Screenshots of each step
go to meson-logs/nautilus-screenshots/ in the build directory."""

import json
import os
import shutil
import signal
import subprocess
import time

from harness import (BUILD_DIR, Btrfs, Bus, Daemon, _libc_call, _umount, btrfs_subvolume_show, installed_tree, main,
                     run, snapshot, subvolume_create)
from test_clients import DaemonTest
from test_nautilus import df_figures, format_size, qgroups, rootid

SESSION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nautilus_session.py")
# Where Nautilus 43 looks for extensions: compiled into it.
NAUTILUS_EXTENSION_DIR = "/usr/lib/x86_64-linux-gnu/nautilus/extensions-4"
MS_BIND = 0x1000


def bind(test, source, target):
    _libc_call("mount", source.encode(), target.encode(), None, MS_BIND, None)
    test.stack.callback(_umount, target)


def kill_user_processes(uid):
    """Ends what the test's user still runs (its session bus, Nautilus'
    helpers): the user was made for this test, so they are the test's."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    os.kill(int(pid), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass


class NautilusTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "desk", size="1G", label="desk")
        # noatime: reading a directory would otherwise rewrite metadata,
        # and the qgroup figures would move under the test.
        self.mnt = mnt = self.fs.mount(self.path("desk"), "noatime")
        os.chmod(mnt, 0o755)
        subvolume_create(f"{mnt}/home")
        os.makedirs(f"{mnt}/home/docs")
        run("btrfs", "quota", "enable", mnt)
        run("btrfs", "quota", "rescan", "-w", mnt)
        self.bus = Bus(self)
        user = self.user = self.bus.client
        # Three versions of a file, a file deleted between the snapshots;
        # the user's own files, as on a desktop.
        self.versions = [os.urandom(n) for n in (3000, 70000, 1200)]
        self.write(f"{mnt}/home/doc.txt", self.versions[0])
        self.write(f"{mnt}/home/docs/old.txt", b"an old file\n")
        self.write(f"{mnt}/top.txt", b"at the top\n")
        run("chown", "-R", f"{user.uid}:{user.gid}", f"{mnt}/home")
        snapshot(f"{mnt}/home", f"{mnt}/home-1", readonly=True)
        self.write(f"{mnt}/home/doc.txt", self.versions[1])
        os.unlink(f"{mnt}/home/docs/old.txt")
        snapshot(f"{mnt}/home", f"{mnt}/home-2", readonly=True)
        self.write(f"{mnt}/home/doc.txt", self.versions[2])
        os.sync()
        self.daemon = Daemon(self, self.bus)

        # The extension where Nautilus looks, and the prefix it was built
        # for (it runs subvold-versions from there), in this namespace only.
        dest, prefix = installed_tree()
        bind(self, f"{dest}{prefix}/lib/x86_64-linux-gnu/nautilus/extensions-4", NAUTILUS_EXTENSION_DIR)
        bind(self, f"{dest}{prefix}", prefix)

        # The user's session: a home, a runtime dir, settings (list view,
        # the columns on) in GLib's keyfile backend.
        self.home = self.path("home")
        self.runtime = self.path("run")
        self.shots = self.path("shots")
        for d, mode in ((self.home, 0o755), (self.runtime, 0o700), (self.shots, 0o755)):
            os.mkdir(d, mode)
        os.makedirs(f"{self.home}/.config/glib-2.0/settings")
        with open(f"{self.home}/.config/glib-2.0/settings/keyfile", "w") as f:
            f.write("[org/gnome/nautilus/preferences]\n"
                    "default-folder-viewer='list-view'\n"
                    "[org/gnome/nautilus/window-state]\n"
                    "initial-size=(1260, 640)\n"
                    "[org/gnome/nautilus/list-view]\n"
                    "default-visible-columns=['name', 'size', 'subvold_subvolume', 'subvold_size', "
                    "'subvold_exclusive', 'subvold_snapshot']\n"
                    "default-column-order=['name', 'size', 'subvold_subvolume', 'subvold_size', "
                    "'subvold_exclusive', 'subvold_snapshot']\n")
        run("chown", "-R", f"{user.uid}:{user.gid}", self.home, self.runtime, self.shots)
        self.stack.callback(kill_user_processes, user.uid)
        self.stack.callback(self.keep_screenshots)
        self.display = self.start_xvfb()

    @staticmethod
    def write(path, data):
        with open(path, "wb") as f:
            f.write(data)

    def keep_screenshots(self):
        """The screenshots, also of a failed run, as the test's artifacts."""
        keep = os.path.join(BUILD_DIR, "meson-logs", "nautilus-screenshots")
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(self.shots, keep)

    def start_xvfb(self):
        """Xvfb as the user, on a display it picks itself (-displayfd): no
        clash with any other X server.  -noreset: without it, the server
        resets when its first client goes, and the next one can fail to
        connect."""
        read_end, write_end = os.pipe()
        xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write_end), "-noreset", "-nolisten", "tcp",
                                 "-screen", "0", "1280x900x24"], pass_fds=(write_end,), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, **self.user.process_args(), cwd=self.home)
        os.close(write_end)
        self.stack.callback(lambda: (xvfb.kill(), xvfb.wait()))
        with os.fdopen(read_end) as f:
            number = f.readline().strip()
        self.assertTrue(number.isdigit(), "Xvfb did not start")
        return f":{number}"

    def session(self, *args):
        """Runs nautilus_session.py in the user's session; returns what it read."""
        out = os.path.join(self.shots, "session.json")
        env = dict(PATH="/usr/bin:/bin", HOME=self.home, USER=self.user.name, LOGNAME=self.user.name,
                   XDG_RUNTIME_DIR=self.runtime, XDG_CONFIG_HOME=f"{self.home}/.config",
                   XDG_CACHE_HOME=f"{self.home}/.cache", XDG_DATA_HOME=f"{self.home}/.local/share",
                   DISPLAY=self.display, GSK_RENDERER="cairo", GSETTINGS_BACKEND="keyfile", GTK_A11Y="atspi",
                   DBUS_SYSTEM_BUS_ADDRESS=self.bus.address, TZ="UTC", LANG="C.UTF-8")
        with open(os.path.join(self.shots, "session.log"), "wb") as log:
            p = subprocess.run(["dbus-run-session", "--", "/usr/bin/python3", SESSION, out, self.shots, *args],
                               env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.home, timeout=600,
                               **self.user.process_args())
        with open(os.path.join(self.shots, "session.log"), "rb") as f:
            log = f.read().decode(errors="replace")
        self.assertEqual(p.returncode, 0, log)
        with open(out) as f:
            return json.load(f), log

    def test_in_nautilus(self):
        mnt = self.mnt
        # The figures before the session: restoring in it adds to /home.
        quota = qgroups(mnt)
        read, log = self.session(mnt, f"{mnt}/home-1", f"{mnt}/home/doc.txt", f"{mnt}/home/docs")

        # The list view: every row against btrfs-progs.
        columns = read["columns"]
        self.assertEqual(columns["titles"][2:], ["Subvolume", "Subvolume size", "Subvolume exclusive", "Snapshot"])
        rows = {name: cells[2:] for name, cells in columns["rows"].items()}
        usage = lambda name: [format_size(quota[rootid(f"{mnt}/{name}")][0]),
                              format_size(quota[rootid(f"{mnt}/{name}")][1])]
        self.assertEqual(rows, {
            "home": ["/home", *usage("home"), ""],
            "home-1": ["/home-1", *usage("home-1"), "yes, of /home"],
            "home-2": ["/home-2", *usage("home-2"), "yes, of /home"],
            "top.txt": ["/", "", "", ""],
        })

        # Properties of the snapshot home-1: its Subvolume section.
        texts = read["properties"]
        section = texts[len(texts) - 1 - texts[::-1].index("Subvolume"):]
        props = dict(zip(section[::2], section[1::2]))
        home1 = rootid(f"{mnt}/home-1")
        show = btrfs_subvolume_show(mnt, home1)
        size, used, avail = df_figures(self.bus, f"{mnt}/home-1")
        self.assertEqual(props, {
            "Subvolume": "/home-1",
            "Filesystem": f"desk ({self.fs.uuid})",
            "Snapshot of": "/home",
            "Read-only": "yes" if b"readonly" in show["Flags"] else "no",
            "Created": self.when(f"{mnt}/home-1"),
            "Referenced": format_size(quota[home1][0]),
            "Exclusive": format_size(quota[home1][1]),
            "Usage from": "btrfs quotas",
            "Referenced limit": "none" if quota[home1][2] is None else format_size(quota[home1][2]),
            "Exclusive limit": "none" if quota[home1][3] is None else format_size(quota[home1][3]),
            "df: size": size, "df: used": used, "df: available": avail,
        })

        # Previous Versions of home/doc.txt: one row per snapshot, oldest
        # first, none the current version.
        versions = read["versions"]
        want = []
        for snap, data in (("home-1", self.versions[0]), ("home-2", self.versions[1])):
            st = os.stat(f"{mnt}/{snap}/doc.txt")
            self.assertEqual(st.st_size, len(data))
            want.append([self.when(f"{mnt}/{snap}"), format_size(st.st_size),
                         time.strftime("modified %Y-%m-%d %H:%M:%S", time.gmtime(st.st_mtime)), "",
                         "Open", "Restore a copy"])
        self.assertEqual(versions["rows"], want)
        # Restore a copy (of the oldest): a reflink next to the file, named
        # with the snapshot's date, the user's, with that version's data.
        stamp = self.when(f"{mnt}/home-1").replace(" ", "_").replace(":", "-")
        restored = f"{mnt}/home/doc.txt.{stamp}"
        self.assertEqual(versions["restored"], f"Restored as {restored} (a reflink).")
        self.assertEqual(self.read(restored), self.versions[0])
        self.assertEqual(os.stat(restored).st_uid, self.user.uid)
        self.assertEqual(self.read(f"{mnt}/home/doc.txt"), self.versions[2], "the file itself changed")
        # Open: a read-only copy in the user's runtime dir.
        opened = f"{self.runtime}/subvold-versions/doc.txt ({stamp})"
        self.assertEqual(versions["opened"], f"Opened a read-only copy: {opened}")
        self.assertEqual(self.read(opened), self.versions[0])
        self.assertEqual(os.stat(opened).st_mode & 0o777, 0o444)

        # Previous Versions of home/docs: the file deleted after home-1.
        deleted = read["deleted"]
        st = os.stat(f"{mnt}/home-1/docs/old.txt")
        self.assertEqual(deleted["rows"], [["old.txt", "file", self.when(f"{mnt}/home-1"), format_size(st.st_size),
                                            time.strftime("modified %Y-%m-%d %H:%M:%S", time.gmtime(st.st_mtime)),
                                            "Open", "Restore a copy"]])
        self.assertEqual(self.read(f"{mnt}/home/docs/old.txt.{stamp}"), b"an old file\n")
        self.assertFalse(os.path.exists(f"{mnt}/home/docs/old.txt"))

    @staticmethod
    def read(path):
        with open(path, "rb") as f:
            return f.read()

    def when(self, subvolume):
        """A subvolume's creation time by btrfs-progs, in UTC as the
        session shows it."""
        show = btrfs_subvolume_show(self.mnt, rootid(subvolume))["Creation time"].decode()
        self.assertTrue(show.endswith("+0000"), show)
        return show[:19]


if __name__ == "__main__":
    main()
