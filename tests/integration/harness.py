# SPDX-License-Identifier: LGPL-2.1-or-later
"""Real parts for subvold's integration tests: loop-mounted btrfs filesystems,
a private dbus-daemon, the real subvold, and clients that read the bus the
way users do (busctl --json, the GDBus client).  Ground truth comes from
btrfs-progs and the kernel, never from subvold.

Everything a test starts is registered on an ExitStack and torn down in
reverse order, also when the test fails."""

import atexit
import collections
import contextlib
import ctypes
import grp
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import xml.etree.ElementTree as ET

BUS_NAME = "org.subvold.Subvold1"
MANAGER_PATH = "/org/subvold/Subvold1"
MANAGER_IFACE = "org.subvold.Subvold1.Manager"
FS_IFACE = "org.subvold.Subvold1.Filesystem"
SUBVOLUME_IFACE = "org.subvold.Subvold1.Subvolume"

SUBVOLD = os.environ.get("SUBVOLD_BINARY", "")
SOURCE_DIR = os.environ.get("SUBVOLD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.environ.get("SUBVOLD_BUILD_DIR", "")
GDBUS_CLIENT = os.environ.get("SUBVOLD_GDBUS_CLIENT", "")
REFRESH_BURST = 2  # daemon/manager.h
SANITIZER_MARKERS = (b"ERROR: AddressSanitizer", b"ERROR: LeakSanitizer", b"runtime error:")


def run(*args, check=True, **kw):
    """Runs a command (str or bytes arguments) and returns its stdout as bytes."""
    p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{args!r} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p.stdout


_ACTIVE_STACKS = set()


def _on_sigterm(signo, frame):
    """meson kills a test that runs past its timeout with SIGTERM: undo the
    mounts, loop devices and processes first, then go."""
    for stack in list(_ACTIVE_STACKS):
        try:
            stack.close()
        except Exception:  # noqa: BLE001 -- best effort on the way out
            pass
    os._exit(128 + signo)


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, MS_REC, MS_PRIVATE, MNT_DETACH = 0x00020000, 0x4000, 0x40000, 2


def _libc_call(name, *args):
    if getattr(_libc, name)(*args) < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{name}: {os.strerror(e)}")


def private_mount_namespace():
    """Moves this test into a mount namespace of its own, so that the
    daemons it starts see its mounts and none of another test's (tests run
    in parallel, and each daemon publishes and scans every btrfs it sees).
    btrfs mounts that were there before are detached in it, except those
    the test needs to reach its own files through."""
    _libc_call("unshare", CLONE_NEWNS)
    _libc_call("mount", b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    keep = [os.path.realpath(p) for p in (SOURCE_DIR, BUILD_DIR or SOURCE_DIR, tempfile.gettempdir(), os.getcwd())]
    with open("/proc/self/mountinfo", "rb") as f:
        lines = f.read().splitlines()
    for line in reversed(lines):
        fields = line.split(b" - ")[0].split()
        point = fields[4].decode("unicode_escape").encode("latin-1")
        if line.split(b" - ")[1].split()[0] != b"btrfs" or point == b"/":
            continue
        if any(os.fsencode(k) == point or os.fsencode(k).startswith(point + b"/") for k in keep):
            continue
        _libc.umount2(point, MNT_DETACH)  # gone already (nested in another one): fine


class TestCase(unittest.TestCase):
    """Base class: skips (exit 77 via main()) unless root; gives an ExitStack
    and a mount namespace of the test's own."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (loop devices, mounts)")
        if not SUBVOLD or not os.access(SUBVOLD, os.X_OK):
            self.fail("SUBVOLD_BINARY is not set to the built daemon")
        private_mount_namespace()
        self.stack = contextlib.ExitStack()
        _ACTIVE_STACKS.add(self.stack)
        self.addCleanup(_ACTIVE_STACKS.discard, self.stack)
        self.addCleanup(self.stack.close)
        self.tmp = tempfile.mkdtemp(prefix="subvold-test-")
        self.stack.callback(shutil.rmtree, self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)


class Btrfs:
    """A btrfs filesystem on its own loop device."""

    def __init__(self, test, name, size="512M", label=None, uuid=None, mkfs_args=()):
        self.test = test
        self.image = test.path(name + ".img")
        with open(self.image, "wb") as f:
            f.truncate(_parse_size(size))
        run("mkfs.btrfs", "-q", *(["-L", label] if label else []), *(["-U", uuid] if uuid else []), *mkfs_args,
            self.image)
        self.device = run("losetup", "--find", "--show", self.image).decode().strip()
        test.stack.callback(run, "losetup", "-d", self.device, check=False)
        self.uuid = run("blkid", "-p", "-o", "value", "-s", "UUID", self.device).decode().strip()
        self.mounts = []

    def mount(self, where, *options):
        """Mounts the filesystem (optionally with -o options) and registers the unmount."""
        os.makedirs(where, exist_ok=True)
        opts = ["-o", ",".join(options)] if options else []
        run("mount", *opts, self.device, where)
        self.test.stack.callback(_umount, where)
        self.mounts.append(where)
        return where

    def umount(self, where):
        run("umount", where)
        self.mounts.remove(where)

    @property
    def hex(self):
        return self.uuid.replace("-", "")

    @property
    def object_path(self):
        return f"{MANAGER_PATH}/fs/{self.hex}"


def _umount(where):
    if os.path.ismount(where):
        subprocess.run(["umount", "-R", where], stderr=subprocess.DEVNULL)
        if os.path.ismount(where):
            subprocess.run(["umount", "-l", where], stderr=subprocess.DEVNULL)


def _parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def subvolume_create(path):
    run(b"btrfs", b"subvolume", b"create", os.fsencode(path))


def snapshot(source, dest, readonly=False):
    run(b"btrfs", b"subvolume", b"snapshot", *([b"-r"] if readonly else []), os.fsencode(source), os.fsencode(dest))


# ---------------------------------------------------------------- users

ROOT = "root"


def _retry_on_lock(*args):
    """useradd and friends fail with 10 while another test holds the lock
    on /etc/passwd; try again until they get it."""
    result = {}

    def attempt():
        p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        result["p"] = p
        return p.returncode != 10

    wait_for(attempt, f"the lock for {args[0]}")
    p = result["p"]
    if p.returncode != 0:
        raise AssertionError(f"{args!r} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")


def _kill_user_processes(uid):
    def remaining():
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    pids.append(int(pid))
            except FileNotFoundError:
                pass
        return pids

    def gone():
        for pid in remaining():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not remaining()

    wait_for(gone, f"the processes of uid {uid} to end")


class Group:
    """A local group, removed after the test."""
    _count = 0

    def __init__(self, test):
        Group._count += 1
        self.name = f"svg{os.getpid()}x{Group._count}"
        _retry_on_lock("groupadd", self.name)
        test.stack.callback(_retry_on_lock, "groupdel", self.name)
        self.gid = grp.getgrnam(self.name).gr_gid


class User:
    """A real unprivileged local user, as a person has one: a passwd entry
    (dbus-daemon wants one), its own uid, primary group and supplementary
    groups; removed after the test.  Processes run as it switch all of
    these, not just the uid."""
    _count = 0

    def __init__(self, test, groups=()):
        User._count += 1
        self.name = f"svu{os.getpid()}x{User._count}"
        _retry_on_lock("useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin",
                       *(["--groups", ",".join(g.name for g in groups)] if groups else []), self.name)
        test.stack.callback(_retry_on_lock, "userdel", self.name)
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        # Before userdel (the stack runs backwards): whatever the user's
        # processes started and left behind (a desktop session's helpers)
        # goes too, or userdel refuses.
        test.stack.callback(_kill_user_processes, self.uid)
        self.groups = os.getgrouplist(self.name, self.gid)

    def process_args(self):
        """What subprocess.run()/Popen() need to run a command as this user."""
        return dict(user=self.uid, group=self.gid, extra_groups=self.groups)


def as_user(user):
    """subprocess arguments for @user: a User, or ROOT for root."""
    return {} if user == ROOT else user.process_args()


# ---------------------------------------------------------------- the bus

ALLOW_ALL_POLICY = """
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
  </policy>
"""

_installed = {}


def installed_tree():
    """(destdir, prefix) of `meson install --destdir` of the build under
    test, made once per process: the bus policy and activation file exactly
    as they ship."""
    if not _installed:
        dest = tempfile.mkdtemp(prefix="subvold-install-")
        atexit.register(shutil.rmtree, dest, ignore_errors=True)
        run("meson", "install", "-C", BUILD_DIR, "--no-rebuild", "--quiet", "--destdir", dest)
        options = json.loads(run("meson", "introspect", "--buildoptions", BUILD_DIR))
        _installed.update(dest=dest, prefix=next(o["value"] for o in options if o["name"] == "prefix"))
    return _installed["dest"], _installed["prefix"]


def installed_policy_dir():
    dest, prefix = installed_tree()
    return f"{dest}{prefix}/share/dbus-1/system.d"


def system_bus_policy():
    """The policies and limits of this machine's real system bus
    (/usr/share/dbus-1/system.conf): a default that denies method calls,
    as a real system bus does."""
    root = ET.parse("/usr/share/dbus-1/system.conf").getroot()
    return "\n".join(ET.tostring(e, encoding="unicode") for e in root if e.tag in ("policy", "limit"))


class Bus:
    """A private dbus-daemon of type system.  With shipped_policy=True its
    configuration is this machine's system bus policy plus exactly the
    files `meson install` puts in share/dbus-1/system.d; otherwise it
    allows everything.  @limits: extra <limit>s, name -> value.
    @local_policy: a drop-in (a whole busconfig document) read last, as
    /etc/dbus-1/system.d is on a real system.

    Clients run as an unprivileged user made for the bus (self.client)
    unless a call says user=ROOT."""

    def __init__(self, test, shipped_policy=True, servicedir=None, limits=None, local_policy=None):
        self.socket = test.path("system_bus_socket")
        conf = test.path("bus.conf")
        if shipped_policy:
            policy = system_bus_policy() + f"\n<includedir>{installed_policy_dir()}</includedir>\n"
        else:
            policy = ALLOW_ALL_POLICY
        policy += "".join(f'<limit name="{k}">{v}</limit>\n' for k, v in (limits or {}).items())
        if local_policy:
            os.mkdir(test.path("local.d"))
            with open(test.path("local.d", "local.conf"), "w") as f:
                f.write(local_policy)
            policy += f"<includedir>{test.path('local.d')}</includedir>\n"
        with open(conf, "w") as f:
            f.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={self.socket}</listen>
  <auth>EXTERNAL</auth>
  {policy}
  {f"<servicedir>{servicedir}</servicedir>" if servicedir else ""}
  {"".join(f'<limit name="{k}">{v}</limit>' for k, v in (limits or {}).items())}
</busconfig>
""")
        # The socket lives in a private 0700 directory; others must reach it.
        os.chmod(test.tmp, 0o755)
        with open(test.path("dbus-daemon.log"), "wb") as log:
            self.proc = subprocess.Popen(["dbus-daemon", "--config-file", conf, "--nofork", "--nopidfile"],
                                         stdout=subprocess.DEVNULL, stderr=log)
        test.stack.callback(_terminate, self.proc)
        wait_for(lambda: os.path.exists(self.socket), "dbus-daemon socket")
        self.address = "unix:path=" + self.socket
        self.env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.address)
        self.client = User(test)

    def run(self, *args, user=None, check=False):
        """Runs a client command on this bus as @user (default: self.client);
        returns the CompletedProcess."""
        p = subprocess.run(list(args), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           **as_user(user or self.client))
        if check and p.returncode != 0:
            raise AssertionError(f"{args!r} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
        return p

    def busctl(self, *args, check=True, user=None):
        """Runs busctl against this bus; returns (returncode, stdout, stderr)."""
        p = self.run("busctl", "--system", *args, user=user)
        if check and p.returncode != 0:
            raise AssertionError(f"busctl {' '.join(args)}: {p.stderr.decode(errors='replace')}")
        return p.returncode, p.stdout, p.stderr

    def call(self, path, iface, method, *args, user=None):
        """Calls a method; returns the parsed 'data' of busctl --json, or raises BusError."""
        rc, out, err = self.busctl("--json=short", "call", BUS_NAME, path, iface, method, *args,
                                   check=False, user=user)
        if rc != 0:
            raise BusError(err.decode(errors="replace").strip())
        return json.loads(out)["data"] if out.strip() else None

    def managed_objects(self, user=None):
        data = self.call(MANAGER_PATH, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", user=user)
        return {path: {iface: {k: v["data"] for k, v in props.items()} for iface, props in ifaces.items()}
                for path, ifaces in data[0].items()}

    def get(self, path, iface, prop, user=None):
        rc, out, err = self.busctl("--json=short", "get-property", BUS_NAME, path, iface, prop, user=user)
        return json.loads(out)["data"]

    def error_name(self, path, iface, method, *args, user=None):
        """Calls a method that must fail with gdbus, which reports the error's
        D-Bus name (busctl does not); returns that name."""
        p = self.run("gdbus", "call", "--system", "--dest", BUS_NAME, "--object-path", path, "--method",
                     f"{iface}.{method}", *args, user=user)
        if p.returncode == 0:
            raise AssertionError(f"{method} succeeded: {p.stdout!r}")
        m = re.search(r"GDBus\.Error:([\w.]+)", p.stderr.decode(errors="replace"))
        if not m:
            raise AssertionError(f"no D-Bus error name in: {p.stderr!r}")
        return m[1]


class BusError(Exception):
    pass


def _terminate(proc, timeout=10):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(predicate, what, timeout=30):
    """Polls @predicate until it is true; a generous timeout, so that a slow
    machine fails no test -- nothing here measures time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------- the daemon

class Daemon:
    """The real subvold, started on @bus.  Waits for READY=1 on a notify
    socket, as systemd would.  stop() checks for a clean exit: status 0 on
    SIGTERM and no sanitizer report."""

    def __init__(self, test, bus, *args, wrapper=(), env=None, pass_fds=()):
        self.test = test
        notify_path = test.path(f"notify-{time.monotonic_ns()}")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(notify_path)
        self.stderr_path = test.path(f"subvold-{time.monotonic_ns()}.log")
        self.stderr = open(self.stderr_path, "wb")
        env = dict(bus.env, NOTIFY_SOCKET=notify_path, **(env or {}))
        self.proc = subprocess.Popen([*wrapper, SUBVOLD, *args], env=env, stdout=self.stderr, stderr=self.stderr,
                                     pass_fds=pass_fds)
        self.stopped = False
        test.stack.callback(self._cleanup)
        self._wait_ready()

    def _wait_ready(self):
        self.notify.settimeout(0.1)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if b"READY=1" in self.notify.recv(4096).split(b"\n"):
                    return
            except socket.timeout:
                if self.proc.poll() is not None:
                    raise AssertionError(f"subvold exited with {self.proc.returncode} before READY=1:\n" + self.log())
        raise AssertionError("subvold did not send READY=1:\n" + self.log())

    def log(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        """Sends @sig and asserts a clean exit."""
        self.stopped = True
        self.proc.send_signal(sig)
        rc = self.proc.wait(60)
        self.stderr.close()
        self.notify.close()
        with open(self.stderr_path, "rb") as f:
            assert_clean_exit(self.test, "subvold", rc, f.read())

    def _cleanup(self):
        if not self.stopped:
            # Gone before the end of a test that failed: say how, or a crash
            # (a sanitizer report) would be lost behind the test's error.
            if self.proc.poll() is not None:
                print(f"subvold had exited with {self.proc.returncode}:\n{self.log()[-20000:]}", file=sys.stderr)
            _terminate(self.proc)
            self.stderr.close()
            self.notify.close()

    BTRFS_SUPER_MAGIC = 0x9123683E

    def fds(self):
        """Its open fds: fd number -> (what the fd refers to, whether that
        is on a btrfs).  An fd closed while they are read is left out."""
        fds = {}
        statfs = ctypes.create_string_buffer(256)  # struct statfs; f_type comes first
        for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
            link = f"/proc/{self.proc.pid}/fd/{fd}"
            try:
                target = os.readlink(link)
                _libc_call("statfs", link.encode(), statfs)
            except FileNotFoundError:
                continue
            fds[int(fd)] = (target, ctypes.c_long.from_buffer(statfs).value == self.BTRFS_SUPER_MAGIC)
        return fds

    def open_fds(self):
        """What its fds refer to, counted: a set would hide a second fd on
        the same thing (a leaked timerfd, /proc/self/mountinfo again)."""
        return collections.Counter(target for target, _ in self.fds().values())

    def fds_between_operations(self):
        """open_fds() at a moment when none of them is on a btrfs: subvold
        keeps none (a generation check or a scan has one for some µs), so
        such a sample holds no passing fd."""
        sample = []
        wait_for(lambda: sample.append(self.fds()) or not any(on for _, on in sample[-1].values()),
                 "a moment with no fd of subvold on a btrfs")
        return collections.Counter(target for target, _ in sample[-1].values())

    def armed_timers(self):
        """Its timerfds that are armed (fdinfo it_value not (0, 0)): sd-event
        has one per clock and disarms it while no timer on that clock is on."""
        armed = []
        for fd, (target, _) in self.fds().items():
            if target != "anon_inode:[timerfd]":
                continue
            try:
                with open(f"/proc/{self.proc.pid}/fdinfo/{fd}") as f:
                    value = re.search(r"^it_value: \((\d+), (\d+)\)$", f.read(), re.M)
            except FileNotFoundError:
                continue
            if value.groups() != ("0", "0"):
                armed.append(fd)
        return armed

    def wakeups(self):
        """Context switches of all its threads (the scanner and the helpers
        too, not just the main thread): a thread that sleeps has none."""
        total = 0
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/status") as f:
                    for line in f:
                        key, _, value = line.partition(":")
                        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                            total += int(value)
            except FileNotFoundError:
                pass  # a thread that just ended
        return total

    def refreshes(self):
        """The refreshes it logged (run it with -v), in order: for each, when
        it ran (CLOCK_MONOTONIC µs, subvold's own clock) and whether another
        one was due already."""
        return [(int(m[1]), m[3] == "another is due") for m in self._refresh_lines()]

    def _refresh_lines(self):
        return re.finditer(r"^<7>Refresh at (\d+) us for (a change|new usage); (another is due|none due)\.$",
                           self.log(), re.M)

    def usage_refresh_gaps(self):
        """For each refresh that was for new usage figures alone (a scan's
        results, the next quota read), the µs since the refresh before it."""
        lines = [(int(m[1]), m[2] == "new usage") for m in self._refresh_lines()]
        return [t - prev for (prev, _), (t, usage) in zip(lines, lines[1:]) if usage]

    def assert_refresh_rate(self):
        """subvold's rate limit on refreshes, on its own clock (no jitter on
        it): n + 1 refreshes in a row span at least n - REFRESH_BURST + 1
        seconds (a burst of two after a quiet while, one a second on
        average).  Refresh() must not have been called."""
        times = [t for t, _ in self.refreshes()]
        closer = [(times[j] - times[i], j - i) for i in range(len(times)) for j in range(i + 1, len(times))
                  if times[j] - times[i] < (j - i - REFRESH_BURST + 1) * 1000000]
        self.test.assertEqual(closer, [], f"refreshes closer than the rate limit allows (µs, refreshes apart): {times}")

    def status(self, field):
        """A number from /proc/PID/status (VmRSS in kB, ...)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)


def assert_clean_exit(test, what, status, log):
    """The end every daemon a test starts must have: exit status 0 and no
    sanitizer report in its output (bytes)."""
    for marker in SANITIZER_MARKERS:
        test.assertFalse(marker in log, f"{what}: sanitizer report:\n" + log.decode(errors="replace"))
    test.assertEqual(status, 0, f"{what} exited with {status}:\n" + log.decode(errors="replace"))


class Activation:
    """A service directory for Bus(servicedir=...) from which dbus-daemon
    starts subvold on demand.  @service is an activation file; its Exec= line
    is replaced by one that runs subvold with @args through a shell, which
    keeps each run's exit status and output: dbus-daemon does not tell them.
    check() holds every run to a clean end."""

    def __init__(self, test, service, *args):
        self.test = test
        self.servicedir = test.path("services")
        os.mkdir(self.servicedir)
        self.log = test.path("activated.log")
        self.status = test.path("activated.status")
        wrapper = " ".join([f"/bin/sh -c '\"$0\" \"$@\" 2>>{self.log}; echo $? >>{self.status}'", SUBVOLD, *args])
        with open(os.path.join(self.servicedir, f"{BUS_NAME}.service"), "w") as f:
            f.write(re.sub(r"^Exec=.*$", lambda _: f"Exec={wrapper}", service, flags=re.M))

    def statuses(self):
        try:
            with open(self.status) as f:
                return [int(line) for line in f]
        except FileNotFoundError:
            return []

    def check(self, runs):
        """Waits until @runs runs have ended; asserts that each ended cleanly."""
        wait_for(lambda: len(self.statuses()) >= runs, f"{runs} activated subvold run(s) to end")
        self.test.assertEqual(len(self.statuses()), runs)
        with open(self.log, "rb") as f:
            log = f.read()
        for status in self.statuses():
            assert_clean_exit(self.test, "activated subvold", status, log)


class Churn:
    """Runs @step(i) for i = 0, 1, ... in a thread until stop().  stop()
    returns what went wrong in it: a failing command there (a umount refused
    with EBUSY because subvold held the mount, say) must fail the test.  A
    failure that no stop() handed over fails the test at its cleanup."""

    def __init__(self, test, step):
        self.stopping = threading.Event()
        self.failures = []
        self.reported = False
        self.thread = threading.Thread(target=self._run, args=(step,))
        self.thread.start()
        test.stack.callback(self._cleanup)

    def _run(self, step):
        i = 0
        try:
            while not self.stopping.is_set():
                step(i)
                i += 1
        except Exception as e:  # noqa: BLE001 -- handed to the test by stop()
            self.failures.append(repr(e))

    def stop(self):
        self.stopping.set()
        self.thread.join()
        self.reported = True
        return self.failures

    def _cleanup(self):
        self.stopping.set()
        self.thread.join()
        if self.failures and not self.reported:
            raise AssertionError(f"churn failed: {self.failures}")


class Monitor:
    """Signals from subvold as a client sees them: `gdbus monitor`, one line
    per signal.  Its reader thread dying (or gdbus monitor ending) fails
    the test: at the next wait() or at the cleanup."""

    def __init__(self, test, bus):
        self.lines = []
        self.failures = []
        self.proc = subprocess.Popen(["gdbus", "monitor", "--system", "--dest", BUS_NAME], env=bus.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        test.stack.callback(self._stop)
        self.wait("is owned by")

    def _read(self):
        try:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
        except Exception as e:  # noqa: BLE001 -- raised in the test by _check()
            self.failures.append(repr(e))

    def _check(self):
        if self.failures:
            raise AssertionError(f"reading gdbus monitor failed: {self.failures}")
        if self.proc.poll() is not None:
            raise AssertionError(f"gdbus monitor exited with {self.proc.returncode}")

    def _stop(self):
        running = self.proc.poll() is None
        _terminate(self.proc)
        self.thread.join()  # at the end of its output
        self.proc.stdout.close()
        if self.failures or not running:
            self._check()

    def mark(self):
        return len(self.lines)

    def matching(self, *needles, since=0, until=None):
        """The lines in [since, until) containing every needle."""
        return [l for l in self.lines[since:until] if all(n in l for n in needles)]

    def wait(self, *needles, since=0, timeout=30):
        """Waits for a line after @since containing every needle; returns it."""
        found = []
        wait_for(lambda: self._check() or found.extend(self.matching(*needles, since=since)) or found,
                 f"a signal with {needles}", timeout=timeout)
        return found[0]


def bytestring(data):
    """Decodes an 'ay' bytestring from busctl JSON: a list of ints ending in NUL."""
    assert data and data[-1] == 0, f"not NUL-terminated: {data!r}"
    return bytes(data[:-1])


# ---------------------------------------------------------------- ground truth

_LIST_RE = re.compile(
    rb"^ID (\d+) gen (\d+) cgen (\d+) parent (\d+) top level (\d+) parent_uuid (\S+)\s+"
    rb"received_uuid (\S+)\s+uuid (\S+) path (.*?)(?=\nID \d+ gen |\n?\Z)", re.S | re.M)


def write_random(path, size):
    """Incompressible data, so sizes on disk are predictable."""
    with open(path, "wb") as f:
        f.write(os.urandom(size))


def qgroup_show(mountpoint, unlimited=None):
    """Level-0 qgroups as btrfs-progs reports them: id -> (rfer, excl,
    max_rfer, max_excl), @unlimited where there is no limit."""
    out = run("btrfs", "qgroup", "show", "--raw", "-r", "-e", mountpoint).decode()
    num = lambda s: unlimited if s == "none" else int(s)
    return {int(f[0][2:]): tuple(num(x) for x in f[1:5])
            for f in (line.split() for line in out.splitlines()) if f and f[0].startswith("0/")}


def btrfs_subvolume_list(mountpoint):
    """Every subvolume btrfs-progs lists (root only; top level excluded), by id.
    Paths are bytes relative to the top level."""
    out = run("btrfs", "subvolume", "list", "-a", "-p", "-u", "-q", "-R", "-c", "-g", mountpoint)
    result = {}
    for m in _LIST_RE.finditer(out):
        uid = lambda b: "" if b == b"-" else b.decode()
        result[int(m[1])] = dict(generation=int(m[2]), cgen=int(m[3]), parent=int(m[4]),
                                 parent_uuid=uid(m[6]), received_uuid=uid(m[7]), uuid=uid(m[8]),
                                 path=m[9].removeprefix(b"<FS_TREE>/"))
    return result


def btrfs_subvolume_show(mountpoint, subvolume_id):
    """`btrfs subvolume show -r ID` as a dict of its "Key: value" lines."""
    out = run("btrfs", "subvolume", "show", "-r", str(subvolume_id), mountpoint)
    fields = {}
    for line in out.split(b"\n")[1:]:
        if b":" in line and not line.startswith(b"\t\t"):
            k, v = line.split(b":", 1)
            fields[k.strip().decode()] = v.strip()
    return fields


def btrfs_rootid(path):
    """The id of the subvolume holding @path, as btrfs-progs finds it."""
    return int(run(b"btrfs", b"inspect-internal", b"rootid", os.fsencode(path)))


def superblock_generation(device):
    out = run("btrfs", "inspect-internal", "dump-super", device).decode()
    return int(re.search(r"^generation\s+(\d+)", out, re.M)[1])


def main():
    """unittest.main(), where a skipped test fails the file: what did not run
    proved nothing (meson would count a file with a few skips as OK)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    for test, reason in r.skipped:
        print(f"SKIPPED, which counts as a failure: {test.id()}: {reason}", file=sys.stderr)
    if not r.wasSuccessful() or r.skipped or r.testsRun == 0:
        raise SystemExit(1)
    raise SystemExit(0)


_ROOT_ITEM_RE = re.compile(
    r"item \d+ key \((FS_TREE|\d+) ROOT_ITEM \d+\) .*?\n"
    r"\s+generation (\d+) .*?\n"
    r"\s+last_snapshot \d+ flags (0x[0-9a-f]+).*?\n"
    r".*?ctransid (\d+) otransid (\d+).*?\n"
    r".*?otime (\d+)\.(\d+)", re.S)


def root_items(device):
    """The on-disk ROOT_ITEMs of every subvolume, from `btrfs inspect-internal
    dump-tree -t root` (call `sync` first): id -> generation, read-only flag,
    ctransid and otime in microseconds."""
    out = run("btrfs", "inspect-internal", "dump-tree", "-t", "root", device).decode(errors="replace")
    items = {}
    for m in _ROOT_ITEM_RE.finditer(out):
        subvolume_id = 5 if m[1] == "FS_TREE" else int(m[1])
        if subvolume_id != 5 and subvolume_id < 256:
            continue
        items[subvolume_id] = dict(generation=int(m[2]), readonly=bool(int(m[3], 16) & 1),
                                   ctransid=int(m[4]), otime_usec=int(m[6]) * 1000000 + int(m[7]) // 1000)
    return items


def display_path(path):
    """DisplayPath as the XML specifies it: invalid UTF-8 bytes, ASCII
    control characters and the bytes of Unicode noncharacters as \\xNN."""
    out = []
    i = 0
    while i < len(path):
        for n in (1, 2, 3, 4):
            try:
                ch = path[i:i + n].decode("utf-8")
                break
            except UnicodeDecodeError:
                continue
        else:
            ch = None
        code = ord(ch) if ch else None
        if ch is None or code < 0x20 or code == 0x7f or 0xfdd0 <= code <= 0xfdef or code & 0xfffe == 0xfffe:
            n = 1 if ch is None else len(ch.encode())
            out.extend("\\x%02x" % b for b in path[i:i + n])
            i += n
        else:
            out.append(ch)
            i += len(ch.encode())
    return "".join(out)
