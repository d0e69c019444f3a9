#!/usr/bin/env bash
# Installs what is needed, builds subvold twice -- plainly and with
# AddressSanitizer + UndefinedBehaviorSanitizer (leak checking on) -- and
# runs the whole test suite on both builds.  Needs root: the integration
# tests use loop devices, mounts and a private dbus-daemon.  Any test that
# skips counts as a failure here.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root" >&2; exit 1; }
"$REPO/tools/install-deps.sh"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
passed=0 failed=0 skipped=0
for variant in plain sanitize; do
	build=$REPO/build/$variant
	opts=()
	[ "$variant" = sanitize ] && opts=(-Db_sanitize=address,undefined -Db_lundef=false)
	if [ ! -f "$build/build.ninja" ]; then
		meson setup "$build" "$REPO" "${opts[@]}" >/dev/null
	fi
	meson compile -C "$build" >/dev/null
	echo "== $variant build: meson test" >&2
	meson test -C "$build" --print-errorlogs || true
	# Count from meson's machine-readable log, not from its exit code alone.
	read -r p f s < <(python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r == "OK": p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(p, f, s)
PY
)
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] && [ "$skipped" = 0 ]
