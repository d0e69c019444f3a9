#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# broker-bench.sh - subvold's calls on dbus-daemon and on dbus-broker, side
# by side, under a real systemd: GetManagedObjects, a property Get and
# GetSubvolumeByFd, with subvold's CPU and the broker's CPU per call, and
# btrfs subvolume list -p on the same filesystem.
#
# usage: sudo tools/broker-bench.sh [N]   (default: 10000 subvolumes)
# env:   GMO_CALLS=20 GET_CALLS=1000 RUNS=10
#        BENCH_ROOT_CACHE  where the container's Debian root is kept between
#                          runs (see container.sh)
#
# dbus-broker's launcher needs systemd, so both brokers run in a Debian 12
# container booted with systemd-nspawn (tools/container.sh).  subvold is
# built from this checkout and installed into it with meson install, its
# unit and bus policy as shipped, with one drop-in: --max-message-size=32M,
# dbus-daemon's system bus limit, or GetManagedObjects at 10,000 subvolumes
# is refused.  The fixture (mkfixture:
# N subvolumes, a fifth of them snapshots) is a loop btrfs bound into the
# container at /bench.  The container boots twice from the same root: once
# with dbus.service as Debian ships it (dbus-daemon), once aliased to
# dbus-broker.service.  Calls come from busbench inside the container, as
# root, through the system bus socket; CPU (all threads, schedstat) is read
# around them.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${1:-10000}
GMO_CALLS=${GMO_CALLS:-20} GET_CALLS=${GET_CALLS:-1000} RUNS=${RUNS:-10}

die() { echo "broker-bench.sh: $*" >&2; exit 1; }
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
[ "$(id -u)" = 0 ] || die "needs root (loop devices, mounts, containers)"
for c in debootstrap systemd-nspawn nsenter meson gcc pkg-config mkfs.btrfs btrfs losetup hyperfine; do
	command -v "$c" >/dev/null || die "missing command: $c"
done

