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
import types

from harness import (ROOT, BUS_NAME, MANAGER_IFACE, MANAGER_PATH, SUBVOLD, SUBVOLUME_IFACE, FS_IFACE, Activation,
                     Btrfs, Bus, Churn, Daemon, Monitor, TestCase, btrfs_rootid, btrfs_subvolume_list, main, run,
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


def qgroup_usage(path):
    """(referenced, exclusive) bytes of the subvolume at @path, from its
    qgroup as btrfs-progs reads it."""
    out = run("btrfs", "subvolume", "show", "--raw", path).decode()
    return tuple(int(re.search(rf"^\s*Usage {k}:\s+(\d+)$", out, re.M)[1]) for k in ("referenced", "exclusive"))


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

    def wait_quiet(self, daemon):
        """Waits until @daemon (run with -v) has nothing left to do: its
        last refresh had no other one due, and what it published then has
        every scan done.  The log is read before and after the bus, so that
        what the bus said is that refresh's."""
        def quiet():
            before = daemon.refreshes()
            scanned = all(self.bus.get(fs, FS_IFACE, "ScanProgress") == 1.0
                          for fs in self.bus.get(MANAGER_PATH, MANAGER_IFACE, "Filesystems"))
            return before and not before[-1][1] and scanned and daemon.refreshes() == before
        wait_for(quiet, "subvold to have nothing left to do", timeout=60)

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
        # ... which every subvolume is reached through too, until it goes.
        vol = self.object(f"{mnt}/vol")
        mon.wait(f"{vol}:", "PropertiesChanged", f"'AccessPaths': <[b'{mnt}/vol', b'{second}/vol']>", since=m)
        m = mon.mark()
        self.fs.umount(second)
        mon.wait(f"{vol}:", "PropertiesChanged", f"'AccessPaths': <[b'{mnt}/vol']>", since=m)
        other = Btrfs(self, "other")
        m = mon.mark()
        other.mount(self.path("other"))
        mon.wait("InterfacesAdded", f"'{other.object_path}'", since=m)
        m = mon.mark()
        other.umount(self.path("other"))
        mon.wait("InterfacesRemoved", f"'{other.object_path}'", since=m)

        # In the end the model is the kernel's.
        wait_for(lambda: self.published_ids(self.fs) == {5, *btrfs_subvolume_list(mnt)}, "the model to settle")

    def test_properties_changed_at_the_refresh_rate(self):
        """A subvolume written to continuously: it signals at most once a
        refresh, and refreshes keep to the rate limit (two in a row after
        a quiet while, one a second on average).  Both are read
        from subvold's own log (-v), not from arrival times, which a busy
        machine bunches up."""
        run("btrfs", "quota", "enable", self.mnt)
        run("btrfs", "quota", "rescan", "-w", self.mnt)
        daemon = self.start("-v")
        mon = Monitor(self, self.bus)
        vol = self.object(f"{self.mnt}/vol")

        def barrier(name):
            """A new subvolume.  subvold's signals arrive in order: once its
            InterfacesAdded is here, so is every signal of a refresh before
            it.  Returns the monitor's mark after it."""
            since = mon.mark()
            subvolume_create(f"{self.mnt}/{name}")
            line = mon.wait("InterfacesAdded", f"'{self.object(f'{self.mnt}/{name}')}'", since=since)
            return mon.lines.index(line, since) + 1

        # A refresh logged before the first barrier exists has all its
        # signals before that barrier's.
        first = len(daemon.refreshes())
        start = barrier("start")
        files = iter(range(1 << 20))

        def write_and_count():
            # Each change committed: usage moves with every one.
            with open(f"{self.mnt}/vol/f{next(files)}", "wb") as f:
                f.write(os.urandom(64 << 10))
            os.sync()
            return len(daemon.refreshes()) >= first + 6

        wait_for(write_and_count, "refreshes while the subvolume changes", timeout=120)
        signals = mon.matching(f"{vol}:", "PropertiesChanged", since=start, until=barrier("end"))
        refreshes = daemon.refreshes()  # each logged before its signals go out
        self.assertGreaterEqual(len(signals), 2, "the control: usage signals")
        self.assertLessEqual(len(signals), len(refreshes) - first, signals)
        # Only a change is signalled: the same values twice is a repeat.
        self.assertEqual([a for a, b in zip(signals, signals[1:]) if a == b], [])
        daemon.assert_refresh_rate()

    def test_new_usage_leaves_the_burst_to_the_next_change(self):
        """Without quotas, a new subvolume is published at once and the
        scanner's figures for it with a later refresh: that one must wait
        for the whole rate-limit bucket (a full interval after the refresh
        before it), or the change that comes next finds no refresh at hand
        and waits a second for its signal.  Read from subvold's own log."""
        daemon = self.start("-v")
        self.wait_quiet(daemon)
        for i in range(3):
            subvolume_create(f"{self.mnt}/new{i}")
            new = self.object(f"{self.mnt}/new{i}")
            wait_for(lambda: new in self.bus.managed_objects()
                     and self.bus.get(new, SUBVOLUME_IFACE, "UsageSource") == "scan"
                     and self.bus.get(new, SUBVOLUME_IFACE, "UsageConsistent"), f"the scan of new{i} to be published")
        gaps = daemon.usage_refresh_gaps()
        self.assertGreaterEqual(len(gaps), 3, "the control: refreshes for the scans' figures alone")
        self.assertEqual([g for g in gaps if g < 1000000], [], f"µs between refreshes: {gaps}")

    def test_new_figures_alone_keep_the_model(self):
        """With quotas off, a refresh for the scanner's figures alone keeps
        the model the kernel gave the last one: the subvolume whose figures
        moved signals them, the one beside it nothing, and the figures are
        btrfs-progs'."""
        subvolume_create(f"{self.mnt}/other")
        daemon = self.start("-v")
        mon = Monitor(self, self.bus)
        vol, other = self.object(f"{self.mnt}/vol"), self.object(f"{self.mnt}/other")
        for size in (4096, 1 << 20):
            # The first round settles "other", read at first in a
            # transaction that may have been open, once a commit shows.
            m, log_mark = mon.mark(), len(daemon.log())
            with open(f"{self.mnt}/vol/data", "wb") as f:
                f.write(os.urandom(size))
            run("btrfs", "filesystem", "sync", self.mnt)
            du = run("btrfs", "filesystem", "du", "-s", "--raw", f"{self.mnt}/vol").decode().splitlines()[1].split()
            referenced = int(du[0])  # Total
            mon.wait(f"{vol}:", "PropertiesChanged", f"'ReferencedBytes': <uint64 {referenced}>", since=m)
            self.wait_quiet(daemon)
            wait_for(lambda: self.bus.get(other, SUBVOLUME_IFACE, "UsageConsistent"), "other to be read again")
        self.assertGreaterEqual(referenced, 1 << 20)
        self.assertEqual(self.bus.get(vol, SUBVOLUME_IFACE, "ReferencedBytes"), referenced)
        self.assertIn("Kept the model, new figures only.", daemon.log()[log_mark:])
        self.assertEqual(mon.matching(f"{other}:", "PropertiesChanged", since=m), [])

    def test_at_rest_only_sysfs_is_read(self):
        """The generation timer reads /sys/fs/btrfs/<fsid>/generation; it
        reads the root tree through a mount only while the transaction of
        the model's generation is open, where a second change would not
        move the generation.  Once that transaction has closed and the root
        tree was read after that, nothing needs a mount until the
        generation moves.  From subvold's log (-v), its context switches
        and the bus."""
        daemon = self.start("-v")
        sysfs = f"/sys/fs/btrfs/{self.fs.uuid}/generation"

        def generation():
            with open(sysfs) as f:
                return int(f.read())

        def commits():
            with open(f"/sys/fs/btrfs/{self.fs.uuid}/commit_stats") as f:
                return int(re.search(r"^commits (\d+)$", f.read(), re.M)[1])

        def tree_reads(since=0):
            lines = re.findall(rf"^<7>Read the root tree of {self.fs.uuid} at generation (\d+) "
                               r"\(transaction (open|closed)\)\.$", daemon.log(), re.M)
            return [(int(g), state) for g, state in lines[since:]]

        # At rest: a commit closes the transaction, a read after it settles.
        run("btrfs", "filesystem", "sync", self.mnt)
        wait_for(lambda: (generation(), "closed") in tree_reads(), "a read of the root tree once it closed")
        quiet_at, reads, switches = generation(), len(tree_reads()), daemon.wakeups()
        wait_for(lambda: daemon.wakeups() >= switches + 6, "a few more generation checks")
        if generation() == quiet_at:
            self.assertEqual([r for r in tree_reads(reads) if r[0] == quiet_at], [],
                             "root tree reads at a generation already read after its transaction closed")

        # A transaction that stays open: the first change moves the
        # generation, the second one does not.
        for attempt in range(3):
            reads, committed = len(tree_reads()), commits()
            subvolume_create(f"{self.mnt}/first{attempt}")
            opened = generation()
            first = self.object(f"{self.mnt}/first{attempt}")
            wait_for(lambda: first in self.bus.managed_objects(), "the first subvolume")
            wait_for(lambda: any(g == opened for g, _ in tree_reads(reads)), "a read of the root tree after it")
            seen, mark = tree_reads(reads), len(daemon.log())
            subvolume_create(f"{self.mnt}/second{attempt}")
            if commits() != committed or generation() != opened:
                continue  # btrfs committed in between: not the case under test
            self.assertNotIn((opened, "closed"), seen, "the transaction was still open")
            second = self.object(f"{self.mnt}/second{attempt}")
            wait_for(lambda: second in self.bus.managed_objects(), "the second subvolume, in the same transaction",
                     timeout=10)
            # Seen by the generation check, not only by the refresh for the
            # first one's scanned usage.
            self.assertRegex(daemon.log()[mark:], r"(?m)^<7>Refresh at \d+ us for a change;")
            return
        self.fail("btrfs committed between the two changes three times")

    def test_with_quotas_on_the_root_tree_is_always_read(self):
        """With quotas on, a snapshot's accounting writes the root items
        that tell a closed transaction early, inside the commit, before the
        snapshot is in: the generation timer never takes the transaction
        for closed there."""
        run("btrfs", "quota", "enable", self.mnt)
        run("btrfs", "quota", "rescan", "-w", self.mnt)  # its transactions done
        daemon = self.start("-v")
        run("btrfs", "filesystem", "sync", self.mnt)
        with open(f"/sys/fs/btrfs/{self.fs.uuid}/generation") as f:
            generation = int(f.read())
        pattern = rf"^<7>Read the root tree of {self.fs.uuid} at generation {generation} \(transaction (open|closed)\)\.$"
        wait_for(lambda: len(re.findall(pattern, daemon.log(), re.M)) >= 2, "two reads of the root tree after the commit")
        self.assertEqual(set(re.findall(pattern, daemon.log(), re.M)), {"open"})

    def test_churn(self):
        """Thousands of mounts, unmounts and subvolume operations while
        clients read: the daemon keeps answering, ends with the kernel's
        model, and its fds and RSS come back to where they started."""
        os.sync()  # vol committed: scanned once, not again after the baseline
        daemon = self.start("-v")
        mnt = self.mnt
        vol = self.object(f"{mnt}/vol")
        binds = [self.path(f"bind{i}") for i in range(2)]
        for b in binds:
            os.mkdir(b)
            self.stack.callback(lambda b=b: os.path.ismount(b) and run("umount", b))
        settle = lambda: wait_for(lambda: self.published_ids(self.fs) == {5, *btrfs_subvolume_list(mnt)}
                                  and self.bus.get(self.fs.object_path, FS_IFACE, "MountPoints") == [
                                      list(os.fsencode(mnt)) + [0]], "the model to settle", timeout=60)
        self.wait_quiet(daemon)  # the first scan is published
        fds, rss = daemon.fds_between_operations(), daemon.status("VmRSS")

        def read(i):
            answer = self.bus.call(MANAGER_PATH, MANAGER_IFACE, "GetSubvolumeByPath", "s", mnt + "/vol")
            if answer != [vol]:
                raise AssertionError(f"GetSubvolumeByPath answered {answer}, not {vol}")

        reader = Churn(self, read)
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
            failures = reader.stop()
        self.assertEqual(failures, [])
        # A filesystem unmounted while subvold reads it.
        other = Btrfs(self, "gone")
        for i in range(20):
            other.mount(self.path("gone"))
            self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
            other.umount(self.path("gone"))
        # The deleted subvolumes cleaned up and everything committed: no
        # change is left for subvold to find.
        run("btrfs", "subvolume", "sync", mnt)
        os.sync()
        settle()
        self.wait_quiet(daemon)
        # A leak stays; the fd of an operation under way goes.
        try:
            wait_for(lambda: daemon.open_fds() == fds, "the open fds back at the baseline")
        except AssertionError:
            self.assertEqual(daemon.open_fds(), fds)  # says which
            raise
        if not SANITIZED:  # ASan keeps freed memory in quarantine
            self.assertLess(daemon.status("VmRSS"), rss + 2048, f"RSS grew from {rss} kB")

    def test_exit_when_idle_and_activate_again(self):
        # Data that a snapshot shares: referenced and exclusive differ.
        with open(f"{self.mnt}/vol/file", "wb") as f:
            f.write(os.urandom(1 << 20))
        snapshot(f"{self.mnt}/vol", f"{self.mnt}/snap")
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
        self.assertEqual(tuple(bus.get(vol, SUBVOLUME_IFACE, p) for p in ("ReferencedBytes", "ExclusiveBytes")),
                         qgroup_usage(f"{self.mnt}/vol"))
        os.kill(owner_pid(), 15)
        activation.check(2)  # the idle exit and the SIGTERM

    def test_no_timer_without_btrfs(self):
        """With no btrfs published, subvold sleeps: no timer armed, and not
        one wake-up of any thread while a second subvold that has one (the
        control) wakes again and again.  A btrfs that comes is watched (the
        timer notices a new subvolume on it); when it goes, subvold sleeps
        again."""
        hide_btrfs = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                      "findmnt -rn -t btrfs -o TARGET | sort -r | while read -r m; do "
                      "umount -l \"$(printf %b \"$m\")\"; done; exec \"$@\"", "sh"]
        control = Daemon(self, self.bus_of_its_own())
        wait_for(control.armed_timers, "the control's generation timer")  # it shows in fdinfo
        daemon = self.start("-v", wrapper=hide_btrfs)
        published = lambda: self.bus.get(MANAGER_PATH, MANAGER_IFACE, "Filesystems")
        self.assertEqual(published(), [])
        self.assert_asleep(daemon, control)

        # A btrfs mounted where only subvold sees it, and away again.
        where = self.path("seen")
        os.mkdir(where)
        in_its_namespace = ["nsenter", f"--mount=/proc/{daemon.proc.pid}/ns/mnt"]
        run(*in_its_namespace, "mount", self.fs.device, where)
        wait_for(lambda: published() == [self.fs.object_path], "the filesystem")
        # Once nothing else is left to do, only the generation timer can
        # notice a new subvolume.
        self.wait_quiet(daemon)
        subvolume_create(f"{self.mnt}/later")
        wait_for(lambda: btrfs_rootid(f"{self.mnt}/later") in self.published_ids(self.fs), "the new subvolume")
        run(*in_its_namespace, "umount", where)
        wait_for(lambda: published() == [], "the filesystem to go")
        self.assert_asleep(daemon, control)
        daemon.stop()
        control.stop()

    def bus_of_its_own(self):
        """A bus for a second subvold (the name is taken on self.bus): all
        Daemon needs of one is its environment."""
        socket_path = self.path("control_bus_socket")
        proc = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--nopidfile",
                                 f"--address=unix:path={socket_path}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.stack.callback(proc.wait)
        self.stack.callback(proc.terminate)
        wait_for(lambda: os.path.exists(socket_path), "the control's bus")
        return types.SimpleNamespace(env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=f"unix:path={socket_path}"))

    def assert_asleep(self, daemon, control, ticks=6):
        """No timer of @daemon armed, and not one wake-up of it while
        @control's generation timer wakes it @ticks times: the window is
        counted in the very wake-ups that must not happen, not in seconds."""
        def still_for(n):
            before, control_before = daemon.wakeups(), control.wakeups()
            wait_for(lambda: control.wakeups() >= control_before + n, f"{n} wake-up(s) of the control")
            return daemon.wakeups() == before

        wait_for(lambda: not daemon.armed_timers(), "no armed timer")
        wait_for(lambda: still_for(1), "subvold to fall asleep")  # done with what it was doing
        self.assertTrue(still_for(ticks), "subvold woke without a btrfs")
        self.assertEqual(daemon.armed_timers(), [])


if __name__ == "__main__":
    main()
