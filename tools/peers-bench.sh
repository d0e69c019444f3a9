#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# peers-bench.sh - subvold next to the tools that answer the same questions,
# in one run on one filesystem: udisks2's GetSubvolumes and snapper's
# ListSnapshots (their daemons under systemd, in a container), and
# btrfs subvolume list -p, btrfs qgroup show, btrfs filesystem du -s,
# compsize and du -s (on the host).
#
# usage: sudo tools/peers-bench.sh [N]   (default: 1000 subvolumes)
# env:   FILES=10000 (files in the measured subvolume)  SNAPS=100 (snapper's
#        snapshots of it)  RUNS=10 (hyperfine runs, listings)  CALLS=1000
#        BENCH_ROOT_CACHE (see container.sh)
#
# The fixture: a loop btrfs mounted with compress=zstd, mkfixture's N
# subvolumes (a fifth of them snapshots) and one subvolume "files" of FILES
# small files, of which snapper (a config made for it) takes SNAPS
# snapshots.  The container (tools/container.sh: Debian 12, systemd,
# dbus-daemon, udisks2 with its btrfs module, snapper, subvold installed
# from this checkout) gets the fixture at /bench, the loop device, and the
# host's udev database read-only: udisksd exports a block device only when
# udev has probed it, and udev does not run in a container, so a host
# systemd-udevd is started for the run when none runs.  The kernel here has
# btrfs built in and no /lib/modules, which libblockdev's btrfs plugin
# checks: the container gets a modules.builtin naming btrfs.
#
# Each question is answered by a peer and by subvold; the D-Bus calls come
# from busbench inside the container on one connection (median of CALLS
# calls, RUNS for listings), the commands from hyperfine on the host
# (median of RUNS, a new process each, as a user runs them).  Quotas are off
# for all rows but the last, which enables them (btrfs qgroup show needs
# them; subvold then serves the qgroup figures).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${1:-1000}
FILES=${FILES:-10000} SNAPS=${SNAPS:-100} RUNS=${RUNS:-10} CALLS=${CALLS:-1000}

die() { echo "peers-bench.sh: $*" >&2; exit 1; }
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
[ "$(id -u)" = 0 ] || die "needs root (loop devices, mounts, containers)"
for c in debootstrap systemd-nspawn nsenter meson gcc pkg-config mkfs.btrfs btrfs losetup hyperfine compsize \
	udevadm /lib/systemd/systemd-udevd; do
	command -v "$c" >/dev/null || die "missing command: $c"
done

