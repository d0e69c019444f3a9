#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""subvold under a real systemd: a minimal Debian 12 root with systemd and
dbus (debootstrap, cached between runs) on a loop btrfs, the build under
test installed into it with `meson install --destdir`, booted with
systemd-nspawn, /home and /var btrfs too.  From inside: the first busctl
call activates subvold through D-Bus activation and the shipped unit,
hardening unchanged; it reports the container's btrfs mounts and
subvolumes as findmnt and btrfs-progs there do, not the binds systemd adds
in the unit's namespace; systemd-analyze security rates the unit's exposure
2.0 or better; stopped, it exits cleanly."""

import errno
import glob
import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile

from harness import (btrfs_rootid, BUS_NAME, FS_IFACE, MANAGER_PATH, SOURCE_DIR, SUBVOLUME_IFACE, Btrfs, TestCase,
                     assert_clean_exit, btrfs_subvolume_list, btrfs_subvolume_show, bytestring, main, run, snapshot,
                     subvolume_create, wait_for)

# The root's packages: systemd and dbus to boot, subvold's libraries, and
# gcc 12's sanitizer runtimes for a -Db_sanitize build.
PACKAGES = "systemd,systemd-sysv,dbus,libsystemd0,btrfs-progs,libasan8,libubsan1"
DEBOOTSTRAP_ARGS = ["--variant=minbase", f"--include={PACKAGES}", "bookworm"]
# Cached between runs under a name derived from what makes it, so a change
# of packages, options or release builds a new one.
ROOT_CACHE_PREFIX = os.environ.get("SUBVOLD_TEST_ROOT_CACHE", "/var/tmp/subvold-test-root") + "-"
ROOT_CACHE = ROOT_CACHE_PREFIX + hashlib.sha256(json.dumps(DEBOOTSTRAP_ARGS).encode()).hexdigest()[:16]
MAX_EXPOSURE = 2.2  # 2.1: CAP_SETUID/SETGID, open_by_handle_at, mount_setattr for file versions
BUILD_DIR = os.environ.get("SUBVOLD_BUILD_DIR", "")
# systemd's MESSAGE_ID for "<unit>: Main process exited, code=..., status=..."
PROCESS_EXIT = "98e322203f7a4ed290d09fe03c09fe15"


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
        # A machine name of its own: nspawn keeps state under it in /run.
        self.proc = subprocess.Popen(["systemd-nspawn", "--register=no", "--keep-unit", "--boot", "--console=pipe",
                                      f"--machine=subvold-test-{os.getpid()}", "-D", root, *nspawn_args],
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

    def path(self, path):
        """@path as the container's init sees it, from outside."""
        return f"/proc/{self.init}/root{path}"

    def stop_service(self, test, unit):
        """Stops @unit and asserts a clean end: its main process exited with
        status 0, and its output in the journal has no sanitizer report."""
        # PID 1 logs a successful main process's exit status at debug level.
        self.run("systemctl", "log-level", "debug")
        self.run("systemctl", "stop", unit)
        self.run("journalctl", "--sync")  # everything logged so far is in the journal
        entries = [json.loads(line) for line in
                   self.run("journalctl", "--unit", unit, "--output=json", "--no-pager").splitlines()]
        # MESSAGE is a list of byte values when it is not UTF-8.
        log = b"\n".join(bytes(m) if isinstance(m, list) else m.encode()
                         for m in (e.get("MESSAGE") or "" for e in entries))
        exits = [(e["EXIT_CODE"], int(e["EXIT_STATUS"])) for e in entries if e.get("MESSAGE_ID") == PROCESS_EXIT]
        test.assertEqual([code for code, _ in exits], ["exited"], log.decode(errors="replace"))
        assert_clean_exit(test, unit, exits[0][1], log)

    def stop(self):
        """Powers the container off; returns nspawn's exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # nspawn powers the container off
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def build_options():
    """The sanitizer options of the build under test, for the build installed
    into the container."""
    options = {o["name"]: o["value"] for o in json.loads(run("meson", "introspect", "--buildoptions", BUILD_DIR))}
    return options["b_sanitize"], options["b_lundef"]


def subvolume_uuid(container, path):
    """The UUID of the subvolume whose root @path is, as btrfs-progs sees it
    in the container; None if @path is no subvolume root."""
    out = container.run("btrfs", "subvolume", "show", path, check=False)
    m = re.search(rb"^\s*UUID:\s*(\S+)$", out, re.M)
    return m[1].decode() if m else None


def bytestrings(prop):
    return [bytestring(p) for p in prop["data"]]


class SystemdTest(TestCase):
    def test_activation_under_systemd(self):
        """The container's /, /home and /var are btrfs: subvold reports them as
        the container's own namespace has them, not as systemd's private
        namespace for the unit does."""
        # /: subvolume @ of one filesystem.  Its own /home is a subvolume
        # too, hidden under the /home mount.
        rootfs = Btrfs(self, "root", size="1G")
        root_top = rootfs.mount(self.path("root-top"))
        root = f"{root_top}/@"
        subvolume_create(root)
        run("cp", "-a", cached_root() + "/.", root)
        os.rmdir(f"{root}/home")
        subvolume_create(f"{root}/home")
        # /home: subvolume @home, with a nested subvolume; a read-only
        # snapshot of it that no mount reaches.
        subvolume_create(f"{root_top}/@home")
        subvolume_create(f"{root_top}/@home/alice")
        with open(f"{root_top}/@home/doc", "w") as f:
            f.write("then\n")
        os.chmod(f"{root_top}/@home/doc", 0o644)
        snapshot(f"{root_top}/@home", f"{root_top}/@home-snap", readonly=True)
        with open(f"{root_top}/@home/doc", "w") as f:
            f.write("now\n")
        # /var: subvolume @var of another filesystem; the cache directory is
        # a subvolume of its own, and systemd binds it in the unit's
        # namespace (CacheDirectory=).
        varfs = Btrfs(self, "var")
        var_top = varfs.mount(self.path("var-top"))
        subvolume_create(f"{var_top}/@var")
        run("cp", "-a", f"{root}/var/.", f"{var_top}/@var")
        subvolume_create(f"{var_top}/@var/cache/subvold")

        # The build under test, installed as a distribution package would be.
        build = self.path("build")
        sanitize, lundef = build_options()
        run("meson", "setup", build, SOURCE_DIR, "--prefix=/usr", "-Dtests=false", f"-Db_sanitize={sanitize}",
            f"-Db_lundef={str(lundef).lower()}")
        run("meson", "compile", "-C", build)
        run("meson", "install", "-C", build, "--destdir", root, "--no-rebuild")
        with open(os.path.join(build, "units", "subvold.service")) as f:
            shipped_unit = f.read()
        os.sync()

        # nspawn's own system-call filter refuses open_by_handle_at (it lets
        # a container reach files outside it); subvold, which needs it for
        # snapshots no mount reaches, runs on the host in real life.
        container = Container(self, root, f"--bind={root_top}/@home:/home", f"--bind={var_top}/@var:/var",
                              "--system-call-filter=open_by_handle_at")
        self.assertEqual(container.run("systemctl", "show", "-p", "ActiveState", "--value", "subvold.service").strip(),
                         b"inactive", "subvold must not run before it is asked for")
        if sanitize != "none":
            executable = re.search(r"^ExecStart=(\S+)", shipped_unit, re.M)[1]
            self.assertIn(b"libasan", container.run("ldd", executable), "the container must run the sanitizer build")
            # The manager's environment, not the unit's.  LeakSanitizer
            # needs ptrace(), which the unit's SystemCallFilter= refuses;
            # the other tests check for leaks.
            container.run("systemctl", "set-environment",
                          f"ASAN_OPTIONS={os.environ.get('ASAN_OPTIONS', '')}:detect_leaks=0",
                          f"UBSAN_OPTIONS={os.environ.get('UBSAN_OPTIONS', '')}")

        # The first call activates it.
        out = container.run("busctl", "--json=short", "call", BUS_NAME, MANAGER_PATH,
                            "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
        objects = json.loads(out)["data"][0]
        self.assertEqual(container.run("systemctl", "show", "-p", "ActiveState", "--value", "subvold.service").strip(),
                         b"active")
        unit_path = container.run("systemctl", "show", "-p", "FragmentPath", "--value", "subvold.service").strip()
        with open(root + unit_path.decode()) as f:
            self.assertEqual(f.read(), shipped_unit, "the unit must be the shipped one, hardening unchanged")
        # The case at hand: systemd did bind the cache directory in
        # subvold's namespace.
        pid = container.run("systemctl", "show", "-p", "MainPID", "--value", "subvold.service").strip().decode()
        self.assertEqual(container.run("findmnt", "--task", pid, "--noheadings", "--output", "TARGET",
                                       "/var/cache/subvold").strip(), b"/var/cache/subvold")

        # The container's btrfs mounts, as findmnt shows them there.
        mounts = json.loads(container.run("findmnt", "--json", "--list", "--types", "btrfs", "--nofsroot",
                                          "--output", "TARGET,SOURCE,FSROOT"))["filesystems"]
        self.assertEqual(sorted(m["target"] for m in mounts), ["/", "/home", "/var"])
        for fs, top in ((rootfs, root_top), (varfs, var_top)):
            fs_mounts = [m for m in mounts if m["source"] == fs.device]
            fs_props = objects[fs.object_path][FS_IFACE]
            self.assertEqual(bytestrings(fs_props["MountPoints"]), sorted(m["target"].encode() for m in fs_mounts))

            # Every subvolume btrfs-progs lists; reachable where a path
            # through one of those mounts leads to it, as btrfs-progs in
            # the container says.
            top_uuid = btrfs_subvolume_show(top, 5)["UUID"]
            truth = {5: dict(path=b"", uuid="" if top_uuid == b"-" else top_uuid.decode()),
                     **btrfs_subvolume_list(top)}
            published = {int(p.rsplit("/", 1)[1]): v[SUBVOLUME_IFACE] for p, v in objects.items()
                         if p.startswith(fs.object_path + "/")}
            self.assertEqual(set(published), set(truth))
            for subvolume_id, t in truth.items():
                props = published[subvolume_id]
                path = b"/" + t["path"]
                self.assertEqual(bytestring(props["Path"]["data"]), path)
                self.assertEqual(props["Uuid"]["data"], t["uuid"])
                candidates = filter(None, (path_through(m, path) for m in fs_mounts))
                self.assertEqual(bytestrings(props["AccessPaths"]),
                                 sorted(p for p in candidates if subvolume_uuid(container, p) == t["uuid"]), path)

        # Its cache directory was made by systemd (CacheDirectory=) and used.
        wait_for(lambda: os.path.exists(container.path("/var/cache/subvold/usage.cache")), "the usage cache")

        # Debian 12's systemd filters listmount()/statmount() out with EPERM
        # (SystemCallFilter=@system-service predates them): subvold falls
        # back to mountinfo, as the README says.
        journal = container.run("journalctl", "-u", "subvold.service", "--no-pager").decode()
        self.assertIn("mounts from /proc/self/mountinfo", journal, journal)

        # File versions under the unit's sandbox: an ordinary user of the
        # container asks, subvold takes the user's credentials and opens
        # the version in a private mount of a snapshot no mount reaches.
        container.run("useradd", "--no-create-home", "tester")
        as_tester = ("runuser", "-u", "tester", "--")
        versions = json.loads(container.run(*as_tester, "subvolctl", "--json", "versions", "/home/doc"))
        snap = f"{rootfs.object_path}/{btrfs_rootid(f'{root_top}/@home-snap')}"
        self.assertEqual([(v["snapshot"], v["path"], v["size"]) for v in versions], [(snap, "doc", 5)],
                         container.run("journalctl", "-u", "subvold.service", "--no-pager").decode())
        container.run(*as_tester, "subvolctl", "restore", "/home/doc", "--from", snap, "--to", "/tmp/doc")
        with open(container.path("/tmp/doc")) as f:
            self.assertEqual(f.read(), "then\n")

        out = container.run("systemd-analyze", "security", "subvold.service").decode()
        exposure = float(re.search(r"Overall exposure level for subvold.service: ([0-9.]+)", out)[1])
        print(f"systemd-analyze security: exposure {exposure}")
        self.assertLessEqual(exposure, MAX_EXPOSURE, out)

        container.stop_service(self, "subvold.service")
        self.assertEqual(container.stop(), 0, "the container did not shut down cleanly")


def path_through(mount, path):
    """Where @mount (a findmnt row) shows the directory at @path in its
    filesystem (bytes), or None if it does not show it."""
    root, target = mount["fsroot"].encode(), mount["target"].encode().rstrip(b"/")
    if root == b"/":
        return target + path.rstrip(b"/") or b"/"
    if path == root or path.startswith(root + b"/"):
        return target + path[len(root):] or b"/"
    return None


if __name__ == "__main__":
    main()
