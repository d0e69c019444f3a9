#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""subvold under a real systemd: a minimal Debian 12 root with systemd and
dbus (debootstrap, cached between runs), the build installed into it with
`meson install --destdir`, booted with systemd-nspawn with a loop btrfs
bind-mounted in.  From inside: the first busctl call activates subvold
through D-Bus activation and the shipped unit, hardening unchanged; it
lists the filesystem's subvolumes right; systemd-analyze security rates
the unit's exposure 2.0 or better."""

import errno
import glob
import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time

from harness import SOURCE_DIR, Btrfs, TestCase, btrfs_subvolume_list, main, run, snapshot, subvolume_create, wait_for

PACKAGES = "systemd,systemd-sysv,dbus,libsystemd0,libbtrfsutil1,btrfs-progs"
DEBOOTSTRAP_ARGS = ["--variant=minbase", f"--include={PACKAGES}", "bookworm"]
# Cached between runs under a name derived from what makes it, so a change
# of packages, options or release builds a new one.
ROOT_CACHE_PREFIX = os.environ.get("SUBVOLD_TEST_ROOT_CACHE", "/var/tmp/subvold-test-root") + "-"
ROOT_CACHE = ROOT_CACHE_PREFIX + hashlib.sha256(json.dumps(DEBOOTSTRAP_ARGS).encode()).hexdigest()[:16]
MAX_EXPOSURE = 2.0


def debian_mirror():
    """The machine's own Debian mirror, from its apt sources."""
    for path in glob.glob("/etc/apt/sources.list.d/*.sources"):
        with open(path) as f:
            for line in f:
                if line.startswith("URIs:") and "security" not in line:
                    return line.split()[1]
    with open("/etc/apt/sources.list") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and fields[0] == "deb" and "security" not in fields[1]:
                return fields[1]
    raise AssertionError("no Debian mirror in the apt sources")


def cached_root():
    """A pristine Debian root made by debootstrap with DEBOOTSTRAP_ARGS, built
    once per ROOT_CACHE.  Built aside and renamed into place, so that a run
    cut short leaves nothing half made, and concurrent runs each find either
    no root or a whole one."""
    if os.path.isdir(ROOT_CACHE):
        return ROOT_CACHE
    tmp = tempfile.mkdtemp(prefix=os.path.basename(ROOT_CACHE) + ".tmp-", dir=os.path.dirname(ROOT_CACHE))
    os.chmod(tmp, 0o755)  # it becomes the container's /
    try:
        run("debootstrap", *DEBOOTSTRAP_ARGS, tmp, debian_mirror())
        os.rename(tmp, ROOT_CACHE)
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):  # else another run was first
            raise
    finally:
        remove_tree(tmp)
    # Roots made from other arguments are stale now.
    for stale in glob.glob(ROOT_CACHE_PREFIX + "[0-9a-f]" * 16):
        if stale != ROOT_CACHE:
            remove_tree(stale)
    return ROOT_CACHE


def remove_tree(path):
    """rm -rf, but not into file systems mounted below @path: debootstrap
    mounts /proc and /sys in its target, and one it left behind must stay
    untouched."""
    run("rm", "-rf", "--one-file-system", path, check=False)


