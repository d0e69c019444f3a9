#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The clients people use: subvolctl (list, df, show, monitor, metrics,
exit codes), Prometheus node_exporter scraping `subvolctl metrics` through
its textfile collector, and a GLib file manager built on the code
gdbus-codegen generates from the XML.  Ground truth from btrfs-progs and
statvfs()."""

import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET

from harness import (SOURCE_DIR, SUBVOLUME_IFACE, Btrfs, Bus, Daemon, TestCase, btrfs_rootid, btrfs_subvolume_list,
                     btrfs_subvolume_show, main, qgroup_show, root_items, run, snapshot, subvolume_create,
                     wait_for)

SUBVOLCTL = os.environ.get("SUBVOLCTL", "")
FILE_MANAGER = os.environ.get("SUBVOLD_FILE_MANAGER", "")
UNKNOWN = 2**64 - 1


def parse_metrics(text):
    """Prometheus text exposition: {(name, frozenset(labels)): value}."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, f"malformed sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m[2] or ""))
        samples[(m[1], labels)] = float(m[3])
    return samples


class DaemonTest(TestCase):
    """A test with self.bus and self.daemon, which must end cleanly."""

    def tearDown(self):
        if not self.daemon.stopped:
            self.daemon.stop()
        super().tearDown()

    def ctl(self, *args, rc=0, user=None):
        """Runs subvolctl as @user (default: the bus's ordinary user);
        returns its stdout and stderr."""
        p = self.bus.run(SUBVOLCTL, *args, user=user)
        self.assertEqual(p.returncode, rc, f"subvolctl {args}: {p.stderr.decode(errors='replace')}")
        return p.stdout.decode(), p.stderr.decode()


class ClientsTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs", size="1G", label="data")
        self.mnt = mnt = self.fs.mount(self.path("mnt"))
        subvolume_create(f"{mnt}/vol")
        with open(f"{mnt}/vol/file", "wb") as f:
            f.write(os.urandom(3 << 20))
        run("btrfs", "quota", "enable", mnt)
        run("btrfs", "quota", "rescan", "-w", mnt)
        run("btrfs", "qgroup", "limit", str(200 << 20), f"{mnt}/vol")
        snapshot(f"{mnt}/vol", f"{mnt}/snap-ro", readonly=True)
        snapshot(f"{mnt}/vol", f"{mnt}/snap-rw")
        subvolume_create(f"{mnt}/other")
        os.sync()
        self.bus = Bus(self)
        self.daemon = Daemon(self, self.bus)

    def ids(self, *names):
        return {btrfs_rootid(os.path.join(self.mnt, n)) for n in names}

    def test_list(self):
        truth = btrfs_subvolume_list(self.mnt)
        quota = qgroup_show(self.mnt)
        items = root_items(self.fs.device)
        rows = [r for r in json.loads(self.ctl("--json", "list", "--fs", self.fs.uuid)[0])]
        self.assertEqual({r["id"] for r in rows}, {5, *truth})
        for r in rows:
            self.assertEqual(r["filesystem"], self.fs.uuid)
            self.assertEqual((r["referenced"], r["exclusive"]), quota[r["id"]][:2])
            self.assertIsNone(r["inodes"])
            self.assertEqual(r["read_only"], items[r["id"]]["readonly"])
            if r["id"] != 5:
                self.assertEqual(r["path"], "/" + truth[r["id"]]["path"].decode())
                self.assertEqual(r["snapshot"], truth[r["id"]]["parent_uuid"] != "")
        snaps = json.loads(self.ctl("--json", "list", "--snapshots", "--fs", self.mnt)[0])
        self.assertEqual({r["id"] for r in snaps}, self.ids("snap-ro", "snap-rw"))
        self.assertEqual({r["id"]: r["read_only"] for r in snaps},
                         {btrfs_rootid(f"{self.mnt}/snap-ro"): True, btrfs_rootid(f"{self.mnt}/snap-rw"): False})
        plain = json.loads(self.ctl("--json", "list", "--no-snapshots", "--fs", self.mnt)[0])
        self.assertEqual({r["id"] for r in plain}, {5} | self.ids("vol", "other"))

        # The table, with exact bytes and with IEC sizes.
        out = self.ctl("--bytes", "list", "--fs", self.fs.uuid)[0].splitlines()
        self.assertEqual(out[0].split(), ["FILESYSTEM", "ID", "FLAGS", "REFERENCED", "EXCLUSIVE", "SNAPSHOTS", "WRITTEN",
                                          "INODES", "PATH"])
        row = next(l.split() for l in out[1:] if l.split()[1:2] == [str(btrfs_rootid(f"{self.mnt}/snap-ro"))])
        self.assertEqual(row[0], "data")
        self.assertEqual(row[2], "SR")
        self.assertEqual(int(row[3]), quota[int(row[1])][0])
        self.assertEqual(row[8], "/snap-ro")
        human = self.ctl("list", "--fs", self.fs.uuid)[0].splitlines()
        vol = btrfs_rootid(f"{self.mnt}/vol")
        row = next(l.split() for l in human[1:] if l.split()[1:2] == [str(vol)])
        # Sizes as `df -h` gives them: rounded up, one decimal below 10.
        self.assertEqual(row[3], run("numfmt", "--to=iec", "--round=up", str(quota[vol][0])).decode().strip())

    def test_df(self):
        """subvolctl df as test_df checks it, here on a filesystem with
        quotas and snapshots: by path, every subvolume, the table."""
        st = os.statvfs(self.mnt)
        bs = st.f_bsize
        quota = qgroup_show(self.mnt)
        rfer, excl, limit, _ = quota[btrfs_rootid(f"{self.mnt}/vol")]
        rows = json.loads(self.ctl("--json", "df", f"{self.mnt}/vol/file", f"{self.mnt}/other")[0])
        vol, other = rows
        self.assertEqual(vol["path"], "/vol")
        self.assertEqual(vol["filesystem"], self.fs.uuid)
        self.assertEqual(vol["used"], -(-rfer // bs) * bs)
        self.assertEqual(vol["size"], limit)  # the limit binds
        self.assertEqual(vol["available"], min((limit - rfer) // bs, st.f_bavail) * bs)
        self.assertEqual((vol["mounted"], vol["mounted_on"]), (False, f"{self.mnt}/vol"))
        self.assertEqual(vol["use_percent"], -(-vol["used"] * 100 // (vol["used"] + vol["available"])))
        self.assertIsNone(vol["inodes"])  # btrfs counts no inodes per qgroup
        other_rfer = quota[btrfs_rootid(f"{self.mnt}/other")][0]
        self.assertEqual((other["used"], other["available"]), (-(-other_rfer // bs) * bs, st.f_bavail * bs))
        # Without paths: the mounted subvolumes; --all: every subvolume.
        mounted = json.loads(self.ctl("--json", "df")[0])
        self.assertEqual([(r["path"], r["mounted_on"]) for r in mounted if r["filesystem"] == self.fs.uuid],
                         [("/", self.mnt)])
        every = json.loads(self.ctl("--json", "df", "--all")[0])
        self.assertEqual(sorted(r["path"] for r in every if r["object"].startswith(self.fs.object_path + "/")),
                         sorted(["/"] + ["/" + t["path"].decode() for t in btrfs_subvolume_list(self.mnt).values()]))
        text = self.ctl("df", f"{self.mnt}/vol")[0].splitlines()
        self.assertEqual(text[0].split(), ["SUBVOLUME", "SIZE", "USED", "AVAIL", "USE%", "RATIO", "MOUNTED", "ON"])
        self.assertEqual(text[1].split()[1], "200M")
        self.assertEqual(text[1].split()[5], "-")  # quotas on: no scan, no logical size

    def test_show(self):
        snap = f"{self.mnt}/snap-ro"
        sid = btrfs_rootid(snap)
        out = self.ctl("--bytes", "show", snap)[0]
        props = dict(line.split("=", 1) for line in out.splitlines())
        with open(os.path.join(SOURCE_DIR, "dbus", "org.subvold.Subvold1.xml")) as f:
            contract = {p.get("name") for i in ET.fromstring(f.read()).iter("interface")
                        if i.get("name") == "org.subvold.Subvold1.Subvolume" for p in i.iter("property")}
        self.assertEqual(set(props) - {"Object"}, contract, "show must print every property")
        # The figures against btrfs-progs and the root item on disk.
        truth = btrfs_subvolume_show(self.mnt, sid)
        item = root_items(self.fs.device)[sid]
        uuid = lambda b: "" if b == b"-" else b.decode()
        rfer, excl, max_rfer, max_excl = (UNKNOWN if v is None else v for v in qgroup_show(self.mnt)[sid])
        expected = {"Id": sid, "ParentId": int(truth["Parent ID"]), "Path": "/snap-ro", "Uuid": uuid(truth["UUID"]),
                    "ParentUuid": uuid(truth["Parent UUID"]), "ReceivedUuid": uuid(truth["Received UUID"]),
                    "IsSnapshot": truth["Parent UUID"] != b"-", "ReadOnly": item["readonly"],
                    "Generation": item["generation"], "ChangeGeneration": item["ctransid"],
                    "CreationTime": item["otime_usec"], "ReferencedBytes": rfer, "ExclusiveBytes": excl,
                    "ReferencedLimitBytes": max_rfer, "ExclusiveLimitBytes": max_excl}
        # As people read them: "-" for no UUID, "infinity" for no limit, a date.
        text = {k: ("yes" if v else "no") if isinstance(v, bool) else "-" if v == "" else
                "infinity" if v == UNKNOWN and k.endswith("LimitBytes") else str(v) for k, v in expected.items()}
        text["CreationTime"] = time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(item["otime_usec"] // 10**6))
        self.assertEqual({k: props[k] for k in expected}, text)
        # JSON: the schema's names, null for none and for no limit.
        shown = json.loads(self.ctl("--json", "show", props["Object"])[0])
        names = {"Id": "id", "ParentId": "parent_id", "Path": "path", "Uuid": "uuid", "ParentUuid": "parent_uuid",
                 "ReceivedUuid": "received_uuid", "IsSnapshot": "snapshot", "ReadOnly": "read_only",
                 "Generation": "generation", "ChangeGeneration": "change_generation",
                 "CreationTime": "creation_time", "ReferencedBytes": "referenced", "ExclusiveBytes": "exclusive",
                 "ReferencedLimitBytes": "referenced_limit", "ExclusiveLimitBytes": "exclusive_limit"}
        self.assertEqual({names[k]: shown[names[k]] for k in expected},
                         {names[k]: None if v in ("", UNKNOWN) else v for k, v in expected.items()})

    def test_exit_codes_and_messages(self):
        _, err = self.ctl("df", "/proc/self/status", rc=4)
        self.assertEqual("/proc/self/status is not on a btrfs filesystem.\n", err)
        self.ctl("show", f"{self.fs.object_path}/99999", rc=5)
        self.ctl("list", "--fs", "00000000-0000-0000-0000-000000000000", rc=5)
        self.ctl("frobnicate", rc=2)
        self.ctl("--no-such-option", "list", rc=2)
        self.assertIn("Usage", self.ctl("--help")[0])
        self.daemon.stop()
        _, err = self.ctl("list", rc=3)
        self.assertIn("subvold is not running", err)

    def test_monitor(self):
        mon = subprocess.Popen([SUBVOLCTL, "--json", "monitor"], env=self.bus.env, stdout=subprocess.PIPE, text=True,
                               **self.bus.client.process_args())
        self.stack.callback(mon.stdout.close)
        self.stack.callback(mon.wait)
        self.stack.callback(mon.terminate)
        events, failures = [], []

        def read():
            try:
                events.extend(json.loads(l) for l in mon.stdout)
            except Exception as e:  # noqa: BLE001 -- fails the test in seen()
                failures.append(repr(e))

        def seen():
            # A reader that died fails the test here, not by a timeout.
            self.assertEqual(failures, [], "reading subvolctl monitor failed")
            return events

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        # Changes until the monitor has subscribed and reports one: only
        # then is the one we check certain to be seen.  Each flip waits
        # until subvold publishes it, so that the next is a change of its own.
        flips = iter([True, False] * 100)
        snap_rw = f"{self.fs.object_path}/{btrfs_rootid(self.mnt + '/snap-rw')}"
        changes = lambda: [e["properties"] for e in seen() if e["event"] == "changed" and e["object"] == snap_rw
                           and "read_only" in e["properties"]]

        def flip_and_look():
            if changes():
                return True
            ro = next(flips)
            run("btrfs", "property", "set", "-ts", f"{self.mnt}/snap-rw", "ro", str(ro).lower())
            wait_for(lambda: self.bus.get(snap_rw, SUBVOLUME_IFACE, "ReadOnly") == ro, "the flip published")
            return False

        wait_for(flip_and_look, "monitor to report a change", timeout=120)
        subvolume_create(f"{self.mnt}/new")
        added = ("added", f"{self.fs.object_path}/{btrfs_rootid(self.mnt + '/new')}", "/new")
        wait_for(lambda: added in [(e["event"], e["object"], e["properties"]["path"]) for e in seen()
                                   if e["event"] == "added"], "monitor to report the new subvolume")
        # What the last change reports is the kernel's flag (its last flip).
        kernel = run("btrfs", "property", "get", "-ts", f"{self.mnt}/snap-rw", "ro").decode().strip()
        wait_for(lambda: f"ro={str(changes()[-1]['read_only']).lower()}" == kernel,
                 f"the monitor to report {kernel}")
        mon.terminate()
        self.assertEqual(mon.wait(10), 0)
        reader.join()
        seen()

    def test_metrics_through_node_exporter(self):
        text = self.ctl("metrics")[0]
        samples = parse_metrics(text)
        quota = qgroup_show(self.mnt)
        mine = {dict(l)["id"]: v for (name, l), v in samples.items()
                if name == "subvold_subvolume_referenced_bytes" and dict(l)["uuid"] == self.fs.uuid}
        self.assertEqual({int(k): int(v) for k, v in mine.items()}, {k: v[0] for k, v in quota.items()})

        # node_exporter's textfile collector, scraped over HTTP on loopback.
        textdir = self.path("textfile")
        os.mkdir(textdir)
        with open(os.path.join(textdir, "subvold.prom"), "w") as f:
            f.write(text)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        exporter = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{port}",
                                     "--collector.disable-defaults", "--collector.textfile",
                                     f"--collector.textfile.directory={textdir}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.stack.callback(exporter.wait)
        self.stack.callback(exporter.terminate)
        scraped = {}

        def scrape():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    scraped["text"] = r.read().decode()
                return True
            except OSError:
                return False

        wait_for(scrape, "node_exporter to answer")
        served = parse_metrics(scraped["text"])
        vol = str(btrfs_rootid(f"{self.mnt}/vol"))
        key = ("subvold_subvolume_referenced_limit_bytes",
               frozenset({("uuid", self.fs.uuid), ("id", vol)}))
        self.assertEqual(served[key], 200 << 20)
        for sample, value in samples.items():
            self.assertEqual(served.get(sample), value, sample)

    def test_gdbus_codegen_file_manager(self):
        out = self.bus.run(FILE_MANAGER, f"{self.mnt}/vol/file", check=True).stdout.decode()
        facts = {}
        for line in out.splitlines():
            k, v = line.split(" ", 1)
            facts.setdefault(k, []).append(v)
        vol = btrfs_rootid(f"{self.mnt}/vol")
        self.assertEqual(facts["subvolume"], [f"{self.fs.object_path}/{vol}"])
        self.assertEqual(facts["path"], ["/vol"])
        self.assertEqual(facts["snapshot"], ["no"])
        self.assertEqual(int(facts["referenced"][0]), qgroup_show(self.mnt)[vol][0])
        path = f"{self.fs.object_path}/{vol}"
        self.assertEqual(facts["snapshot-of-it"],
                         [f"{self.fs.object_path}/{i} {path}" for i in sorted(self.ids("snap-ro", "snap-rw"))])
        out = self.bus.run(FILE_MANAGER, f"{self.mnt}/snap-ro/file", check=True).stdout.decode()
        self.assertIn("snapshot yes", out)
        self.assertNotIn("snapshot-of-it", out)


class FilesystemColumnTest(DaemonTest):
    """subvolctl list over several filesystems says which one each row is
    on: the label, or the short UUID where there is none or two filesystems
    share it."""

    def setUp(self):
        super().setUp()
        self.filesystems = {name: Btrfs(self, name, size="256M", label=label) for name, label in
                            [("labelled", "my data"), ("plain", None), ("twin1", "twin"), ("twin2", "twin")]}
        self.vol = {}
        for name, fs in self.filesystems.items():
            mnt = fs.mount(self.path(name))
            subvolume_create(f"{mnt}/vol")
            self.vol[name] = btrfs_rootid(f"{mnt}/vol")
        self.bus = Bus(self)
        self.daemon = Daemon(self, self.bus)

    def test_filesystem_column(self):
        fss = self.filesystems
        shown = {"labelled": "my\\x20data", "plain": fss["plain"].uuid[:8],
                 "twin1": fss["twin1"].uuid[:8], "twin2": fss["twin2"].uuid[:8]}
        lines = self.ctl("list")[0].splitlines()
        self.assertEqual(lines[0].split()[:2], ["FILESYSTEM", "ID"])
        self.assertEqual(lines[-1], f"{len(lines) - 3} subvolumes listed. FLAGS: S snapshot, R read-only.")
        lines = lines[:-2]
        self.assertEqual({(l.split()[0], int(l.split()[1]), l.split()[-1]) for l in lines[1:]},
                         {(shown[n], i, p) for n in fss for i, p in [(5, "/"), (self.vol[n], "/vol")]})
        self.assertEqual(len({len(re.match(r"\S+\s+", l)[0]) for l in lines}), 1, "columns must line up")

        rows = json.loads(self.ctl("--json", "list")[0])
        self.assertEqual({(r["filesystem"], r["id"], r["path"]) for r in rows},
                         {(fs.uuid, i, p) for n, fs in fss.items() for i, p in [(5, "/"), (self.vol[n], "/vol")]})


if __name__ == "__main__":
    main()
