#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The bus fuzzer (tests/fuzz/busfuzz.c) against the real subvold on a real
btrfs, through the shipped policy: an ordinary user's connections and one
of root's call everything the XML lists and names that do not exist, with
any signature, values and fds, while subvolumes are created, snapshotted
and deleted and a second btrfs is mounted and lazily unmounted beneath.
Every answer must be a reply or a named error; subvold must end with its
fds where they were and its memory near it, and exit cleanly with no
sanitizer report.

SUBVOLD_BUSFUZZ_SECONDS (default 60) sets how long, SUBVOLD_BUSFUZZ_SEED
(default 2) the calls; tools/busfuzz.sh runs it long and prints the
figures."""

import collections
import ctypes
import os
import subprocess

from harness import (ROOT, SANITIZER_MARKERS, SOURCE_DIR, SUBVOLD, Btrfs, Bus, Churn, Daemon, TestCase, as_user,
                     main, run, snapshot, subvolume_create, wait_for, write_random)

BUSFUZZ = os.environ.get("SUBVOLD_BUSFUZZ", "")
SECONDS = int(os.environ.get("SUBVOLD_BUSFUZZ_SECONDS", "60"))
SEED = int(os.environ.get("SUBVOLD_BUSFUZZ_SEED", "2"))  # the same calls each run, unless told
XML = os.path.join(SOURCE_DIR, "dbus", "org.subvold.Subvold1.xml")
SANITIZED = "libasan" in run("ldd", SUBVOLD).decode()
MNT_DETACH = 2
libc = ctypes.CDLL(None, use_errno=True)


def figures(output):
    """busfuzz's "key value" lines: numbers, error counts by name, failures."""
    numbers, errors, failures = {}, collections.Counter(), []
    for line in output.splitlines():
        key, _, value = line.partition(" ")
        if key == "error":
            name, count = value.rsplit(" ", 1)
            errors[name] += int(count)
        elif key == "failure":
            failures.append(value)
        elif key:
            numbers[key] = float(value)
    return numbers, errors, failures


class BusFuzzTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs", size="1G")
        self.mnt = self.fs.mount(self.path("mnt"))
        subvolume_create(f"{self.mnt}/vol")
        subvolume_create(f"{self.mnt}/vol/nested")
        os.makedirs(f"{self.mnt}/vol/dir")
        write_random(f"{self.mnt}/vol/dir/file", 1 << 20)
        snapshot(f"{self.mnt}/vol", f"{self.mnt}/snap", readonly=True)
        os.unlink(f"{self.mnt}/vol/dir/file")  # a deleted file, with versions
        write_random(f"{self.mnt}/vol/dir/file", 4096)
        os.mkdir(f"{self.mnt}/churn")
        # A second btrfs, mounted and lazily unmounted over and over: fds
        # of files on a filesystem being unmounted.
        self.other = Btrfs(self, "other", size="256M")
        self.other_mnt = self.path("other")
        self.other.mount(self.other_mnt)
        write_random(f"{self.other_mnt}/file", 4096)
        self.other.umount(self.other_mnt)
        os.chmod(self.tmp, 0o755)
        self.bus = Bus(self)

    def busfuzz(self, seconds, connections, seed, user):
        sources = [f"{self.mnt}/vol/dir/file", f"{self.mnt}/vol/dir", f"{self.mnt}/snap/dir/file", f"{self.mnt}/snap",
                   f"{self.mnt}/vol/nested", self.mnt, f"{self.other_mnt}/file", self.other_mnt]
        proc = subprocess.Popen([BUSFUZZ, XML, str(seconds), str(connections), str(seed), self.mnt, *sources],
                                env=self.bus.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                **as_user(user))
        self.stack.callback(lambda: proc.poll() is None and proc.kill())
        return proc

    def finish(self, proc, who):
        out, err = proc.communicate(timeout=SECONDS + 300)
        numbers, errors, failures = figures(out)
        print(f"busfuzz as {who}: {int(numbers.get('calls', 0))} calls in {numbers.get('seconds')} s, "
              f"{numbers.get('calls_per_s')}/s, {int(numbers.get('returns', 0))} returns, "
              f"{int(numbers.get('unsendable', 0))} not sendable")
        for name, count in errors.most_common():
            print(f"  {count:9d} {name}")
        self.assertEqual(failures, [], f"busfuzz as {who}:\n{out}\n{err}")
        self.assertEqual(proc.returncode, 0, f"busfuzz as {who}:\n{out}\n{err}")
        self.assertGreater(numbers["calls"], 0)
        return numbers, errors

    def churn(self, i):
        """One step beneath the fuzzer: a subvolume made, snapshotted and
        deleted, and the second btrfs mounted and detached."""
        subvolume_create(f"{self.mnt}/churn/c{i}")
        snapshot(f"{self.mnt}/churn/c{i}", f"{self.mnt}/churn/s{i}", readonly=i % 2 == 0)
        run("btrfs", "subvolume", "delete", f"{self.mnt}/churn/c{i}", f"{self.mnt}/churn/s{i}")
        run("mount", self.other.device, self.other_mnt)
        if libc.umount2(self.other_mnt.encode(), MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), "umount -l")

    def test_busfuzz(self):
        # A small quarantine: ASan keeps freed memory there, which would
        # hide whether RSS came back.
        env = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4"} if SANITIZED else None
        daemon = Daemon(self, self.bus, env=env)
        # Warm up: every code path once, so that what it allocates for
        # good (caches, sd-bus' tables) is in the baseline.
        self.finish(self.busfuzz(3, 2, 1, self.bus.client), "the user (warm-up)")
        fds, rss = daemon.fds_between_operations(), daemon.status("VmRSS")

        churn = Churn(self, self.churn)
        try:
            user = self.busfuzz(SECONDS, 4, SEED, self.bus.client)
            root = self.busfuzz(SECONDS, 1, SEED + 1, ROOT)
            user_numbers, user_errors = self.finish(user, "the user")
            root_numbers, root_errors = self.finish(root, "root")
        finally:
            failures = churn.stop()
        self.assertEqual(failures, [])
        self.assertTrue(daemon.alive(), daemon.log())
        # Through the policy, a user's calls of what only root may call
        # are refused by the bus; root's reach subvold, which answers for
        # itself (unknown methods, wrong signatures, missing objects).
        self.assertIn("org.freedesktop.DBus.Error.AccessDenied", user_errors)
        self.assertIn("org.freedesktop.DBus.Error.UnknownMethod", root_errors)
        self.assertIn("org.freedesktop.DBus.Error.InvalidArgs", root_errors)
        self.assertIn("org.freedesktop.DBus.Error.UnknownObject", root_errors)
        log = daemon.log().encode()
        for marker in SANITIZER_MARKERS:
            self.assertNotIn(marker, log)

        # Back at the baseline: every fd a call brought is closed, and memory
        # is what it was, give or take what malloc keeps.
        try:
            wait_for(lambda: daemon.fds_between_operations() == fds, "the open fds back at the baseline", timeout=60)
        except AssertionError:
            self.assertEqual(daemon.fds_between_operations(), fds)  # says which
            raise
        rss_after = daemon.status("VmRSS")
        print(f"subvold VmRSS: {rss} kB after the warm-up, {rss_after} kB at the end; "
              f"VmHWM {daemon.status('VmHWM')} kB")
        self.assertLess(rss_after, rss + (16384 if SANITIZED else 8192), f"RSS grew from {rss} kB")
        daemon.stop()


if __name__ == "__main__":
    main()
