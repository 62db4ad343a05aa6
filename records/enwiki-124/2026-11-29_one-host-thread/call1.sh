#!/usr/bin/env bash
# Traces for finding per-step costs: world 2 (rank 0) stages 1 and 3, an emulated world-8 rank stages 1 and 3.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
G="--gpus 0,1 --cache /tmp/c"
tools/ab_runs.sh project PR1 0 $G --limit 150 -- --profile_steps 36:40
tools/ab_runs.sh project PR3 0 $G --limit 90 -- --profile_steps 96:100
E="--gpus 0 --cache /tmp/e8"
tools/ab_runs.sh project E1 0 $E --limit 120 -- --emulate_world_size 8 --profile_steps 36:40
tools/ab_runs.sh project E3 0 $E --limit 70 -- --emulate_world_size 8 --profile_steps 96:100
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && mv logs/*_trace.json.xz . ; tar -cJf logs.tar.xz logs walls.txt gpu.txt cpu.txt; rm -rf logs; ls -la
