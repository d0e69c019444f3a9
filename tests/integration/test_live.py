#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""subvold follows mounts and subvolumes as they change: the standard
ObjectManager and PropertiesChanged signals, coalesced; robustness under
churn (RSS and fds back where they started); exit when idle and come back
through D-Bus activation; no timer while no btrfs is mounted."""

import ctypes
import fcntl
import os
import re
import struct
import subprocess
import threading
import time

from harness import (ROOT, BUS_NAME, MANAGER_IFACE, MANAGER_PATH, SUBVOLD, SUBVOLUME_IFACE, FS_IFACE, Activation,
                     Btrfs, Bus, BusError, Daemon, Monitor, TestCase, btrfs_rootid, btrfs_subvolume_list, main, run,
                     snapshot, subvolume_create, wait_for)

libc = ctypes.CDLL(None, use_errno=True)
MS_BIND = 4096
# btrfs ioctls on struct btrfs_ioctl_vol_args {s64 fd; char name[4088]}: no
# process per operation, so a thousand cycles stay quick.
BTRFS_IOC_SNAP_CREATE = 0x50009401
BTRFS_IOC_SUBVOL_CREATE = 0x5000940E
BTRFS_IOC_SNAP_DESTROY = 0x5000940F
SANITIZED = "libasan" in run("ldd", SUBVOLD).decode()


def vol_ioctl(dirpath, request, name, fd=0):
    d = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # A mutable buffer: fcntl copies immutable ones into 1 KiB at most.
        fcntl.ioctl(d, request, bytearray(struct.pack("q4088s", fd, name.encode())), True)
    finally:
        os.close(d)


def mount(source, target, fstype=None, flags=0, data=None):
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                  data.encode() if data else None) != 0:
        raise OSError(ctypes.get_errno(), f"mount {source} {target}")


def umount(target):
    if libc.umount2(target.encode(), 0) != 0:
        raise OSError(ctypes.get_errno(), f"umount {target}")


def process_alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in f.read()
    except FileNotFoundError:
        return False


def stable_fds(daemon):
    """The daemon's open fds, sampled until two samples agree (so that the
    brief fd of a generation check does not count)."""
    while True:
        first = daemon.open_fds()
        time.sleep(0.1)
        if daemon.open_fds() == first:
            return first


class LiveTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs")
        self.mnt = self.fs.mount(self.path("mnt"))
        subvolume_create(f"{self.mnt}/vol")
        self.bus = Bus(self)

    def start(self, *args, **kw):
        self.daemon = Daemon(self, self.bus, *args, **kw)
        return self.daemon

    def tearDown(self):
        if hasattr(self, "daemon") and not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def object(self, path):
        return f"{self.fs.object_path}/{btrfs_rootid(path)}"

    def published_ids(self, fs):
        objects = self.bus.managed_objects()
        return {int(p.rsplit("/", 1)[1]) for p in objects if p.startswith(fs.object_path + "/")}

    def test_changes_are_signalled(self):
        self.start()
        mon = Monitor(self, self.bus)
        mnt = self.mnt

        m = mon.mark()
        subvolume_create(f"{mnt}/new")
        new = self.object(f"{mnt}/new")
        mon.wait("InterfacesAdded", f"'{new}'", since=m)

        m = mon.mark()
        snapshot(f"{mnt}/new", f"{mnt}/snap", readonly=True)
        snap = self.object(f"{mnt}/snap")
        line = mon.wait("InterfacesAdded", f"'{snap}'", since=m)
        self.assertIn("'IsSnapshot': <true>", line)

        m = mon.mark()
        os.rename(f"{mnt}/new", f"{mnt}/renamed")
        mon.wait(f"{new}:", "PropertiesChanged", "'Path': <b'/renamed'>", since=m)

        m = mon.mark()
        run("btrfs", "property", "set", "-ts", f"{mnt}/snap", "ro", "false")
        mon.wait(f"{snap}:", "PropertiesChanged", "'ReadOnly': <false>", since=m)

        m = mon.mark()
        run("btrfs", "subvolume", "delete", f"{mnt}/renamed")
        mon.wait("InterfacesRemoved", f"'{new}'", since=m)

        # Mounts: a second mount point, then a whole new filesystem.
        m = mon.mark()
        second = self.fs.mount(self.path("second"))
        mon.wait(f"{self.fs.object_path}:", "PropertiesChanged", "MountPoints", second, since=m)
        other = Btrfs(self, "other")
        m = mon.mark()
        other.mount(self.path("other"))
        mon.wait("InterfacesAdded", f"'{other.object_path}'", since=m)
        m = mon.mark()
        other.umount(self.path("other"))
        mon.wait("InterfacesRemoved", f"'{other.object_path}'", since=m)

        # In the end the model is the kernel's.
        wait_for(lambda: self.published_ids(self.fs) == {5, *btrfs_subvolume_list(mnt)}, "the model to settle")

    def test_properties_changed_at_most_once_a_second(self):
        run("btrfs", "quota", "enable", self.mnt)
        run("btrfs", "quota", "rescan", "-w", self.mnt)
        self.start()
        mon = Monitor(self, self.bus)
        vol = self.object(f"{self.mnt}/vol")
        m = mon.mark()
        # Many changes, each committed: usage moves with every one.
        for i in range(40):
            with open(f"{self.mnt}/vol/f{i}", "wb") as f:
                f.write(os.urandom(64 << 10))
            os.sync()
            time.sleep(0.05)
        wait_for(lambda: len(mon.times(f"{vol}:", "PropertiesChanged", since=m)) >= 2, "usage signals")
        times = mon.times(f"{vol}:", "PropertiesChanged", since=m)
        gaps = [b - a for a, b in zip(times, times[1:])]
        # Sent at least a second apart; arrival jitter is far below half of that.
        self.assertGreater(min(gaps), 0.5, gaps)

    def test_churn(self):
        """Thousands of mounts, unmounts and subvolume operations while
        clients read: the daemon keeps answering, ends with the kernel's
        model, and its fds and RSS come back to where they started."""
        daemon = self.start()
        mnt = self.mnt
        binds = [self.path(f"bind{i}") for i in range(2)]
        for b in binds:
            os.mkdir(b)
            self.stack.callback(lambda b=b: os.path.ismount(b) and run("umount", b))
        settle = lambda: wait_for(lambda: self.published_ids(self.fs) == {5, *btrfs_subvolume_list(mnt)}
                                  and self.bus.get(self.fs.object_path, FS_IFACE, "MountPoints") == [
                                      list(os.fsencode(mnt)) + [0]], "the model to settle", timeout=60)
        time.sleep(1.5)  # let the start-up settle, then take the baseline
        fds, rss = stable_fds(daemon), daemon.status("VmRSS")

        stop = threading.Event()
        errors = []

        def read():
            while not stop.is_set():
                try:
                    self.bus.call(MANAGER_PATH, MANAGER_IFACE, "GetSubvolumeByPath", "s", mnt + "/vol")
                except BusError as e:
                    errors.append(str(e))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for i in range(1000):
                # a bind mount and a subvolume mount, and away again
                mount(f"{mnt}/vol", binds[0], flags=MS_BIND)
                mount(self.fs.device, binds[1], "btrfs", data="subvol=vol")
                umount(binds[1])
                umount(binds[0])
                # create, snapshot, delete
                vol_ioctl(mnt, BTRFS_IOC_SUBVOL_CREATE, f"c{i}")
                src = os.open(f"{mnt}/c{i}", os.O_RDONLY | os.O_DIRECTORY)
                try:
                    vol_ioctl(mnt, BTRFS_IOC_SNAP_CREATE, f"s{i}", fd=src)
                finally:
                    os.close(src)
                vol_ioctl(mnt, BTRFS_IOC_SNAP_DESTROY, f"s{i}")
                vol_ioctl(mnt, BTRFS_IOC_SNAP_DESTROY, f"c{i}")
                if i % 100 == 0:
                    self.assertTrue(daemon.alive(), daemon.log())
        finally:
            stop.set()
            reader.join()
        self.assertEqual(errors, [])
        # A filesystem unmounted while subvold reads it.
        other = Btrfs(self, "gone")
        for i in range(20):
            other.mount(self.path("gone"))
            self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
            other.umount(self.path("gone"))
        settle()
        time.sleep(1.5)  # no refresh pending any more
        # The generation timer opens a mount for some µs twice a second:
        # a leak stays, that fd goes.
        wait_for(lambda: daemon.open_fds() == fds, f"open fds back to {fds} (now {daemon.open_fds()})")
        if not SANITIZED:  # ASan keeps freed memory in quarantine
            self.assertLess(daemon.status("VmRSS"), rss + 2048, f"RSS grew from {rss} kB")

    def test_exit_when_idle_and_activate_again(self):
        run("btrfs", "quota", "enable", self.mnt)
        run("btrfs", "quota", "rescan", "-w", self.mnt)
        os.sync()
        cache = self.path("cache")
        os.mkdir(cache)
        activation = Activation(self, f"[D-BUS Service]\nName={BUS_NAME}\nExec=\n", "--exit-idle-sec=1",
                                f"--cache-dir={cache}")
        bus = Bus(self, servicedir=activation.servicedir)
        vol = self.object(f"{self.mnt}/vol")

        def owner_pid():
            out = run("busctl", "--system", "--json=short", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                      "org.freedesktop.DBus", "GetConnectionUnixProcessID", "s", BUS_NAME, env=bus.env)
            return int(re.search(rb"\[(\d+)\]", out)[1])

        first = bus.get(vol, SUBVOLUME_IFACE, "UsageUpdated")  # activates
        pid = owner_pid()
        wait_for(lambda: not process_alive(pid), "subvold to exit when idle")
        # The next call starts it again; it answers from the cache.
        self.assertEqual(bus.get(vol, SUBVOLUME_IFACE, "UsageUpdated"), first)
        self.assertNotEqual(owner_pid(), pid)
        self.assertGreater(bus.get(vol, SUBVOLUME_IFACE, "ReferencedBytes"), 0)
        os.kill(owner_pid(), 15)
        activation.check(2)  # the idle exit and the SIGTERM

    def test_no_timer_without_btrfs(self):
        """With no btrfs mounted, subvold sleeps: no wake-ups at all.  With
        one, its generation timer wakes it (the test's positive control)."""
        hide_btrfs = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                      "findmnt -rn -t btrfs -o TARGET | sort -r | while read -r m; do "
                      "umount -l \"$(printf %b \"$m\")\"; done; exec \"$@\"", "sh"]
        daemon = self.start(wrapper=hide_btrfs)
        self.assertFalse([p for p in self.bus.managed_objects() if "/fs/" in p])
        before = daemon.status("voluntary_ctxt_switches")
        time.sleep(2)
        self.assertEqual(daemon.status("voluntary_ctxt_switches"), before)
        daemon.stop()

        daemon = self.start()
        before = daemon.status("voluntary_ctxt_switches")
        time.sleep(2)
        self.assertGreater(daemon.status("voluntary_ctxt_switches"), before)


if __name__ == "__main__":
    main()
