#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The daemon as a process and as a packaged service: command line, signals,
no fds held on mounts, the served introspection against the XML contract,
D-Bus activation, and the systemd unit."""

import json
import os
import re
import signal
import subprocess
import xml.etree.ElementTree as ET

from harness import (BUS_NAME, GDBUS_CLIENT, MANAGER_PATH, SOURCE_DIR, SUBVOLD, SUBVOLUME_IFACE, Activation, Btrfs, Bus,
                     Daemon, TestCase, btrfs_rootid, btrfs_subvolume_list, main, run, subvolume_create, wait_for)

BUILD_DIR = os.environ.get("SUBVOLD_BUILD_DIR", "")
EMITS = "org.freedesktop.DBus.Property.EmitsChangedSignal"


def interfaces(xml_text, prefix="org.subvold."):
    """Interface name -> (methods, properties) from introspection XML, with
    EmitsChangedSignal's default ("true") made explicit."""
    result = {}
    for iface in ET.fromstring(xml_text).iter("interface"):
        name = iface.get("name")
        if not name.startswith(prefix):
            continue
        methods = {m.get("name"): [(a.get("name"), a.get("type"), a.get("direction", "in")) for a in m.iter("arg")]
                   for m in iface.iter("method")}
        props = {}
        for p in iface.iter("property"):
            emits = [a.get("value") for a in p.iter("annotation") if a.get("name") == EMITS]
            props[p.get("name")] = (p.get("type"), p.get("access"), emits[0] if emits else "true")
        result[name] = (methods, props)
    return result


