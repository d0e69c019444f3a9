#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""subvolctl as a sysadmin meets it (issue: subvolctl as good as systemd's
*ctl tools): output no name can subvert, one JSON schema (checked against
the man page), the options people type and refusal of the others, the
filesystems in view, monitor saying what changed, messages naming what the
user gave, metrics promtool accepts, and what generic D-Bus clients see.
Everything as the bus's ordinary user through the shipped policy."""

import json
import os
import pty
import re
import select
import subprocess
import threading

from harness import (BUS_NAME, FS_IFACE, MANAGER_IFACE, MANAGER_PATH, SOURCE_DIR, SUBVOLD, Btrfs, Bus, Daemon,
                     TestCase, btrfs_rootid, main, run, snapshot, subvolume_create, wait_for, write_random)

SUBVOLCTL = os.environ.get("SUBVOLCTL", "")
MAN_PAGE = os.path.join(SOURCE_DIR, "subvolctl", "subvolctl.1")

# Names an ordinary user can give a subvolume in a directory they own.
NAMES = {
    "csi": b"ctl-\x01\x1b[2J\x7f",         # would clear the screen
    "newline": b"nl-a\nb",                 # would break Name=value lines
    "c1": b"c1-\xc2\x9b2J",                # U+009B: the 8-bit CSI
    "bad": b"bad-\xff\xfe",                # not UTF-8
    "blank": b"two words",
}
ESCAPED = {"csi": "ctl-\\x01\\x1b[2J\\x7f", "newline": "nl-a\\x0ab", "c1": "c1-\\xc2\\x9b2J", "bad": "bad-\\xff\\xfe"}
LABEL = b"lab\x1b]0;owned\x07el"


def assert_terminal_safe(test, out, what):
    """@out (bytes) is UTF-8 with no control character but newline: nothing
    in it can move a cursor or change a terminal's state."""
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError as e:
        test.fail(f"{what}: not UTF-8: {e}")
    bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
    test.assertEqual(bad, [], f"{what} prints control characters: {text!r}")
    return text


def man_schema():
    """{section title: set of JSON names} from the man page's JSON OUTPUT."""
    with open(MAN_PAGE) as f:
        text = f.read()
    part = text.split(".SH JSON OUTPUT", 1)[1].split("\n.SH ", 1)[0]
    sections = {}
    for block in part.split("\n.SS ")[1:]:
        title, body = block.split("\n", 1)
        names = set()
        for tp in body.split(".TP\n")[1:]:
            names |= set(re.findall(r"\\fB([a-z_]+)\\fR", tp.split("\n", 1)[0]))
        sections[title.split(" (")[0]] = names
    return sections


class SubvolctlTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs", size="512M", label="data")
        self.mnt = self.fs.mount(self.path("mnt"))
        subvolume_create(f"{self.mnt}/vol")
        with open(f"{self.mnt}/vol/file", "wb") as f:
            f.write(os.urandom(1 << 20))
        snapshot(f"{self.mnt}/vol", f"{self.mnt}/snap", readonly=True)
        for name in NAMES.values():
            subvolume_create(os.fsencode(self.mnt) + b"/" + name)
        run("btrfs", "quota", "enable", self.mnt)
        run("btrfs", "quota", "rescan", "-w", self.mnt)
        self.other = Btrfs(self, "other", size="256M")
        self.other_mnt = self.other.mount(self.path("other"))
        run(b"btrfs", b"filesystem", b"label", os.fsencode(self.other_mnt), LABEL)
        os.sync()
        self.bus = Bus(self)
        self.daemon = Daemon(self, self.bus)
        # The tests compare outputs taken one after the other: start once
        # the scanner's first read of the quota-less filesystem is published.
        wait_for(lambda: self.bus.get(self.other.object_path, FS_IFACE, "ScanProgress") == 1.0, "the first scan")

    def tearDown(self):
        if not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def ctl(self, *args, rc=0, user=None):
        """subvolctl as the ordinary user: (stdout bytes, stderr str)."""
        p = self.bus.run(SUBVOLCTL, *args, user=user)
        self.assertEqual(p.returncode, rc, f"subvolctl {args}: {p.stderr.decode(errors='replace')}")
        return p.stdout, p.stderr.decode(errors="replace")

    def json(self, *args):
        return json.loads(self.ctl("--json", *args)[0])

    def test_no_name_reaches_the_terminal_raw(self):
        outputs = {
            "list": self.ctl("list")[0],
            "list --bytes": self.ctl("--bytes", "list")[0],
            "df --all": self.ctl("df", "--all")[0],
            "df -i --all": self.ctl("df", "-i", "--all")[0],
            "filesystems": self.ctl("filesystems")[0],
            "show --fs": self.ctl("show", "--fs", self.other.uuid)[0],
        }
        for key, name in NAMES.items():
            path = os.fsencode(self.mnt) + b"/" + name
            p = self.bus.run(SUBVOLCTL, "show", path)
            self.assertEqual(p.returncode, 0, p.stderr)
            outputs[f"show {key}"] = p.stdout
            outputs[f"df {key}"] = self.bus.run(SUBVOLCTL, "df", path, check=True).stdout
        text = {what: assert_terminal_safe(self, out, what) for what, out in outputs.items()}
        for key, escaped in ESCAPED.items():
            self.assertIn("/" + escaped, text["list"], key)
            self.assertIn("/" + escaped, text["df --all"], key)
            self.assertIn(f"Path=/{escaped}\n", text[f"show {key}"])
            self.assertIn(f"Name={escaped}\n", text[f"show {key}"])
        # Every show line is Name=value: a newline in a name broke them.
        for key in NAMES:
            for line in text[f"show {key}"].splitlines():
                self.assertRegex(line, r"^[A-Za-z]+=", key)
        # Table cells: blanks escaped too, so that columns split on them.
        self.assertIn("/two\\x20words", text["list"])
        self.assertIn("lab\\x1b]0;owned\\x07el", text["filesystems"])
        self.assertIn("LabelBytes=lab\\x1b]0;owned\\x07el\n", text["show --fs"])

        # JSON is lossless: UTF-8 paths as strings, others as bytes.
        rows = {bytes(r["path"]) if isinstance(r["path"], list) else r["path"].encode(): r for r in self.json("list")}
        for name in NAMES.values():
            self.assertIn(b"/" + name, rows)
        self.assertIsInstance(rows[b"/" + NAMES["bad"]]["path"], list)
        self.assertEqual(rows[b"/" + NAMES["newline"]]["path"], "/nl-a\nb")
        fs = next(f for f in self.json("filesystems") if f["uuid"] == self.other.uuid)
        self.assertEqual(fs["label"], LABEL.decode())

    def test_json_schema_is_the_documented_one(self):
        schema = man_schema()
        subvolume, filesystem = schema["Subvolume"], schema["Filesystem"]
        self.assertIn("referenced", subvolume)
        for row in self.json("list"):
            self.assertEqual(set(row), subvolume)
        shown = self.json("show", f"{self.mnt}/vol")
        self.assertEqual(set(shown), subvolume)
        self.assertEqual(shown["filesystem"], self.fs.uuid)
        self.assertEqual(shown["id"], btrfs_rootid(f"{self.mnt}/vol"))
        self.assertIsNone(shown["referenced_limit"])  # no limit
        self.assertEqual(shown["snapshot_source"], None)
        snap = self.json("show", f"{self.mnt}/snap")
        self.assertEqual(snap["snapshot_source"], shown["object"])
        self.assertIsInstance(snap["creation_time"], int)
        for fs in self.json("filesystems"):
            self.assertEqual(set(fs), filesystem)
        self.assertEqual(set(self.json("show", "--fs", "data")), filesystem)
        for row in self.json("df", "--all"):
            self.assertEqual(set(row), schema["df rows"])
        # versions/deleted/identity, on a file with a version in the snapshot.
        entries = schema["versions and deleted entries"]
        versions = self.json("versions", f"{self.mnt}/vol/file")
        self.assertEqual(len(versions), 1)
        self.assertEqual(set(versions[0]), entries - {"name", "type"})
        os.unlink(f"{self.mnt}/vol/file")
        deleted = self.json("deleted", f"{self.mnt}/vol")
        self.assertEqual(set(deleted[0]), entries - {"path", "match", "inode", "change_time", "same_as_current"})
        identity = self.json("identity", f"{self.mnt}/snap/file")
        self.assertEqual(set(identity), schema["identity"] - {"relation"})
        self.assertEqual(self.json("identity", f"{self.mnt}/snap/file", f"{self.mnt}/snap/file"), {"relation": "same"})
        # Monitor events: their own fields, and the subvolume's without object.
        with self.monitor("--json") as mon:
            subvolume_create(f"{self.mnt}/new")
            added = json.loads(mon.wait(lambda l: json.loads(l)["event"] == "added", "the added event"))
            os.rename(f"{self.mnt}/new", f"{self.mnt}/renamed")
            changed = json.loads(mon.wait(lambda l: json.loads(l)["event"] == "changed" and
                                          json.loads(l)["object"] == added["object"], "the rename"))
            run("btrfs", "subvolume", "delete", f"{self.mnt}/renamed")
            removed = json.loads(mon.wait(lambda l: json.loads(l)["event"] == "removed", "the deletion"))
        self.assertEqual(set(added), schema["Monitor events"] - {"old"})
        self.assertEqual(set(added["properties"]), subvolume - {"object"})
        self.assertEqual(added["properties"]["path"], "/new")
        self.assertEqual(set(changed), schema["Monitor events"])
        self.assertEqual(set(changed["properties"]), set(changed["old"]))
        self.assertLessEqual(set(changed["properties"]), subvolume - {"object"})
        self.assertEqual((changed["old"]["path"], changed["properties"]["path"]), ("/new", "/renamed"))
        self.assertEqual(set(removed), schema["Monitor events"] - {"old"})
        self.assertEqual((removed["object"], removed["properties"]["path"]), (added["object"], "/renamed"))

    def test_json_modes(self):
        short = self.ctl("--json=short", "list")[0]
        self.assertEqual(short.count(b"\n"), 1)
        pretty = self.ctl("--json=pretty", "list")[0]
        self.assertGreater(pretty.count(b"\n"), 20)
        self.assertEqual(json.loads(short), json.loads(pretty))
        self.assertEqual(self.ctl("-j", "list")[0], short)  # not a terminal: short
        self.assertEqual(self.ctl("--json=off", "list")[0], self.ctl("list")[0])
        self.assertIn("--json takes pretty, short or off", self.ctl("--json=bogus", "list", rc=2)[1])

    def test_options(self):
        # df -h: human sizes, as everyone types it.
        self.assertEqual(self.ctl("df", "-h")[0], self.ctl("df")[0])
        self.assertEqual(self.ctl("-h", "df", "--all")[0], self.ctl("df", "--all")[0])
        # Help per command, both ways; the global help lists the commands.
        own = self.ctl("list", "--help")[0].decode()
        self.assertTrue(own.startswith("Usage: subvolctl [OPTIONS] list\n"), own)
        self.assertEqual(self.ctl("help", "list")[0].decode(), own)
        self.assertIn("--inodes", self.ctl("help", "df")[0].decode())
        self.assertNotIn("--inodes", own)
        self.assertIn("filesystems", self.ctl("help")[0].decode())
        self.ctl("help", "nosuch", rc=2)
        # What does not apply is refused, not ignored.
        for args, message in [(("df", "--fs", "data"), "--fs does not apply to df"),
                              (("df", "--no-snapshots"), "--snapshots does not apply to df"),
                              (("list", "--all"), "--all does not apply to list"),
                              (("restore", "--json", "x", "--from", "y"), "--json does not apply to restore"),
                              (("list", "extra"), "Usage: subvolctl list"),
                              (("df", "--all", self.mnt), "--all takes no PATH"),
                              (("list", "--snapshots", "--no-snapshots"), "exclude each other")]:
            with self.subTest(args=args):
                self.assertIn(message, self.ctl(*args, rc=2)[1])
        # --no-legend: rows only; --output: columns; --bytes keeps them aligned.
        rows = self.ctl("--no-legend", "list")[0].decode().splitlines()
        self.assertEqual(len(rows), 2 + 2 + len(NAMES))  # two top levels, vol, snap
        self.assertTrue(all(re.match(r"\S+\s+\d+ ", r) for r in rows), rows)
        lines = self.ctl("list", "--output=id,path", "--fs", "data")[0].decode().splitlines()
        self.assertEqual(lines[0].split(), ["ID", "PATH"])
        self.assertIn(f"{btrfs_rootid(self.mnt + '/vol')} /vol", re.sub(r" +", " ", "\n".join(lines)))
        self.assertIn("Unknown column", self.ctl("list", "--output=nosuch", rc=2)[1])
        table = self.ctl("--bytes", "list")[0].decode().splitlines()[:-2]
        self.assertEqual(len({l.index("/") for l in table[1:]}), 1, "PATH must start in one column:\n" +
                         "\n".join(table))

    def test_what_snapshots_cost(self):
        """list's SNAPSHOTS and WRITTEN, and free, on a filesystem the
        scanner measures (quotas off), against sizes known by
        construction: 1 MiB files, each one extent."""
        mib = 1 << 20
        base = self.other_mnt
        subvolume_create(f"{base}/vol")
        write = lambda name: (write_random(f"{base}/vol/{name}", mib), os.sync())
        write("a")
        snapshot(f"{base}/vol", f"{base}/s1", readonly=True)
        write("b")
        snapshot(f"{base}/vol", f"{base}/s2", readonly=True)
        os.unlink(f"{base}/vol/a")
        write("c")
        os.sync()
        for file in (f"{base}/s1/a", f"{base}/vol/b", f"{base}/vol/c"):
            self.assertIn(": 1 extent found", run("filefrag", file).decode(), "one extent per file, by construction")
        # a: s1, s2; b: s2, vol; c: vol.
        vol = lambda: next((r for r in self.json("list", "--fs", base) if r["path"] == "/vol"), {})
        wait_for(lambda: (vol().get("snapshots_exclusive"), vol().get("written")) == (mib, mib),
                 "the scanner's snapshot figures")
        row = next(l.split() for l in self.ctl("--bytes", "list", "--fs", base)[0].decode().splitlines()
                   if l.endswith(" /vol"))
        # REFERENCED b and c; EXCLUSIVE c; SNAPSHOTS a (only s1 and s2 have it); WRITTEN c (not in s2).
        self.assertEqual([int(v) for v in row[3:7]], [2 * mib, mib, mib, mib])
        # RATIO: logical over referenced, nothing compressed here.
        df = next(l.split() for l in self.ctl("df", f"{base}/vol")[0].decode().splitlines()[1:])
        shown = self.json("show", f"{base}/vol")
        self.assertEqual(shown["logical_referenced"], shown["referenced"])
        self.assertEqual(df[5], "1.00x")
        free = lambda *args: self.json("free", *args)[0]["bytes"]
        self.assertEqual(free(f"{base}/s1"), 0)
        self.assertEqual(free(f"{base}/s2"), 0)
        self.assertEqual(free(f"{base}/s1", f"{base}/s2"), mib)
        self.assertEqual(free(f"{base}/s[12]"), mib)  # a pattern, expanded by subvolctl
        self.assertEqual(free("--snapshots-of", f"{base}/vol"), mib)
        self.assertEqual(free(f"{base}/vol", f"{base}/s2"), 2 * mib)  # b and c
        self.assertEqual(free(f"{base}/vol", f"{base}/vol/."), mib)  # named twice, counted once
        text = self.ctl("free", f"{base}/s1", f"{base}/s2")[0].decode()
        self.assertIn("Deleting these 2 would free 1.0M of data.", text)
        self.assertIn("not a subvolume", self.ctl("free", f"{base}/vol/b", rc=2)[1])
        # Quotas on: unknown, said so.
        self.assertIsNone(self.json("free", f"{self.mnt}/snap")[0]["bytes"])
        self.assertIn("unknown", self.ctl("free", f"{self.mnt}/snap")[0].decode())
        metrics = self.ctl("metrics")[0].decode()
        vid = btrfs_rootid(f"{base}/vol")
        self.assertIn(f'subvold_subvolume_snapshots_exclusive_bytes{{uuid="{self.other.uuid}",id="{vid}"}} {mib}\n',
                      metrics)
        self.assertIn(f'subvold_subvolume_written_bytes{{uuid="{self.other.uuid}",id="{vid}"}} {mib}\n', metrics)

    def test_help_and_man_page_agree(self):
        """Every command and option the help names, the man page
        describes, and the other way round."""
        with open(MAN_PAGE) as f:
            man = f.read().replace("\\-", "-")
        section = lambda name: man.split(f".SH {name}\n", 1)[1].split("\n.SH ", 1)[0]
        man_commands = {re.match(r"(?:\\fB|\.B )([a-z]+)", tp)[1] for tp in section("COMMANDS").split(".TP\n")[1:]}
        help_text = self.ctl("help")[0].decode()
        commands = set(re.findall(r"^  ([a-z]+)", help_text.split("Commands:\n", 1)[1].split("\n\n", 1)[0], re.M))
        self.assertEqual(commands - {"help"}, man_commands)
        options = set(re.findall(r"--[a-z][a-z-]*", help_text))
        for command in commands - {"help"}:
            options |= set(re.findall(r"--[a-z][a-z-]*", self.ctl("help", command)[0].decode()))
        self.assertEqual(options, set(re.findall(r"--[a-z][a-z-]*", section("OPTIONS"))))

    def test_pager(self):
        """On a terminal, output goes through $SUBVOLCTL_PAGER; --no-pager,
        or not a terminal, and it does not."""
        shared = self.path("paged")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        record = os.path.join(shared, "out")

        def on_terminal(*args):
            master, slave = pty.openpty()
            try:
                env = dict(self.bus.env, SUBVOLCTL_PAGER=f"cat > {record}")
                p = subprocess.Popen([SUBVOLCTL, *args], stdin=slave, stdout=slave, stderr=slave, env=env,
                                     **self.bus.client.process_args())
                os.close(slave)
                slave = None
                seen = b""
                while True:  # drain the terminal until the program is gone
                    ready, _, _ = select.select([master], [], [], 30)
                    try:
                        chunk = os.read(master, 65536) if ready else b""
                    except OSError:
                        chunk = b""
                    if not chunk:
                        break
                    seen += chunk
                self.assertEqual(p.wait(30), 0)
                return seen
            finally:
                os.close(master)
                if slave is not None:
                    os.close(slave)

        on_terminal("list")
        with open(record, "rb") as f:
            self.assertIn(b"FILESYSTEM", f.read())
        os.unlink(record)
        self.assertIn(b"FILESYSTEM", on_terminal("--no-pager", "list"))
        self.assertFalse(os.path.exists(record))
        self.bus.run(SUBVOLCTL, "list", check=True)  # stdout a pipe
        self.assertFalse(os.path.exists(record))

    def test_filesystems_in_view(self):
        lines = self.ctl("filesystems")[0].decode().splitlines()
        self.assertEqual(lines[0].split()[:4], ["FILESYSTEM", "UUID", "DEVICES", "SIZE"])
        rows = {l.split()[1]: l.split() for l in lines[1:]}
        self.assertEqual(rows[self.fs.uuid][0], "data")
        self.assertEqual(rows[self.fs.uuid][2], self.fs.device)
        self.assertEqual(rows[self.fs.uuid][6], "qgroup")
        self.assertEqual(rows[self.other.uuid][6], "disabled")
        fs = next(f for f in self.json("filesystems") if f["uuid"] == self.fs.uuid)
        st = os.statvfs(self.mnt)
        self.assertEqual(fs["size"], st.f_blocks * st.f_frsize)
        self.assertEqual((fs["devices"], fs["mount_points"], fs["quota_mode"]), ([self.fs.device], [self.mnt], "qgroup"))
        # --fs by label, UUID with or without dashes, mount point, path below, object.
        expected = sorted(r["id"] for r in self.json("list") if r["filesystem"] == self.fs.uuid)
        for spec in ("data", self.fs.uuid, self.fs.hex.upper(), self.mnt, f"{self.mnt}/vol/file", self.fs.object_path):
            with self.subTest(spec=spec):
                self.assertEqual(sorted(r["id"] for r in self.json("list", "--fs", spec)), expected)
        self.assertIn("No btrfs filesystem \"nosuch\"", self.ctl("list", "--fs", "nosuch", rc=5)[1])
        # show on a filesystem: by --fs and by its object path.
        props = self.ctl("show", "--fs", "data")[0].decode()
        self.assertIn(f"Uuid={self.fs.uuid}\n", props)
        self.assertIn("QuotaMode=qgroup\n", props)
        self.assertIn(f"Devices={self.fs.device}\n", props)
        self.assertEqual(self.ctl("show", self.fs.object_path)[0].decode(), props)
        # Several filesystems in list: each row says which.
        names = {l.split()[0] for l in self.ctl("--no-legend", "list")[0].decode().splitlines()}
        self.assertEqual(names, {"data", "lab\\x1b]0;owned\\x07el"})

    def test_show_for_people(self):
        vol = f"{self.mnt}/vol"
        run("btrfs", "qgroup", "limit", str(100 << 20), vol)
        wait_for(lambda: "ReferencedLimitBytes=100M\n" in self.ctl("show", vol)[0].decode(), "the limit")
        props = self.ctl("show", vol)[0].decode()
        self.assertIn("ExclusiveLimitBytes=infinity\n", props)
        self.assertIn("ParentUuid=-\n", props)
        self.assertIn("SnapshotSource=-\n", props)
        self.assertRegex(props, r"\nCreationTime=\w{3} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+\n")
        self.assertIn(f"AccessPaths={vol}\n", props)
        self.assertIn("ReferencedLimitBytes=104857600\n", self.ctl("--bytes", "show", vol)[0].decode())
        # The other filesystem has quotas off and no scan result may be
        # there yet; what is unknown shows "-" (never 2^64 - 1).
        other = self.ctl("show", self.other_mnt)[0].decode()
        self.assertNotIn("18446744073709551615", other + props)

    def monitor(self, *args):
        test = self

        class Mon:
            def __enter__(self):
                self.proc = subprocess.Popen([SUBVOLCTL, *args, "monitor"], env=test.bus.env, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True, **test.bus.client.process_args())
                self.lines, self.errors = [], []
                self.threads = [threading.Thread(target=self._read, args=(s, l), daemon=True)
                                for s, l in ((self.proc.stdout, self.lines), (self.proc.stderr, self.errors))]
                for t in self.threads:
                    t.start()
                return self

            def _read(self, stream, into):
                for line in stream:
                    into.append(line.rstrip("\n"))

            def wait(self, predicate, what, stream=None):
                found = []
                wait_for(lambda: found.extend(l for l in (stream or self.lines) if predicate(l)) or found,
                         f"monitor to print {what}; it printed {self.lines} {self.errors}", timeout=60)
                return found[0]

            def __exit__(self, *exc):
                self.proc.terminate()
                status = self.proc.wait(10)
                for t in self.threads:
                    t.join(10)
                self.proc.stdout.close()
                self.proc.stderr.close()
                if exc[0] is None:
                    test.assertEqual(status, 0, self.errors)

        return Mon()

    def test_monitor_says_what_changed(self):
        stamp = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
        with self.monitor() as mon:
            mon.wait(lambda l: l.startswith("Monitoring subvold"), "that it listens", mon.errors)
            vid = btrfs_rootid(f"{self.mnt}/vol")
            os.rename(f"{self.mnt}/vol", f"{self.mnt}/moved")
            head = mon.wait(lambda l: f"changed subvolume /vol (id {vid} on data)" in l, "the rename")
            self.assertRegex(head, stamp)
            mon.wait(lambda l: l == "    Path: /vol → /moved", "old and new path")
            subvolume_create(f"{self.mnt}/{NAMES['csi'].decode()}2")
            added = mon.wait(lambda l: " added subvolume " in l, "the new subvolume")
            self.assertIn(f"added subvolume /{ESCAPED['csi']}2 (id", added)
            run("btrfs", "subvolume", "delete", f"{self.mnt}/{NAMES['csi'].decode()}2")
            mon.wait(lambda l: f" removed subvolume /{ESCAPED['csi']}2 " in l, "the deletion")
        # Only what moved: the rename changed paths, not flags or sizes.
        block = mon.lines[mon.lines.index(head) + 1:]
        block = block[:next((i for i, l in enumerate(block) if not l.startswith("    ")), len(block))]
        self.assertEqual({l.split(":")[0].strip() for l in block} - {"Path", "Name", "DisplayPath", "AccessPaths"},
                         set(), block)
        text = "\n".join(mon.lines).encode()
        assert_terminal_safe(self, text, "monitor")

    def test_monitor_waits_for_subvold(self):
        self.daemon.stop()
        with self.monitor() as mon:
            mon.wait(lambda l: l == "subvold is not running; waiting for it to start.", "that it waits", mon.errors)
            self.daemon = Daemon(self, self.bus)
            mon.wait(lambda l: l.endswith(" subvold started"), "that subvold started")
            subvolume_create(f"{self.mnt}/late")
            mon.wait(lambda l: " added subvolume /late " in l, "a change after the start")

    def test_messages_name_what_the_user_gave(self):
        os.makedirs(self.path("plain-dir"), exist_ok=True)
        _, err = self.ctl("show", "/proc", rc=4)
        self.assertEqual(err, "/proc is not on a btrfs filesystem.\n")
        _, err = self.ctl("show", self.path("nosuch"), rc=1)
        self.assertEqual(err, f"{self.path('nosuch')}: No such file or directory\n")
        self.assertIn("subvold has no subvolume or filesystem", self.ctl("show", f"{self.fs.object_path}/9999", rc=5)[1])
        # A second subvold: said plainly, without <N> prefixes on a terminal.
        master, slave = pty.openpty()
        try:
            p = subprocess.run([SUBVOLD], env=self.bus.env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                               timeout=120)
            os.close(slave)
            slave = None
            out = b""
            while select.select([master], [], [], 1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        finally:
            os.close(master)
            if slave is not None:
                os.close(slave)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"subvold is already running: another process owns org.subvold.Subvold1", out)
        self.assertNotRegex(out, rb"(^|\n)<\d>")
        # Not on a terminal (a pipe, a file, the journal): the level stays.
        p = subprocess.run([SUBVOLD], env=self.bus.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.assertRegex(p.stdout, rb"<3>subvold is already running")

    def test_metrics(self):
        out = self.ctl("metrics")[0]
        check = subprocess.run(["promtool", "check", "metrics"], input=out, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
        self.assertEqual(check.returncode, 0, check.stdout.decode())
        text = out.decode()
        # Values carry uuid and id only; names and modes are on _info.
        for line in text.splitlines():
            if line.startswith("subvold_subvolume_") and "_info{" not in line:
                self.assertRegex(line, r'^\w+\{uuid="[0-9a-f-]{36}",id="\d+"\} \d+$')
            if line.startswith("subvold_filesystem_") and "_info{" not in line:
                self.assertRegex(line, r'^\w+\{uuid="[0-9a-f-]{36}"\} [\d.e+-]+$')
        self.assertIn(f'subvold_filesystem_info{{uuid="{self.fs.uuid}",label="data",quota_mode="qgroup"}} 1', text)
        self.assertIn(f'subvold_filesystem_quota_consistent{{uuid="{self.fs.uuid}"}} 1', text)
        self.assertIn(f'subvold_filesystem_scan_progress_ratio{{uuid="{self.fs.uuid}"}} 1', text)
        self.assertIn("subvold_up 1\n", text)
        vid = btrfs_rootid(f"{self.mnt}/vol")
        self.assertIn(f'subvold_subvolume_info{{uuid="{self.fs.uuid}",id="{vid}",path="/vol",snapshot="false",'
                      'read_only="false",source="qgroup"} 1', text)
        # --output: written atomically, also when subvold is gone.
        shared = self.path("textfile")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        target = os.path.join(shared, "subvold.prom")
        self.ctl("metrics", f"--output={target}")
        self.assertEqual(os.listdir(shared), ["subvold.prom"])
        with open(target) as f:
            written = f.read()
        strip = lambda t: re.sub(r"(?m)^subvold_last_success_timestamp_seconds .*$", "", t)
        self.assertEqual(strip(written), strip(text))
        inode = os.stat(target).st_ino
        self.daemon.stop()
        self.ctl("metrics", f"--output={target}", rc=3)
        with open(target) as f:
            self.assertRegex(f.read(), r"(?m)^subvold_up 0$")
        # Replaced by rename(), not rewritten where a reader may be.
        self.assertNotEqual(os.stat(target).st_ino, inode)
        self.assertEqual(os.listdir(shared), ["subvold.prom"])

    def test_generic_clients(self):
        # gdbus introspect --recurse sees every object once.
        out = self.bus.run("gdbus", "introspect", "--system", "--dest", BUS_NAME, "--object-path", MANAGER_PATH,
                           "--recurse", check=True).stdout.decode()
        nodes = re.findall(r"^\s*node (\S+) \{", out, re.M)
        self.assertEqual(len(nodes), len(set(nodes)), "objects listed twice")
        rows = self.json("list")
        self.assertEqual({n for n in nodes if n.startswith(f"{MANAGER_PATH}/fs/")},
                         {r["object"] for r in rows} | {f["object"] for f in self.json("filesystems")})
        # GetSubvolumeByPathBytes: a path that is not UTF-8, with and without its NUL.
        path = os.fsencode(self.mnt) + b"/" + NAMES["bad"] + b"/inside"
        expected = next(r["object"] for r in rows if r["path"] == list(b"/" + NAMES["bad"]))
        for data in (path, path + b"\0"):
            out = self.bus.busctl("call", BUS_NAME, MANAGER_PATH, MANAGER_IFACE, "GetSubvolumeByPathBytes", "ay",
                                  str(len(data)), *map(str, data))[1].decode()
            self.assertEqual(out.strip(), f'o "{expected}"')
        rc, _, err = self.bus.busctl("call", BUS_NAME, MANAGER_PATH, MANAGER_IFACE, "GetSubvolumeByPathBytes", "ay",
                                     "3", "47", "0", "97", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn(b"NUL", err)
        rc, _, err = self.bus.busctl("call", BUS_NAME, MANAGER_PATH, MANAGER_IFACE, "GetSubvolumeByPathBytes", "ay",
                                     "5000", *["47"] * 5000, check=False)
        self.assertIn(b"longer than PATH_MAX", err)


if __name__ == "__main__":
    main()
