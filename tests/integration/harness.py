# SPDX-License-Identifier: LGPL-2.1-or-later
"""Real parts for subvold's integration tests: loop-mounted btrfs filesystems,
a private dbus-daemon, the real subvold, and clients that read the bus the
way users do (busctl --json, the GDBus client).  Ground truth comes from
btrfs-progs and the kernel, never from subvold.

Everything a test starts is registered on an ExitStack and torn down in
reverse order, also when the test fails."""

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

BUS_NAME = "org.subvold.Subvold1"
MANAGER_PATH = "/org/subvold/Subvold1"
MANAGER_IFACE = "org.subvold.Subvold1.Manager"
FS_IFACE = "org.subvold.Subvold1.Filesystem"
SUBVOLUME_IFACE = "org.subvold.Subvold1.Subvolume"

SUBVOLD = os.environ.get("SUBVOLD_BINARY", "")
SOURCE_DIR = os.environ.get("SUBVOLD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
GDBUS_CLIENT = os.environ.get("SUBVOLD_GDBUS_CLIENT", "")
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


class TestCase(unittest.TestCase):
    """Base class: skips (exit 77 via main()) unless root; gives an ExitStack."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (loop devices, mounts)")
        if not SUBVOLD or not os.access(SUBVOLD, os.X_OK):
            self.fail("SUBVOLD_BINARY is not set to the built daemon")
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

    def __init__(self, test, name, size="512M", label=None, mkfs_args=()):
        self.test = test
        self.image = test.path(name + ".img")
        with open(self.image, "wb") as f:
            f.truncate(_parse_size(size))
        run("mkfs.btrfs", "-q", *(["-L", label] if label else []), *mkfs_args, self.image)
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


def private_mounts():
    """Moves this process (and what it starts from now on) into a mount
    namespace of its own without the btrfs loop mounts that exist now,
    other tests' among them, as tools/bench.sh does: its subvold sees only
    what the test mounts, and other tests' daemons never see that."""
    if ctypes.CDLL(None, use_errno=True).unshare(0x00020000) != 0:  # CLONE_NEWNS
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    run("mount", "--make-rprivate", "/")
    mounts = run("findmnt", "-rn", "-t", "btrfs", "-o", "TARGET,SOURCE", check=False).splitlines()  # 1 if none
    for target, source in reversed([m.split(b" ", 1) for m in mounts]):
        if source.startswith(b"/dev/loop"):
            # findmnt -r writes a blank (and other bytes) as \xNN
            target = re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m[1], 16)]), target)
            run(b"umount", b"-l", target, check=False)


def _parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def subvolume_create(path):
    run(b"btrfs", b"subvolume", b"create", os.fsencode(path))


def snapshot(source, dest, readonly=False):
    run(b"btrfs", b"subvolume", b"snapshot", *([b"-r"] if readonly else []), os.fsencode(source), os.fsencode(dest))


# ---------------------------------------------------------------- the bus

ALLOW_ALL_POLICY = """
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
  </policy>
"""


