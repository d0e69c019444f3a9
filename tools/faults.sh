#!/usr/bin/env bash
# The long fault run: test_faults (tests/integration/test_faults.py) with
# ROUNDS SIGKILLs while a cache is written (CI: 30), then every test of it
# REPEAT times more (new seeds for the failing kernel calls each time),
# against <repo>/build/plain (set up if missing; $SUBVOLD_BUILD to use
# another build as is, a sanitizer build too).
# usage: sudo tools/faults.sh [ROUNDS [REPEAT]]   (default 1000 20)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "faults.sh: run as root" >&2; exit 1; }
BUILD=${SUBVOLD_BUILD:-$REPO/build/plain}
if [ -z "${SUBVOLD_BUILD:-}" ] && [ ! -f "$BUILD/build.ninja" ]; then
	"$REPO/tools/install-deps.sh"
	meson setup "$BUILD" "$REPO" -Dtests=true >/dev/null
fi
meson compile -C "$BUILD" >/dev/null
rounds=${1:-1000} repeat=${2:-20}
SUBVOLD_FAULT_KILL_ROUNDS=$rounds meson test -C "$BUILD" --no-rebuild --timeout-multiplier $((rounds / 30 + 1)) \
	--print-errorlogs test_faults --test-args FaultTest.test_killed_while_writing_the_cache
echo "faults.sh: $rounds kills while a cache was written: passed"
for i in $(seq "$repeat"); do
	SUBVOLD_FAULT_SEED=$i meson test -C "$BUILD" --no-rebuild --print-errorlogs test_faults >/dev/null ||
		{ echo "faults.sh: run $i failed; see $BUILD/meson-logs/testlog.txt" >&2; exit 1; }
	echo "faults.sh: run $i of $repeat passed"
done
