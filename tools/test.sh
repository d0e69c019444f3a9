#!/usr/bin/env bash
# Installs what is needed, builds subvold twice -- plainly and with
# AddressSanitizer + UndefinedBehaviorSanitizer (leak checking on) -- and
# runs the whole test suite on both builds; then builds the libFuzzer
# targets (clang, tests/fuzz) and runs each for a bounded time.  Needs
# root: the integration tests use loop devices, mounts and a private
# dbus-daemon.  A test that skips anything counts as a failure here, and so
# does a test file that meson does not run.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root" >&2; exit 1; }
"$REPO/tools/install-deps.sh"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
passed=0 failed=0 skipped=0
for variant in plain sanitize fuzz; do
	build=$REPO/build/$variant
	sanitize=none
	[ "$variant" = sanitize ] && sanitize=address,undefined
	# Set the options every time: a build directory left with others (no
	# sanitizers, no tests) would pass with less.
	opts=(-Dtests=true -Dfuzz=false -Dnautilus=enabled -Db_sanitize=$sanitize -Db_lundef=$([ $sanitize = none ] && echo true || echo false))
	# The fuzz targets: clang, its own sanitizer flags (see meson.build), no
	# other test; each target runs fuzz_seconds (meson_options.txt).
	[ "$variant" = fuzz ] && opts=(-Dtests=false -Dfuzz=true -Dnautilus=disabled -Db_sanitize=none -Db_lundef=false)
	if [ -f "$build/build.ninja" ]; then
		meson configure "$build" "${opts[@]}" >/dev/null
	else
		CC=$([ "$variant" = fuzz ] && echo clang || echo "${CC:-cc}") meson setup "$build" "$REPO" "${opts[@]}" >/dev/null
	fi
	meson compile -C "$build" >/dev/null
	echo "== $variant build: meson test" >&2
	meson test -C "$build" --print-errorlogs $([ "$variant" = fuzz ] && echo "--suite fuzz") || true
	# Count from meson's machine-readable log, not from its exit code
	# alone, and check that it ran what the build and the tree hold.
	read -r p f s < <(python3 - "$build" "$REPO" "$sanitize" "$variant" <<'PY'
import glob, json, os, subprocess, sys
build, repo, sanitize, variant = sys.argv[1:]
options = {o["name"]: o["value"] for o in json.loads(subprocess.check_output(
    ["meson", "introspect", "--buildoptions", build]))}
fuzz = variant == "fuzz"
if options["b_sanitize"] != sanitize or options["tests"] is fuzz or options["fuzz"] is not fuzz:
    sys.exit(f"test.sh: {build} has b_sanitize={options['b_sanitize']} tests={options['tests']} fuzz={options['fuzz']}")
known = {t["name"] for t in json.loads(subprocess.check_output(["meson", "introspect", "--tests", build]))}
if fuzz:
    files = {os.path.basename(f)[:-2] for f in glob.glob(f"{repo}/tests/fuzz/fuzz-*.c")} - {"fuzz-util"}
else:
    files = {os.path.basename(f)[:-3] for f in glob.glob(f"{repo}/tests/integration/test_*.py")}
    files |= {os.path.basename(f)[:-2] for f in glob.glob(f"{repo}/tests/unit/test-*.c")}
p = f = s = 0
ran = set()
for line in open(f"{build}/meson-logs/testlog.json"):
    r = json.loads(line)
    # meson names a test "project:suite / name" in its log.
    ran.add(r["name"].split(" / ")[-1])
    # A TAP test (the unit tests) that skips some of its cases is still "OK".
    if r["result"] == "SKIP" or "# SKIP" in (r.get("stdout") or ""):
        s += 1
    elif r["result"] == "OK":
        p += 1
    else:
        f += 1
for name in sorted((files - known) | (known - ran)):
    print(f"test.sh: {name} was not run", file=sys.stderr)
    f += 1
print(p, f, s)
PY
)
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] && [ "$skipped" = 0 ]
