#!/usr/bin/env bash
# Warm starts at world 1, reverse order of call 4: B A B A, each stopped after 33 s (its startup line is in by then).
set -u
export OUT=${OUT:-/tmp/out}
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
[ -d /tmp/data ] || tools/ab_runs.sh setup --shards .bench/shards_w1
$B project B2 2 --cache /tmp/cb --limit 33; $A project A2 2 --cache /tmp/ca --limit 33
$B project B3 3 --cache /tmp/cb --limit 33; $A project A3 3 --cache /tmp/ca --limit 33
grep -h "startup:" $OUT/logs/[AB][23].txt /dev/null; for f in $OUT/logs/[AB][23].txt; do echo "$f $(grep -h '^startup:' $f)"; done
