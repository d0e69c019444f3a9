#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Replies that grow with the model: 100,000 subvolumes on one filesystem,
and subvolumes with paths of a few KiB on a bus that carries at most 1 MiB.
No reply may be larger than the bus accepts (dbus-daemon would disconnect
subvold for it): GetManagedObjects is refused with LimitsExceeded when it
could be, GetSubvolumes pages reach every subvolume, and subvolctl reads
through them.  Ground truth from btrfs-progs and statvfs(); the clients run
as an unprivileged user, each a separate implementation (GDBus, sd-bus)."""

import json
import os
import time

from harness import (ROOT, BUS_NAME, FS_IFACE, GDBUS_CLIENT, MANAGER_IFACE, MANAGER_PATH, Btrfs, Bus, Daemon, TestCase,
                     btrfs_subvolume_list, display_path, main, run, wait_for)
from test_clients import parse_metrics

SUBVOLCTL = os.environ.get("SUBVOLCTL", "")
MKFIXTURE = os.environ.get("SUBVOLD_MKFIXTURE", "")
LIMITS_EXCEEDED = "org.freedesktop.DBus.Error.LimitsExceeded"
DEFAULT_MAX_MESSAGE_SIZE = 16 << 20


def as_user(bus, *args):
    """Runs a client on @bus as the bus's ordinary user; returns its stdout."""
    return bus.run(*args, check=True).stdout.decode()


def timed(what, f, *args):
    """Calls f(*args) and prints how long it took; nothing asserts on it."""
    start = time.monotonic()
    result = f(*args)
    print(f"time: {what}: {time.monotonic() - start:.2f} s", flush=True)
    return result


def read_answer(out):
    """gdbus-client's first line: ("ok", objects, bytes) or ("error", name, message)."""
    kind, a, b = out.split("\n", 1)[0].split(" ", 2)
    return (kind, int(a), int(b)) if kind == "ok" else (kind, a, b)


def read_pages(out):
    """gdbus-client pages: [(bytes, count, next_id)] and [(id, path)] in the order received."""
    pages, subvolumes = [], []
    for line in out.splitlines():
        kind, *fields = line.split(" ")
        if kind == "page":
            pages.append(tuple(int(f) for f in fields))
        elif kind == "subvolume":
            subvolumes.append((int(fields[0]), bytes.fromhex(fields[1])))
        else:
            raise AssertionError(f"GetSubvolumes: {line}")
    return pages, subvolumes


class BusTestCase(TestCase):
    """A test with self.bus, self.daemon and self.fs, its one filesystem."""

    def tearDown(self):
        if not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def name_owner(self):
        out = self.bus.busctl("--json=short", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                              "org.freedesktop.DBus", "GetNameOwner", "s", BUS_NAME)[1]
        return json.loads(out)["data"][0]

    def assert_on_bus(self, owner):
        """subvold runs, still on the connection it had (@owner), and answers."""
        self.assertTrue(self.daemon.alive(), "subvold exited:\n" + self.daemon.log())
        self.assertEqual(self.name_owner(), owner, "subvold lost its bus connection")
        self.assertTrue(self.bus.get(MANAGER_PATH, MANAGER_IFACE, "Version"))

    def page_through(self, count, limit):
        """Every subvolume through GetSubvolumes, @count a page: {id: path}
        in id order, each once, and every page within @limit bytes.
        Returns the number of pages."""
        pages, subvolumes = read_pages(as_user(self.bus, GDBUS_CLIENT, "pages", self.fs.object_path, str(count)))
        self.assertEqual([i for i, _ in subvolumes], sorted({i for i, _ in subvolumes}))
        self.assertEqual(dict(subvolumes), self.expected_paths())
        self.assertEqual(pages[-1][2], 0)
        for size, n, _ in pages:
            self.assertLessEqual(size, limit)
            self.assertGreater(n, 0)
        return len(pages)

    def expected_paths(self):
        return {5: b"/"} | {i: b"/" + s["path"] for i, s in btrfs_subvolume_list(self.mnt).items()}


