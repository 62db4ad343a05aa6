#!/usr/bin/env bash
# Emulated world-8 rank on one GPU: a long stage-1 trace, then OMP_NUM_THREADS=1 (as torchrun sets at world > 1)
# against the default, alternating, one warm cache.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
E="--gpus 0 --cache /tmp/e8"
tools/ab_runs.sh project L1 0 $E --limit 120 -- --emulate_world_size 8 --profile_steps 2:38
for i in 1 2; do
  tools/ab_runs.sh project D$i 0 $E --limit 60 -- --emulate_world_size 8
  OMP_NUM_THREADS=1 tools/ab_runs.sh project O$i 0 $E --limit 60 -- --emulate_world_size 8
done
OMP_NUM_THREADS=1 tools/ab_runs.sh project LO 0 $E --limit 60 -- --emulate_world_size 8 --profile_steps 2:38
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && mv logs/*_trace.json.xz . ; tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
