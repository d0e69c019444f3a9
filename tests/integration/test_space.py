#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What snapshots cost, with quotas off (the scanner's extent map):
Subvolume.WrittenBytes, SnapshotsExclusiveBytes and GetWrittenSince(),
Filesystem.GetExclusiveBytes() for every subset of a subvolume and its two
snapshots, as the ordinary user through the shipped policy.  Expectations
twice: by construction (1 MiB files) and from the trees
as btrfs-progs dumps them; single subvolumes also against `btrfs
filesystem du`, sets against level-1 qgroups."""

import collections
import itertools
import json
import os
import re
import subprocess

from harness import (FS_IFACE, SUBVOLUME_IFACE, BUS_NAME, Daemon, Monitor, as_user, main, run, snapshot, subvolume_create, wait_for,
                     write_random)
from test_scan import (KiB, MiB, SCAN_TIMEOUT, ScanTestCase, extents_by_subvolume, nodesize, settle, subvolume_ids,
                       trees)

INVALID, NOT_FOUND = "org.subvold.Subvold1.Error.InvalidArgument", "org.subvold.Subvold1.Error.NotFound"
UNKNOWN = 2**64 - 1


def expected_figures(extents, family):
    """From {id: {bytenr: bytes}}: the figures of every subset of @family
    and the per-subvolume ones, by the definitions in the XML."""
    owners = collections.defaultdict(set)
    for i, ext in extents.items():
        for b in ext:
            owners[b].add(i)
    size = {b: n for ext in extents.values() for b, n in ext.items()}

    def exclusive(members):
        return sum(size[b] for b, o in owners.items() if o & members and o <= members)

    def written(a, b):
        return sum(n for e, n in extents[a].items() if e not in extents[b])

    subsets = {frozenset(c): exclusive(set(c)) for k in range(len(family) + 1)
               for c in itertools.combinations(family, k)}
    return subsets, exclusive, written


class SpaceTest(ScanTestCase):
    def obj(self, sid):
        return f"{self.fs.object_path}/{sid}"

    def id(self, name):
        return self.id_of(f"{self.mnt}/{name}")

    def exclusive_bytes(self, ids, fs=None):
        return self.bus.call((fs or self.fs).object_path, FS_IFACE, "GetExclusiveBytes", "ao", str(len(ids)),
                             *(self.obj(i) for i in ids))[0]

    def written_since(self, sid, since):
        return self.bus.call(self.obj(sid), SUBVOLUME_IFACE, "GetWrittenSince", "o", self.obj(since))[0]

    def wait_figures(self, want):
        """Waits until the bus shows @want {id: (WrittenBytes,
        SnapshotsExclusiveBytes)} with the scan complete."""
        settle(self.mnt)
        self.refresh()
        last = {}

        def shown():
            got = self.published(self.fs)
            last.update({i: (got[i]["WrittenBytes"], got[i]["SnapshotsExclusiveBytes"]) if i in got else None
                         for i in want})
            return (self.bus.get(self.fs.object_path, FS_IFACE, "ScanProgress") == 1.0 and
                    all(last[i] == w for i, w in want.items()) and set(got) == subvolume_ids(self.mnt))
        try:
            wait_for(shown, "written and snapshots' bytes", timeout=SCAN_TIMEOUT)
        except AssertionError:
            self.fail(f"published {last} != expected {want}")

    def check(self, vol, snaps, others, by_hand):
        """Every figure against the trees; @by_hand: the ones built by
        construction, {subset (tuple of ids): bytes}, and written since
        each snapshot."""
        settle(self.mnt)
        ids = [vol, *snaps, *others]
        extents = extents_by_subvolume(self.fs.device, ids)
        subsets, exclusive, written = expected_figures(extents, [vol, *snaps])
        # @snaps in the order they were taken: the newest last.
        want = {vol: (written(vol, snaps[-1]) if snaps else sum(extents[vol].values()), exclusive(set(snaps)))}
        for i in [*snaps, *others]:
            want[i] = (sum(extents[i].values()), 0)
        self.wait_figures(want)
        for subset, bytes_ in subsets.items():
            with self.subTest(subset=sorted(subset)):
                self.assertEqual(self.exclusive_bytes(sorted(subset)), bytes_)
                self.assertEqual(self.exclusive_bytes(sorted(subset, reverse=True)), bytes_)
        for s in snaps:
            self.assertEqual(self.written_since(vol, s), written(vol, s))
            self.assertEqual(self.written_since(s, vol), written(s, vol))
        for key, bytes_ in by_hand.items():
            if key and key[0] == "written":
                self.assertEqual(self.written_since(vol, key[1]), bytes_, key)
            else:
                self.assertEqual(self.exclusive_bytes(list(key)), bytes_, key)
        # btrfs-progs: what no other file refers to, per subvolume (FIEMAP's
        # SHARED flag), counts the same here as uncompressed, unshared
        # extents are whole.
        for i in ids:
            path = next(p for p in (f"{self.mnt}/{n}" for n in os.listdir(self.mnt)) if self.id_of(p) == i)
            out = run("btrfs", "filesystem", "du", "-s", "--raw", path).decode().splitlines()[1].split()
            self.assertEqual(int(out[1]), self.exclusive_bytes([i]), path)
        return want

    def id_of(self, path):
        return int(run("btrfs", "inspect-internal", "rootid", path))

    def test_snapshots_cost(self):
        self.fs, self.mnt = self.make_fs()
        other_fs, other_mnt = self.make_fs("other")
        subvolume_create(f"{other_mnt}/X")
        x = f"{other_fs.object_path}/{self.id_of(other_mnt + '/X')}"
        m = self.mnt
        subvolume_create(f"{m}/V")
        subvolume_create(f"{m}/W")
        for name in "abcd":
            write_random(f"{m}/V/{name}", MiB)
        # A zstd-compressed file: extents smaller than what they hold.
        open(f"{m}/V/z", "wb").close()
        run("btrfs", "property", "set", f"{m}/V/z", "compression", "zstd")
        with open(f"{m}/V/z", "wb") as f:
            f.write(b"snapshot space " * (MiB // 15))
        settle(m)
        snapshot(f"{m}/V", f"{m}/S1", readonly=True)
        # Between the snapshots: a rewritten, a deleted, a new file and a
        # reflink of c into W.
        write_random(f"{m}/V/a", MiB)
        os.unlink(f"{m}/V/b")
        write_random(f"{m}/V/e", MiB)
        run("cp", "--reflink=always", f"{m}/V/c", f"{m}/W/c")
        settle(m)
        snapshot(f"{m}/V", f"{m}/S2", readonly=True)
        write_random(f"{m}/V/d", MiB)
        write_random(f"{m}/V/f", MiB)
        # Apart: U (read-only) with g, also in W; its snapshot T adds h.
        subvolume_create(f"{m}/U")
        write_random(f"{m}/U/g", MiB)
        run("cp", "--reflink=always", f"{m}/U/g", f"{m}/W/g")
        snapshot(f"{m}/U", f"{m}/T")
        write_random(f"{m}/T/h", MiB)
        run("btrfs", "property", "set", "-ts", f"{m}/U", "ro", "true")
        v, s1, s2, w, u = (self.id(n) for n in ("V", "S1", "S2", "W", "U"))
        self.start()
        monitor = Monitor(self, self.bus)
        self.wait_figures({u: (0, MiB)})

        # Files (1 MiB each, z apart): a, b, d in S1 only or S1 and S2;
        # c in V, S1, S2, W; a' and e in V, S2; d' and f in V only.
        want = self.check(v, [s1, s2], [w], {
            (): 0, (v,): 2 * MiB, (s1,): 2 * MiB, (s2,): 0, (v, s1): 4 * MiB, (v, s2): 4 * MiB,
            (s1, s2): 3 * MiB, ("written", s1): 4 * MiB, ("written", s2): 2 * MiB})
        self.assertEqual(want[v], (2 * MiB, 3 * MiB))
        # V: c, a', e, d', f and z.  (A sync elsewhere may split a 1 MiB
        # file into extents: sums hold whatever the split.)
        z = sum(extents_by_subvolume(self.fs.device, [v])[v].values()) - 5 * MiB
        self.assertGreater(z, 0)
        self.assertLess(z, MiB // 2)  # compressed
        self.assertEqual(self.exclusive_bytes([v, s1, s2]), 7 * MiB + z)
        # Uncompressed: z's eight 128 KiB extents hold 1 MiB; against
        # compsize's "Uncompressed" and "Disk Usage" too.
        got = self.bus.get(self.obj(v), SUBVOLUME_IFACE, "LogicalReferencedBytes")
        self.assertEqual(got, 6 * MiB)
        self.assertEqual(self.bus.get(self.obj(s1), SUBVOLUME_IFACE, "LogicalReferencedBytes"), 5 * MiB)
        total = next(line.split() for line in run("compsize", "-b", f"{m}/V").decode().splitlines()
                     if line.startswith("TOTAL"))
        self.assertEqual((int(total[3]), int(total[2])),
                         (got, self.bus.get(self.obj(v), SUBVOLUME_IFACE, "ReferencedBytes")))

        # A further change: e only in S2 now, c no longer in W, and n new
        # in V (written since S2, the newest snapshot still).
        os.unlink(f"{m}/V/e")
        os.unlink(f"{m}/W/c")
        write_random(f"{m}/V/n", MiB)
        want = self.check(v, [s1, s2], [w], {(s2,): MiB, (s1, s2): 4 * MiB, (v, s1, s2): 9 * MiB + z})
        self.assertEqual(want[v], (3 * MiB, 4 * MiB))

        # S1 deleted: a and b are gone, S2 is the only snapshot.
        run("btrfs", "subvolume", "delete", f"{m}/S1")
        run("btrfs", "subvolume", "sync", m)
        want = self.check(v, [s2], [w], {(s2,): 2 * MiB, (v, s2): 7 * MiB + z, ("written", s2): 3 * MiB})
        self.assertEqual(want[v], (3 * MiB, 2 * MiB))

        # U is read-only and shares all it has with W: deleting its
        # snapshot T changes none of its own figures but these two, which
        # the change signal must carry.
        self.assertEqual(self.bus.get(self.obj(u), SUBVOLUME_IFACE, "ExclusiveBytes"), 0)
        mark = monitor.mark()
        run("btrfs", "subvolume", "delete", f"{m}/T")
        run("btrfs", "subvolume", "sync", m)
        self.wait_figures({u: (MiB, 0)})
        self.assertEqual(self.bus.get(self.obj(u), SUBVOLUME_IFACE, "ExclusiveBytes"), 0)
        monitor.wait(f"{self.obj(u)}:", "PropertiesChanged", f"'WrittenBytes': <uint64 {MiB}>",
                     "'SnapshotsExclusiveBytes': <uint64 0>", since=mark)

        # Errors, as the ordinary user.
        self.assertIn(x, self.bus.managed_objects())
        err = lambda path, iface, method, *args: self.bus.error_name(path, iface, method, *args)
        self.assertEqual(err(self.obj(v), SUBVOLUME_IFACE, "GetWrittenSince", f"'{x}'"), INVALID)
        self.assertEqual(err(self.obj(v), SUBVOLUME_IFACE, "GetWrittenSince", f"'{self.fs.object_path}'"), INVALID)
        self.assertEqual(err(self.obj(v), SUBVOLUME_IFACE, "GetWrittenSince", f"'{self.obj(s1)}'"), NOT_FOUND)
        self.assertEqual(err(self.fs.object_path, FS_IFACE, "GetExclusiveBytes", f"['{self.obj(v)}', '{x}']"),
                         INVALID)
        self.assertEqual(err(self.fs.object_path, FS_IFACE, "GetExclusiveBytes",
                             f"['{self.obj(v)}', '{self.obj(s2)}', '{self.obj(v)}']"), INVALID)
        self.assertEqual(err(self.fs.object_path, FS_IFACE, "GetExclusiveBytes", f"['{self.obj(s1)}']"), NOT_FOUND)
        self.assertEqual(err(self.fs.object_path, FS_IFACE, "GetExclusiveBytes", f"['{self.fs.object_path}']"),
                         INVALID)
        self.assertEqual(self.exclusive_bytes([]), 0)
        # 100,000 objects are taken (here: the same one, refused as a
        # duplicate), one more is too many.
        for count, message in ((100000, "twice"), (100001, "More than 100000")):
            out = self.bus.run("python3", "-c", LARGE_SET_CALL, BUS_NAME, self.fs.object_path, self.obj(v),
                               str(count), check=True).stdout.decode()
            self.assertEqual(out.split(None, 1)[0], INVALID, out)
            self.assertIn(message, out)

        # btrfs-progs for sets: a level-1 qgroup holding exactly each set,
        # on this filesystem with quotas on (subvold stopped first: it would
        # read qgroups then).  A qgroup counts the same data extents plus
        # tree blocks: its exclusive is ours plus a nodesize for each block
        # that only trees of the set hold (dump-tree says which).
        sets = [(v,), (s2,), (w,), (v, s2), (v, w), (s2, w), (v, s2, w), (u, w), (v, s2, u, w)]
        ours = {members: self.exclusive_bytes(list(members)) for members in sets}
        self.daemon.stop()
        run("btrfs", "quota", "enable", m)
        for n, members in enumerate(sets, 1):
            run("btrfs", "qgroup", "create", f"1/{n}", m)
            for i in members:
                run("btrfs", "qgroup", "assign", "--no-rescan", f"0/{i}", f"1/{n}", m)
        run("btrfs", "quota", "rescan", "-w", m)
        settle(m)
        parsed = trees(self.fs.device, subvolume_ids(m))
        node = nodesize(self.fs.device)
        block_owners = collections.defaultdict(set)
        for i, t in parsed.items():
            for b in t.blocks:
                block_owners[b].add(i)
        out = run("btrfs", "qgroup", "show", "--raw", m).decode()
        level1 = {int(f[0][2:]): int(f[2]) for f in (line.split() for line in out.splitlines())
                  if f and f[0].startswith("1/")}
        for n, members in enumerate(sets, 1):
            with self.subTest(qgroup=members):
                blocks = sum(1 for o in block_owners.values() if o <= set(members))
                self.assertEqual(level1[n] - ours[members], node * blocks)


    def test_exclusive_bytes_in_steps(self):
        """GetExclusiveBytes works a bounded number of extents per event
        loop iteration (here 7, SUBVOLD_TEST_SPACE_STEP_EXTENTS), and the
        test lets the steps run (SUBVOLD_TEST_SPACE_PAUSE_FD: one per
        byte, all once closed): while one waits, other calls are answered;
        one connection has at most 4 calls waiting, the next is refused
        with LimitsExceeded; answered in many steps, the figure is exact."""
        self.fs, self.mnt = self.make_fs()
        m = self.mnt
        subvolume_create(f"{m}/V")
        for i in range(STEP_FILES):
            write_random(f"{m}/V/{i}", 8 * KiB)  # not inline: one extent each
        settle(m)
        snapshot(f"{m}/V", f"{m}/S1", readonly=True)
        snapshot(f"{m}/V", f"{m}/S2")
        settle(m)
        members = [self.obj(self.id(n)) for n in ("V", "S1", "S2")]
        truth = STEP_FILES * 8 * KiB  # what deleting all three frees, by construction
        pause_read, pause = os.pipe()
        self.stack.callback(lambda: pause >= 0 and os.close(pause))
        self.daemon = Daemon(self, self.bus, "-v", pass_fds=(pause_read,),
                             env={"SUBVOLD_TEST_SPACE_STEP_EXTENTS": "7", "SUBVOLD_TEST_SPACE_PAUSE_FD": str(pause_read)})
        os.close(pause_read)
        wait_for(lambda: self.bus.get(self.fs.object_path, FS_IFACE, "ScanProgress") == 1.0, "the first scan",
                 timeout=SCAN_TIMEOUT)
        client = subprocess.Popen(["python3", "-c", STEPPED_CALLS, BUS_NAME, self.fs.object_path, *members],
                                  env=self.bus.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  **as_user(self.bus.client))
        self.stack.callback(lambda: client.poll() is None and (client.kill(), client.wait()))

        def client_says(line):
            client.stdin.write(line + "\n")
            client.stdin.flush()
            return json.loads(client.stdout.readline())

        # Five on one connection while no step may run: the fifth is
        # refused at once, the others wait; a Get is answered meanwhile,
        # and one step lets none of them out.
        self.assertEqual(client_says("exclusive 5"), ["exclusive", "org.freedesktop.DBus.Error.LimitsExceeded"])
        self.assertEqual(client_says("get 1"), ["get", 1.0])
        os.write(pause, b"x")
        self.assertEqual(client_says("get 1"), ["get", 1.0])
        os.close(pause)
        pause = -1
        for _ in range(4):
            self.assertEqual(client_says("wait"), ["exclusive", truth])
        steps = [int(n) for n in re.findall(r"GetExclusiveBytes of 3 subvolume\(s\) answered in (\d+) step",
                                             self.daemon.log())]
        self.assertEqual(len(steps), 4, self.daemon.log())
        self.assertGreater(min(steps), 3 * STEP_FILES // 7, "not in steps of 7 extents")
        self.assertTrue(self.daemon.alive())


STEP_FILES = 300

# A client on one connection, told on stdin what to do; it prints one
# JSON line [kind, value or error name] per reply: "exclusive N" sends N
# GetExclusiveBytes(members) and prints the first reply, "get 1" a
# Get(ScanProgress) and its reply, "wait" the next reply that comes.
STEPPED_CALLS = """
import json, sys
import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib
name, fs, *members = sys.argv[1:]
bus = Gio.bus_get_sync(Gio.BusType.SYSTEM)
replies = []

