#!/usr/bin/env bash
# Builds subvold and shows what it publishes for a demo btrfs image with
# subvolumes, nested subvolumes, read-only and writable snapshots, a
# snapshot whose source is gone, and a second mount of one subvolume --
# on a private system bus, read with busctl as a user would.
# Run as root on Debian 12.  Everything it starts is torn down at exit.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root" >&2; exit 1; }
"$REPO/tools/install-deps.sh"
BUILD=$REPO/build/plain
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" "$REPO" >/dev/null
meson compile -C "$BUILD" >/dev/null

WORK=$(mktemp -d /tmp/subvold-demo.XXXXXX)
chmod 755 "$WORK"
LOOP= BUS_PID= DAEMON_PID=
cleanup() {
	[ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
	[ -n "$BUS_PID" ] && kill "$BUS_PID" 2>/dev/null
	for m in "$WORK/home" "$WORK/mnt"; do mountpoint -q "$m" && umount "$m"; done
	[ -n "$LOOP" ] && losetup -d "$LOOP"
	rm -rf "$WORK"
}
trap cleanup EXIT
show() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

# ---- a demo filesystem -------------------------------------------------------
truncate -s 1G "$WORK/demo.img"
mkfs.btrfs -q -L demo "$WORK/demo.img"
LOOP=$(losetup --find --show "$WORK/demo.img")
mkdir "$WORK/mnt" "$WORK/home"
mount "$LOOP" "$WORK/mnt"
M=$WORK/mnt
{
	btrfs subvolume create "$M/@home"
	btrfs subvolume create "$M/@home/alice"          # nested
	btrfs subvolume create "$M/@srv"
	btrfs subvolume create "$M/@srv/photos 2026"     # a space in the name
	# Some data (random, so it does not compress or dedupe): 4 MiB in
	# @home, then half of it replaced after the snapshots, so that they
	# hold data of their own.
	head -c 2M /dev/urandom >"$M/@home/a.bin"
	head -c 2M /dev/urandom >"$M/@home/b.bin"
	head -c 3M /dev/urandom >"$M/@srv/photos 2026/img.raw"
	cp --reflink=always "$M/@srv/photos 2026/img.raw" "$M/@srv/img-copy.raw"  # shared across subvolumes
	mkdir "$M/.snapshots"
	btrfs subvolume snapshot -r "$M/@home" "$M/.snapshots/home-monday"
	btrfs subvolume snapshot "$M/@home" "$M/.snapshots/home-scratch"
	head -c 2M /dev/urandom >"$M/@home/b.bin"
	btrfs subvolume create "$M/@old"
	head -c 1M /dev/urandom >"$M/@old/only-in-old"
	btrfs subvolume snapshot -r "$M/@old" "$M/.snapshots/old-final"
	btrfs subvolume delete -c "$M/@old"               # the source is gone
	btrfs subvolume sync "$M"
	sync
} >/dev/null
mount -o subvol=@home "$LOOP" "$WORK/home"        # a second mount, of one subvolume

# ---- a private system bus with subvold's own policy, and subvold --------------
cat >"$WORK/bus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$WORK/bus.socket</listen>
  <auth>EXTERNAL</auth>
  <include>$REPO/tests/data/system-default-policy.conf</include>
  <include>$REPO/dbus/org.subvold.Subvold1.conf</include>
</busconfig>
CONF
dbus-daemon --config-file="$WORK/bus.conf" --nofork --nopidfile &
BUS_PID=$!
for _ in $(seq 100); do [ -S "$WORK/bus.socket" ] && break; sleep 0.05; done
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$WORK/bus.socket

"$BUILD/daemon/subvold" &
DAEMON_PID=$!
for _ in $(seq 200); do busctl --system status org.subvold.Subvold1 >/dev/null 2>&1 && break; sleep 0.05; done

# ---- what a user sees ----------------------------------------------------------
B=org.subvold.Subvold1
FS=$(busctl --system --json=short call $B /org/subvold/Subvold1 org.subvold.Subvold1.Manager \
	GetSubvolumeByPath s "$M" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0].rsplit("/",1)[0])')
# Quotas are off: subvold's scanner measures each subvolume (published
# within a second); wait for it so that the usage below is filled in.
for _ in $(seq 100); do
	[ "$(busctl --system get-property $B "$FS" org.subvold.Subvold1.Filesystem ScanProgress)" = "d 1" ] && break
	sleep 0.1
done
show btrfs subvolume list -p -u -q "$M"
show "$BUILD/subvolctl/subvolctl" filesystems
show "$BUILD/subvolctl/subvolctl" list
# df per subvolume, as ZFS has it for datasets: what each one uses, beside
# plain df, which can only say what the whole filesystem uses.
show df -h "$M" "$WORK/home"
show "$BUILD/subvolctl/subvolctl" df
show "$BUILD/subvolctl/subvolctl" df --all
show btrfs filesystem du -s "$M/@home" "$M/@srv" "$M/@srv/photos 2026" "$M"/.snapshots/*
show busctl --system tree $B
show busctl --system introspect $B "$FS/5"
show busctl --system call $B /org/subvold/Subvold1 org.subvold.Subvold1.Manager GetSubvolumeByPath s "$WORK/home/alice/notes.txt"
show setpriv --reuid=nobody --regid=nogroup --clear-groups \
	busctl --system get-property $B "$FS/257" org.subvold.Subvold1.Subvolume DisplayPath IsSnapshot ReadOnly
show setpriv --reuid=nobody --regid=nogroup --clear-groups \
	busctl --system call $B /org/subvold/Subvold1 org.subvold.Subvold1.Manager Refresh || true
show busctl --system --json=pretty call $B /org/subvold/Subvold1 org.freedesktop.DBus.ObjectManager GetManagedObjects
