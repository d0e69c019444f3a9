#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""org.subvold.Subvold1.Files with real snapshots and real users, called as
those users through the shipped policy: which versions of a file its
family's snapshots hold (edited in place, saved by rename, renamed,
hard-linked, deleted, in snapshots no mount reaches, after a rollback),
who may see which (mode bits, a supplementary group, an ACL, a directory
on the way), the content read through every returned fd, and which file
is which.  Ground truth: what the test wrote, os.stat and btrfs-progs."""

import json
import os
import subprocess

from harness import (GDBUS_CLIENT, MANAGER_IFACE, MANAGER_PATH, ROOT, Btrfs, Bus, Daemon, Group, TestCase, User, btrfs_rootid, main, run,
                     snapshot, subvolume_create)

ERR = "org.subvold.Subvold1.Error."
SUBVOLCTL = os.environ.get("SUBVOLCTL", "")


class FilesTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs")
        self.mnt = self.fs.mount(self.path("mnt"))
        os.chmod(self.mnt, 0o755)
        subvolume_create(f"{self.mnt}/home")
        os.mkdir(f"{self.mnt}/snaps")
        self.bus = Bus(self)
        self.group = Group(self)
        self.user = User(self, groups=[self.group])   # a member of the group
        self.other = User(self)                       # not
        self.daemon = None
        self.n_snaps = 0

    def tearDown(self):
        if self.daemon and not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def start(self):
        self.daemon = Daemon(self, self.bus)

    # -- fixture helpers

    def write(self, path, data, mode=0o644, owner=None):
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        if owner:
            os.chown(path, owner.uid, owner.gid)

    def snap(self, source=None, readonly=True):
        """A snapshot of @source (default: home) in snaps/; its object path."""
        self.n_snaps += 1
        dest = f"{self.mnt}/snaps/s{self.n_snaps}"
        snapshot(source or f"{self.mnt}/home", dest, readonly=readonly)
        return self.obj(dest)

    def obj(self, path):
        return f"{self.fs.object_path}/{btrfs_rootid(path)}"

    # -- calls, as a user (default: the group member)

    def files(self, method, *args, user=None):
        """Calls a Files method with gdbus-client, which opens every file
        argument as the user; returns the reply's arguments or raises."""
        p = self.bus.run(GDBUS_CLIENT, "files", method, *args, user=user or self.user, check=True)
        out = p.stdout.decode().strip()
        if out.startswith("error "):
            raise FilesError(out.split()[1])
        self.assertTrue(out.startswith("ok"), out)
        return out[3:]

    def error(self, method, *args, user=None):
        with self.assertRaises(FilesError) as e:
            self.files(method, *args, user=user)
        return str(e.exception)

    def versions(self, path, all=False, user=None):
        return json.loads(self.files("ListFileVersions", path, *(["all"] if all else []), user=user))[0]

    def version_content(self, path, snapshot_object, user=None):
        return bytes.fromhex(self.files("OpenFileVersion", path, snapshot_object, user=user))

    def deleted(self, path, user=None):
        return json.loads(self.files("ListDeletedFiles", path, user=user))[0]

    def identity(self, path, user=None):
        return json.loads(self.files("GetFileIdentity", path, user=user))[0]

    def assert_versions(self, path, expected, user=None, all=False):
        """@expected: [(snapshot object, content, match, path in snapshot)],
        oldest first; each version's content read through OpenFileVersion."""
        got = self.versions(path, all=all, user=user)
        self.assertEqual([(v["Snapshot"], v["Match"], bytes(v["Path"][:-1])) for v in got],
                         [(o, m, p) for o, _, m, p in expected])
        for v, (o, content, _, _) in zip(got, expected):
            self.assertEqual(v["Size"], len(content))
            self.assertEqual(self.version_content(path, o, user=user), content)
        return got

    # -- the tests

    def test_edited_in_place_between_snapshots(self):
        doc = f"{self.mnt}/home/doc"
        self.write(doc, b"one\n")
        s1 = self.snap()
        self.write(doc, b"two, longer\n")         # the same inode, rewritten
        s2 = self.snap(readonly=False)            # writable snapshots count as well
        self.write(doc, b"three\n")
        s3 = self.snap()
        s4 = self.snap()                          # nothing changed since s3
        self.write(doc, b"four\n")
        self.start()
        ino = os.stat(doc).st_ino
        got = self.assert_versions(doc, [(s1, b"one\n", "inode", b"doc"), (s2, b"two, longer\n", "inode", b"doc"),
                                         (s3, b"three\n", "inode", b"doc")])
        self.assertEqual([(v["Inode"], v["SameAsCurrent"]) for v in got], [(ino, False)] * 3)
        # s4 is the same version as s3: shown with All only.
        every = self.versions(doc, all=True)
        self.assertEqual([v["Snapshot"] for v in every], [s1, s2, s3, s4])
        # A version equal to the current file is marked so.
        s5 = self.snap()
        self.bus.call(MANAGER_PATH, MANAGER_IFACE, "Refresh", user=ROOT)  # publish s5 now
        self.assertTrue(self.versions(doc)[-1]["SameAsCurrent"])
        self.assertEqual(self.versions(doc)[-1]["Snapshot"], s5)
        # Times are the file's, as stat tells them.
        st = os.stat(f"{self.mnt}/snaps/s1/doc")
        self.assertEqual(got[0]["ModificationTime"], st.st_mtime_ns // 1000)
        self.assertEqual(got[0]["ChangeTime"], st.st_ctime_ns // 1000)

    def test_saved_by_rename_renamed_and_hard_linked(self):
        home = f"{self.mnt}/home"
        self.write(f"{home}/doc", b"v1\n")
        s1 = self.snap()
        # An editor saves: a new file renamed over the old one.
        self.write(f"{home}/.doc.tmp", b"v2\n")
        os.rename(f"{home}/.doc.tmp", f"{home}/doc")
        s2 = self.snap()
        # Renamed, and hard-linked under a third name.
        os.rename(f"{home}/doc", f"{home}/report")
        os.link(f"{home}/report", f"{home}/link")
        self.write(f"{home}/report", b"v3\n")
        self.start()
        # By path in s1 (another inode), by inode in s2 (another name).
        self.assert_versions(f"{home}/report", [(s1, b"v1\n", "path", b"doc"), (s2, b"v2\n", "inode", b"doc")]
                             [1:])
        self.assert_versions(f"{home}/link", [(s2, b"v2\n", "inode", b"doc")])
        # The same file through both names; the old one is of its lineage.
        self.assertEqual(self.files("CompareFiles", f"{home}/report", f"{home}/link"), '["same"]')
        self.assertEqual(self.files("CompareFiles", f"{home}/report", f"{self.mnt}/snaps/s2/doc"),
                         '["same-lineage"]')
        self.assertEqual(self.files("CompareFiles", f"{home}/report", f"{self.mnt}/snaps/s1/doc"), '["different"]')

    def test_path_match_takes_regular_files_only(self):
        home = f"{self.mnt}/home"
        self.write(f"{home}/target", b"t\n")
        os.symlink("target", f"{home}/doc")       # a symlink in the snapshot at the path
        os.mkdir(f"{home}/notes")                 # a directory there (it opens like a file)
        self.snap()
        os.unlink(f"{home}/doc")
        os.rmdir(f"{home}/notes")
        for name in ("doc", "notes"):
            self.write(f"{home}/{name}", b"now\n")
        self.start()
        self.assertEqual(self.versions(f"{home}/doc"), [])
        self.assertEqual(self.versions(f"{home}/notes"), [])

    def test_deleted_files(self):
        home = f"{self.mnt}/home"
        os.mkdir(f"{home}/dir")
        os.mkdir(f"{home}/dir/sub")
        self.write(f"{home}/dir/a", b"aaa")
        self.write(f"{home}/dir/kept", b"k")
        os.symlink("a", f"{home}/dir/link")
        s1 = self.snap()
        self.write(f"{home}/dir/b", b"bb")
        s2 = self.snap()
        for name in ("a", "b", "link"):
            os.unlink(f"{home}/dir/{name}")
        os.rmdir(f"{home}/dir/sub")
        self.start()
        entries = {bytes(e["Name"][:-1]): e for e in self.deleted(f"{home}/dir")}
        self.assertEqual(sorted(entries), [b"a", b"b", b"link", b"sub"])
        self.assertEqual({k: (e["Type"], e["Snapshot"]) for k, e in entries.items()},
                         {b"a": ("file", s2), b"b": ("file", s2), b"link": ("symlink", s2), b"sub": ("directory", s2)})
        self.assertEqual(entries[b"a"]["Size"], 3)
        self.assertEqual(bytes.fromhex(self.files("OpenDeletedFile", f"{home}/dir", "a", s1)), b"aaa")
        self.assertEqual(bytes.fromhex(self.files("OpenDeletedFile", f"{home}/dir", "b", s2)), b"bb")
        self.assertEqual(self.error("OpenDeletedFile", f"{home}/dir", "b", s1), ERR + "NotFound")
        for bad in ("", "..", "a/b"):
            self.assertEqual(self.error("OpenDeletedFile", f"{home}/dir", bad, s1), ERR + "InvalidArgument")

    def test_who_may_see_what(self):
        """Each version as its snapshot records its permissions, for the
        group member and for another user."""
        home = f"{self.mnt}/home"
        g = self.group.gid
        os.mkdir(f"{home}/closed", 0o700)
        cases = {  # name: (mode in the snapshot, group, acl for the member, readable by member, by other)
            "private-then": (0o600, 0, None, False, False),
            "group-only": (0o640, g, None, True, False),
            "acl-only": (0o600, 0, "r", True, False),
        }
        for name, (mode, gid, acl, _, _) in cases.items():
            self.write(f"{home}/{name}", name.encode(), mode)
            os.chown(f"{home}/{name}", 0, gid)
            if acl:
                run("setfacl", "-m", f"u:{self.user.name}:{acl}", f"{home}/{name}")
        self.write(f"{home}/closed/inside", b"inside")
        s1 = self.snap()
        # Now everything is readable by everyone.
        for name in cases:
            run("setfacl", "-b", f"{home}/{name}")
            os.chmod(f"{home}/{name}", 0o644)
        os.chmod(f"{home}/closed", 0o755)
        self.start()
        for name, (_, _, _, member, other) in cases.items():
            with self.subTest(name=name):
                for user, expected in ((self.user, member), (self.other, other)):
                    got = [v["Snapshot"] for v in self.versions(f"{home}/{name}", user=user)]
                    self.assertEqual(got, [s1] if expected else [])
                    if not expected:
                        self.assertEqual(self.error("OpenFileVersion", f"{home}/{name}", s1, user=user),
                                         ERR + "NotFound")
        # A directory on the way that nobody else could enter then.
        self.assertEqual(self.versions(f"{home}/closed/inside"), [])
        # Root sees all of it.
        self.assertEqual(len(self.versions(f"{home}/closed/inside", user=ROOT)), 1)
        # The reverse: private now, so no fd to ask with.
        os.chmod(f"{home}/group-only", 0o600)
        p = self.bus.run(GDBUS_CLIENT, "files", "ListFileVersions", f"{home}/group-only", user=self.user)
        self.assertNotEqual(p.returncode, 0)  # the client cannot even open it
        self.assertEqual(self.error("ListFileVersions", f"opath:{home}/group-only"), ERR + "InvalidArgument")

    def test_snapshots_no_mount_reaches_and_families(self):
        """Snapshots outside every mount, a snapshot of a snapshot, a
        rollback to an old snapshot, and a nested subvolume's own family."""
        home = f"{self.mnt}/home"
        self.write(f"{home}/doc", b"v1\n")
        subvolume_create(f"{home}/nested")
        self.write(f"{home}/nested/n", b"n1\n")
        s1 = self.snap()
        s2 = self.snap(f"{self.mnt}/snaps/s1")    # a snapshot of a snapshot
        self.write(f"{home}/doc", b"v2\n")
        n1 = self.snap(f"{home}/nested")
        self.write(f"{home}/nested/n", b"n2\n")
        # Rollback: a writable snapshot of s1 becomes the new home.
        snapshot(f"{self.mnt}/snaps/s1", f"{self.mnt}/home-rollback")
        rolled = f"{self.mnt}/home-rollback"
        old_home, rollback = self.obj(home), self.obj(rolled)
        # Only the two homes are mounted where the users look.
        seen = self.path("seen")
        self.fs.mount(seen, "subvol=home")
        seen_rolled = self.path("seen-rollback")
        self.fs.mount(seen_rolled, "subvol=home-rollback")
        self.fs.umount(self.mnt)
        self.start()
        self.assert_versions(f"{seen}/doc", [(s1, b"v1\n", "inode", b"doc"), (s2, b"v1\n", "inode", b"doc"),
                                             (rollback, b"v1\n", "inode", b"doc")], all=True)
        # After the rollback the family still holds the home it replaced
        # (created first: oldest first).
        got = self.assert_versions(f"{seen_rolled}/doc", [(old_home, b"v2\n", "inode", b"doc"),
                                                          (s1, b"v1\n", "inode", b"doc"),
                                                          (s2, b"v1\n", "inode", b"doc")], all=True)
        self.assertEqual([v["SameAsCurrent"] for v in got], [False, True, True])
        # The nested subvolume: its own snapshot, not the placeholder in home's.
        self.assert_versions(f"{seen}/nested/n", [(n1, b"n1\n", "inode", b"n")])

    def test_bad_fds_and_objects(self):
        home = f"{self.mnt}/home"
        self.write(f"{home}/doc", b"x")
        os.mkdir(f"{home}/dir")
        s1 = self.snap()
        subvolume_create(f"{self.mnt}/unrelated")
        self.start()
        tmpfs = self.path("tmpfs")
        os.mkdir(tmpfs)
        run("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", tmpfs)
        self.stack.callback(run, "umount", tmpfs, check=False)
        self.write(f"{tmpfs}/f", b"t")
        self.assertEqual(self.error("ListFileVersions", f"{tmpfs}/f"), ERR + "NotBtrfs")
        self.assertEqual(self.error("ListFileVersions", f"{home}/dir"), ERR + "InvalidArgument")
        self.assertEqual(self.error("ListDeletedFiles", f"{home}/doc"), ERR + "InvalidArgument")
        self.assertEqual(self.error("GetFileIdentity", f"opath:{home}/doc"), ERR + "InvalidArgument")
        self.assertEqual(self.error("OpenFileVersion", f"{home}/doc", self.obj(f"{self.mnt}/unrelated")),
                         ERR + "NotFound")
        self.assertEqual(self.error("OpenFileVersion", f"{home}/doc", "/org/subvold/Subvold1/fs/x/1"),
                         ERR + "NotFound")
        self.assertEqual(bytes.fromhex(self.files("OpenFileVersion", f"{home}/doc", s1)), b"x")

    def test_identity_across_paths_mounts_and_namespaces(self):
        home = f"{self.mnt}/home"
        self.write(f"{home}/doc", b"x")
        os.link(f"{home}/doc", f"{home}/hard")
        self.snap()
        bind = self.path("bind")
        os.mkdir(bind)
        run("mount", "--bind", home, bind)
        self.stack.callback(run, "umount", bind, check=False)
        self.start()
        st = os.stat(f"{home}/doc")
        ident = self.identity(f"{home}/doc")
        self.assertEqual(ident["Inode"], st.st_ino)
        self.assertEqual(ident["ChangeTime"], st.st_ctime_ns // 1000)
        self.assertEqual(ident["Subvolume"], self.obj(home))
        self.assertEqual(ident["Filesystem"], self.fs.object_path)
        self.assertEqual(self.identity(f"{bind}/doc")["Key"], ident["Key"])
        self.assertEqual(self.identity(f"{home}/hard")["Key"], ident["Key"])
        copy = self.identity(f"{self.mnt}/snaps/s1/doc")
        self.assertNotEqual(copy["Key"], ident["Key"])
        self.assertEqual(copy["LineageKey"], ident["LineageKey"])
        self.assertEqual(copy["InodeGeneration"], ident["InodeGeneration"])
        # From another mount namespace, where only the client mounted it.
        private = self.path("private")
        os.mkdir(private)
        script = (f"mount -o subvol=home {self.fs.device} {private} && "
                  f"exec {GDBUS_CLIENT} files GetFileIdentity {private}/doc")
        out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                             env=self.bus.env, stdout=subprocess.PIPE, check=True).stdout.decode()
        self.assertEqual(json.loads(out[3:])[0]["Key"], ident["Key"])

    def test_returned_fds_are_read_only_and_stay_in_their_snapshot(self):
        """The private mount an fd comes from: read-only, and ".." from a
        deleted directory's fd ends at the snapshot's root."""
        home = f"{self.mnt}/home"
        os.makedirs(f"{home}/a/b")
        s1 = self.snap()
        os.rmdir(f"{home}/a/b")
        self.start()
        out = self.bus.run(GDBUS_CLIENT, "files-walk", f"{home}/a", "b", s1, user=self.user, check=True)
        self.assertEqual(out.stdout.decode().split(), ["256", str(btrfs_rootid(f"{self.mnt}/snaps/s1")), "ro"])


    def ctl(self, *args, rc=0, user=None):
        p = self.bus.run(SUBVOLCTL, *args, user=user or self.user)
        self.assertEqual(p.returncode, rc, f"subvolctl {args}: {p.stderr.decode(errors='replace')}")
        return p.stdout.decode()

    def test_subvolctl_versions_deleted_identity_restore(self):
        """subvolctl as the user: versions and deleted as tables and JSON,
        identity's exit codes, restore by reflink that never overwrites."""
        home = f"{self.mnt}/home"
        os.chmod(home, 0o777)
        data = os.urandom(1 << 20)
        self.write(f"{home}/big", data, mode=0o640, owner=self.user)
        os.utime(f"{home}/big", (1_000_000_000, 1_000_000_000))
        self.write(f"{home}/gone", b"gone", owner=self.user)
        s1 = self.snap()
        self.write(f"{home}/big", b"changed", mode=0o640, owner=self.user)
        os.unlink(f"{home}/gone")
        self.start()
        rows = json.loads(self.ctl("--json", "versions", f"{home}/big"))
        self.assertEqual([(r["snapshot"], r["size"], r["match"], r["path"]) for r in rows],
                         [(s1, len(data), "inode", "big")])
        table = self.ctl("versions", f"{home}/big").splitlines()
        self.assertEqual(table[0].split()[:3], ["SNAPSHOT", "TIME", "SIZE"])
        self.assertIn("/snaps/s1", table[1])
        deleted = json.loads(self.ctl("--json", "deleted", home))
        self.assertEqual([(r["name"], r["type"], r["snapshot"]) for r in deleted], [("gone", "file", s1)])
        # identity: 0 the same file, 10 copies of one file, 1 different.
        self.assertEqual(self.bus.run(SUBVOLCTL, "identity", f"{home}/big", f"{home}/big", user=self.user).returncode, 0)
        self.assertEqual(self.bus.run(SUBVOLCTL, "identity", f"{home}/big", f"{self.mnt}/snaps/s1/big",
                                      user=self.user).returncode, 10)
        self.write(f"{home}/other", b"o")
        self.assertEqual(self.bus.run(SUBVOLCTL, "identity", f"{home}/big", f"{home}/other",
                                      user=self.user).returncode, 1)
        self.assertIn("Key=", self.ctl("identity", f"{home}/big"))

        # Restore by the time versions printed: a reflink, mode and times kept.
        when = table[1][:19]
        out = self.ctl("restore", f"{home}/big", "--from", when)
        dest = out.split(" as ")[1].split(" (")[0]
        self.assertIn("reflink", out)
        with open(dest, "rb") as f:
            self.assertEqual(f.read(), data)
        st = os.stat(dest)
        self.assertEqual((st.st_mode & 0o7777, st.st_mtime), (0o640, 1_000_000_000))
        self.assertEqual(st.st_uid, self.user.uid)
        frag = run("filefrag", "-v", dest).decode()
        self.assertIn("shared", frag, "the restored file shares the snapshot's extents")
        # Never over an existing file, unless --force.
        p = self.bus.run(SUBVOLCTL, "restore", f"{home}/big", "--from", s1, "--to", dest, user=self.user)
        self.assertEqual(p.returncode, 1)
        self.assertIn("exists", p.stderr.decode())
        with open(f"{home}/big", "rb") as f:
            self.assertEqual(f.read(), b"changed")
        os.truncate(dest, 0)
        self.assertEqual(self.bus.run(SUBVOLCTL, "restore", f"{home}/big", "--from", s1, "--to", dest,
                                      user=self.user).returncode, 1)
        self.assertEqual(os.path.getsize(dest), 0, "restore wrote over an existing file")
        self.ctl("restore", f"{home}/big", "--from", f"{self.mnt}/snaps/s1", "--to", f"{home}/big", "--force")
        with open(f"{home}/big", "rb") as f:
            self.assertEqual(f.read(), data)
        # A deleted file, by its directory and name.
        self.ctl("restore", f"{home}/gone", "--from", s1, "--to", f"{home}/back")
        with open(f"{home}/back", "rb") as f:
            self.assertEqual(f.read(), b"gone")


class FilesError(Exception):
    pass


if __name__ == "__main__":
    main()
