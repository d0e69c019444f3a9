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
#                          runs (default /var/tmp/subvold-bench-root)
#
# dbus-broker's launcher needs systemd, so both brokers run in a Debian 12
# container booted with systemd-nspawn (debootstrap --variant=minbase with
# systemd, dbus and dbus-broker, from the machine's own Debian mirror; built
# once, then copied).  subvold is built from this checkout and installed
# into it with meson install, its unit and bus policy as shipped, with one
# drop-in: --max-message-size=32M, dbus-daemon's system bus limit, or
# GetManagedObjects at 10,000 subvolumes is refused.  The fixture (mkfixture:
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
ROOT_CACHE=${BENCH_ROOT_CACHE:-/var/tmp/subvold-bench-root}
PACKAGES=systemd,systemd-sysv,dbus,dbus-broker,libsystemd0,libbtrfsutil1

die() { echo "broker-bench.sh: $*" >&2; exit 1; }
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
[ "$(id -u)" = 0 ] || die "needs root (loop devices, mounts, containers)"
for c in debootstrap systemd-nspawn nsenter meson gcc pkg-config mkfs.btrfs btrfs losetup hyperfine; do
	command -v "$c" >/dev/null || die "missing command: $c"
done

TMP=$(mktemp -d /tmp/subvold-broker-bench.XXXXXX)
NSPAWN_PID='' LOOP='' FIXTURE=$TMP/fixture ROOT=$TMP/root
stop_container() {
	[ -n "$NSPAWN_PID" ] || return 0
	kill "$NSPAWN_PID" 2>/dev/null || true   # nspawn powers the container off
	for _ in $(seq 600); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$NSPAWN_PID" 2>/dev/null || true
	wait "$NSPAWN_PID" 2>/dev/null || true
	NSPAWN_PID=
}
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
mirror() { # the machine's Debian mirror, from its apt sources
	local m
	m=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)
	[ -n "$m" ] || m=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
	[ -n "$m" ] || die "no Debian mirror in the apt sources"
	echo "$m"
}
if [ ! -d "$ROOT_CACHE" ]; then
	log "debootstrap (once; kept in $ROOT_CACHE)"
	debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOT_CACHE.tmp" "$(mirror)" >>"$LOG" 2>&1 \
		|| die "debootstrap failed (see $LOG)"
	mv "$ROOT_CACHE.tmp" "$ROOT_CACHE"
fi
cp -a "$ROOT_CACHE" "$ROOT"

log "building subvold and busbench"
meson setup "$TMP/build" "$REPO" --prefix=/usr -Dtests=false -Dnautilus=disabled -Dbuildtype=debugoptimized >>"$LOG"
meson compile -C "$TMP/build" >>"$LOG"
meson install -C "$TMP/build" --destdir "$ROOT" --no-rebuild >>"$LOG"
read -ra LIBSYSTEMD <<<"$(pkg-config --cflags --libs libsystemd)"
gcc -O2 -Wall -o "$ROOT/usr/local/bin/busbench" "$REPO/tools/busbench.c" "${LIBSYSTEMD[@]}"
read -ra BTRFSUTIL <<<"$(pkg-config --cflags --libs libbtrfsutil)"
gcc -O2 -Wall -o "$TMP/mkfixture" "$REPO/tools/mkfixture.c" "${BTRFSUTIL[@]}"
exec_start=$(sed -n 's/^ExecStart=//p' "$TMP/build/units/subvold.service")
mkdir -p "$ROOT/etc/systemd/system/subvold.service.d"
printf '[Service]\nExecStart=\nExecStart=%s --max-message-size=32M\n' "$exec_start" \
	>"$ROOT/etc/systemd/system/subvold.service.d/bench.conf"

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
INIT=''
inside() { nsenter -t "$INIT" -a env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
find_init() { # the container's systemd: the child of nspawn named systemd
	local p
	for p in $(pgrep -P "$NSPAWN_PID" -x systemd); do INIT=$p; return 0; done
	return 1
}
boot() { # BROKER: daemon or broker
	if [ "$1" = broker ]; then
		ln -sf /lib/systemd/system/dbus-broker.service "$ROOT/etc/systemd/system/dbus.service"
	else
		rm -f "$ROOT/etc/systemd/system/dbus.service"
	fi
	systemd-nspawn --register=no --keep-unit --boot --console=pipe --machine="subvold-bench-$$" -D "$ROOT" \
		--bind="$FIXTURE:/bench" </dev/null >>"$LOG" 2>&1 &
	NSPAWN_PID=$!
	for _ in $(seq 600); do find_init && break; kill -0 "$NSPAWN_PID" || die "nspawn exited (see $LOG)"; sleep 0.1; done
	[ -n "$INIT" ] || die "no init in the container"
	for _ in $(seq 1200); do
		case "$(inside systemctl is-system-running 2>/dev/null || true)" in running|degraded) return 0 ;; esac
		sleep 0.1
	done
	die "the container did not boot (see $LOG)"
}
cpu_ns() { # CPU time of all threads of PID in the container, ns (schedstat)
	# shellcheck disable=SC2016 # expanded by the container's shell
	inside sh -c 'cat /proc/"$1"/task/*/schedstat' sh "$1" | awk '{s += $1} END {printf "%.0f\n", s}'
}
comm_pid() { # the pid of the process named COMM in the container (minbase has no pgrep)
	# shellcheck disable=SC2016 # expanded by the container's shell
	inside sh -c 'for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = "$1" ] && echo "${p#/proc/}"; done; true' sh "$1"
}
TSV=$RESULTS/brokers.tsv
printf 'broker\tgmo_ms\tgmo_p99_ms\tgmo_cpu_subvold_ms\tgmo_cpu_broker_ms\tget_us\tget_p99_us\tget_cpu_subvold_us\tget_cpu_broker_us\tbyfd_us\tbyfd_p99_us\tbyfd_cpu_subvold_us\tbyfd_cpu_broker_us\tgetid_us\tlist_ms\n' >"$TSV"
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }
for broker in daemon broker; do
	log "booting with dbus-$broker"
	boot "$broker"
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
