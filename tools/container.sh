# SPDX-License-Identifier: LGPL-2.1-or-later
# container.sh - a Debian 12 machine booted with systemd-nspawn, for the
# benchmarks that need a real systemd (dbus-broker, udisksd, snapperd).
# Sourced by broker-bench.sh and peers-bench.sh, which set REPO, TMP and
# LOG and define die() and log() first.
#
# container_root DIR   copies the Debian root to DIR: debootstrap
#                      --variant=minbase with CONTAINER_PACKAGES from the
#                      machine's own Debian mirror, made once and kept in
#                      $BENCH_ROOT_CACHE (default /var/tmp/subvold-bench-root-
#                      and a hash of the package list), then copied
# container_install_subvold DIR
#                      meson install of this checkout into DIR, busbench in
#                      /usr/local/bin, subvold with --max-message-size=32M
#                      (the limit of dbus-daemon's system bus: without it
#                      GetManagedObjects at 10,000 subvolumes is refused)
# boot DIR [ARG...]    boots DIR (ARGs go to systemd-nspawn) and waits until
#                      systemd says running or degraded; sets NSPAWN_PID, INIT
# inside CMD...        runs CMD in the container, every namespace entered
# stop_container       powers it off and waits for nspawn to exit
# cpu_ns PID           CPU time of all threads of PID in the container, ns
# comm_pid COMM        the pids of the processes named COMM in the container

CONTAINER_PACKAGES=systemd,systemd-sysv,dbus,dbus-broker,libsystemd0,libbtrfsutil1,udisks2,udisks2-btrfs,snapper,btrfs-progs,kmod
NSPAWN_PID='' INIT=''

mirror() { # the machine's Debian mirror, from its apt sources
	local m
	m=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)
	[ -n "$m" ] || m=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
	[ -n "$m" ] || die "no Debian mirror in the apt sources"
	echo "$m"
}

container_root() {
	local cache
	cache=${BENCH_ROOT_CACHE:-/var/tmp/subvold-bench-root-$(echo "$CONTAINER_PACKAGES" | md5sum | cut -c1-8)}
	if [ ! -d "$cache" ]; then
		log "debootstrap (once; kept in $cache)"
		rm -rf "$cache.tmp"
		debootstrap --variant=minbase --include="$CONTAINER_PACKAGES" bookworm "$cache.tmp" "$(mirror)" >>"$LOG" 2>&1 \
			|| die "debootstrap failed (see $LOG)"
		mv "$cache.tmp" "$cache"
	fi
	cp -a "$cache" "$1"
}

container_install_subvold() {
	local root=$1 exec_start libs
	log "building subvold and busbench"
	meson setup "$TMP/build" "$REPO" --prefix=/usr -Dtests=false -Dnautilus=disabled -Dbuildtype=debugoptimized >>"$LOG"
	meson compile -C "$TMP/build" >>"$LOG"
	meson install -C "$TMP/build" --destdir "$root" --no-rebuild >>"$LOG"
	read -ra libs <<<"$(pkg-config --cflags --libs libsystemd)"
	gcc -O2 -Wall -o "$root/usr/local/bin/busbench" "$REPO/tools/busbench.c" "${libs[@]}"
	exec_start=$(sed -n 's/^ExecStart=//p' "$TMP/build/units/subvold.service")
	mkdir -p "$root/etc/systemd/system/subvold.service.d"
	printf '[Service]\nExecStart=\nExecStart=%s --max-message-size=32M\n' "$exec_start" \
		>"$root/etc/systemd/system/subvold.service.d/bench.conf"
}

stop_container() {
	[ -n "$NSPAWN_PID" ] || return 0
	kill "$NSPAWN_PID" 2>/dev/null || true   # nspawn powers the container off
	for _ in $(seq 600); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$NSPAWN_PID" 2>/dev/null || true
	wait "$NSPAWN_PID" 2>/dev/null || true
	NSPAWN_PID='' INIT=''
}

inside() { nsenter -t "$INIT" -a env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

find_init() { # the container's systemd: the child of nspawn named systemd
	local p
	for p in $(pgrep -P "$NSPAWN_PID" -x systemd); do INIT=$p; return 0; done
	return 1
}

boot() {
	local root=$1
	shift
	systemd-nspawn --register=no --keep-unit --boot --console=pipe --machine="subvold-bench-$$" -D "$root" \
		"$@" </dev/null >>"$LOG" 2>&1 &
	NSPAWN_PID=$!
	for _ in $(seq 600); do find_init && break; kill -0 "$NSPAWN_PID" || die "nspawn exited (see $LOG)"; sleep 0.1; done
	[ -n "$INIT" ] || die "no init in the container"
	for _ in $(seq 1200); do
		case "$(inside systemctl is-system-running 2>/dev/null || true)" in running|degraded) return 0 ;; esac
		sleep 0.1
	done
	die "the container did not boot (see $LOG)"
}

cpu_ns() {
	# shellcheck disable=SC2016 # expanded by the container's shell
	inside sh -c 'cat /proc/"$1"/task/*/schedstat' sh "$1" | awk '{s += $1} END {printf "%.0f\n", s}'
}

comm_pid() { # minbase has no pgrep
	# shellcheck disable=SC2016 # expanded by the container's shell
	inside sh -c 'for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = "$1" ] && echo "${p#/proc/}"; done; true' sh "$1"
}