TMP=$(mktemp -d /tmp/subvold-broker-bench.XXXXXX)
LOOP='' FIXTURE=$TMP/fixture ROOT=$TMP/root
# shellcheck source=tools/container.sh
. "$REPO/tools/container.sh"
cleanup() {
	set +e
	stop_container
	if mountpoint -q "$FIXTURE"; then umount "$FIXTURE" || umount -l "$FIXTURE"; fi
	[ -z "$LOOP" ] || losetup -d "$LOOP"
	rm -rf --one-file-system "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
RESULTS=${RESULTS:-$REPO/build/bench-results/brokers-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
LOG=$RESULTS/broker-log.txt
: >"$LOG"

# ---- the container's root: built once, copied for each run -----------------
container_root "$ROOT"
container_install_subvold "$ROOT"
read -ra BTRFSUTIL <<<"$(pkg-config --cflags --libs libbtrfsutil)"
gcc -O2 -Wall -o "$TMP/mkfixture" "$REPO/tools/mkfixture.c" "${BTRFSUTIL[@]}"

log "N=$N: building the fixture"
truncate -s 4G "$TMP/img"
mkfs.btrfs -q "$TMP/img" >>"$LOG" 2>&1
LOOP=$(losetup -f --show "$TMP/img")
mkdir -p "$FIXTURE"
mount "$LOOP" "$FIXTURE"
"$TMP/mkfixture" "$FIXTURE" "$N" >>"$LOG"
sync
list_ms=$(hyperfine -N --style none --warmup 3 --runs "$RUNS" --export-csv "$TMP/hf.csv" \
	"btrfs subvolume list -p $FIXTURE" >>"$LOG" 2>&1 && awk -F, 'NR == 2 {printf "%.3f", $4 * 1000}' "$TMP/hf.csv")
uuid=$(btrfs filesystem show "$FIXTURE" | sed -n 's/.*uuid: \([0-9a-f-]*\).*/\1/p' | tr -d -)
fs=/org/subvold/Subvold1/fs/$uuid
# A subvolume from the middle, as in bench.sh.
middle=vol/v$(printf %06d $(( (N - N / 5 + 1) / 2 )))
object=$fs/$(btrfs inspect-internal rootid "$FIXTURE/$middle")

# ---- one boot per broker ----------------------------------------------------
boot_with() { # BROKER: daemon or broker
	if [ "$1" = broker ]; then
		ln -sf /lib/systemd/system/dbus-broker.service "$ROOT/etc/systemd/system/dbus.service"
	else
		rm -f "$ROOT/etc/systemd/system/dbus.service"
	fi
	boot "$ROOT" --bind="$FIXTURE:/bench"
}
TSV=$RESULTS/brokers.tsv
printf 'broker\tgmo_ms\tgmo_p99_ms\tgmo_cpu_subvold_ms\tgmo_cpu_broker_ms\tget_us\tget_p99_us\tget_cpu_subvold_us\tget_cpu_broker_us\tbyfd_us\tbyfd_p99_us\tbyfd_cpu_subvold_us\tbyfd_cpu_broker_us\tgetid_us\tlist_ms\n' >"$TSV"
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }
for broker in daemon broker; do
	log "booting with dbus-$broker"
	boot_with "$broker"
	addr=unix:path=/run/dbus/system_bus_socket
	# The broker proper: dbus-daemon, or dbus-broker (its launcher is the
	# unit's main process and does nothing per call).
	bus_pid=$(comm_pid "dbus-$broker" | head -1)
	[ -n "$bus_pid" ] || die "no dbus-$broker in the container"
	inside busctl call org.subvold.Subvold1 /org/subvold/Subvold1 org.freedesktop.DBus.Peer Ping >/dev/null
	until [ "$(inside busctl get-property org.subvold.Subvold1 "$fs" org.subvold.Subvold1.Filesystem \
		ScanProgress 2>/dev/null)" = "d 1" ]; do sleep 0.2; done
	sleep 2   # the scan's results published, the caches written
	sv_pid=$(inside systemctl show -p MainPID --value subvold.service)
	row=("dbus-$broker")
	for call in "managed $addr $GMO_CALLS" \
		"get $addr $GET_CALLS $object org.subvold.Subvold1.Subvolume ReadOnly" \
		"byfd $addr $GET_CALLS /bench/$middle"; do
		read -ra args <<<"$call"
		calls=${args[2]}
		d0=$(cpu_ns "$sv_pid") b0=$(cpu_ns "$bus_pid")
		out=$(inside busbench "${args[@]}" 2>>"$LOG") || die "busbench ${args[0]} failed on dbus-$broker (see $LOG)"
		d1=$(cpu_ns "$sv_pid") b1=$(cpu_ns "$bus_pid")
		echo "dbus-$broker $out" >>"$LOG"
		if [ "${args[0]}" = managed ]; then
			row+=("$(awk -v v="$(field median_us "$out")" 'BEGIN {printf "%.1f", v / 1000}')"
			      "$(awk -v v="$(field p99_us "$out")" 'BEGIN {printf "%.1f", v / 1000}')"
			      $(( (d1 - d0) / 1000000 / calls )) $(( (b1 - b0) / 1000000 / calls )))
		else
			row+=("$(field median_us "$out")" "$(field p99_us "$out")"
			      $(( (d1 - d0) / 1000 / calls )) $(( (b1 - b0) / 1000 / calls )))
		fi
	done
	getid=$(inside busbench getid "$addr" "$GET_CALLS" 2>>"$LOG") || die "GetId failed"
	row+=("$(field median_us "$getid")" "$list_ms")
	(IFS=$'\t'; echo "${row[*]}") >>"$TSV"
	log "  $(tail -1 "$TSV")"
	stop_container
done

# ---- report -----------------------------------------------------------------
{
	printf '%d subvolumes; btrfs subvolume list -p %.1f ms; per call: median (p99), then CPU of subvold and of the broker\n' \
		"$N" "$list_ms"
	awk -F'\t' 'NR > 1 {
		printf "%s:\n  GetManagedObjects %.1f ms (p99 %.1f), %.2fx list -p; CPU per call: subvold %d ms, broker %d ms\n",
		       $1, $2, $3, $2 / $15, $4, $5
		printf "  Get ReadOnly %.1f µs (p99 %.1f); CPU per call: subvold %d µs, broker %d µs\n", $6, $7, $8, $9
		printf "  GetSubvolumeByFd %.1f µs (p99 %.1f); CPU per call: subvold %d µs, broker %d µs\n", $10, $11, $12, $13
		printf "  GetId (the floor) %.1f µs\n", $14
	}' "$TSV"
	awk -F'\t' '$1 == "dbus-broker" {
		printf "targets: GetManagedObjects on dbus-broker <= 2x list -p: %.2fx %s; subvold CPU for it <= 40 ms: %d ms %s\n",
		       $2 / $15, $2 / $15 <= 2 ? "met" : "MISSED", $4, $4 <= 40 ? "met" : "MISSED"
	}' "$TSV"
} | tee "$RESULTS/brokers.txt"