class Bus:
    """A private dbus-daemon of type system.  With shipped_policy=True it
    denies by default like the real system bus and includes subvold's own
    policy file; otherwise it allows everything."""

    def __init__(self, test, shipped_policy=True, servicedir=None, limits=None):
        """@limits: dbus-daemon's <limit>s by name, e.g. {"max_message_size": 1048576}."""
        self.socket = test.path("system_bus_socket")
        conf = test.path("bus.conf")
        if shipped_policy:
            policy = "".join(f"<include>{os.path.join(SOURCE_DIR, f)}</include>\n" for f in
                             ("tests/data/system-default-policy.conf", "dbus/org.subvold.Subvold1.conf"))
        else:
            policy = ALLOW_ALL_POLICY
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

    def busctl(self, *args, check=True, user=None):
        """Runs busctl against this bus; returns (returncode, stdout, stderr)."""
        p = subprocess.run(["busctl", "--system", *args], env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, user=user, group=user, extra_groups=[] if user else None)
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

    def managed_objects(self):
        data = self.call(MANAGER_PATH, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
        return {path: {iface: {k: v["data"] for k, v in props.items()} for iface, props in ifaces.items()}
                for path, ifaces in data[0].items()}

    def get(self, path, iface, prop):
        rc, out, err = self.busctl("--json=short", "get-property", BUS_NAME, path, iface, prop)
        return json.loads(out)["data"]


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

    def __init__(self, test, bus, *args, wrapper=()):
        self.test = test
        notify_path = test.path(f"notify-{time.monotonic_ns()}")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(notify_path)
        self.stderr_path = test.path(f"subvold-{time.monotonic_ns()}.log")
        self.stderr = open(self.stderr_path, "wb")
        env = dict(bus.env, NOTIFY_SOCKET=notify_path)
        self.proc = subprocess.Popen([*wrapper, SUBVOLD, *args], env=env, stdout=self.stderr, stderr=self.stderr)
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
            log = f.read()
        for marker in SANITIZER_MARKERS:
            self.test.assertNotIn(marker, log, "sanitizer report:\n" + log.decode(errors="replace"))
        self.test.assertEqual(rc, 0, "subvold exited with %d:\n%s" % (rc, log.decode(errors="replace")))

    def _cleanup(self):
        if not self.stopped:
            _terminate(self.proc)
            self.stderr.close()
            self.notify.close()

    def open_fds(self):
        return {os.readlink(f"/proc/{self.proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{self.proc.pid}/fd")}

    def status(self, field):
        """A number from /proc/PID/status (VmRSS in kB, voluntary_ctxt_switches, ...)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)


class Churn:
    """Runs @step(i) for i = 0, 1, ... in a thread until stop().  stop()
    returns what went wrong in it: a failing command there (a umount refused
    with EBUSY because subvold held the mount, say) must fail the test."""

    def __init__(self, test, step):
        self.stopping = threading.Event()
        self.failures = []
        self.thread = threading.Thread(target=self._run, args=(step,))
        self.thread.start()
        test.stack.callback(self.stop)

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
        return self.failures


class Monitor:
    """Signals from subvold as a client sees them: `gdbus monitor`, one
    (arrival time, line) per signal."""

    def __init__(self, test, bus):
        self.lines = []
        self.proc = subprocess.Popen(["gdbus", "monitor", "--system", "--dest", BUS_NAME], env=bus.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        test.stack.callback(self.proc.stdout.close)
        test.stack.callback(_terminate, self.proc)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        wait_for(lambda: any("is owned by" in l for _, l in self.lines), "gdbus monitor to start")

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def mark(self):
        return len(self.lines)

    def wait(self, *needles, since=0, timeout=30):
        """Waits for a line after @since containing every needle; returns it."""
        found = []
        wait_for(lambda: found.extend(l for _, l in self.lines[since:] if all(n in l for n in needles)) or found,
                 f"a signal with {needles}", timeout=timeout)
        return found[0]

    def times(self, *needles, since=0):
        return [t for t, l in self.lines[since:] if all(n in l for n in needles)]


def bytestring(data):
    """Decodes an 'ay' bytestring from busctl JSON: a list of ints ending in NUL."""
    assert data and data[-1] == 0, f"not NUL-terminated: {data!r}"
    return bytes(data[:-1])


# ---------------------------------------------------------------- ground truth

_LIST_RE = re.compile(
    rb"^ID (\d+) gen (\d+) cgen (\d+) parent (\d+) top level (\d+) parent_uuid (\S+)\s+"
    rb"received_uuid (\S+)\s+uuid (\S+) path (.*?)(?=\nID \d+ gen |\n?\Z)", re.S | re.M)


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
    """unittest.main(), but exit 77 (skipped) when every test was skipped."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    if not r.wasSuccessful():
        raise SystemExit(1)
    if r.testsRun and len(r.skipped) == r.testsRun:
        raise SystemExit(77)
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
    """DisplayPath as the XML specifies it: invalid UTF-8 bytes and ASCII
    control characters as \\xNN."""
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
        if ch is None or (len(ch) == 1 and (ord(ch) < 0x20 or ord(ch) == 0x7f)):
            out.append("\\x%02x" % path[i])
            i += 1
        else:
            out.append(ch)
            i += len(ch.encode())
    return "".join(out)
