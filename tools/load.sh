#!/usr/bin/env bash
# The long load test: test_load (tests/integration/test_load.py) on
# SUBVOLUMES subvolumes for SECONDS seconds, against <repo>/build/plain
# (set up if missing; $SUBVOLD_BUILD to use another build as is).  Prints
# loadgen's table and subvold's CPU and memory (see tools/README.md).
# usage: sudo tools/load.sh [SUBVOLUMES [SECONDS]]   (default 10000 120)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "load.sh: run as root" >&2; exit 1; }
BUILD=${SUBVOLD_BUILD:-$REPO/build/plain}
if [ -z "${SUBVOLD_BUILD:-}" ] && [ ! -f "$BUILD/build.ninja" ]; then
	"$REPO/tools/install-deps.sh"
	meson setup "$BUILD" "$REPO" -Dtests=true >/dev/null
fi
meson compile -C "$BUILD" >/dev/null
export SUBVOLD_LOAD_SUBVOLUMES=${1:-10000} SUBVOLD_LOAD_SECONDS=${2:-120}
# The CI timeout (600 s) is for 1,000 subvolumes and 30 s.
meson test -C "$BUILD" --no-rebuild --timeout-multiplier 10 test_load >/dev/null || status=$?
python3 - "$BUILD/meson-logs/testlog.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["name"].endswith("test_load"):
        print(r["stdout"].strip())
        if r["result"] != "OK":
            print(r.get("stderr", ""), file=sys.stderr)
PY
exit "${status:-0}"