class HundredThousandTest(BusTestCase):
    """100,000 subvolumes on one filesystem, 1,000 of them read-only
    snapshots: GetManagedObjects's reply would be some 100 MB."""

    N = 100_000
    SNAPSHOTS = 1_000

    def setUp(self):
        super().setUp()
        # 4 KiB tree blocks, metadata once: an eighth of the default's
        # writes, and no disk flush per commit (a fixture needs none).
        self.fs = Btrfs(self, "big", size="8G", mkfs_args=("--nodesize", "4096", "--metadata", "single"))
        self.mnt = self.fs.mount(self.path("mnt"), "nobarrier")
        timed(f"mkfixture, {self.N} subvolumes", run, MKFIXTURE, "--empty", f"--snapshots={self.SNAPSHOTS}",
              self.mnt, str(self.N))
        self.bus = Bus(self)
        self.daemon = timed("subvold, start to READY=1", Daemon, self, self.bus)
        # Until the first scan is published, subvold is busy signalling
        # each subvolume's new usage and calls wait (20 s once under ASan).
        timed("subvold, READY=1 to its first scan published", wait_for, self.scanned, "the first scan", 600)

    def scanned(self):
        out = self.bus.busctl("--timeout=600", "--json=short", "get-property", BUS_NAME, self.fs.object_path,
                              FS_IFACE, "ScanProgress")[1]
        return json.loads(out)["data"] == 1.0

    def test_hundred_thousand_subvolumes(self):
        truth = timed("btrfs subvolume list", btrfs_subvolume_list, self.mnt)
        self.assertEqual(len(truth), self.N)
        read_only = {int(line.split()[1]) for line in run("btrfs", "subvolume", "list", "-r", self.mnt).splitlines()}
        self.assertEqual(len(read_only), self.SNAPSHOTS)
        owner = self.name_owner()

        kind, name, message = timed("GetManagedObjects (GDBus)", lambda: read_answer(
            as_user(self.bus, GDBUS_CLIENT, "managed-objects")))
        self.assertEqual((kind, name), ("error", LIMITS_EXCEEDED), message)
        self.assertIn("GetSubvolumes", message, "the error must name the alternative")
        self.assert_on_bus(owner)

        # Asked for everything at once, subvold shortens each page to what fits.
        pages = timed("GetSubvolumes, every subvolume (GDBus)", self.page_through, self.N + 1,
                      DEFAULT_MAX_MESSAGE_SIZE)
        self.assertGreater(pages, 1)
        self.assert_on_bus(owner)

        paths = {5: "/"} | {i: "/" + display_path(s["path"]) for i, s in truth.items()}
        snapshots = {i for i, s in truth.items() if s["parent_uuid"]}
        rows = json.loads(timed("subvolctl --json list", as_user, self.bus, SUBVOLCTL, "--json", "list"))
        self.assertEqual({r["id"]: (r["filesystem"], r["path"], r["snapshot"], r["read_only"]) for r in rows},
                         {i: (self.fs.uuid, p, i in snapshots, i in read_only) for i, p in paths.items()})

        samples = parse_metrics(timed("subvolctl metrics", as_user, self.bus, SUBVOLCTL, "metrics"))
        info = {(int(d["id"]), d["path"], d["snapshot"], d["read_only"])
                for d in (dict(l) for name, l in samples if name == "subvold_subvolume_info")}
        self.assertEqual(info, {(i, p, str(i in snapshots).lower(), str(i in read_only).lower())
                                for i, p in paths.items()})
        st = os.statvfs(self.mnt)
        size = {dict(l)["uuid"]: v for (name, l), v in samples.items() if name == "subvold_filesystem_size_bytes"}
        self.assertEqual(size, {self.fs.uuid: st.f_blocks * st.f_bsize})

        df = json.loads(timed("subvolctl --json df --all", as_user, self.bus, SUBVOLCTL, "--json", "df", "--all"))
        self.assertEqual({int(r["object"].rsplit("/", 1)[1]): r["path"] for r in df}, paths)
        for r in df:  # no quota limits: the filesystem's available space, and reachable under the mount
            self.assertEqual(r["available"], st.f_bavail * st.f_bsize)
            self.assertEqual(r["mounted_on"], self.mnt + ("" if r["path"] == "/" else r["path"]))
            self.assertEqual(r["mounted"], r["path"] == "/")
        self.assert_on_bus(owner)


def long_name(prefix, multibyte):
    """255 bytes: @prefix, then @multibyte (UTF-8) and bytes that are not
    UTF-8 (DisplayPath writes each as four characters), over and over."""
    return (prefix + (multibyte.encode() + b"\xff\xfe\x80\xc0" * 4) * 20)[:255]


class SizeBoundTest(BusTestCase):
    """On a bus that carries at most 1 MiB, and subvold told so, subvolumes
    with paths of a few KiB, mostly bytes that DisplayPath escapes, come a
    batch at a time.  After each, GetManagedObjects is a whole reply or
    LimitsExceeded, never a disconnect: what proves that subvold's bound on
    a reply's size is an upper bound is that dbus-daemon never throws it off
    the bus."""

    LIMIT = 1 << 20
    BATCH = 4

    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "long", size="512M")
        self.mnt = self.fs.mount(self.path("mnt"))
        self.bus = Bus(self, limits={"max_message_size": self.LIMIT})
        self.daemon = Daemon(self, self.bus, f"--max-message-size={self.LIMIT}")

    def test_replies_fit_or_are_refused(self):
        deep = os.fsencode(self.mnt)
        for level in range(12):
            deep = os.path.join(deep, long_name(b"%02d" % level, "€"))
        os.makedirs(deep)
        owner = self.name_owner()
        answers, multipage, made = [], False, 0
        while answers.count("refused") < 3:
            self.assertLess(made, 200, f"GetManagedObjects never refused: {answers}")
            for _ in range(self.BATCH):
                run(b"btrfs", b"subvolume", b"create", os.path.join(deep, long_name(b"%04d" % made, "é😀")))
                made += 1
            self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)

            answer = read_answer(as_user(self.bus, GDBUS_CLIENT, "managed-objects"))
            if answer[0] == "ok":
                self.assertEqual(answer[1], 1 + 1 + made, "the filesystem, its top level and each subvolume")
                self.assertLessEqual(answer[2], self.LIMIT)
                answers.append(f"reply({answer[2]} bytes)")
            else:
                self.assertEqual(answer[:2], ("error", LIMITS_EXCEEDED), answer)
                answers.append("refused")
            multipage |= self.page_through(1000, self.LIMIT) > 1
            self.assert_on_bus(owner)
        self.assertTrue(answers[0].startswith("reply"), answers)
        self.assertTrue(multipage, "subvold never had to shorten a page")
        rows = json.loads(as_user(self.bus, SUBVOLCTL, "--json", "list"))
        self.assertEqual({r["id"]: r["display_path"] for r in rows},
                         {i: display_path(p) for i, p in self.expected_paths().items()})
        print(f"{made} subvolumes, GetManagedObjects answers: {' '.join(answers)}", flush=True)


if __name__ == "__main__":
    main()
