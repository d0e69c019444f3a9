#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Load: tools/loadgen's 64 concurrent clients (as an ordinary user, through
the shipped policy) and a subscriber that never reads, on a btrfs of
SUBVOLD_LOAD_SUBVOLUMES subvolumes (1,000 here; tools/load.sh runs 10,000)
for SUBVOLD_LOAD_SECONDS seconds, while subvolumes are created,
snapshotted and deleted and another btrfs is mounted and unmounted.
Requires no failed call but for objects that really went away, subvold's
memory bounded while the subscriber reads nothing (the bus holds 32 KiB for
it, then drops its signals), and its fds and RSS back to their baseline
afterwards.  Prints the table tools/README.md explains."""

import collections
import os
import re
import subprocess

from harness import (FS_IFACE, SUBVOLD, Btrfs, Bus, Churn, Daemon, TestCase, main, run, snapshot,
                     subvolume_create, wait_for)

LOADGEN = os.environ.get("SUBVOLD_LOADGEN", "")
MKFIXTURE = os.environ.get("SUBVOLD_MKFIXTURE", "")
N = int(os.environ.get("SUBVOLD_LOAD_SUBVOLUMES", "1000"))
SECONDS = int(os.environ.get("SUBVOLD_LOAD_SECONDS", "30"))
SANITIZED = "libasan" in run("ldd", SUBVOLD).decode()
QUEUE_BYTES = 32 * 1024


class LoadTest(TestCase):
    def setUp(self):
        super().setUp()
        if not LOADGEN or not MKFIXTURE:
            self.fail("SUBVOLD_LOADGEN and SUBVOLD_MKFIXTURE must name the built tools")
        self.fs = Btrfs(self, "load", size="2G", mkfs_args=("--nodesize", "4096", "--metadata", "single"))
        self.mnt = self.fs.mount(self.path("mnt"), "nobarrier")
        run(MKFIXTURE, self.mnt, str(N))
        self.other = Btrfs(self, "other", size="256M")
        self.other_mnt = self.path("other")
        os.makedirs(self.other_mnt)
        # The bus keeps at most this much queued for one connection (the
        # default is 127 MiB, which the subscriber that never reads would
        # take hours to fill): past it dbus-daemon drops what is sent to
        # that connection, and the run shows what that does to subvold.
        self.bus = Bus(self, limits={"max_outgoing_bytes": QUEUE_BYTES})

    def scanned(self, fs):
        try:
            return self.bus.get(fs.object_path, FS_IFACE, "ScanProgress") == 1.0
        except Exception:  # noqa: BLE001 -- not published yet
            return False

    def cpu_seconds(self, pid):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def test_load(self):
        daemon = Daemon(self, self.bus)
        wait_for(lambda: self.scanned(self.fs), "the first scan", timeout=300)
        baseline_fds = daemon.fds_between_operations()
        baseline_rss = daemon.status("VmRSS")
        with open(f"/proc/{daemon.proc.pid}/clear_refs", "w") as f:
            f.write("5")  # VmHWM from here on

        # Subvolumes come, are snapshotted and go; another btrfs is mounted
        # and unmounted.
        def step(i):
            subvolume_create(f"{self.mnt}/churn{i}")
            snapshot(f"{self.mnt}/churn{i}", f"{self.mnt}/churn{i}-snap", readonly=True)
            run("btrfs", "subvolume", "delete", f"{self.mnt}/churn{i}", f"{self.mnt}/churn{i}-snap")
            if i % 4 == 0:
                self.other.mount(self.other_mnt)
            elif i % 4 == 2:
                # The clients' fds on it (and subvold's copies of them) go
                # within a call; until then it is busy.
                wait_for(lambda: subprocess.run(["umount", self.other_mnt], stderr=subprocess.DEVNULL).returncode == 0,
                         "the other btrfs unmounted")
                self.other.mounts.remove(self.other_mnt)

        cpu = self.cpu_seconds(daemon.proc.pid)
        churn = Churn(self, step)
        rss = []
        with open(self.path("loadgen.out"), "wb") as out:
            loadgen = subprocess.Popen([LOADGEN, "--connections=64", f"--seconds={SECONDS}", "--gmo-ms=1000",
                                        f"--stable={self.fs.object_path}/", "--slow-subscriber"],
                                       env=self.bus.env, stdout=out, stderr=subprocess.STDOUT,
                                       **self.bus.client.process_args())
            self.stack.callback(lambda: loadgen.poll() is None and (loadgen.kill(), loadgen.wait()))
            # Samples of subvold's RSS while loadgen runs (the wait paces them).
            while loadgen.poll() is None:
                rss.append(daemon.status("VmRSS"))
                try:
                    loadgen.wait(0.2)
                except subprocess.TimeoutExpired:
                    pass
        self.assertEqual(churn.stop(), [])
        cpu = self.cpu_seconds(daemon.proc.pid) - cpu
        peak = daemon.status("VmHWM")
        with open(self.path("loadgen.out")) as f:
            report = f.read()
        print(report)
        self.assertTrue(rss, report)  # loadgen ran
        print(f"subvolumes={N} seconds={SECONDS} subvold_cpu_s={cpu:.1f} rss_baseline_kB={baseline_rss} "
              f"rss_peak_kB={peak} rss_first_third_max_kB={max(rss[:len(rss) // 3])} "
              f"rss_last_third_max_kB={max(rss[-(len(rss) // 3):])}")
        self.assertEqual(loadgen.returncode, 0, report)
        # Answered, or (GetManagedObjects past some thousands of subvolumes)
        # refused with LimitsExceeded as documented.
        kinds = {m[1]: int(m[2]) + int(m[3]) for m in re.finditer(r"^kind=(\S+) calls=(\d+) .* refused=(\d+)", report, re.M)}
        for kind in ("GetSubvolumeByFd", "GetStatfsByFd", "Get", "GetAll", "GetSubvolumeByPath",
                     "GetManagedObjects"):
            self.assertGreater(kinds.get(kind, 0), 0, f"no {kind} calls:\n{report}")
        # The subscriber stays connected; once its socket buffer (some
        # 200 KiB) and its queue in dbus-daemon are full, the bus drops the
        # signals for it, saying so in its log: counted here, not required
        # (the churn of a 30 s run does not always send that much).
        self.assertIn("slow_subscriber", report)
        self.assertIn("disconnected=0", report)
        with open(self.path("dbus-daemon.log")) as f:
            dropped = f.read().count("destination has a full message queue")
        print(f"signals the bus dropped for the subscriber: {dropped}")
        # Bounded while the subscriber read nothing: no growth from the
        # first third of the run to the last (a queue would grow with the
        # signals).  Not under ASan, whose quarantine of freed memory
        # (256 MiB) fills all along.
        if not SANITIZED:
            self.assertLess(max(rss[-(len(rss) // 3):]), max(rss[:len(rss) // 3]) + 8 * 1024, f"RSS samples {rss}")

        # Back to the baseline once the churn is cleared up.
        if os.path.ismount(self.other_mnt):
            self.other.umount(self.other_mnt)
        leftovers = [f"{self.mnt}/{n}" for n in os.listdir(self.mnt) if n.startswith("churn")]
        if leftovers:
            run("btrfs", "subvolume", "delete", *leftovers)
        wait_for(lambda: collections.Counter(daemon.fds_between_operations()) == baseline_fds,
                 f"fds back to {baseline_fds}")
        if not SANITIZED:  # ASan keeps freed memory in quarantine
            wait_for(lambda: daemon.status("VmRSS") < baseline_rss + 4096,
                     f"RSS back within 4 MiB of {baseline_rss} kB (now {daemon.status('VmRSS')} kB)")
        daemon.stop()


if __name__ == "__main__":
    main()
