#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Per-subvolume usage that subvold measures itself when btrfs quotas are
off (UsageSource "scan"), against the sizes the fixtures wrote and against
the subvolume trees as btrfs-progs dumps them (`btrfs inspect-internal
dump-tree`); once against qgroups, enabled after the scan."""

import collections
import ctypes
import errno
import fcntl
import os
import platform
import re
import itertools
import struct
import subprocess
import tempfile
import threading
import time

from harness import (ROOT, FS_IFACE, MANAGER_IFACE, MANAGER_PATH, SUBVOLD, SUBVOLUME_IFACE, Btrfs, Bus, Daemon, TestCase,
                     btrfs_rootid, btrfs_subvolume_list, main, run, snapshot, subvolume_create, wait_for,
                     write_random)

KiB = 1 << 10
MiB = 1 << 20
SCAN_TIMEOUT = 90  # generous: a slow machine must fail nothing; nothing here measures time

Usage = collections.namedtuple("Usage", "inodes referenced exclusive")
SYS_ioprio_get = {"x86_64": 252, "aarch64": 31, "i686": 290}[platform.machine()]
IOPRIO_CLASS_BE, IOPRIO_CLASS_IDLE = 2, 3
FICLONERANGE, FS_IOC_FIEMAP = 0x4020940D, 0xC020660B
SANITIZED = "libasan" in run("ldd", SUBVOLD).decode()


def pwrite(path, offset, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def settle(mountpoint):
    """Commits everything, so that extents are allocated and on disk."""
    os.sync()
    run("btrfs", "filesystem", "sync", mountpoint)


def double_by_cloning(path, times):
    """Clones the file onto its own end @times times (FICLONERANGE of
    [0, len) to [len, 2 len)): each doubles its file extent items, all on
    the extents it had."""
    fd = os.open(path, os.O_RDWR)
    try:
        for _ in range(times):
            length = os.fstat(fd).st_size
            fcntl.ioctl(fd, FICLONERANGE, struct.pack("qQQQ", fd, 0, length, length))
    finally:
        os.close(fd)


def preallocate(path, count):
    """@count preallocated extents of 4 KiB, each its own (holes between)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in range(count):
            os.posix_fallocate(fd, i * 8 * KiB, 4 * KiB)
    finally:
        os.close(fd)


def file_extent_count(path):
    """The file's extents as the kernel maps them (FIEMAP): one per file
    extent item here, the same disk extent counting each time."""
    with open(path, "rb") as f:
        buf = bytearray(struct.pack("QQIIII", 0, 2**64 - 1, 0, 0, 0, 0))
        fcntl.ioctl(f.fileno(), FS_IOC_FIEMAP, buf)
    return struct.unpack("QQIIII", buf)[3]


def mountinfo_id(point):
    """The id /proc/self/mountinfo gives the mount on @point (the top one)."""
    with open("/proc/self/mountinfo") as f:
        ids = [int(line.split()[0]) for line in f if line.split()[4] == point]
    return ids[-1] if ids else None


def _mount_syscall(source, point, fstype=b"btrfs"):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(os.fsencode(source), os.fsencode(point), fstype, 0, None) < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"cannot mount {source} on {point}: {os.strerror(e)}")