class DaemonTest(TestCase):
    def setUp(self):
        super().setUp()
        self.fs = Btrfs(self, "fs")
        self.mnt = self.fs.mount(self.path("mnt"))
        subvolume_create(f"{self.mnt}/vol")

    def test_command_line(self):
        out = run(SUBVOLD, "--help").decode()
        with open(os.path.join(SOURCE_DIR, "daemon", "man", "subvold.8")) as f:
            man = f.read().replace("\\-", "-")
        # Every option is in the help and in the man page.
        options = re.findall(r"^\s+(?:-\w )?(--[\w-]+)", out, re.M)
        self.assertEqual(set(re.findall(r"^\.B[IR]? (--[\w-]+)", man.replace(", --", "\n.B --"), re.M)), set(options))
        for option in ("--help", "--version", "--mountinfo", "--cache-dir", "--exit-idle-sec", "--scan-max-memory",
                       "--scan-nice", "--scan-io-class", "--verbose"):
            self.assertIn(option, options)
        self.assertRegex(run(SUBVOLD, "--version").decode(), r"^subvold \d+\.\d+")
        p = subprocess.run([SUBVOLD, "--no-such-option"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.returncode, 2)
        p = subprocess.run([SUBVOLD, "extra-argument"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.returncode, 2)

    def test_no_bus_is_a_clear_failure(self):
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS="unix:path=" + self.path("no-such-socket"))
        p = subprocess.run([SUBVOLD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"system bus", p.stderr)

    def test_sigint_exits_cleanly(self):
        bus = Bus(self)
        daemon = Daemon(self, bus)
        daemon.stop(signal.SIGINT)

    def test_holds_no_fd_on_mounts(self):
        """Between operations no fd of subvold is on a btrfs (or a clone of
        a mount), and umount does not fail with EBUSY because of it."""
        bus = Bus(self)
        daemon = Daemon(self, bus)
        # Some work first: generation checks notice a new subvolume, a
        # refresh publishes it, the scanner measures it.
        subvolume_create(f"{self.mnt}/new")
        new = f"{self.fs.object_path}/{btrfs_rootid(self.mnt + '/new')}"
        wait_for(lambda: bus.managed_objects().get(new, {}).get(SUBVOLUME_IFACE, {}).get("UsageSource") == "scan",
                 "the new subvolume measured")
        # Twice a second a generation check opens a mount for some µs: look
        # until a sample shows none.
        daemon.fds_between_operations()
        self.fs.umount(self.mnt)  # raises if busy
        self.assertTrue(daemon.alive())
        daemon.stop()

    def test_introspection_matches_xml(self):
        bus = Bus(self)
        daemon = Daemon(self, bus)
        with open(os.path.join(SOURCE_DIR, "dbus", "org.subvold.Subvold1.xml")) as f:
            contract = interfaces(f.read())
        vol = f"{self.fs.object_path}/{btrfs_rootid(self.mnt + '/vol')}"
        served = {}
        for path in (MANAGER_PATH, self.fs.object_path, vol):
            _, out, _ = bus.busctl("introspect", "--xml-interface", BUS_NAME, path)
            served.update(interfaces(out.decode()))
        self.assertEqual(served, contract)
        # The ObjectManager is where clients expect it.
        _, out, _ = bus.busctl("introspect", "--xml-interface", BUS_NAME, MANAGER_PATH)
        self.assertIn("org.freedesktop.DBus.ObjectManager", out.decode())
        # A generic client walking the tree sees each object once.
        out = bus.run("gdbus", "introspect", "--system", "--dest", BUS_NAME, "--object-path", MANAGER_PATH,
                      "--recurse", "--only-properties", check=True).stdout.decode()
        walked = re.findall(r"^\s*node (\S+) \{", out, re.M)
        self.assertEqual(len(walked), len(set(walked)), "objects listed twice")
        self.assertEqual({p for p in walked if p.startswith(MANAGER_PATH + "/fs/")},
                         {self.fs.object_path} | {f"{self.fs.object_path}/{i}" for i in {5, *btrfs_subvolume_list(self.mnt)}})
        daemon.stop()

    def test_gdbus_client_reads_objects(self):
        """A GLib application's view: GDBusObjectManagerClient and bytestrings."""
        bus = Bus(self)
        daemon = Daemon(self, bus)
        run(b"btrfs", b"subvolume", b"snapshot", b"-r", os.fsencode(self.mnt + "/vol"),
            os.fsencode(self.mnt) + b"/snap \xff")
        run("busctl", "--system", "call", BUS_NAME, MANAGER_PATH, "org.subvold.Subvold1.Manager",
            "Refresh", env=bus.env)
        out = bus.run(GDBUS_CLIENT, "objects", check=True).stdout.decode().splitlines()
        rows = {}
        for line in out:
            path, sid, snap, ro, source, path_hex = line.split(" ")
            if path.startswith(self.fs.object_path + "/"):
                rows[bytes.fromhex(path_hex)] = (int(sid), snap == "1", ro == "1", source)
        vol_id = btrfs_rootid(self.mnt + "/vol")
        snap_id = btrfs_rootid(os.fsencode(self.mnt) + b"/snap \xff")
        self.assertEqual(rows, {
            b"/": (5, False, False, "/"),
            b"/vol": (vol_id, False, False, "/"),
            b"/snap \xff": (snap_id, True, True, f"{self.fs.object_path}/{vol_id}"),
        })
        daemon.stop()

    def test_dbus_activation(self):
        """The shipped activation file starts subvold on the first call (here
        dbus-daemon execs it directly; under systemd it would ask for
        subvold.service)."""
        with open(os.path.join(BUILD_DIR, "dbus", "org.subvold.Subvold1.service")) as f:
            text = f.read()
        self.assertIn("SystemdService=subvold.service", text)
        activation = Activation(self, text)
        bus = Bus(self, servicedir=activation.servicedir)
        self.assertEqual(bus.get(MANAGER_PATH, "org.subvold.Subvold1.Manager", "Version"),
                         run(SUBVOLD, "--version").decode().split()[1])
        pid = int(run("busctl", "--system", "--json=short", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                      "org.freedesktop.DBus", "GetConnectionUnixProcessID", "s", BUS_NAME,
                      env=bus.env).decode().split("[")[1].split("]")[0])
        os.kill(pid, signal.SIGTERM)
        activation.check(1)

    def test_install_layout(self):
        """meson install puts each file where dbus and systemd look for it."""
        dest = self.path("dest")
        run("meson", "install", "-C", BUILD_DIR, "--no-rebuild", "--destdir", dest)
        prefix = run("meson", "introspect", "--buildoptions", BUILD_DIR).decode()
        prefix = next(o["value"] for o in json.loads(prefix) if o["name"] == "prefix")
        unitdir = run("pkg-config", "--variable=systemdsystemunitdir", "systemd").decode().strip()
        expected = [f"{prefix}/share/dbus-1/system.d/org.subvold.Subvold1.conf",
                    f"{prefix}/share/dbus-1/system-services/org.subvold.Subvold1.service",
                    f"{prefix}/share/dbus-1/interfaces/org.subvold.Subvold1.xml",
                    f"{unitdir}/subvold.service"]
        bindir = next(o["value"] for o in json.loads(run("meson", "introspect", "--buildoptions", BUILD_DIR).decode())
                      if o["name"] == "bindir")
        mandir = next(o["value"] for o in json.loads(run("meson", "introspect", "--buildoptions", BUILD_DIR).decode())
                      if o["name"] == "mandir")
        for path in expected + [f"{prefix}/{bindir}/subvolctl", f"{prefix}/{mandir}/man8/subvold.8",
                                f"{prefix}/{mandir}/man1/subvolctl.1"]:
            self.assertTrue(os.path.isfile(dest + path), path)
        execs = set()
        for path, key in ((expected[1], "Exec="), (expected[3], "ExecStart=")):
            with open(dest + path) as f:
                execs |= {line.split("=", 1)[1].strip() for line in f if line.startswith(key)}
        self.assertEqual(len(execs), 1, execs)
        self.assertTrue(os.access(dest + execs.pop(), os.X_OK))

    def test_unit_verifies(self):
        """systemd-analyze verify on the installed unit (ExecStart pointed at
        the build, since nothing is installed here)."""
        with open(os.path.join(BUILD_DIR, "units", "subvold.service")) as f:
            text = f.read()
        self.assertRegex(text, r"(?m)^Type=dbus$")
        self.assertRegex(text, r"(?m)^BusName=org\.subvold\.Subvold1$")
        unit = self.path("subvold.service")
        with open(unit, "w") as f:
            f.write(re.sub(r"^ExecStart=.*$", f"ExecStart={SUBVOLD}", text, flags=re.M))
        p = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, out)
        self.assertNotIn("subvold.service:", out, out)


if __name__ == "__main__":
    main()
