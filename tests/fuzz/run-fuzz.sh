#!/bin/sh
# run-fuzz.sh TARGET SEEDS WORK SECONDS: runs a libFuzzer target for
# SECONDS from the seed corpus SEEDS, keeping what it learns in WORK (the
# source tree is never written).  Any crash, leak, timeout (10 s for one
# input) or sanitizer report fails; the input that did it is left in WORK
# and named in the output.
set -eu
target=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work/corpus"
# -error_exitcode: libFuzzer's default, 77, is meson's "skipped".
exec "$target" -max_total_time="$seconds" -error_exitcode=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$work/" "$work/corpus" "$seeds"
