#!/usr/bin/env bash
# Where the project's world-1 step spends GPU time, stage 1 (steps 36-39) and stage 3 (96-99), by kernel family:
# the side of a family-by-family comparison with the reference (call2.sh). One H200.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
tools/ab_runs.sh project P36 0 --gpus 0 --cache /tmp/c --limit 200 -- --profile_steps 36:40
tools/ab_runs.sh project P96 0 --gpus 0 --cache /tmp/c --limit 150 -- --profile_steps 96:100
for r in P36 P96; do python3 tools/trace_summary.py $OUT/logs/${r}_trace.json.xz > $OUT/${r}_summary.txt 2>&1; done
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
