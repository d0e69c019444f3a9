#!/usr/bin/env bash
# tools/fuzz.sh [SECONDS] [TARGET...]: runs the libFuzzer targets of
# tests/fuzz long (default 600 s each, every target), $JOBS at a time
# (default 2), and prints per target: executions, executions a second,
# coverage (libFuzzer's cov: and ft:), corpus size and the result.
# Builds build/fuzz with clang first (as tools/test.sh does).  What a run
# learns stays in build/fuzz/long/<target>/corpus for the next run; a
# crash leaves its input there too (crash-*, leak-*, timeout-*), to be
# kept as a regress-* seed once fixed.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECONDS_EACH=${1:-600}
shift || true
JOBS=${JOBS:-2}
build=$REPO/build/fuzz
opts=(-Dtests=false -Dfuzz=true -Dnautilus=disabled -Db_sanitize=none -Db_lundef=false)
if [ -f "$build/build.ninja" ]; then
	meson configure "$build" "${opts[@]}" >/dev/null
else
	CC=clang meson setup "$build" "$REPO" "${opts[@]}" >/dev/null
fi
meson compile -C "$build" >/dev/null
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=($(cd "$REPO/tests/fuzz" && ls fuzz-*.c | sed 's/\.c$//' | grep -v '^fuzz-util$'))
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

run_one() {
	local t=$1 work=$build/long/$1
	mkdir -p "$work/corpus"
	"$REPO/tests/fuzz/run-fuzz.sh" "$build/tests/fuzz/$t" "$REPO/tests/fuzz/corpus/$t" "$work" "$SECONDS_EACH" \
		>"$work/log" 2>&1 && echo ok >"$work/result" || echo "FAILED (see $work/log)" >"$work/result"
}
running=0
for t in "${targets[@]}"; do
	run_one "$t" &
	running=$((running + 1))
	if [ "$running" -ge "$JOBS" ]; then
		wait -n || true
		running=$((running - 1))
	fi
done
wait || true

printf '%-22s %12s %9s %6s %7s %14s  %s\n' target execs exec/s cov ft corpus result
failed=0
for t in "${targets[@]}"; do
	work=$build/long/$t
	done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/log" | tail -1 || true)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log")
	cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
	corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$done_line")
	result=$(cat "$work/result")
	[ "$result" = ok ] || failed=1
	printf '%-22s %12s %9s %6s %7s %14s  %s\n' "$t" "${execs:--}" "${rate:--}" "${cov:--}" "${ft:--}" "${corp:--}" "$result"
done
exit $failed