def _umount_syscall(point):
    """Unmounts the top mount on @point; False if there is none."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(point), 0) < 0:
        e = ctypes.get_errno()
        if e == errno.EINVAL:
            return False
        raise OSError(e, f"cannot unmount {point}: {os.strerror(e)}")
    return True


def replace_mount(test, point, device, mount_id):
    """Unmounts @point and mounts the btrfs on @device there with id
    @mount_id (mountinfo's).  The kernel hands out the lowest free id, and
    mounting a btrfs takes two: its top level's internal mount takes the
    lowest (and frees it again), the mount made takes the next.  So
    exactly one id below @mount_id must be free.  Ids are freed and taken
    by anyone on the machine (subvold's clones of mounts too): while the
    btrfs comes out below @mount_id, more than one was free, and a tmpfs
    mount elsewhere (a filler, until the test ends) takes one; while it
    comes out above, none was (or @mount_id is taken for a moment), and a
    filler goes if there is one."""
    fillers = test.__dict__.setdefault("id_fillers", [])
    got_ids = []

    def attempt():
        while True:
            _mount_syscall(device, point)
            got = mountinfo_id(point)
            got_ids.append(got)
            if got == mount_id:
                return True
            _umount_syscall(point)
            if got > mount_id:
                below = [f for f in fillers if mountinfo_id(f) < mount_id]
                if not below:
                    return False  # @mount_id is taken: wait
                fillers.remove(below[-1])
                _umount_syscall(below[-1])
                continue
            filler = tempfile.mkdtemp(prefix="id-filler-", dir=test.tmp)
            _mount_syscall("tmpfs", filler, b"tmpfs")
            test.stack.callback(_umount_syscall, filler)
            if mountinfo_id(filler) >= mount_id:  # the free ids went meanwhile: this one is no filler
                _umount_syscall(filler)
                return False
            fillers.append(filler)

    _umount_syscall(point)
    try:
        wait_for(attempt, f"mount id {mount_id} for {device} on {point}", timeout=SCAN_TIMEOUT)
    except AssertionError as e:
        raise AssertionError(f"{e} (ids got: {got_ids[-20:]}); mount id {mount_id} is held by: "
                             f"{mount_id_holders(mount_id) or 'nothing that shows'}") from None


def mount_id_holders(mount_id):
    """Who holds mount id @mount_id: a mount in some process's mount
    namespace, or an fd (an open_tree() clone is in none)."""
    holders = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                who = f"{pid} ({f.read().strip()})"
            with open(f"/proc/{pid}/mountinfo") as f:
                holders.update(f"{who}: mount on {line.split()[4]}" for line in f if line.split()[0] == str(mount_id))
            for fd in os.listdir(f"/proc/{pid}/fdinfo"):
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    if f"mnt_id:\t{mount_id}\n" in f.read():
                        holders.add(f"{who}: fd {fd} -> {os.readlink(f'/proc/{pid}/fd/{fd}')}")
        except OSError:
            continue
    return "; ".join(sorted(holders))


def restore_mount(point, device):
    """Unmounts @point and mounts the btrfs on @device there again."""
    _umount_syscall(point)
    _mount_syscall(device, point)


def device_free(device):
    """Whether nothing claims the block device: it opens O_EXCL."""
    try:
        os.close(os.open(device, os.O_RDONLY | os.O_EXCL))
        return True
    except OSError:
        return False


_PAUSED_RE = re.compile(r"^<7>Paused before subvolume (\d+) of (\S+) \(through (.*), mount (\d+)\)\.$", re.M)
_PAUSE_OVER_RE = re.compile(r"^<7>Pause over: (.*)\.$", re.M)


class ScanPause:
    """subvold's test-only pause (SUBVOLD_TEST_SCAN_PAUSE_FD): its scanner
    reads one byte from a pipe before each tree, of every btrfs it sees
    (other tests' too), and logs where it waits and when it goes on.
    advance() lets trees through one by one until the scanner waits before
    one that is wanted; release() lets it run freely (EOF)."""

    def __init__(self, test):
        self.read_end, self.write_end = os.pipe()
        self.sent = 0
        test.stack.callback(self.release)
        test.stack.callback(self._close_read_end)

    def daemon_args(self):
        return dict(env={"SUBVOLD_TEST_SCAN_PAUSE_FD": str(self.read_end)}, pass_fds=(self.read_end,))

    def _close_read_end(self):
        if self.read_end >= 0:
            os.close(self.read_end)
            self.read_end = -1

    def waiting(self, daemon):
        """Every pause so far as (id, uuid, mount point, mount id), when the scanner
        waits in the last one and has read every byte sent; else None."""
        log = daemon.log()
        paused = [(int(m[1]), m[2], m[3], int(m[4])) for m in _PAUSED_RE.finditer(log)]
        over = _PAUSE_OVER_RE.findall(log)
        if len(paused) > len(over) and over.count("next tree") == self.sent:
            return paused
        return None

    def advance(self, daemon, want, what):
        """Lets trees through until the scanner waits and want(pauses so
        far) is true; returns the pauses so far (the last: where it waits)."""
        found = []

        def step():
            paused = self.waiting(daemon)
            if paused is None:
                return False
            if want(paused):
                found.append(paused)
                return True
            self.let_one_through()
            return False

        wait_for(step, what, timeout=SCAN_TIMEOUT)
        return found[0]

    def let_one_through(self):
        """Lets the scanner read the tree it waits before (see waiting())."""
        os.write(self.write_end, b"x")
        self.sent += 1

    def step(self, daemon):
        """Lets one tree through, once the scanner waits, and waits for it
        to pause again."""
        n = len(self.advance(daemon, lambda paused: True, "the scanner to pause"))
        self.advance(daemon, lambda paused: len(paused) > n, "the scanner to read a tree and pause again")

    def release(self):
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1


# ---------------------------------------------------------------- ground truth: dump-tree

# btrfs-progs (checked with v6.2) prints each leaf item as a line
#   "\titem 16 key (257 EXTENT_DATA 0) itemoff 15456 itemsize 53"
# followed by its fields on lines indented by two tabs.  A file extent is
#   "\t\tgeneration 7 type 1 (regular)"
#   "\t\textent data disk byte 14680064 nr 1048576"        (disk_bytenr, disk_num_bytes)
#   "\t\textent data offset 0 nr 1048576 ram 1048576"
#   "\t\textent compression 0 (none)"
# or, preallocated, "type 2 (prealloc)" and "\t\tprealloc data disk byte B nr N",
# or inline, "type 0 (inline)" and "\t\tinline extent data size 100 ram_bytes 100 ...".
# Holes (without the no-holes feature) are regular extents at disk byte 0.
# Nodes list their children as "\tkey (...) block B gen G" lines, which are no items.
_ITEM_RE = re.compile(r"^\titem \d+ key \((\S+) (\S+) (\d+)\) itemoff \d+ itemsize \d+\n((?:\t\t.*\n)*)", re.M)
_LEAF_RE = re.compile(r"^leaf (\d+) items (\d+) ", re.M)
_NODE_RE = re.compile(r"^node (\d+) level \d+ items \d+ ", re.M)
_EXTENT_TYPE_RE = re.compile(r"^\t\tgeneration \d+ type (\d+) \(", re.M)
_DISK_RE = re.compile(r"^\t\t(?:extent|prealloc) data disk byte (\d+) nr (\d+)$", re.M)
EXTENT_INLINE, EXTENT_REGULAR, EXTENT_PREALLOC = 0, 1, 2

Tree = collections.namedtuple("Tree", "inodes extents inline blocks")


def dump_tree(device, tree_id):
    # The block device's page cache may hold tree blocks from an earlier
    # dump that btrfs has since rewritten (btrfs writes around that cache).
    run("blockdev", "--flushbufs", device)
    return run("btrfs", "inspect-internal", "dump-tree", "-t", str(tree_id), device).decode(errors="replace")


def parse_tree(text):
    """A subvolume tree's INODE_ITEM count, its data extents {disk_bytenr:
    disk_num_bytes} (regular and preallocated, holes left out), its number
    of inline extents and the bytenrs of its tree blocks."""
    inodes = 0
    extents = {}
    inline = 0
    items = 0
    for m in _ITEM_RE.finditer(text):
        items += 1
        item_type, body = m[2], m[4]
        if item_type == "INODE_ITEM":
            inodes += 1
        elif item_type == "EXTENT_DATA":
            t = _EXTENT_TYPE_RE.search(body)
            if not t:
                raise AssertionError(f"unparsed file extent item: {m[0]!r}")
            extent_type = int(t[1])
            if extent_type == EXTENT_INLINE:
                inline += 1
            elif extent_type in (EXTENT_REGULAR, EXTENT_PREALLOC):
                d = _DISK_RE.search(body)
                if not d:
                    raise AssertionError(f"unparsed file extent item: {m[0]!r}")
                bytenr, size = int(d[1]), int(d[2])
                if bytenr == 0:
                    continue  # a hole
                if extents.setdefault(bytenr, size) != size:
                    raise AssertionError(f"extent {bytenr} with two sizes: {extents[bytenr]}, {size}")
            else:
                raise AssertionError(f"unknown file extent type {extent_type}: {m[0]!r}")
    leaves = {int(b): int(n) for b, n in _LEAF_RE.findall(text)}
    # Every item of every leaf went through the parser above.
    if items != sum(leaves.values()) or not leaves:
        raise AssertionError(f"parsed {items} items of {sum(leaves.values())} in {len(leaves)} leaves")
    return Tree(inodes, extents, inline, set(leaves) | {int(b) for b in _NODE_RE.findall(text)})


def trees(device, ids):
    return {i: parse_tree(dump_tree(device, i)) for i in ids}


def extents_by_subvolume(device, ids):
    """{subvolume id: {disk_bytenr: disk_num_bytes}} of its data extents."""
    return {i: t.extents for i, t in trees(device, ids).items()}


def inode_count(device, subvolume_id):
    return parse_tree(dump_tree(device, subvolume_id)).inodes


def usage_from_trees(parsed):
    """The contract, computed from the trees: referenced is the on-disk size
    of every distinct data extent a subvolume references, once each and
    whole even when only part of it is still in use; exclusive, of those no
    other subvolume references."""
    owners = collections.Counter(b for t in parsed.values() for b in t.extents)
    return {i: Usage(t.inodes, sum(t.extents.values()), sum(n for b, n in t.extents.items() if owners[b] == 1))
            for i, t in parsed.items()}


def subvolume_ids(mountpoint):
    return {5, *btrfs_subvolume_list(mountpoint)}


def fds_on(pid, fsids):
    """The fds of @pid on a file system whose statfs() f_fsid is in @fsids:
    through the /proc magic links, whatever mount (or clone) they are on."""
    on = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.statvfs(f"/proc/{pid}/fd/{fd}").f_fsid in fsids:
                on.append(fd)
        except OSError:
            pass  # closed in between
    return on


def nodesize(device):
    out = run("btrfs", "inspect-internal", "dump-super", device).decode()
    return int(re.search(r"^nodesize\s+(\d+)", out, re.M)[1])


def qgroup_show(mountpoint):
    """Level-0 qgroups as btrfs-progs reports them: id -> (rfer, excl)."""
    out = run("btrfs", "qgroup", "show", "--raw", mountpoint).decode()
    result = {}
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0].startswith("0/"):
            result[int(fields[0][2:])] = (int(fields[1]), int(fields[2]))
    return result


# ---------------------------------------------------------------- the tests

class ScanTestCase(TestCase):
    """What the scanner tests share: fresh filesystems, a daemon, and the
    usage the bus publishes compared with dump-tree's."""

    def setUp(self):
        super().setUp()
        self.bus = Bus(self)
        self.mountpoints = []

    def tearDown(self):
        if hasattr(self, "daemon") and not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def make_fs(self, name="fs", *options, size="512M"):
        """A fresh btrfs (quotas off, as mkfs leaves them), mounted."""
        fs = Btrfs(self, name, size=size)
        mnt = fs.mount(self.path(name), *options)
        self.mountpoints.append(mnt)
        return fs, mnt

    def start(self, *args, pause=None):
        # The fixture is on disk before subvold first looks: the first scan
        # sees allocated extents, not data still waiting for writeback.
        for mnt in self.mountpoints:
            if os.path.ismount(mnt):
                settle(mnt)
        self.daemon = Daemon(self, self.bus, *args, **(pause.daemon_args() if pause else {}))
        if pause:
            pause._close_read_end()
        return self.daemon

    def refresh(self):
        self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)

    def published(self, fs):
        """{subvolume id: Subvolume properties} of @fs as the bus shows them."""
        prefix = fs.object_path + "/"
        return {v[SUBVOLUME_IFACE]["Id"]: v[SUBVOLUME_IFACE] for p, v in self.bus.managed_objects().items()
                if p.startswith(prefix) and SUBVOLUME_IFACE in v}

    def assert_scan_matches(self, fs, mnt):
        """Waits until subvold publishes, for every subvolume of @fs, the
        usage computed from dump-tree, measured by its scanner; then checks
        ScanProgress.  Returns {id: Usage}."""
        settle(mnt)
        expected = usage_from_trees(trees(fs.device, subvolume_ids(mnt)))
        self.refresh()
        last = []

        def matches():
            got = self.published(fs)
            diff = []
            if set(got) != set(expected):
                diff.append(f"ids {sorted(got)} != {sorted(expected)}")
            for i in sorted(set(got) & set(expected)):
                p = got[i]
                usage = Usage(p["Inodes"], p["ReferencedBytes"], p["ExclusiveBytes"])
                if p["UsageSource"] != "scan" or usage != expected[i] or not p["UsageConsistent"]:
                    diff.append(f"{i}: {p['UsageSource']} {tuple(usage)} consistent {p['UsageConsistent']} "
                                f"!= scan {tuple(expected[i])}")
            last[:] = diff
            return not diff

        try:
            wait_for(matches, "scanned usage", timeout=SCAN_TIMEOUT)
        except AssertionError:
            self.fail(f"published usage differs from dump-tree: {'; '.join(last[:4])}"
                      + (f" (+{len(last) - 4} more)" if len(last) > 4 else ""))
        wait_for(lambda: self.bus.get(fs.object_path, FS_IFACE, "ScanProgress") == 1.0, "ScanProgress 1.0",
                 timeout=SCAN_TIMEOUT)
        return expected

    def statfs(self, path):
        return {k: v["data"] for k, v in self.bus.call(path, SUBVOLUME_IFACE, "GetStatfs")[0].items()}

    def populate(self, mnt, count, scale=1):
        """@count subvolumes, each with two small data files (@scale times
        larger) and an inline one, and every tenth also snapshotted, so
        that a scan takes a while and extents are shared."""
        for i in range(count):
            subvolume_create(f"{mnt}/v{i}")
            write_random(f"{mnt}/v{i}/a", 4 * KiB * (1 + i % 4) * scale)
            write_random(f"{mnt}/v{i}/b", 8 * KiB * scale)
            write_random(f"{mnt}/v{i}/c", 200)
            if i % 10 == 0:
                snapshot(f"{mnt}/v{i}", f"{mnt}/s{i}", readonly=True)
        settle(mnt)


class ScanTest(ScanTestCase):
    # ------------------------------------------------------------ fixtures

    def test_file_in_subvolume(self):
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        subvolume_create(f"{mnt}/empty")
        self.start()
        usage = self.assert_scan_matches(fs, mnt)
        a, empty = btrfs_rootid(f"{mnt}/A"), btrfs_rootid(f"{mnt}/empty")
        self.assertEqual(usage[a], Usage(2, MiB, MiB))
        self.assertEqual(usage[empty], Usage(1, 0, 0))  # its root directory
        self.assertEqual(usage[5], Usage(1, 0, 0))  # subvolumes are no inodes of their parent
        # statfs for the subvolume carries the measured figures.
        sf = self.statfs(f"{fs.object_path}/{a}")
        self.assertEqual((sf["files"], sf["referenced"], sf["exclusive"], sf["source"]), (2, MiB, MiB, "scan"))

    def test_read_only_snapshot(self):
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        snapshot(f"{mnt}/A", f"{mnt}/S", readonly=True)
        self.start()
        usage = self.assert_scan_matches(fs, mnt)
        a, s = btrfs_rootid(f"{mnt}/A"), btrfs_rootid(f"{mnt}/S")
        self.assertEqual((usage[a], usage[s]), (Usage(2, MiB, 0), Usage(2, MiB, 0)))

    def test_partially_overwritten_in_snapshot(self):
        """An extent partly replaced still counts whole for who references
        any of it.  Then the same figures against qgroups."""
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        snapshot(f"{mnt}/A", f"{mnt}/S")
        a, s = btrfs_rootid(f"{mnt}/A"), btrfs_rootid(f"{mnt}/S")
        self.start()
        usage = self.assert_scan_matches(fs, mnt)
        self.assertEqual((usage[a], usage[s]), (Usage(2, MiB, 0), Usage(2, MiB, 0)))
        # The figures below need the file to be one extent, as one write makes it.
        self.assertEqual(len(extents_by_subvolume(fs.device, [a])[a]), 1, "fixture: data is not one extent")

        pwrite(f"{mnt}/S/data", 0, os.urandom(512 * KiB))
        usage = self.assert_scan_matches(fs, mnt)
        self.assertEqual(usage[s], Usage(2, MiB + 512 * KiB, 512 * KiB))
        self.assertEqual(usage[a], Usage(2, MiB, 0))

        # Cross-check the dump-tree figures with qgroups (after subvold is
        # done: with quotas on it would read those instead).  qgroups count
        # the same data extents, whole, plus the subvolume's tree blocks:
        # referenced is ours plus a nodesize for each block of its tree, and
        # exclusive ours plus a nodesize for each block no other tree shares.
        self.daemon.stop()
        run("btrfs", "quota", "enable", mnt)
        run("btrfs", "quota", "rescan", "-w", mnt)
        settle(mnt)
        parsed = trees(fs.device, subvolume_ids(mnt))
        ours = usage_from_trees(parsed)
        qgroups = qgroup_show(mnt)
        node = nodesize(fs.device)
        block_owners = collections.Counter(b for t in parsed.values() for b in t.blocks)
        self.assertEqual(set(qgroups), set(ours))
        for i, (rfer, excl) in qgroups.items():
            with self.subTest(subvolume=i):
                self.assertEqual((rfer - ours[i].referenced) % node, 0)
                self.assertEqual((excl - ours[i].exclusive) % node, 0)
                self.assertEqual(rfer - ours[i].referenced, node * len(parsed[i].blocks))
                self.assertEqual(excl - ours[i].exclusive,
                                 node * sum(1 for b in parsed[i].blocks if block_owners[b] == 1))

    def test_reflink_within_subvolume(self):
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        a = btrfs_rootid(f"{mnt}/A")
        self.start()
        self.assertEqual(self.assert_scan_matches(fs, mnt)[a], Usage(2, MiB, MiB))
        run("cp", "--reflink=always", f"{mnt}/A/data", f"{mnt}/A/copy")
        self.assertEqual(self.assert_scan_matches(fs, mnt)[a], Usage(3, MiB, MiB))

    def test_reflink_across_subvolumes(self):
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        subvolume_create(f"{mnt}/B")
        write_random(f"{mnt}/A/data", MiB)
        a, b = btrfs_rootid(f"{mnt}/A"), btrfs_rootid(f"{mnt}/B")
        self.start()
        usage = self.assert_scan_matches(fs, mnt)
        self.assertEqual((usage[a], usage[b]), (Usage(2, MiB, MiB), Usage(1, 0, 0)))
        run("cp", "--reflink=always", f"{mnt}/A/data", f"{mnt}/B/copy")
        usage = self.assert_scan_matches(fs, mnt)
        self.assertEqual((usage[a], usage[b]), (Usage(2, MiB, 0), Usage(2, MiB, 0)))

    def test_compressed(self):
        """Compressed extents count their compressed size on disk."""
        fs, mnt = self.make_fs("fs", "compress=zstd")
        subvolume_create(f"{mnt}/A")
        line = b"All work and no play makes Jack a dull boy. 0123456789\n"
        with open(f"{mnt}/A/text", "wb") as f:
            f.write((line * (MiB // len(line) + 1))[:MiB])
        write_random(f"{mnt}/A/random", MiB)  # btrfs stores incompressible data as it is
        a = btrfs_rootid(f"{mnt}/A")
        self.start()
        usage = self.assert_scan_matches(fs, mnt)
        settle(mnt)
        text_inode = os.stat(f"{mnt}/A/text").st_ino
        compressed = 0
        for m in _ITEM_RE.finditer(dump_tree(fs.device, a)):
            if m[1] == str(text_inode) and m[2] == "EXTENT_DATA":
                self.assertRegex(m[4], r"extent compression 3 \(zstd\)")
                compressed += int(_DISK_RE.search(m[4])[2])
        self.assertLess(compressed, MiB)
        self.assertGreater(compressed, 0)
        self.assertEqual(usage[a], Usage(3, MiB + compressed, MiB + compressed))

    def test_inline_files(self):
        """Inline extents live in the tree: data bytes count nothing."""
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        a = btrfs_rootid(f"{mnt}/A")
        self.start()
        self.assertEqual(self.assert_scan_matches(fs, mnt)[a], Usage(2, MiB, MiB))
        for i in range(10):
            write_random(f"{mnt}/A/small{i}", 100)
        self.assertEqual(self.assert_scan_matches(fs, mnt)[a], Usage(12, MiB, MiB))
        self.assertEqual(parse_tree(dump_tree(fs.device, a)).inline, 10, "fixture: files are not inline")

    def test_sparse_file(self):
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        with open(f"{mnt}/A/sparse", "wb") as f:
            f.truncate(10 * MiB)
            f.seek(5 * MiB)
            f.write(os.urandom(4 * KiB))
        a = btrfs_rootid(f"{mnt}/A")
        self.start()
        self.assertEqual(self.assert_scan_matches(fs, mnt)[a], Usage(2, 4 * KiB, 4 * KiB))

    def test_fallocated_file(self):
        """Preallocated extents count; written into, they stay one extent."""
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        fd = os.open(f"{mnt}/A/falloc", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, MiB)
        finally:
            os.close(fd)
        a = btrfs_rootid(f"{mnt}/A")
        self.start()
        self.assertEqual(self.assert_scan_matches(fs, mnt)[a], Usage(2, MiB, MiB))
        # Written in the middle: regular and preallocated items on the one extent.
        before = extents_by_subvolume(fs.device, [a])[a]
        pwrite(f"{mnt}/A/falloc", 64 * KiB, os.urandom(4 * KiB))
        settle(mnt)
        self.assertEqual(extents_by_subvolume(fs.device, [a])[a], before, "fixture: the write left the extent")
        self.assertGreater(len([m for m in _ITEM_RE.finditer(dump_tree(fs.device, a)) if m[2] == "EXTENT_DATA"]), 1,
                           "fixture: the extent was not split")
        self.assertEqual(self.assert_scan_matches(fs, mnt)[a], Usage(2, MiB, MiB))

    def test_scanned_before_commit(self):
        """A subvolume scanned inside the transaction that created it (its
        data still waiting for writeback) is scanned again once that
        transaction is committed: the generation of its tree does not move
        then, yet its extents appear."""
        fs, mnt = self.make_fs()
        daemon = self.start("-v")
        # Anything may commit in between (a sync elsewhere on the machine):
        # until a first read saw the data not yet written, try again.
        for attempt in range(5):
            subvolume_create(f"{mnt}/B{attempt}")
            write_random(f"{mnt}/B{attempt}/data", MiB)  # no sync
            b = btrfs_rootid(f"{mnt}/B{attempt}")
            self.refresh()
            read = []
            wait_for(lambda: read.extend(re.findall(rf"Read the tree of subvolume {b} of {fs.uuid}: (.*)\.$",
                                                    daemon.log(), re.M)) or read, "a first scan", timeout=SCAN_TIMEOUT)
            if read[0].startswith("2 inode(s), 0 extent(s),"):
                break
        else:
            self.fail("every first read came after a commit")
        usage = self.assert_scan_matches(fs, mnt)  # commits first
        self.assertEqual(usage[b], Usage(2, MiB, MiB))

    def test_deleted_snapshot(self):
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        snapshot(f"{mnt}/A", f"{mnt}/S", readonly=True)
        a, s = btrfs_rootid(f"{mnt}/A"), btrfs_rootid(f"{mnt}/S")
        self.start()
        usage = self.assert_scan_matches(fs, mnt)
        self.assertEqual((usage[a], usage[s]), (Usage(2, MiB, 0), Usage(2, MiB, 0)))
        run("btrfs", "subvolume", "delete", f"{mnt}/S")
        run("btrfs", "subvolume", "sync", mnt)
        usage = self.assert_scan_matches(fs, mnt)  # also: S is no longer published
        self.assertNotIn(s, usage)
        self.assertEqual(usage[a], Usage(2, MiB, MiB))

    # ------------------------------------------------------------ the scan cache, across restarts

    def trees_read(self, daemon, fs):
        """The ids of the subvolumes of @fs whose trees @daemon read (its
        debug log), and the sizes of its completed runs."""
        log = daemon.log()
        read = [int(i) for i in re.findall(rf"Read the tree of subvolume (\d+) of {fs.uuid}:", log)]
        runs = [int(n) for n in re.findall(rf"Measured the usage of (\d+) subvolume\(s\) of {fs.uuid} ", log)]
        return read, runs

    def test_restart_reads_only_changed_trees(self):
        """With --cache-dir, the extents read survive a restart: a restart
        reads no tree that did not change, and after a change only the
        changed one; a read-only snapshot is never read twice."""
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        snapshot(f"{mnt}/A", f"{mnt}/S", readonly=True)
        subvolume_create(f"{mnt}/B")
        write_random(f"{mnt}/B/data", 64 * KiB)
        settle(mnt)
        # One more transaction, in the top level only: A, S and B are then
        # settled, older than the filesystem's generation.
        write_random(f"{mnt}/top", 4 * KiB)
        a, s, b = (btrfs_rootid(f"{mnt}/{n}") for n in "ASB")
        cache = self.path("cache")
        os.mkdir(cache)

        daemon = self.start("--cache-dir", cache, "-v")
        first = self.assert_scan_matches(fs, mnt)
        self.assertEqual((first[a], first[s], first[b]),
                         (Usage(2, MiB, 0), Usage(2, MiB, 0), Usage(2, 64 * KiB, 64 * KiB)))
        read, runs = self.trees_read(daemon, fs)
        self.assertEqual(sorted(read), sorted([5, a, s, b]))
        self.assertEqual(runs, [4])
        daemon.stop()
        self.assertTrue(os.path.isfile(f"{cache}/scan.cache"))

        # Nothing changed: nothing is read, the figures are the same.
        daemon = self.start("--cache-dir", cache, "-v")
        self.assertEqual(self.assert_scan_matches(fs, mnt), first)
        self.assertEqual(self.trees_read(daemon, fs), ([], []))
        daemon.stop()

        # B changes while subvold is away: B alone is read again, and the
        # snapshot's exclusive bytes stay right without reading it.
        write_random(f"{mnt}/B/more", 128 * KiB)
        run("rm", f"{mnt}/A/data")
        settle(mnt)
        daemon = self.start("--cache-dir", cache, "-v")
        usage = self.assert_scan_matches(fs, mnt)
        self.assertEqual((usage[s], usage[b]), (Usage(2, MiB, MiB), Usage(3, 192 * KiB, 192 * KiB)))
        read, runs = self.trees_read(daemon, fs)
        self.assertNotIn(s, read)
        self.assertIn(b, read)
        self.assertIn(a, read)
        daemon.stop()

    def test_changed_while_away_is_not_consistent(self):
        """A tree that changed while subvold was not running is published
        from the scan cache as it was read, with UsageConsistent false
        (the figures of an older state, as qgroups during a rescan) until
        it is read again; an unchanged one is consistent at once."""
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", 64 * KiB)
        subvolume_create(f"{mnt}/B")
        write_random(f"{mnt}/B/data", 64 * KiB)
        settle(mnt)
        write_random(f"{mnt}/top", 4 * KiB)  # A and B settled, older than the filesystem
        a, b = btrfs_rootid(f"{mnt}/A"), btrfs_rootid(f"{mnt}/B")
        cache = self.path("cache")
        os.mkdir(cache)
        self.start("--cache-dir", cache)
        first = self.assert_scan_matches(fs, mnt)
        self.daemon.stop()

        write_random(f"{mnt}/B/more", 128 * KiB)
        settle(mnt)
        pause = ScanPause(self)
        daemon = self.start("--cache-dir", cache, "-v", pause=pause)
        pause.advance(daemon, lambda paused: paused[-1][0] == b, "the scanner before B's tree")
        published = self.published(fs)
        self.assertEqual([(p["UsageSource"], p["UsageConsistent"], p["ReferencedBytes"]) for p in
                          (published[a], published[b])],
                         [("scan", True, first[a].referenced), ("scan", False, first[b].referenced)])
        pause.release()
        usage = self.assert_scan_matches(fs, mnt)
        self.assertEqual(usage[b], Usage(3, 192 * KiB, 192 * KiB))

    def test_corrupted_scan_cache(self):
        """A damaged scan.cache is refused with one log line; subvold reads
        every tree again and writes a good file."""
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        snapshot(f"{mnt}/A", f"{mnt}/S", readonly=True)
        cache = self.path("cache")
        os.mkdir(cache)
        daemon = self.start("--cache-dir", cache, "-v")
        first = self.assert_scan_matches(fs, mnt)
        daemon.stop()

        path = f"{cache}/scan.cache"
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x55]))
        daemon = self.start("--cache-dir", cache, "-v")
        self.assertEqual(self.assert_scan_matches(fs, mnt), first)
        log = daemon.log()
        self.assertEqual(log.count("Ignoring the scan cache"), 1, log)
        self.assertIn("truncated or corrupted", log)
        self.assertEqual(sorted(self.trees_read(daemon, fs)[0]), sorted(first))
        daemon.stop()

        # The file written after that run is good again.
        daemon = self.start("--cache-dir", cache, "-v")
        self.assertEqual(self.assert_scan_matches(fs, mnt), first)
        self.assertNotIn("Ignoring the scan cache", daemon.log())
        self.assertEqual(self.trees_read(daemon, fs), ([], []))
        daemon.stop()

    def test_scan_cache_cannot_be_written(self):
        """A full cache directory: the figures are right all the same, one
        log line however many runs, no temporary file left behind."""
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/data", MiB)
        cache = self.path("cache")
        os.mkdir(cache)
        run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", cache)
        self.stack.callback(run, "umount", cache, check=False)
        subprocess.run(["dd", "if=/dev/zero", f"of={cache}/filler", "bs=4k", "count=64"], stderr=subprocess.DEVNULL)
        daemon = self.start("--cache-dir", cache)
        self.assert_scan_matches(fs, mnt)
        write_random(f"{mnt}/A/more", 64 * KiB)  # a second run, a second try
        usage = self.assert_scan_matches(fs, mnt)
        self.assertEqual(usage[btrfs_rootid(f"{mnt}/A")], Usage(3, MiB + 64 * KiB, MiB + 64 * KiB))
        wait_for(lambda: len(self.trees_read(daemon, fs)[1]) >= 2, "two runs", timeout=SCAN_TIMEOUT)
        daemon.stop()
        self.assertEqual(daemon.log().count("Cannot write the scan cache"), 1, daemon.log())
        self.assertFalse([f for f in os.listdir(cache) if f.startswith("scan.cache")], "file left behind")

    # ------------------------------------------------------------ limits and priorities

    def test_max_memory(self):
        """Past --scan-max-memory, one warning and no figures for that
        filesystem: its subvolumes keep UsageSource "none"; a smaller one
        is measured as usual."""
        fs, mnt = self.make_fs()
        subvolume_create(f"{mnt}/A")
        for i in range(800):  # 800 extents: the map's table grows past 1024 slots of 48 bytes
            write_random(f"{mnt}/A/f{i}", 4 * KiB)
        small, small_mnt = self.make_fs("small")
        subvolume_create(f"{small_mnt}/A")
        write_random(f"{small_mnt}/A/f", 64 * KiB)  # one extent
        daemon = self.start("--scan-max-memory", "60K")  # the small one: 1024 slots, 48 KiB
        usage = self.assert_scan_matches(small, small_mnt)
        self.assertEqual(usage[btrfs_rootid(f"{small_mnt}/A")], Usage(2, 64 * KiB, 64 * KiB))
        warning = f"btrfs filesystem {fs.uuid} needs more than 61440 bytes"
        wait_for(lambda: warning in daemon.log(), "the warning", timeout=SCAN_TIMEOUT)
        self.refresh()
        published = self.published(fs)
        self.assertTrue(published)
        for props in published.values():
            self.assertEqual((props["UsageSource"], props["Inodes"]), ("none", 2**64 - 1))
        self.assertEqual(daemon.log().count(warning), 1)
        daemon.stop()
        self.assert_refused("--scan-max-memory=1T", "--scan-max-memory=", "--scan-max-memory=-1")

    def peak_rss_baseline(self, *args):
        """The peak RSS (VmHWM, kB) of subvold with @args measuring a
        filesystem of one small file: what the daemon takes anyway."""
        tiny, mnt = self.make_fs("tiny")
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/f", 4 * KiB)
        daemon = self.start(*args)
        self.assert_scan_matches(tiny, mnt)
        peak = daemon.status("VmHWM")
        daemon.stop()
        tiny.umount(mnt)
        self.mountpoints.remove(mnt)
        return peak

    def test_reflinks_within_max_memory(self):
        """One file cloned onto its own end 21 times (FICLONERANGE): 2^21
        file extent items, all on one 4 KiB extent; as an array, 32 MiB.
        subvold drops repeats as it reads, so with --scan-max-memory=8M it
        measures the file exactly, and its peak RSS stays under that of
        the same daemon measuring a tiny filesystem, plus the cap."""
        baseline = self.peak_rss_baseline("--scan-max-memory=8M")
        fs, mnt = self.make_fs(size="4G")
        subvolume_create(f"{mnt}/A")
        write_random(f"{mnt}/A/f", 4 * KiB)
        settle(mnt)
        double_by_cloning(f"{mnt}/A/f", 21)
        self.assertEqual(file_extent_count(f"{mnt}/A/f"), 2**21, "fixture: not one item per 4 KiB")
        a = btrfs_rootid(f"{mnt}/A")
        daemon = self.start("--scan-max-memory=8M", "-v")
        wait_for(lambda: (lambda p: p and p.get(a, {}).get("UsageSource") == "scan")(self.published(fs)),
                 "the scan", timeout=SCAN_TIMEOUT)
        got = self.published(fs)[a]
        self.assertEqual(Usage(got["Inodes"], got["ReferencedBytes"], got["ExclusiveBytes"]),
                         Usage(2, 4 * KiB, 4 * KiB))
        # What the scanner counted for the array as it read (the only
        # check under ASan, where RSS says nothing).
        read = re.search(rf"Read the tree of subvolume {a} of {fs.uuid}: 2 inode\(s\), 1 extent\(s\), in (\d+) bytes",
                         daemon.log())
        self.assertTrue(read, daemon.log())
        self.assertLessEqual(int(read[1]), 8 * MiB)
        if not SANITIZED:  # ASan's quarantine and shadow memory make RSS meaningless
            self.assertLess(daemon.status("VmHWM"), baseline + 8 * 1024,
                            f"peak RSS {daemon.status('VmHWM')} kB, baseline {baseline} kB")
        daemon.stop()

    def reset_peak_rss(self, daemon):
        """Sets the daemon's peak RSS (VmHWM) back to its RSS now (clear_refs
        5); returns that, in kB."""
        with open(f"/proc/{daemon.proc.pid}/clear_refs", "w") as f:
            f.write("5")
        return daemon.status("VmHWM")

    def test_extents_past_max_memory(self):
        """Trees with more distinct extents than --scan-max-memory=1M can
        hold: one of 240,000 preallocated extents (5.5 MiB as an array) is
        read no further once they do not fit; one of 20,000 (an array of
        480 KiB, but 1.5 MiB of table in the map) is read, and refused
        before the map takes it in.  Either way one warning, no figures for
        the filesystem, and the daemon's peak RSS, from where it was once
        it had measured a filesystem within the cap, grows by less than the
        cap plus a slack while it reads the tree.

        The slack, 256 KiB, is for what the cap does not count: the 64 KiB
        tree search buffer (allocated anew for each run), the page malloc
        adds to the array's mapping, and the first touch of the code and
        data of the paths the filesystem within the cap did not take (the
        warning, the stop) and of the bus replies meanwhile: 40 to 120 KiB
        past the cap in all, measured.  The same process, daemon options
        and code paths before the reset keep the rest out (the library
        pages one process touches and the next does not came to 130 KiB).
        A reader that held all 240,000 extents grows by some 3.8 MiB (the
        pages of its array they fill), 2.5 MiB past the bound; an
        uncounted copy of the array as it is sorted (qsort() would make
        one) goes past it too."""
        slack = 256 * KiB
        # Within the cap: a tree read whole, its extents in the map,
        # figures published; read before each reset.
        base, base_mnt = self.make_fs("base")
        subvolume_create(f"{base_mnt}/A")
        preallocate(f"{base_mnt}/A/f", 1000)
        for count, stopped in ((240000, True), (20000, False)):
            fs, mnt = self.make_fs(f"fs{count}", size="2G")
            subvolume_create(f"{mnt}/A")
            preallocate(f"{mnt}/A/f", count)
            settle(mnt)
            self.assertEqual(file_extent_count(f"{mnt}/A/f"), count, "fixture: extents merged")
            a = btrfs_rootid(f"{mnt}/A")
            fs.umount(mnt)  # until subvold measured the other one
            daemon = self.start("--scan-max-memory=1M", "-v")
            self.assert_scan_matches(base, base_mnt)
            before = self.reset_peak_rss(daemon)
            fs.mount(mnt)
            warning = f"btrfs filesystem {fs.uuid} needs more than 1048576 bytes"
            wait_for(lambda: warning in daemon.log(), "the warning", timeout=SCAN_TIMEOUT)
            if not SANITIZED:  # ASan's quarantine and shadow memory make RSS meaningless
                peak = daemon.status("VmHWM")
                self.assertLess(peak - before, (MiB + slack) // KiB,
                                f"peak RSS {peak} kB, {before} kB before the tree of {count} extents")
            self.refresh()
            log = daemon.log()
            self.assertEqual(f"Stopped reading subvolume {a} of {fs.uuid}:" in log, stopped, log)
            self.assertNotIn(f"Read the tree of subvolume {a} of {fs.uuid}:", log)
            self.assertEqual(log.count(warning), 1, log)
            published = self.published(fs)
            self.assertTrue(published)
            for props in published.values():
                self.assertEqual((props["UsageSource"], props["Inodes"]), ("none", 2**64 - 1))
            daemon.stop()
            fs.umount(mnt)
            self.mountpoints.remove(mnt)

    def assert_refused(self, *options):
        """Each option=value is refused at start: exit status 2 and a line
        naming the option."""
        for bad in options:
            proc = subprocess.run([SUBVOLD, bad], env=self.bus.env, capture_output=True, timeout=60)
            self.assertEqual(proc.returncode, 2, bad)
            self.assertIn(f"Invalid {bad.split('=')[0]} value".encode(), proc.stderr)

    def scanner_thread(self, daemon):
        """The scanner thread, once it has named itself (it may not have
        at READY=1)."""
        found = []

        def named():
            for tid in os.listdir(f"/proc/{daemon.proc.pid}/task"):
                try:
                    with open(f"/proc/{daemon.proc.pid}/task/{tid}/comm") as f:
                        if f.read().strip() == "subvold-scan":
                            found.append(int(tid))
                except FileNotFoundError:
                    pass
            return found

        wait_for(named, "a thread named subvold-scan")
        return found[0]

    def priorities(self, tid):
        """(nice, I/O class, I/O level) of thread @tid, from the kernel."""
        with open(f"/proc/{tid}/stat") as f:
            nice = int(f.read().rsplit(")", 1)[1].split()[16])
        libc = ctypes.CDLL(None, use_errno=True)
        ioprio = libc.syscall(SYS_ioprio_get, 1, tid)  # IOPRIO_WHO_PROCESS: a thread id
        self.assertGreaterEqual(ioprio, 0, os.strerror(ctypes.get_errno()))
        return nice, ioprio >> 13, ioprio & 0x1fff

    def test_priorities(self):
        """The scanner thread runs at nice 19 in the idle I/O class by
        default; --scan-nice and --scan-io-class change that, and bad
        values are refused at start."""
        daemon = self.start()
        self.assertEqual(self.priorities(self.scanner_thread(daemon)), (19, IOPRIO_CLASS_IDLE, 0))
        self.assertEqual(self.priorities(daemon.proc.pid)[0], 0)  # the main thread keeps its own
        daemon.stop()
        daemon = self.start("--scan-nice=5", "--scan-io-class=best-effort")
        self.assertEqual(self.priorities(self.scanner_thread(daemon)), (5, IOPRIO_CLASS_BE, 7))
        daemon.stop()
        # Raising the priority needs CAP_SYS_NICE: without it, a warning,
        # and subvold goes on at the priority it has.
        daemon = Daemon(self, self.bus, "--scan-nice=-5", wrapper=("setpriv", "--bounding-set", "-sys_nice", "--"))
        tid = self.scanner_thread(daemon)
        wait_for(lambda: "Cannot set the scanner's CPU priority to -5" in daemon.log(), "the warning", timeout=60)
        self.assertEqual(self.priorities(tid)[0], 0)
        daemon.stop()
        self.assert_refused("--scan-nice=20", "--scan-nice=-21", "--scan-nice=x", "--scan-io-class=realtime")

    # ------------------------------------------------------------ many subvolumes, changing under the scan

    def test_subvolumes_change_while_scanning(self):
        """Subvolumes deleted and created while the first scan runs (held
        in its middle, and let on a tree at a time meanwhile): in the end
        the published figures are those of the trees that remain, and the
        deleted ones' extents no longer count as shared."""
        fs, mnt = self.make_fs(size="1G")
        self.populate(mnt, 200)
        pause = ScanPause(self)
        daemon = self.start("-v", pause=pause)
        of_fs = lambda paused: [p for p in paused if p[1] == fs.uuid]
        pause.advance(daemon, lambda paused: paused[-1][1] == fs.uuid and len(of_fs(paused)) > 10,
                      "the scan in its middle")
        failures = []

        def churn():
            try:
                for i in range(0, 200, 10):
                    run("btrfs", "subvolume", "delete", f"{mnt}/v{i}")  # its snapshot s{i} keeps its extents
                for i in range(1, 200, 20):
                    run("btrfs", "subvolume", "delete", f"{mnt}/v{i}")
                    subvolume_create(f"{mnt}/n{i}")
                    write_random(f"{mnt}/n{i}/a", 16 * KiB)
            except Exception as e:  # noqa: BLE001 -- reported below
                failures.append(repr(e))

        thread = threading.Thread(target=churn)
        thread.start()
        try:
            while thread.is_alive():
                if len(of_fs(pause.waiting(daemon) or [])) < 150:  # of some 220 trees
                    pause.step(daemon)
                self.refresh()
                self.bus.managed_objects()
        finally:
            thread.join()
        self.assertEqual(failures, [])
        self.assertEqual(self.trees_read(daemon, fs)[1], [], "the first run was over before the churn")
        pause.release()
        run("btrfs", "subvolume", "sync", mnt)
        usage = self.assert_scan_matches(fs, mnt)
        self.assertTrue(daemon.alive(), "subvold died")
        # The snapshots' extents are theirs alone now that their sources are gone.
        for i in range(0, 200, 10):
            s = btrfs_rootid(f"{mnt}/s{i}")
            self.assertEqual(usage[s].exclusive, usage[s].referenced)
            self.assertEqual(usage[s].referenced, 4 * KiB * (1 + i % 4) + 8 * KiB)
        self.assertEqual(self.bus.get(fs.object_path, FS_IFACE, "ScanProgress"), 1.0)

    def test_unmounted_while_scanning(self):
        """A filesystem unmounted in the middle of its scan, five times: the
        umount succeeds, and subvold lets go of the filesystem at once, not
        with its next refresh (rate-limited to one a second): its block
        device opens O_EXCL within a second, while its objects are still
        published.  They go then; the other filesystem is measured; no fd
        stays; SIGTERM still exits 0."""
        fs, mnt = self.make_fs(size="1G")
        self.populate(mnt, 30)
        other, other_mnt = self.make_fs("other")
        subvolume_create(f"{other_mnt}/A")
        write_random(f"{other_mnt}/A/data", MiB)
        # Our filesystems as statfs() tells them apart (btrfs mixes the
        # subvolume id into f_fsid): so that the fds of subvold's scans of
        # other tests' filesystems, when tests run in parallel, do not count.
        fsids = {os.statvfs(p).f_fsid for p in (mnt, other_mnt, f"{other_mnt}/A",
                                                 *(e.path for e in os.scandir(mnt) if e.is_dir()))}
        fd = os.open(f"{other_mnt}/A", os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.assertTrue(fds_on(os.getpid(), fsids), "fds_on() misses an fd")  # the check works
        finally:
            os.close(fd)
        pause = ScanPause(self)
        daemon = self.start("-v", pause=pause)
        more = 0  # files written into the other filesystem's A

        def hold(nxt, round):
            """Waits until the scanner, having read a tree of the
            filesystem, waits before a tree of @nxt, its fd on the
            filesystem still open.  A mount change anywhere (other tests
            mount too) makes it drop that fd: then again, with trees
            changed so that they are queued in that order."""
            nonlocal more
            deadline = time.monotonic() + SCAN_TIMEOUT
            for attempt in itertools.count():
                self.assertLess(time.monotonic(), deadline, f"never held before a tree of {nxt.uuid}")
                if attempt:  # two trees of the filesystem to read again
                    for i in range(2):
                        write_random(f"{mnt}/v{(2 * attempt + i) % 30}/more{round}-{attempt}", 4 * KiB)
                    settle(mnt)
                    self.refresh()
                if nxt is other:  # ... and then one of the other
                    pause.advance(daemon, lambda paused: paused[-1][1] == fs.uuid, "a tree of the filesystem")
                    write_random(f"{other_mnt}/A/more{more}", 4 * KiB)
                    more += 1
                    settle(other_mnt)
                    self.refresh()
                pause.advance(daemon, lambda paused: paused[-1][1] == nxt.uuid and len(paused) > 1 and
                              paused[-2][1] == fs.uuid, "the scanner between two trees")
                if fds_on(daemon.proc.pid, fsids):
                    return
                pause.let_one_through()

        for round in range(5):
            # The scanner has read a tree of the filesystem and waits, its
            # fd still open, before the next tree: of the filesystem (its
            # scan in the middle), or every other time of the other one.
            hold(other if round % 2 else fs, round)
            self.refresh()  # the next refresh is a second away
            fs.umount(mnt)  # raises if busy
            wait_for(lambda: device_free(fs.device), "the device to be free", timeout=1)
            self.assertEqual(self.bus.get(fs.object_path, FS_IFACE, "Uuid"), fs.uuid, "let go of only by a refresh")
            wait_for(lambda: not any(p.startswith(fs.object_path) for p in self.bus.managed_objects()),
                     "the unmounted filesystem's objects to go", timeout=SCAN_TIMEOUT)
            fs.mount(mnt)
        pause.release()
        self.assertTrue(daemon.alive(), "subvold died")
        self.assert_scan_matches(fs, mnt)
        usage = self.assert_scan_matches(other, other_mnt)
        written = MiB + more * 4 * KiB
        self.assertEqual(usage[btrfs_rootid(f"{other_mnt}/A")], Usage(2 + more, written, written))
        # A generation check opens a mount for some µs twice a second: look
        # until a sample shows none.
        wait_for(lambda: not fds_on(daemon.proc.pid, fsids), "no fd on our filesystems between operations",
                 timeout=SCAN_TIMEOUT)
        daemon.stop()  # exit status 0, no sanitizer report


class MountIdTest(ScanTestCase):
    """Needs a mount id back that any mount made on the machine meanwhile
    takes for as long as it stays (another test's filesystem, for minutes):
    meson runs it alone, as the test test_scan_mount_ids."""

    def test_mount_replaced_while_scanning(self):
        """With --mountinfo (whose mount ids the kernel hands out again at
        once), the mount through which the scanner is about to read a tree
        of A is replaced by another btrfs B at the same mount point with the
        same mount id, and back, five times; A stays mounted elsewhere too,
        so what the scanner knows of it stays.  B has subvolumes with the
        same ids and other contents.  Each time the scanner refuses B: only
        the fsid tells it from A.  In the end every subvolume of A, the
        read-only snapshot refused the first time included, has UsageSource
        "scan" and the figures of its own trees: a replaced mount is no
        failure of a subvolume, and B's trees never stand in for A's."""
        a, a_mnt = self.make_fs("a")
        b, b_mnt = self.make_fs("b")
        for mnt, scale in ((a_mnt, 1), (b_mnt, 3)):
            # S, a read-only snapshot of the top level: the first subvolume.
            write_random(f"{mnt}/data", 64 * KiB * scale)
            snapshot(mnt, f"{mnt}/S", readonly=True)
            self.populate(mnt, 30, scale)  # enough trees of A for every round
        s_id = btrfs_rootid(f"{a_mnt}/S")
        self.assertEqual(btrfs_rootid(f"{b_mnt}/S"), s_id)
        a.mount(self.path("a2"))
        # B stays mounted at b_mnt: mounting it again on A's mount point
        # takes microseconds, not the time to open a filesystem, in which
        # something else could take the mount id just freed.
        a_fsid = os.statvfs(a_mnt).f_fsid  # of A's top level, the root of the scanner's clones
        pause = ScanPause(self)
        daemon = self.start("--mountinfo", "-v", pause=pause)

        def outcomes(subvolume_id):
            """How often the scanner refused B for the tree, and how often it read the tree (as A's)."""
            log = daemon.log()
            return (len(re.findall(rf"^<7>.* is no longer btrfs filesystem {a.uuid}; reading subvolume "
                                   rf"{subvolume_id} later\.$", log, re.M)),
                    log.count(f"Read the tree of subvolume {subvolume_id} of {a.uuid}:"))

        for round in range(5):
            # The scanner waits before a tree of A (the first time: S),
            # its job queued with a mount of A.  A mount change leaves a
            # job that has not gone for its mount alone: however many
            # notifications subvold gets for what follows, and whenever,
            # the job stays held.
            paused = pause.advance(daemon, lambda paused: paused[-1][1] == a.uuid and (round or paused[-1][0] == s_id),
                                   "the scanner before a tree of A")
            subvolume_id, where, mount_id = paused[-1][0], paused[-1][2], paused[-1][3]
            replace_mount(self, where, b.device, mount_id)
            # Had it not heard of the change, the scanner would read on
            # through the clone of A it read the tree before through
            # (rightly: that is A): wait until it let go of that clone.
            wait_for(lambda: not fds_on(daemon.proc.pid, {a_fsid}), "the scanner to let go of its clone of A")
            before = outcomes(subvolume_id)
            pause.let_one_through()
            wait_for(lambda: outcomes(subvolume_id) != before, f"the scanner to be done with subvolume {subvolume_id}",
                     timeout=SCAN_TIMEOUT)
            self.assertEqual(outcomes(subvolume_id), (before[0] + 1, before[1]),
                             f"B's tree {subvolume_id} read as A's, through {where} (mount {mount_id})")
            restore_mount(where, a.device)
        pause.release()
        usage = self.assert_scan_matches(a, a_mnt)
        self.assertEqual(usage[s_id], Usage(2, 64 * KiB, 0))
        self.assertTrue(daemon.alive(), "subvold died")


if __name__ == "__main__":
    main()