def answered(kind):
    def done(conn, res):
        try:
            replies.append([kind, conn.call_finish(res).unpack()[0]])
        except GLib.Error as e:
            replies.append([kind, Gio.DBusError.get_remote_error(e)])
    return done

def next_reply():
    while not replies:
        GLib.MainContext.default().iteration(True)
    print(json.dumps(replies.pop(0)), flush=True)

for line in sys.stdin:
    what, *n = line.split()
    if what == "exclusive":
        for _ in range(int(n[0])):
            bus.call(name, fs, "org.subvold.Subvold1.Filesystem", "GetExclusiveBytes",
                     GLib.Variant("(ao)", (members,)), GLib.VariantType("(t)"), Gio.DBusCallFlags.NONE, 120000,
                     None, answered("exclusive"))
    elif what == "get":
        bus.call(name, fs, "org.freedesktop.DBus.Properties", "Get",
                 GLib.Variant("(ss)", ("org.subvold.Subvold1.Filesystem", "ScanProgress")), None,
                 Gio.DBusCallFlags.NONE, 120000, None, answered("get"))
    next_reply()
"""

LARGE_SET_CALL = """
import sys, dbus
name, fs, obj, count = sys.argv[1:]
proxy = dbus.SystemBus().get_object(name, fs)
try:
    proxy.GetExclusiveBytes([obj] * int(count), dbus_interface="org.subvold.Subvold1.Filesystem", timeout=120)
    print("ok")
except dbus.DBusException as e:
    print(e.get_dbus_name(), e.get_dbus_message())
"""


if __name__ == "__main__":
    main()
