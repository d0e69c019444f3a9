#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Makes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
from real files and real kernel answers: a real btrfs on a loop device
(subvolumes, a nested one, snapshots, reflinks, inline, sparse and
preallocated files, names of any bytes, qgroups with limits), the tree
searches subvold makes on it, statmount() of every mount and
/proc/self/mountinfo of a namespace with odd mounts, and the usage and
scan caches the daemon itself writes.  Needs root; through the
integration harness, so everything it starts is undone at the end.

    SUBVOLD_BINARY=build/fuzz/daemon/subvold tests/fuzz/make-corpus.py [OUTDIR]

OUTDIR defaults to tests/fuzz/corpus.  Seeds made by hand to hold a fixed
crash (regress-*) are not touched."""

import ctypes
import fcntl
import glob
import os
import struct
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import (Btrfs, Bus, Daemon, FS_IFACE, TestCase, run, snapshot, subvolume_create,  # noqa: E402
                     wait_for, write_random)

OUT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(HERE, "corpus"))

# BTRFS_IOC_TREE_SEARCH_V2 with a 64 KiB buffer, as fs-btrfs.c makes it.
SEARCH_V2 = 0xC0709411
BUF_SIZE = 64 * 1024
HEADER = struct.Struct("<QQQII")   # transid, objectid, offset, type, len
LAST_FREE = (1 << 64) - 256
U64_MAX = (1 << 64) - 1


def search(fd, tree, min_key, max_key, min_transid=0):
    """The answers of the kernel to tree_search()'s calls, continuation
    included: [(nr_items, bytes used)]."""
    answers = []
    (min_obj, min_type, min_off), (max_obj, max_type, max_off) = min_key, max_key
    while True:
        args = bytearray(112 + BUF_SIZE)
        struct.pack_into("<QQQQQQQIIII", args, 0, tree, min_obj, max_obj, min_off, max_off, min_transid, U64_MAX,
                         min_type, max_type, 0xFFFFFFFF, 0)
        struct.pack_into("<Q", args, 104, BUF_SIZE)
        fcntl.ioctl(fd, SEARCH_V2, args)
        nr = struct.unpack_from("<I", args, 64)[0]
        if nr == 0:
            return answers
        off, last = 0, None
        for _ in range(nr):
            last = HEADER.unpack_from(args, 112 + off)
            off += HEADER.size + last[4]
        answers.append((nr, bytes(args[112:112 + off])))
        _, obj, offset, typ, _ = last
        if (obj, typ, offset) == (max_obj, max_type, max_off):
            return answers
        min_obj, min_type, min_off = obj, typ, offset + 1
        if offset == U64_MAX:
            min_off, min_type = 0, typ + 1
            if min_type > 255:
                min_type, min_obj = 0, obj + 1


def tree_seed(which, *answer_lists):
    """The fuzz-tree-search input: the function, then each answer.  An
    answer longer than 64 KiB - 1 is cut (the length is a u16): the seed
    is a start, not a replay."""
    out = bytearray([which])
    for answers in answer_lists:
        for nr, data in answers:
            data = data[:0xFFFF]
            out += struct.pack("<IH", nr, len(data)) + data
    return bytes(out)


def write_seed(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data)


def cache_seeds(target, name, data):
    """A cache file as is (byte 0 = 1) and as count + payload for the target
    to frame (byte 0 = 0): see fuzz-util.h."""
    write_seed(target, name + "-file", b"\x01" + data)
    count = data[12:16]
    write_seed(target, name + "-payload", b"\x00" + count + data[24:-8])


class MakeCorpus(TestCase):
    def make_filesystem(self):
        fs = Btrfs(self, "fs", size="512M", label="fuzz seeds")
        mnt = fs.mount(self.path("mnt"))
        subvolume_create(f"{mnt}/vol")
        os.makedirs(f"{mnt}/vol/dir/deeper")
        write_random(f"{mnt}/vol/dir/deeper/data", 300 << 10)
        write_random(f"{mnt}/vol/small", 100)                          # inline
        run("cp", "--reflink=always", f"{mnt}/vol/dir/deeper/data", f"{mnt}/vol/clone")
        with open(f"{mnt}/vol/sparse", "wb") as f:
            f.truncate(1 << 20)
            f.seek(512 << 10)
            f.write(os.urandom(8192))
        run("fallocate", "-l", "256K", f"{mnt}/vol/prealloc")
        for i in range(40):
            os.link(f"{mnt}/vol/small", f"{mnt}/vol/dir/link{i}")
        subvolume_create(f"{mnt}/vol/nested")
        os.mkdir(f"{mnt}/dir with space")
        subvolume_create(f"{mnt}/dir with space/odd\nname\xff".encode("utf-8", "surrogateescape"))
        snapshot(f"{mnt}/vol", f"{mnt}/snap-ro", readonly=True)
        snapshot(f"{mnt}/vol", f"{mnt}/snap-rw")
        subvolume_create(f"{mnt}/gone")
        snapshot(f"{mnt}/gone", f"{mnt}/of-gone")
        run("btrfs", "subvolume", "delete", f"{mnt}/gone")
        os.sync()
        return fs, mnt

    def tree_search_seeds(self, mnt):
        fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        vol = int(run("btrfs", "inspect-internal", "rootid", f"{mnt}/vol"))
        data_ino = os.stat(f"{mnt}/vol/dir/deeper/data").st_ino
        dir_ino = os.stat(f"{mnt}/vol/dir").st_ino
        root_tree = search(fd, 1, (5, 132, 0), (LAST_FREE, 144, U64_MAX))
        # 0: a subvolume scan, per tree
        for tree in (5, vol, vol + 1):
            write_seed("fuzz-tree-search", f"scan-{tree}",
                       tree_seed(0, search(fd, tree, (256, 1, 0), (LAST_FREE, 108, U64_MAX))))
        # 1: the root tree (no quota tree here; see cache_seeds())
        write_seed("fuzz-tree-search", "subvolumes", tree_seed(1, root_tree))
        # 2: the root fingerprint (everything, from transaction 0)
        write_seed("fuzz-tree-search", "fingerprint",
                   tree_seed(2, search(fd, 1, (5, 132, 0), (U64_MAX, 144, U64_MAX))))
        # 7: the root items that tell a closed transaction, and the quota tree's
        write_seed("fuzz-tree-search", "transaction-closed",
                   tree_seed(7, search(fd, 1, (2, 132, 0), (8, 132, U64_MAX))))
        # 3: an inode item
        write_seed("fuzz-tree-search", "inode", tree_seed(3, search(fd, vol, (data_ino, 1, 0), (data_ino, 1, 0))))
        # 4: a path, link by link up to the root directory
        refs, ino = [], data_ino
        while ino != 256:
            answers = search(fd, vol, (ino, 12, 0), (ino, 13, U64_MAX))
            refs.append(answers)
            _, _, ino, _, _ = HEADER.unpack_from(answers[0][1], 0)
        write_seed("fuzz-tree-search", "inode-path", tree_seed(4, *refs))
        extrefs = search(fd, vol, (os.stat(f"{mnt}/vol/small").st_ino, 12, 0),
                         (os.stat(f"{mnt}/vol/small").st_ino, 13, U64_MAX))
        write_seed("fuzz-tree-search", "inode-path-many-links", tree_seed(4, extrefs))
        # 5, 6: a directory's items and its index
        write_seed("fuzz-tree-search", "dir-lookup", tree_seed(5, search(fd, vol, (256, 84, 0), (256, 84, U64_MAX))))
        write_seed("fuzz-tree-search", "dir-list", tree_seed(6, search(fd, vol, (dir_ino, 96, 0),
                                                                       (dir_ino, 96, U64_MAX))))

    def mount_seeds(self, fs, mnt):
        # Odd mount points, a bind of a subvolume, a slave, stacked mounts.
        odd = os.fsencode(self.path("point with space\ttab\\slash\nnewline\xff".encode("utf-8", "surrogateescape")
                                    .decode("utf-8", "surrogateescape")))
        os.makedirs(odd)
        run(b"mount", b"-t", b"tmpfs", b"-o", b"size=1M", b"odd\x01source", odd)
        self.stack.callback(run, b"umount", odd, check=False)
        fs.mount(self.path("vol-bind"), "subvol=/vol")
        os.makedirs(self.path("shared"))
        run("mount", "-t", "tmpfs", "tmpfs", self.path("shared"))
        self.stack.callback(run, "umount", "-R", self.path("shared"), check=False)
        run("mount", "--make-shared", self.path("shared"))
        os.makedirs(self.path("shared", "a"))
        run("mount", "--bind", self.path("shared"), self.path("shared", "a"))
        run("mount", "--make-slave", self.path("shared", "a"))
        run("mount", "-t", "tmpfs", "tmpfs", self.path("shared", "a"))
        # The machine's own mounts under /mnt are its business, not a seed's.
        with open("/proc/self/mountinfo", "rb") as f:
            mountinfo = b"".join(line for line in f if not line.split(b" ")[4].startswith(b"/mnt/"))
        write_seed("fuzz-mountinfo", "namespace", mountinfo)
        # statmount() of every mount, as mounts.c asks, a few a file.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        req = struct.pack("<IIQQ", 24, 0, (1 << 64) - 1, 0)
        ids = (ctypes.c_uint64 * 1024)()
        n = libc.syscall(458, req, ids, 1024, 0)
        self.assertGreater(n, 0, "listmount")
        answers = []
        for mnt_id in ids[:n]:
            buf = ctypes.create_string_buffer(4096)
            req = struct.pack("<IIQQ", 24, 0, mnt_id, 0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x200)
            if libc.syscall(457, req, buf, 4096, 0) == 0:
                size, point = struct.unpack_from("<I", buf, 0)[0], struct.unpack_from("<I", buf, 108)[0]
                if not buf.raw[512 + point:].startswith(b"/mnt/"):
                    answers.append(buf.raw[:size])
        for i in range(0, len(answers), 4):
            write_seed("fuzz-statmount", f"mounts-{i:03d}",
                       b"".join(struct.pack("<H", len(a)) + a for a in answers[i:i + 4]))
        # The resolver: this namespace's table, the filesystem's subvolume
        # paths, and paths to resolve through it.
        paths = [line.split(b" path ", 1)[1].removeprefix(b"<FS_TREE>") for line in
                 run("btrfs", "subvolume", "list", "-a", mnt).splitlines() if b" path " in line]
        queries = [os.fsencode(mnt) + s for s in (b"", b"/vol", b"/vol/dir/../nested/x", b"/./snap-ro//a/..",
                                                   b"/dir with space/odd\nname\xff/f")]
        queries += [os.fsencode(self.path("vol-bind")) + b"/nested", b"/", b"/proc/self", b"/../../..", b"relative"]
        write_seed("fuzz-resolve-path", "namespace",
                   mountinfo + b"\0" + b"\n".join(paths) + b"\0" + b"\n".join(q for q in queries if b"\n" not in q))
        write_seed("fuzz-display-escape", "paths", b"/dir with space/odd\nname\xff\x7f\xef\xbf\xbe\xed\xa0\x80")
        for p in paths:
            write_seed("fuzz-display-escape", f"path-{len(p)}", p)

    def cache_seeds(self, fs, mnt):
        # A second filesystem with qgroups and limits: usage from the kernel;
        # the first one without: usage from the scanner.
        quota = Btrfs(self, "quota", size="256M")
        qmnt = quota.mount(self.path("qmnt"))
        subvolume_create(f"{qmnt}/a")
        write_random(f"{qmnt}/a/data", 1 << 20)
        snapshot(f"{qmnt}/a", f"{qmnt}/a-snap", readonly=True)
        run("btrfs", "quota", "enable", qmnt)
        run("btrfs", "quota", "rescan", "-w", qmnt)
        run("btrfs", "qgroup", "limit", "10M", f"{qmnt}/a")
        run("btrfs", "qgroup", "limit", "-e", "5M", f"{qmnt}/a-snap")
        os.sync()
        qfd = os.open(qmnt, os.O_RDONLY | os.O_DIRECTORY)
        write_seed("fuzz-tree-search", "subvolumes-quotas",
                   tree_seed(1, search(qfd, 1, (5, 132, 0), (LAST_FREE, 144, U64_MAX)),
                             search(qfd, 8, (0, 240, 0), (0, 244, U64_MAX))))
        os.close(qfd)
        cache = self.path("cache")
        os.mkdir(cache)
        bus = Bus(self, shipped_policy=False)
        daemon = Daemon(self, bus, "--cache-dir", cache)
        wait_for(lambda: bus.get(fs.object_path, FS_IFACE, "ScanProgress") == 1.0, "the scan", timeout=120)
        daemon.stop()
        for name, target in (("usage.cache", "fuzz-usage-cache"), ("scan.cache", "fuzz-scan-cache")):
            with open(os.path.join(cache, name), "rb") as f:
                cache_seeds(target, "daemon", f.read())

    def test_make(self):
        for d in glob.glob(os.path.join(OUT, "fuzz-*")):
            for f in os.listdir(d):
                if not f.startswith("regress-"):
                    os.unlink(os.path.join(d, f))
        fs, mnt = self.make_filesystem()
        self.tree_search_seeds(mnt)
        self.mount_seeds(fs, mnt)
        self.cache_seeds(fs, mnt)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
