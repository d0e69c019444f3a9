#!/usr/bin/env bash
# tools/busfuzz.sh [SECONDS]: runs test_busfuzz (tests/integration) for
# SECONDS (default 600) instead of CI's 60 -- the bus fuzzer against the
# real subvold on a real btrfs, through the shipped policy, while
# subvolumes and mounts change -- and prints its figures: calls, calls a
# second, replies that are returns, messages sd-bus would not build, errors
# by name, and subvold's RSS.  Needs root.  Uses the build in
# $SUBVOLD_BUILD (default build/sanitize, as tools/test.sh leaves it: the
# sanitizer build, so that any memory error shows); builds it if need be.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SUBVOLD_BUILD:-$REPO/build/sanitize}
[ "$(id -u)" = 0 ] || { echo "busfuzz.sh: run as root" >&2; exit 1; }
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$REPO" -Dtests=true -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
meson compile -C "$build" >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
rc=0
# No meson timeout: the run is as long as asked.
SUBVOLD_BUSFUZZ_SECONDS=${1:-600} meson test -C "$build" --timeout-multiplier 0 test_busfuzz >/dev/null || rc=$?
sed -n '/^busfuzz as /,/^subvold VmRSS/p' "$build/meson-logs/testlog.txt"
[ "$rc" = 0 ] && echo "result: ok" || echo "result: FAILED, see $build/meson-logs/testlog.txt"
exit $rc