class Container:
    """systemd-nspawn booting @root; commands run inside with nsenter."""

    def __init__(self, test, root, *nspawn_args):
        self.log = open(test.path("nspawn.log"), "wb")
        self.proc = subprocess.Popen(["systemd-nspawn", "--register=no", "--keep-unit", "--boot", "--console=pipe",
                                      "-D", root, *nspawn_args],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        test.stack.callback(self.stop)
        wait_for(self.find_init, "the container's init", timeout=60)
        wait_for(lambda: self.run("systemctl", "is-system-running", check=False).strip() in (b"running", b"degraded"),
                 "the container to boot", timeout=120)

    def find_init(self):
        if self.proc.poll() is not None:
            raise AssertionError("systemd-nspawn exited; see nspawn.log")
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            if int(fields[1]) == self.proc.pid and comm == "systemd":
                self.init = int(pid)
                return True
        return False

    def run(self, *args, check=True):
        """Runs a command inside the container, with a clean environment."""
        p = subprocess.run(["nsenter", "-t", str(self.init), "-a", "env", "-i",
                            "PATH=/usr/sbin:/usr/bin:/sbin:/bin", *args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if check and p.returncode != 0:
            raise AssertionError(f"{args} in the container: {p.stderr.decode(errors='replace')}")
        return p.stdout

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # nspawn powers the container off
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class SystemdTest(TestCase):
    def test_activation_under_systemd(self):
        root = self.path("root")
        # --reflink where the file system can; a plain copy otherwise.
        run("cp", "-a", "--reflink=auto", cached_root(), root)

        # The build, installed as a distribution package would be.
        build = self.path("build")
        run("meson", "setup", build, SOURCE_DIR, "--prefix=/usr", "-Dtests=false")
        run("meson", "compile", "-C", build)
        run("meson", "install", "-C", build, "--destdir", root, "--no-rebuild")
        with open(os.path.join(build, "units", "subvold.service")) as f:
            shipped_unit = f.read()

        fs = Btrfs(self, "data")
        mnt = fs.mount(self.path("data"))
        subvolume_create(f"{mnt}/vol")
        subvolume_create(f"{mnt}/vol/nested")
        snapshot(f"{mnt}/vol", f"{mnt}/snap", readonly=True)
        os.sync()

        container = Container(self, root, f"--bind={mnt}:/mnt/data")
        self.assertEqual(container.run("systemctl", "show", "-p", "ActiveState", "--value", "subvold.service").strip(),
                         b"inactive", "subvold must not run before it is asked for")

        # The first call activates it.
        out = container.run("busctl", "--json=short", "call", "org.subvold.Subvold1", "/org/subvold/Subvold1",
                            "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
        objects = json.loads(out)["data"][0]
        self.assertEqual(container.run("systemctl", "show", "-p", "ActiveState", "--value", "subvold.service").strip(),
                         b"active")
        unit_path = container.run("systemctl", "show", "-p", "FragmentPath", "--value", "subvold.service").strip()
        with open(root + unit_path.decode()) as f:
            self.assertEqual(f.read(), shipped_unit, "the unit must be the shipped one, hardening unchanged")

        # It sees the bind-mounted filesystem as btrfs-progs does.
        prefix = f"/org/subvold/Subvold1/fs/{fs.hex}/"
        published = {int(p[len(prefix):]): v["org.subvold.Subvold1.Subvolume"] for p, v in objects.items()
                     if p.startswith(prefix)}
        truth = btrfs_subvolume_list(mnt)
        self.assertEqual(set(published), {5, *truth})
        for subvolume_id, t in truth.items():
            props = published[subvolume_id]
            self.assertEqual(bytes(props["Path"]["data"][:-1]), b"/" + t["path"])
            self.assertEqual(props["Uuid"]["data"], t["uuid"])
            self.assertEqual([bytes(p[:-1]) for p in props["AccessPaths"]["data"]], [b"/mnt/data/" + t["path"]])
        fs_props = objects[f"/org/subvold/Subvold1/fs/{fs.hex}"]["org.subvold.Subvold1.Filesystem"]
        self.assertEqual([bytes(p[:-1]) for p in fs_props["MountPoints"]["data"]], [b"/mnt/data"])

        # Its cache directory was made by systemd (CacheDirectory=) and used.
        wait_for(lambda: os.path.exists(f"{root}/var/cache/subvold/usage.cache"), "the usage cache")

        # Debian 12's systemd filters listmount()/statmount() out with EPERM
        # (SystemCallFilter=@system-service predates them): subvold falls
        # back to mountinfo, as the README says.
        journal = container.run("journalctl", "-u", "subvold.service", "--no-pager").decode()
        self.assertIn("mounts from /proc/self/mountinfo", journal, journal)

        out = container.run("systemd-analyze", "security", "subvold.service").decode()
        exposure = float(re.search(r"Overall exposure level for subvold.service: ([0-9.]+)", out)[1])
        print(f"systemd-analyze security: exposure {exposure}")
        self.assertLessEqual(exposure, MAX_EXPOSURE, out)


if __name__ == "__main__":
    main()
