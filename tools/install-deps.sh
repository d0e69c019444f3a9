#!/usr/bin/env bash
# Installs, from Debian 12's archive, everything subvold's build, demo and
# test suite use.  Run as root; installs only what is missing.
set -euo pipefail

PACKAGES=(
	# build
	meson ninja-build pkg-config gcc libc6-dev clang libclang-rt-14-dev libsystemd-dev libbtrfsutil-dev libglib2.0-dev libfuse3-dev
	# run and inspect: busctl, systemd-analyze, a bus, btrfs tools
	systemd dbus-daemon dbus-bin btrfs-progs btrfs-compsize util-linux mount
	# tests: gdbus, python3 (meson needs it anyway), a systemd container
	libglib2.0-bin python3 python3-dbus pyflakes3 debootstrap systemd-container prometheus-node-exporter prometheus fuse3 acl
	# the Nautilus extension and the Previous Versions window; their tests run
	# a real Nautilus under Xvfb and read it through AT-SPI
	nautilus libnautilus-extension-dev libgtk-4-dev xvfb xauth imagemagick python3-pyatspi at-spi2-core dbus-x11
	# benchmark
	hyperfine bc
)

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "Installing: ${missing[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