TMP=$(mktemp -d /tmp/subvold-peers-bench.XXXXXX)
LOOP='' FIXTURE=$TMP/fixture ROOT=$TMP/root UDEVD_PID='' UDEV_DB_MADE=false
# shellcheck source=tools/container.sh
. "$REPO/tools/container.sh"
cleanup() {
	set +e
	stop_container
	if [ -n "$UDEVD_PID" ]; then
		kill "$UDEVD_PID"
		wait "$UDEVD_PID" 2>/dev/null
	fi
	! $UDEV_DB_MADE || rm -rf /run/udev
	if mountpoint -q "$FIXTURE"; then umount "$FIXTURE" || umount -l "$FIXTURE"; fi
	[ -z "$LOOP" ] || losetup -d "$LOOP"
	rm -rf --one-file-system "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
RESULTS=${RESULTS:-$REPO/build/bench-results/peers-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
LOG=$RESULTS/peers-log.txt
: >"$LOG"

container_root "$ROOT"
container_install_subvold "$ROOT"
# udisksd loads its btrfs module when it starts, not when first asked.
sed -i 's/^modules_load_preference=.*/modules_load_preference=onstartup/' "$ROOT/etc/udisks2/udisks2.conf"
mkdir -p "$ROOT/lib/modules/$(uname -r)"
echo kernel/fs/btrfs/btrfs.ko >"$ROOT/lib/modules/$(uname -r)/modules.builtin"
chroot "$ROOT" depmod -a "$(uname -r)" 2>>"$LOG"
read -ra BTRFSUTIL <<<"$(pkg-config --cflags --libs libbtrfsutil)"
gcc -O2 -Wall -o "$TMP/mkfixture" "$REPO/tools/mkfixture.c" "${BTRFSUTIL[@]}"

log "N=$N, FILES=$FILES: building the fixture"
truncate -s 8G "$TMP/img"
mkfs.btrfs -q "$TMP/img" >>"$LOG" 2>&1
LOOP=$(losetup -f --show "$TMP/img")
mkdir -p "$FIXTURE"
mount -o compress=zstd "$LOOP" "$FIXTURE"
"$TMP/mkfixture" "$FIXTURE" "$N" >>"$LOG"
"$TMP/mkfixture" --files "$FIXTURE" "$FILES" >>"$LOG"
sync

if [ ! -S /run/udev/control ]; then
	[ -d /run/udev ] || UDEV_DB_MADE=true
	/lib/systemd/systemd-udevd >>"$LOG" 2>&1 &
	UDEVD_PID=$!
	for _ in $(seq 100); do [ -S /run/udev/control ] && break; sleep 0.1; done
fi
udevadm trigger --action=change "$LOOP"
udevadm settle
udevadm info "$LOOP" | grep -q ID_FS_TYPE=btrfs || die "udev did not probe $LOOP"

log "booting the container"
boot "$ROOT" --bind="$FIXTURE:/bench" --bind="$LOOP" --bind-ro=/run/udev
addr=unix:path=/run/dbus/system_bus_socket
uuid=$(btrfs filesystem show "$FIXTURE" | sed -n 's/.*uuid: \([0-9a-f-]*\).*/\1/p' | tr -d -)
fs=/org/subvold/Subvold1/fs/$uuid
files=$fs/$(btrfs inspect-internal rootid "$FIXTURE/files")
udisks_object=/org/freedesktop/UDisks2/block_devices/${LOOP#/dev/}

scanned() {
	until [ "$(inside busctl get-property org.subvold.Subvold1 "$fs" org.subvold.Subvold1.Filesystem \
		ScanProgress 2>/dev/null)" = "d 1" ]; do sleep 0.2; done
}
scanned

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }
TSV=$RESULTS/peers.tsv
printf 'question\tpeer\tpeer_ms\tpeer_answer\tsubvold\tsubvold_ms\tsubvold_answer\n' >"$TSV"
hf() { # COMMAND: hyperfine median, ms
	hyperfine -N --style none --warmup 2 --runs "$RUNS" --export-csv "$TMP/hf.csv" "$1" >>"$LOG" 2>&1 \
		|| die "hyperfine '$1' failed (see $LOG)"
	awk -F, 'NR == 2 {printf "%.3f", $4 * 1000}' "$TMP/hf.csv"
}
bb() { # BUSBENCH ARGS: prints "median_ms objects"
	local out
	out=$(inside busbench "$@" 2>>"$LOG") || die "busbench $* failed (see $LOG)"
	echo "$out" >>"$LOG"
	awk -v m="$(field median_us "$out")" -v o="$(field objects "$out")" 'BEGIN {printf "%.3f %s\n", m / 1000, o == "" ? "-" : o}'
}
row() { # QUESTION PEER PEER_MS PEER_ANSWER SUBVOLD SUBVOLD_MS SUBVOLD_ANSWER
	(IFS=$'\t'; echo "$*") >>"$TSV"
	log "  $1: $2 $3 ms, $5 $6 ms"
}
lines() { "$@" 2>>"$LOG" | wc -l; }
get_ms() { # PROPERTY: one Get on the files subvolume
	local r
	read -r r _ <<<"$(bb get "$addr" "$CALLS" "$files" org.subvold.Subvold1.Subvolume "$1")"
	echo "$r"
}

log "timing, quotas off"
read -r pages_ms pages_n <<<"$(bb pages "$addr" "$RUNS" "$fs")"
list_ms=$(hf "btrfs subvolume list -p $FIXTURE")
row "every subvolume" "btrfs subvolume list -p" "$list_ms" "$(lines btrfs subvolume list -p "$FIXTURE") subvolumes" \
	"Filesystem.GetSubvolumes, all pages" "$pages_ms" "$pages_n objects, 27 properties each"
read -r udisks_ms udisks_n <<<"$(bb udisks "$addr" "$RUNS" "$udisks_object")"
row "every subvolume" "udisks2 GetSubvolumes" "$udisks_ms" "$udisks_n subvolumes: id, parent, path" \
	"Filesystem.GetSubvolumes, all pages" "$pages_ms" "$pages_n objects, 27 properties each"
referenced_ms=$(get_ms ReferencedBytes)
row "data of one subvolume" "btrfs filesystem du -s" "$(hf "btrfs filesystem du -s $FIXTURE/files")" "total, exclusive, shared" \
	"Get ReferencedBytes" "$referenced_ms" "bytes (ExclusiveBytes: one Get more)"
row "data of one subvolume" "du -s" "$(hf "du -s $FIXTURE/files")" "allocated blocks" \
	"Get ReferencedBytes" "$referenced_ms" "bytes"
logical_ms=$(get_ms LogicalReferencedBytes)
row "compression of one subvolume" "compsize" "$(hf "compsize $FIXTURE/files")" "disk, uncompressed, per type" \
	"Get ReferencedBytes + LogicalReferencedBytes" "$(awk -v a="$referenced_ms" -v b="$logical_ms" 'BEGIN {printf "%.3f", a + b}')" \
	"disk, uncompressed"

# After the data rows: du -s and compsize would count the snapshots too.
log "snapper: a config for /bench/files and $SNAPS snapshots"
inside snapper -c bench create-config -f btrfs /bench/files >>"$LOG" 2>&1
for _ in $(seq "$SNAPS"); do inside snapper -c bench create -d bench; done >>"$LOG" 2>&1
published=0
for _ in $(seq 300); do
	out=$(inside busbench snapshots "$addr" 1 "$files" 2>>"$LOG" || true)
	published=$(field objects "$out")
	[ "${published:-0}" = "$SNAPS" ] && break
	sleep 0.2
done
[ "$published" = "$SNAPS" ] || die "subvold lists ${published:-no} snapshots of /bench/files, not $SNAPS"
scanned
read -r snapper_ms snapper_n <<<"$(bb snapper "$addr" "$CALLS" bench)"
read -r snaps_ms snaps_n <<<"$(bb snapshots "$addr" "$CALLS" "$files")"
row "snapshots of one subvolume" "snapper ListSnapshots" "$snapper_ms" "$snapper_n (with \"current\")" \
	"Subvolume.GetSnapshots" "$snaps_ms" "$snaps_n snapshots"

log "timing, quotas on (enable, rescan)"
btrfs quota enable "$FIXTURE"
btrfs quota rescan -w "$FIXTURE" >>"$LOG"
until [ "$(inside busctl get-property org.subvold.Subvold1 "$files" org.subvold.Subvold1.Subvolume \
	UsageSource 2>/dev/null)" = 's "qgroup"' ]; do sleep 0.2; done
read -r pages_ms pages_n <<<"$(bb pages "$addr" "$RUNS" "$fs")"
row "usage of every subvolume" "btrfs qgroup show --raw" "$(hf "btrfs qgroup show --raw $FIXTURE")" \
	"$(( $(lines btrfs qgroup show --raw "$FIXTURE") - 2 )) qgroups: referenced, exclusive" \
	"Filesystem.GetSubvolumes, all pages" "$pages_ms" "$pages_n objects, 27 properties each"
stop_container

# ---- report -----------------------------------------------------------------
{
	printf '%d subvolumes, %d files in the measured one, %d snapper snapshots of it; medians, ms\n\n' "$N" "$FILES" "$SNAPS"
	printf '| question | peer | ms | subvold | ms | subvold / peer |\n| --- | --- | --- | --- | --- | --- |\n'
	awk -F'\t' 'NR > 1 {
		printf "| %s | %s (%s) | %.2f | %s (%s) | %.2f | %.3f |\n", $1, $2, $4, $3, $5, $7, $6, $6 / $3
	}' "$TSV"
} | tee "$RESULTS/peers.txt"
