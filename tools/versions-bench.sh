#!/usr/bin/env bash
# versions-bench.sh - ListFileVersions for a file with SNAPSHOTS snapshots in
# its family (VERSIONS distinct versions), side by side in one run with a
# loop that stat()s the file's path in each snapshot (what path-based tools
# such as httm pay, without inode matching or permission checks), as an
# ordinary user through subvold's own bus policy; then subvold's RSS
# before and after CALLS more calls.
#
# usage: sudo tools/versions-bench.sh
# env:   SNAPSHOTS=1000 VERSIONS=10 RUNS=21 CALLS=1000
#        SUBVOLD_BUILD  meson build dir (default: <repo>/build, set up if need be)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SNAPSHOTS=${SNAPSHOTS:-1000} VERSIONS=${VERSIONS:-10} RUNS=${RUNS:-21} CALLS=${CALLS:-1000}
[ "$(id -u)" = 0 ] || { echo "versions-bench.sh: needs root" >&2; exit 1; }
BUILD=${SUBVOLD_BUILD:-$REPO/build}
if [ -z "${SUBVOLD_BUILD:-}" ]; then
	[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" "$REPO" >&2
	meson compile -C "$BUILD" subvold >&2
fi

TMP=$(mktemp -d /tmp/subvold-vbench.XXXXXX)
chmod 755 "$TMP"
USER_NAME=svbench$$
cleanup() {
	set +e
	[ -n "${DAEMON:-}" ] && kill "$DAEMON" && wait "$DAEMON"
	[ -n "${BUS:-}" ] && kill "$BUS"
	mountpoint -q "$TMP/mnt" && umount "$TMP/mnt"
	[ -n "${LOOP:-}" ] && losetup -d "$LOOP"
	id "$USER_NAME" >/dev/null 2>&1 && userdel "$USER_NAME"
	rm -rf "$TMP"
}
trap cleanup EXIT
useradd --no-create-home --user-group --shell /usr/sbin/nologin "$USER_NAME"

gcc -O2 -Wall -o "$TMP/versionsbench" "$REPO/tools/versionsbench.c" $(pkg-config --cflags --libs libsystemd)
truncate -s 2G "$TMP/img"
mkfs.btrfs -q "$TMP/img"
LOOP=$(losetup --find --show "$TMP/img")
mkdir "$TMP/mnt"
mount "$LOOP" "$TMP/mnt"
btrfs -q subvolume create "$TMP/mnt/home"
mkdir "$TMP/mnt/snaps"
echo "making $SNAPSHOTS snapshots ..." >&2
for i in $(seq -w 1 "$SNAPSHOTS"); do
	if [ $(( (10#$i - 1) % (SNAPSHOTS / VERSIONS) )) = 0 ]; then
		head -c $((4096 * 10#$i)) /dev/urandom >"$TMP/mnt/home/doc"
	fi
	btrfs -q subvolume snapshot -r "$TMP/mnt/home" "$TMP/mnt/snaps/s$i"
done
chmod 644 "$TMP/mnt/home/doc"

# The machine's system bus policy plus subvold's, on a private bus.
python3 - "$TMP/bus.conf" "$TMP/bus" "$REPO/dbus" <<'PY'
import sys, xml.etree.ElementTree as ET
conf, sock, policy_dir = sys.argv[1:]
root = ET.parse("/usr/share/dbus-1/system.conf").getroot()
policy = "\n".join(ET.tostring(e, encoding="unicode") for e in root if e.tag in ("policy", "limit"))
open(conf, "w").write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path={sock}</listen><auth>EXTERNAL</auth>
{policy}<include>{policy_dir}/org.subvold.Subvold1.conf</include></busconfig>""")
PY
dbus-daemon --config-file "$TMP/bus.conf" --nofork --nopidfile &
BUS=$!
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$TMP/bus
for _ in $(seq 100); do [ -S "$TMP/bus" ] && break; sleep 0.1; done
"$BUILD/daemon/subvold" 2>"$TMP/subvold.log" &
DAEMON=$!
for _ in $(seq 300); do busctl --system status org.subvold.Subvold1 >/dev/null 2>&1 && break; sleep 0.1; done

as_user() { setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups "$@"; }
row=$(as_user "$TMP/versionsbench" "$TMP/mnt/home/doc" "$TMP/mnt/snaps" doc "$RUNS")
stat_ms=$(sed -n 's/.*stat_ms=\([0-9.]*\).*/\1/p' <<<"$row")
list_ms=$(sed -n 's/.*list_ms=\([0-9.]*\).*/\1/p' <<<"$row")
versions=$(sed -n 's/.*versions=\([0-9]*\).*/\1/p' <<<"$row")
# Memory must not grow with the number of calls: RSS after the timed runs,
# after CALLS more, and after CALLS more again.
rss() { awk '/^VmRSS/ {print $2}' /proc/$DAEMON/status; }
rss_before=$(rss)
as_user "$TMP/versionsbench" "$TMP/mnt/home/doc" "$TMP/mnt/snaps" doc "$CALLS" >/dev/null
rss_after=$(rss)
as_user "$TMP/versionsbench" "$TMP/mnt/home/doc" "$TMP/mnt/snaps" doc "$CALLS" >/dev/null
rss_after2=$(rss)

printf '\n| snapshots | distinct versions listed | ListFileVersions ms (median of %s) | stat loop ms | list / loop | subvold RSS kB: after the runs / %s more calls / %s more |\n' "$RUNS" "$CALLS" "$CALLS"
printf '| ---: | ---: | ---: | ---: | ---: | ---: |\n'
printf '| %s | %s | %s | %s | %.2f | %s / %s / %s |\n' "$SNAPSHOTS" "$versions" "$list_ms" "$stat_ms" \
	"$(echo "$list_ms / $stat_ms" | bc -l)" "$rss_before" "$rss_after" "$rss_after2"
