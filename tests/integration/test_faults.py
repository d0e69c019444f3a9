#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Faults a long-running subvold meets: its cache directory removed, full
or read-only, SIGKILL while it writes a cache file, kernel calls failing
(tests/fault-shim.c, LD_PRELOAD), the filesystem failing under it (a btrfs
on a device-mapper device switched to the `error` target), the bus going
away, CLOCK_REALTIME jumps (in the shim) and SIGSTOP/SIGCONT.  In all of
them subvold keeps serving and publishes no figure that differs from
btrfs-progs and the sizes written: a figure may be unknown (UsageSource
"none", the object left out), never wrong.  Once the fault is gone it
publishes the whole truth again."""

import errno
import os
import random
import re
import signal
import subprocess
import threading
import time

from harness import (ROOT, BUS_NAME, MANAGER_IFACE, MANAGER_PATH, SUBVOLD, SUBVOLUME_IFACE, Activation, Btrfs,
                     Bus, Daemon, TestCase, btrfs_subvolume_list, bytestring, main, qgroup_show,
                     run, snapshot, subvolume_create, wait_for, write_random)

KiB, MiB = 1 << 10, 1 << 20
UNKNOWN = 2**64 - 1
SHIM = os.environ.get("SUBVOLD_FAULT_SHIM", "")
FAILING_DISK = os.environ.get("SUBVOLD_FAILING_DISK", "")
MANY_FILES = 3000
LDD = run("ldd", SUBVOLD).decode()
SANITIZED = "libasan" in LDD
# How many SIGKILLs while a cache is written (tools/faults.sh runs more).
KILL_ROUNDS = int(os.environ.get("SUBVOLD_FAULT_KILL_ROUNDS", "30"))
# Sizes of the files written on the filesystem without quotas: the
# scanner's figures must be these (inodes: the files and the root).
SCAN_FILES = {"a": [MiB], "b": [MiB, 512 * KiB], "scratch": []}


def preload():
    """LD_PRELOAD for the shim.  An ASan build must have its runtime first
    in the library list: libasan, then the shim, whose wrappers ASan's own
    interceptors (ioctl, clock_gettime) reach through dlsym(RTLD_NEXT)."""
    libs = [m[1] for m in re.finditer(r"^\s*libasan\S* => (\S+)", LDD, re.M)]
    return " ".join(libs + [SHIM])


class FaultTest(TestCase):
    def setUp(self):
        super().setUp()
        if not SHIM or not os.path.exists(SHIM):
            self.fail("SUBVOLD_FAULT_SHIM is not set to the built tests/fault-shim.so")
        # One btrfs with qgroups (figures from the kernel), one without
        # (figures from subvold's scanner).
        self.q = Btrfs(self, "q")
        self.qmnt = self.q.mount(self.path("q"))
        subvolume_create(f"{self.qmnt}/vol")
        write_random(f"{self.qmnt}/vol/data", 2 * MiB)
        snapshot(f"{self.qmnt}/vol", f"{self.qmnt}/snap", readonly=True)
        write_random(f"{self.qmnt}/vol/more", MiB)
        subvolume_create(f"{self.qmnt}/scratch")
        run("btrfs", "quota", "enable", self.qmnt)
        run("btrfs", "quota", "rescan", "-w", self.qmnt)
        self.s = Btrfs(self, "s")
        self.smnt = self.s.mount(self.path("s"))
        self.scan_files = {}
        for name, sizes in SCAN_FILES.items():
            subvolume_create(f"{self.smnt}/{name}")
            self.scan_files[name] = {}
            for i, size in enumerate(sizes):
                self.write_scanned(f"{name}/f{i}", size)
        os.sync()
        self.cache = self.path("cache")
        os.mkdir(self.cache)

    def write_scanned(self, path, size):
        """Writes a file on the filesystem without quotas, whose size the
        scanner must then find."""
        name, file = path.split("/")
        write_random(f"{self.smnt}/{path}", size)
        self.scan_files[name][file] = size

    def start(self, bus, *args, faults=None, **kw):
        """subvold with the shim preloaded and @faults (SUBVOLD_FAULT_*
        without the prefix) set, or without the shim."""
        env = dict(kw.pop("env", {}))
        if faults is not None:
            env["LD_PRELOAD"] = preload()
            env.update({f"SUBVOLD_FAULT_{k}": str(v) for k, v in faults.items()})
        return Daemon(self, bus, "--cache-dir", self.cache, "-v", *args, env=env, **kw)

    # ---------------------------------------------------------- the truth

    def truth(self, scratch=True):
        """What subvold must publish, from btrfs-progs and the sizes written:
        filesystem object path -> {id: (path, usage)}; usage is
        (source, referenced, exclusive, inodes, referenced limit, exclusive
        limit), None where it is in flux (the scratch subvolume while it is
        written)."""
        truth = {}
        qgroups = qgroup_show(self.qmnt, unlimited=UNKNOWN)
        listed = btrfs_subvolume_list(self.qmnt)
        q = {5: (b"/", ("qgroup", *qgroups[5][:2], UNKNOWN, *qgroups[5][2:]))}
        for i, v in listed.items():
            usage = ("qgroup", *qgroups[i][:2], UNKNOWN, *qgroups[i][2:])
            q[i] = (b"/" + v["path"], usage if scratch or v["path"] != b"scratch" else None)
        truth[self.q.object_path] = q
        s = {5: (b"/", ("scan", 0, 0, 1, UNKNOWN, UNKNOWN))}
        for i, v in btrfs_subvolume_list(self.smnt).items():
            sizes = self.scan_files[v["path"].decode()].values()
            usage = ("scan", sum(sizes), sum(sizes), len(sizes) + 1, UNKNOWN, UNKNOWN)
            s[i] = (b"/" + v["path"], usage if scratch or v["path"] != b"scratch" else None)
        truth[self.s.object_path] = s
        return truth

    @staticmethod
    def published(objects):
        """filesystem object path -> {id: (path, usage)} as GetManagedObjects says."""
        out = {}
        for path, ifaces in objects.items():
            p = ifaces.get(SUBVOLUME_IFACE)
            if not p:
                continue
            usage = (p["UsageSource"], p["ReferencedBytes"], p["ExclusiveBytes"], p["Inodes"],
                     p["ReferencedLimitBytes"], p["ExclusiveLimitBytes"])
            out.setdefault(p["Filesystem"], {})[p["Id"]] = (bytestring(p["Path"]), usage)
        return out

    def wrong_figures(self, published, truth, earlier=None):
        """What @published says that differs from @truth: objects that do
        not exist, wrong paths, known usage that is not the truth.  Objects
        left out and usage "none" are unknown, not wrong.  With @earlier (a
        truth from before the last change), usage that was true then is not
        wrong either: the scanner's figures follow a change once it has read
        the tree again (README, the scanner), also right after a start."""
        wrong = []
        for fs, subvolumes in published.items():
            if fs not in truth:
                wrong.append(f"filesystem {fs} does not exist")
                continue
            for i, (path, usage) in subvolumes.items():
                if i not in truth[fs]:
                    wrong.append(f"{fs}/{i} does not exist")
                    continue
                want_path, want_usage = truth[fs][i]
                if path != want_path:
                    wrong.append(f"{fs}/{i}: path {path!r} != {want_path!r}")
                was = (earlier or {}).get(fs, {}).get(i, (None, None))[1]
                if usage[0] != "none" and want_usage is not None and usage not in (want_usage, was):
                    wrong.append(f"{fs}/{i}: usage {usage} != {want_usage}" + (f" (nor {was})" if was else ""))
        return wrong

    def assert_converges(self, bus, what):
        """Waits until subvold publishes exactly the truth, all of it known."""
        last = []

        def same():
            truth = self.truth()
            got = self.published(bus.managed_objects())
            last[:] = [got, truth]
            return got == truth

        try:
            wait_for(same, what, timeout=90)
        except AssertionError:
            got, truth = last
            self.fail(f"{what}: published {got}\n!= truth {truth}")

    # ---------------------------------------------------------- cache directory

    def test_cache_directory_removed_and_back(self):
        bus = Bus(self)
        daemon = self.start(bus)
        self.assert_converges(bus, "the first model")
        # Yanked: the next write fails once, logged once; serving goes on.
        run("rm", "-rf", self.cache)
        for i in range(3):
            write_random(f"{self.qmnt}/scratch/f{i}", 64 * KiB)
            os.sync()
            self.assert_converges(bus, "figures while the cache directory is gone")
        wait_for(lambda: "Cannot write the usage cache" in daemon.log(), "the failed write logged")
        self.assertEqual(daemon.log().count("Cannot write the usage cache"), 1, daemon.log())
        # Back: the next write works and says so.
        os.mkdir(self.cache)
        write_random(f"{self.qmnt}/scratch/back", 64 * KiB)
        os.sync()
        wait_for(lambda: "Writing the usage cache" in daemon.log() and "works again" in daemon.log(),
                 "the cache written again")
        self.assert_converges(bus, "figures with the cache directory back")
        daemon.stop()
        self.assertTrue(os.path.exists(os.path.join(self.cache, "usage.cache")))

    def test_cache_directory_full_and_read_only(self):
        # Full: a 64 KiB tmpfs filled up; read-only: the same remounted.
        run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", self.cache)
        self.stack.callback(run, "umount", self.cache, check=False)
        subprocess.run(["dd", "if=/dev/zero", f"of={self.cache}/filler", "bs=4k", "count=64"],
                       stderr=subprocess.DEVNULL)
        bus = Bus(self)
        daemon = self.start(bus)
        self.assert_converges(bus, "figures with a full cache directory")
        run("mount", "-o", "remount,ro", self.cache)
        write_random(f"{self.qmnt}/scratch/f", 64 * KiB)
        os.sync()
        self.assert_converges(bus, "figures with a read-only cache directory")
        daemon.stop()
        log = daemon.log()
        self.assertEqual(log.count("Cannot write the usage cache"), 1, log)
        self.assertEqual(sorted(os.listdir(self.cache)), ["filler"], "a temporary file left behind")

    def test_killed_while_writing_the_cache(self):
        """SIGKILL (from the shim, so that it is certain to land in a cache
        write: after a random part of a write(), or before fsync()) and
        kill -9 from outside at random moments, many times: each next start
        loads a valid cache or ignores it with one log line, leaves no
        temporary file behind, and serves the truth."""
        bus = Bus(self)
        rng = random.Random(int(os.environ.get("SUBVOLD_FAULT_SEED", "13")))
        killed_in_write = 0
        for round in range(KILL_ROUNDS):
            earlier = self.truth()
            # Something to write: new qgroup figures, a new tree to scan.
            write_random(f"{self.qmnt}/scratch/r{round}", 4 * KiB)
            self.write_scanned(f"scratch/r{round}", 4 * KiB)
            os.sync()
            notify = self.path("notify-kill")
            env = dict(bus.env, NOTIFY_SOCKET=notify)
            if round % 2 == 0:
                env.update(LD_PRELOAD=preload(), SUBVOLD_FAULT_KILL_DIR=self.cache,
                           SUBVOLD_FAULT_KILL_PERCENT="50", SUBVOLD_FAULT_SEED=str(rng.randrange(1 << 30)))
            since = time.time_ns()
            with open(self.path("killed.log"), "wb") as log:
                proc = subprocess.Popen([SUBVOLD, "--cache-dir", self.cache], env=env, stdout=log, stderr=log)
            self.stack.callback(lambda p=proc: p.poll() is None and (p.kill(), p.wait()))
            if round % 2 == 1:
                # From outside, at a random moment of its start (which
                # reads and writes both caches).
                time.sleep(rng.uniform(0, 0.3))  # a random moment, not a wait for anything
            else:
                # Until the shim kills it, or it wrote both caches unharmed.
                wait_for(lambda: proc.poll() is not None or all(
                    os.path.exists(f) and os.stat(f).st_mtime_ns > since
                    for f in (f"{self.cache}/usage.cache", f"{self.cache}/scan.cache")), "a kill or both caches")
            rc = proc.poll()
            if rc is None:
                proc.kill()
            killed_in_write += rc == -signal.SIGKILL
            proc.wait()
            with open(self.path("killed.log"), "rb") as f:
                out = f.read()
            self.assertFalse(b"runtime error:" in out or b"Sanitizer" in out, out.decode(errors="replace"))
            # The next start, without faults: its first answer holds nothing
            # wrong (what the cache it loaded holds is the truth of before
            # this round's write, or the truth now; or nothing yet), then the
            # truth.
            daemon = self.start(bus)
            self.assertEqual(self.wrong_figures(self.published(bus.managed_objects()), self.truth(), earlier), [],
                             f"round {round}: wrong figures at the first answer after a kill")
            self.assert_converges(bus, f"round {round}: the truth after a kill")
            daemon.stop()
            # Only now: a running daemon may be writing a cache (its own
            # temporary file, for a moment).  The killed one's, if any, went
            # at this start, and a clean exit leaves none.
            leftovers = [f for f in os.listdir(self.cache) if f not in ("usage.cache", "scan.cache")]
            self.assertEqual(leftovers, [], f"round {round}: temporary files left behind")
            log = daemon.log()
            self.assertLessEqual(log.count("usage cache"), 1, log)
            self.assertLessEqual(log.count("scan cache"), 1, log)
            if round % 4 == 0:
                # A start from an undamaged cache has nothing to say.
                daemon = self.start(bus)
                self.assert_converges(bus, f"round {round}: a warm start")
                daemon.stop()
                self.assertNotIn("Ignoring the", daemon.log())
        print(f"killed in a cache write by the shim {killed_in_write} time(s) of {(KILL_ROUNDS + 1) // 2}")
        self.assertGreater(killed_in_write, 0)

    # ---------------------------------------------------------- kernel calls

    def kernel_calls_fail(self, calls, errnos, percent=30, **kw):
        """subvold with @calls failing (@errnos, @percent of the time) while
        both filesystems change: every answer holds no wrong figure; once
        the failures stop, the truth."""
        switch = self.path("faults-on")
        open(switch, "w").close()
        bus = Bus(self)
        # A new seed each run (tools/faults.sh repeats them); printed, so a
        # failure can be run again as it was.
        seed = int(os.environ.get("SUBVOLD_FAULT_SEED", random.randrange(1 << 30)))
        print(f"{calls}: SUBVOLD_FAULT_SEED={seed}")
        daemon = self.start(bus, faults=dict(CALLS=",".join(calls), ERRNOS=",".join(str(e) for e in errnos),
                                             PERCENT=percent, SWITCH=switch, SEED=seed), **kw)

        def step(i):
            write_random(f"{self.qmnt}/scratch/f{i % 8}", 64 * KiB)
            self.write_scanned(f"scratch/f{i % 4}", 64 * KiB)
            os.sync()

        churn_stop = threading.Event()
        failures = []

        def churn():
            i = 0
            try:
                while not churn_stop.is_set():
                    step(i)
                    i += 1
                    churn_stop.wait(0.05)
            except Exception as e:  # noqa: BLE001 -- reported below
                failures.append(repr(e))

        thread = threading.Thread(target=churn)
        thread.start()
        self.stack.callback(lambda: (churn_stop.set(), thread.join()))
        try:
            for i in range(40):
                objects = bus.managed_objects()
                wrong = self.wrong_figures(self.published(objects), self.truth(scratch=False))
                self.assertEqual(wrong, [], f"{calls} failing: wrong figures published")
                if i % 4 == 0:
                    try:
                        bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
                    except Exception as e:  # noqa: BLE001 -- a refresh may fail; it must say so
                        self.assertIn("Failed", str(e))
        finally:
            churn_stop.set()
            thread.join()
        self.assertEqual(failures, [])
        self.assertTrue(daemon.alive())
        os.unlink(switch)
        os.sync()
        self.assert_converges(bus, f"the truth once {calls} work again")
        daemon.stop()
        return daemon.log()

    def test_ioctl_fails(self):
        log = self.kernel_calls_fail(["ioctl"], [errno.EIO, errno.ENOMEM, errno.EPERM, errno.EINTR, errno.ENOTTY,
                                                 errno.EOVERFLOW, errno.ENOENT, errno.EAGAIN])
        self.assertIn("fault-shim: ioctl failed", log)

    def test_statx_and_open_tree_fail(self):
        log = self.kernel_calls_fail(["statx", "open_tree"], [errno.EIO, errno.ENOMEM, errno.EACCES, errno.ENOENT,
                                                              errno.EINTR, errno.EPERM, errno.ENOSYS, errno.EMFILE])
        self.assertIn("fault-shim: statx failed", log)
        self.assertIn("fault-shim: open_tree failed", log)

    def test_listmount_and_statmount_fail(self):
        log = self.kernel_calls_fail(["listmount", "statmount"], [errno.ENOMEM, errno.EINTR, errno.EPERM,
                                                                  errno.ENOENT, errno.EOVERFLOW, errno.ENOSYS])
        self.assertIn("fault-shim: statmount failed", log)

    def test_mounts_unreadable_then_readable(self):
        """statx() fails on every mount point for a while (EIO): both
        filesystems are left out, each warned about once however many
        refreshes meet it, and read again a second later until they can be:
        once statx() works they are published with no change needed to
        trigger it."""
        log = self.kernel_calls_fail(["statx"], [errno.EIO], percent=100)
        warnings = re.findall(r"^<4>Skipping btrfs mount (\S+): cannot open it", log, re.M)
        self.assertEqual(sorted(warnings), sorted([self.qmnt, self.smnt]), log)

    def test_mount_points_are_other_mounts(self):
        """statx() says each mount point is another mount than the table
        (ESTALE, as when a mount is replaced between reading the table and
        opening it: test_load's unmounts meet it each time): a mount change
        whose own refresh follows, no failure of the filesystem, so no
        warning however many mounts meet it; once it stops, the truth."""
        log = self.kernel_calls_fail(["statx"], [errno.ESTALE], percent=100)
        self.assertRegex(log, r"(?m)^<7>Skipping btrfs mount \S+: cannot open it: Stale file handle$")
        self.assertNotRegex(log, r"(?m)^<[0-6]>Skipping btrfs mount")

    def test_mount_table_unreadable_from_the_start(self):
        """listmount() out of memory at every call from the start (ENOMEM is
        no reason to fall back to mountinfo): subvold still goes on the bus,
        publishing nothing, and tries again each second until it can read
        the mounts; then the truth, with no change needed to trigger it."""
        log = self.kernel_calls_fail(["listmount"], [errno.ENOMEM], percent=100)
        self.assertIn("Starting with no filesystems", log)

    def test_statmount_always_overflows(self):
        """A statmount() that never fits (a kernel bug, a seccomp filter
        answering EOVERFLOW): subvold gives up on that mount table read
        instead of doubling its buffer until malloc() fails."""
        # Without the bound, a plain build under meson (MALLOC_PERTURB_
        # writes every allocation) reached 4 GiB of RSS: an address space
        # limit makes that regression fail quickly instead (ASan reserves
        # terabytes of address space and stops such an allocation itself).
        limit = {} if SANITIZED else dict(wrapper=("prlimit", f"--as={1 << 30}", "--"))
        log = self.kernel_calls_fail(["statmount"], [errno.EOVERFLOW], percent=100, **limit)
        self.assertIn("fault-shim: statmount failed", log)
        # Refused as it is, not after malloc() failed (which an ASan build
        # does not survive).
        self.assertIn(os.strerror(errno.EOVERFLOW), log)
        self.assertNotIn(os.strerror(errno.ENOMEM), log)

    def test_fanotify_init_fails(self):
        """Without fanotify (each plausible errno), mounts are still followed."""
        for e in (errno.EPERM, errno.EINVAL, errno.EMFILE, errno.ENOSYS, errno.ENOMEM):
            with self.subTest(errno=errno.errorcode[e]):
                bus = Bus(self)
                daemon = self.start(bus, faults=dict(CALLS="fanotify_init", ERRNOS=e, PERCENT=100))
                self.assert_converges(bus, "the first model")
                self.s.umount(self.smnt)
                wait_for(lambda: self.s.object_path not in bus.managed_objects(), "the unmount seen")
                self.s.mount(self.smnt)
                self.assert_converges(bus, "the mount seen again")
                daemon.stop()
                self.assertIn("fault-shim: fanotify_init failed", daemon.log())
                self.assertIn("relying on mountinfo", daemon.log())
                bus.proc.terminate()
                bus.proc.wait()

    # ---------------------------------------------------------- the bus

    def test_bus_restarted(self):
        """dbus-daemon goes away: subvold says so and exits with status 0
        (a bus service without a bus has nothing to do); on the new bus,
        activation starts it again, answering from its cache."""
        activation = Activation(self, f"[D-BUS Service]\nName={BUS_NAME}\nExec=\n", f"--cache-dir={self.cache}")
        bus = Bus(self, servicedir=activation.servicedir)
        self.assert_converges(bus, "the activated subvold's model")
        vol = f"{self.q.object_path}/{[i for i, v in btrfs_subvolume_list(self.qmnt).items() if v['path'] == b'vol'][0]}"
        updated = bus.get(vol, SUBVOLUME_IFACE, "UsageUpdated")
        bus.proc.terminate()
        bus.proc.wait()
        activation.check(1)
        with open(activation.log) as f:
            self.assertIn("Disconnected from the bus, exiting.", f.read())
        os.unlink(self.path("bus.conf"))
        bus = Bus(self, servicedir=activation.servicedir)
        # Nothing changed: the same figures, read at the same time (the cache).
        self.assertEqual(bus.get(vol, SUBVOLUME_IFACE, "UsageUpdated"), updated)
        self.assert_converges(bus, "the model after the bus came back")
        pid = int(re.search(rb"\[(\d+)\]", run(
            "busctl", "--system", "--json=short", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
            "org.freedesktop.DBus", "GetConnectionUnixProcessID", "s", BUS_NAME, env=bus.env))[1])
        os.kill(pid, signal.SIGTERM)
        activation.check(2)

    # ---------------------------------------------------------- time

    def test_clock_jumps(self):
        """CLOCK_REALTIME jumps a day back, then a year ahead (in the shim:
        this machine's clock is not ours to set).  subvold's timers are on
        CLOCK_MONOTONIC; its only use of the wall clock is the time figures
        were read (UsageUpdated, and whether the once-a-second read limit
        has passed): after each jump changes are still read and published."""
        offset = self.path("clock-offset")
        with open(offset, "w") as f:
            f.write("0")
        bus = Bus(self)
        daemon = self.start(bus, faults=dict(CLOCK=offset))
        self.assert_converges(bus, "the first model")
        for jump, name in ((-86400, "back"), (365 * 86400, "ahead"), (0, "home")):
            with open(offset, "w") as f:
                f.write(str(jump))
            write_random(f"{self.qmnt}/scratch/{name}", 256 * KiB)
            self.write_scanned(f"scratch/{name}", 256 * KiB)
            os.sync()
            self.assert_converges(bus, f"figures after the clock jumped {name}")
            scratch = [o for o in bus.managed_objects().values()
                       if o.get(SUBVOLUME_IFACE, {}).get("Path") == list(b"/scratch\0")][0]
            when = scratch[SUBVOLUME_IFACE]["UsageUpdated"] / 1e6
            self.assertLess(abs(when - (time.time() + jump)), 3600, f"UsageUpdated after the jump {name}")
        # The shim moves what subvold reads of the clock, not the kernel's
        # timers: that none of them is on the wall clock is checked here
        # (timerfd clock ids: 0 CLOCK_REALTIME, 8 CLOCK_REALTIME_ALARM).
        clocks = []
        for fd, (target, _) in daemon.fds().items():
            if target == "anon_inode:[timerfd]":
                with open(f"/proc/{daemon.proc.pid}/fdinfo/{fd}") as f:
                    clocks.append(int(re.search(r"^clockid: (\d+)$", f.read(), re.M)[1]))
        self.assertTrue(clocks, "no timerfd")
        self.assertFalse({0, 8} & set(clocks), f"a timer on the wall clock: clock ids {clocks}")
        daemon.stop()

    def test_stopped_longer_than_a_refresh(self):
        """SIGSTOP for longer than the refresh interval while things change;
        after SIGCONT subvold catches up, and its refreshes keep to the rate
        limit (no burst of the missed ones)."""
        bus = Bus(self)
        daemon = self.start(bus)
        self.assert_converges(bus, "the first model")
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            subvolume_create(f"{self.qmnt}/new")
            write_random(f"{self.qmnt}/new/data", MiB)
            run("btrfs", "subvolume", "delete", f"{self.qmnt}/snap")
            self.write_scanned("a/f1", 256 * KiB)
            os.sync()
            run("btrfs", "quota", "rescan", "-w", self.qmnt)
            # The fault is a duration: three refresh intervals.
            wait_for(lambda: time.monotonic() - stopped > 3, "three refresh intervals")
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        self.assert_converges(bus, "the truth after SIGCONT")
        daemon.assert_refresh_rate()
        daemon.stop()


class DeviceFaultTest(TestCase):
    """A btrfs on a disk that starts failing under subvold: a loop device
    over a file that tests/client/failing-disk serves through FUSE and
    fails on command with EIO (this kernel has no device-mapper, so no
    dm-error or dm-flakey; the loop device sees the same errors).  It
    fails during a scan (held there by SUBVOLD_TEST_SCAN_PAUSE_FD), during
    refreshes, and while writing (btrfs then aborts its transaction and
    goes read-only).  Caches are dropped so that reads reach the disk.
    subvold keeps serving, publishes no wrong figure and logs the error;
    with the disk healthy and the filesystem mounted again, it publishes
    the truth."""

    def setUp(self):
        super().setUp()
        image = self.path("disk.img")
        with open(image, "wb") as f:
            f.truncate(512 * MiB)
        run("mkfs.btrfs", "-q", image)
        fuse = self.path("fuse")
        os.mkdir(fuse)
        self.server = subprocess.Popen([FAILING_DISK, fuse, image], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True)
        self.stack.callback(lambda: (self.server.stdin.close(), self.server.stdout.close()))
        self.stack.callback(lambda: self.server.poll() is None and (self.server.terminate(), self.server.wait()))
        self.stack.callback(subprocess.run, ["umount", "-l", fuse], stderr=subprocess.DEVNULL)
        self.assertEqual(self.server.stdout.readline(), "mounted\n")
        self.loop = run("losetup", "--find", "--show", f"{fuse}/disk").decode().strip()
        self.stack.callback(run, "losetup", "-d", self.loop, check=False)
        # Whatever the test did last, the disk heals before it is let go.
        self.stack.callback(self.command, "heal")
        self.uuid = run("blkid", "-p", "-o", "value", "-s", "UUID", self.loop).decode().strip()
        self.object_path = f"{MANAGER_PATH}/fs/{self.uuid.replace('-', '')}"
        self.mnt = self.path("mnt")
        self.mount()
        self.sizes = {"a": MiB, "b": 2 * MiB, "c": 512 * KiB}
        for name, size in self.sizes.items():
            subvolume_create(f"{self.mnt}/{name}")
            write_random(f"{self.mnt}/{name}/f", size)
        # A tree of many leaves: a subvolume's root node stays in memory
        # whatever is dropped, its leaves need not.
        subvolume_create(f"{self.mnt}/many")
        for i in range(MANY_FILES):
            open(f"{self.mnt}/many/{i}", "w").close()
        os.sync()
        self.bus = Bus(self)

    def command(self, line):
        if self.server.poll() is None:
            self.server.stdin.write(line + "\n")
            self.server.stdin.flush()
            self.assertEqual(self.server.stdout.readline(), "ok\n")

    def mount(self):
        os.makedirs(self.mnt, exist_ok=True)
        run("mount", self.loop, self.mnt)
        self.stack.callback(lambda: os.path.ismount(self.mnt) and run("umount", "-l", self.mnt, check=False))

    def fail_device(self):
        self.command("fail")
        # Clean cached metadata goes, so that reads reach the disk.
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")

    def truth(self):
        """id -> (path, usage) from btrfs-progs (read while healthy) and the sizes written."""
        truth = {5: (b"/", ("scan", 0, 0, 1))}
        for i, v in btrfs_subvolume_list(self.mnt).items():
            size = self.sizes.get(v["path"].decode(), 0)
            truth[i] = (b"/" + v["path"], ("scan", size, size, MANY_FILES + 1 if v["path"] == b"many" else 2))
        return truth

    def published(self):
        out = {}
        for ifaces in self.bus.managed_objects().values():
            p = ifaces.get(SUBVOLUME_IFACE)
            if p and p["Filesystem"] == self.object_path:
                out[p["Id"]] = (bytestring(p["Path"]),
                                (p["UsageSource"], p["ReferencedBytes"], p["ExclusiveBytes"], p["Inodes"]))
        return out

    def assert_nothing_wrong(self, truth, what):
        for i, (path, usage) in self.published().items():
            self.assertIn(i, truth, what)
            self.assertEqual(path, truth[i][0], what)
            if usage[0] != "none" and truth[i][1][0] != "none":
                self.assertEqual(usage, truth[i][1], f"{what}: subvolume {i}")

    def assert_recovers(self, daemon, truth):
        """Healthy again: the filesystem mounted anew is published whole."""
        self.command("heal")
        run("umount", self.mnt)
        wait_for(lambda: self.object_path not in self.bus.managed_objects(), "the unmount published")
        self.mount()
        wait_for(lambda: self.published() == truth, "the truth after the device healed", timeout=90)
        self.assertTrue(daemon.alive())

    def test_device_fails_during_a_scan_and_refreshes(self):
        from test_scan import ScanPause
        truth = self.truth()
        pause = ScanPause(self)
        daemon = Daemon(self, self.bus, "-v", **pause.daemon_args())
        wait_for(lambda: pause.waiting(daemon), "the scanner to pause before a tree")
        pause.let_one_through()  # one tree read while healthy, the rest not
        wait_for(lambda: pause.waiting(daemon), "the scanner to pause again")
        self.fail_device()
        pause.release()
        try:
            wait_for(lambda: re.search(r"^<[0-4]>.*Input/output error", daemon.log(), re.M),
                     "the I/O error logged as a warning")
        except AssertionError:
            self.fail("no I/O error logged:\n" + daemon.log())
        # Refreshes on the failing device, asked for and by the watch.
        for _ in range(5):
            try:
                self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
            except Exception as e:  # noqa: BLE001 -- a refresh may fail; it must say so
                self.assertIn("Failed", str(e))
            self.assert_nothing_wrong(truth, "while the device fails")
        self.assertTrue(daemon.alive())
        self.assert_recovers(daemon, truth)
        daemon.stop()

    def test_failed_trees_are_read_again_once_the_device_heals(self):
        """Nothing changes and nothing is mounted again: the trees that
        failed are read again after a delay (10 s the first time, doubling
        with each failure) and the truth comes out."""
        from test_scan import ScanPause
        truth = self.truth()
        pause = ScanPause(self)
        daemon = Daemon(self, self.bus, "-v", **pause.daemon_args())
        wait_for(lambda: pause.waiting(daemon), "the scanner to pause before a tree")
        self.fail_device()
        pause.release()
        wait_for(lambda: re.search(r"^<[0-4]>.*Scan of subvolume \d+ failed, trying again in 10 s", daemon.log(),
                                   re.M), "the failed scan logged with its retry")
        self.assert_nothing_wrong(truth, "while the device fails")
        self.command("heal")
        wait_for(lambda: self.published() == truth, "the truth once the failed trees were read again", timeout=60)
        self.assertTrue(daemon.alive())
        daemon.stop()

    def test_device_fails_while_writing(self):
        """Writes fail: btrfs aborts the transaction and goes read-only."""
        daemon = Daemon(self, self.bus, "-v")
        truth = self.truth()
        wait_for(lambda: self.published() == truth, "the first scan")
        self.fail_device()
        with open(f"{self.mnt}/a/more", "wb") as f:
            f.write(os.urandom(MiB))
        subprocess.run(["sync", "-f", f"{self.mnt}/a"], stderr=subprocess.DEVNULL)  # fails: EIO
        wait_for(lambda: "ro" in run("findmnt", "-n", "-o", "OPTIONS", self.mnt).decode().split(","),
                 "btrfs to go read-only")
        for _ in range(5):
            try:
                self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)
            except Exception as e:  # noqa: BLE001 -- a refresh may fail; it must say so
                self.assertIn("Failed", str(e))
            # "a" changed in memory but not on disk: its live tree (a new
            # inode, its data never allocated) is neither the old truth nor
            # the new one, and is left out; the others are exact.
            in_flux = dict(truth)
            in_flux.update({i: (v[0], ("none",)) for i, v in truth.items() if v[0] == b"/a"})
            self.assert_nothing_wrong(in_flux, "after the transaction abort")
        self.assertTrue(daemon.alive())
        self.assert_recovers(daemon, truth)
        daemon.stop()


if __name__ == "__main__":
    main()
