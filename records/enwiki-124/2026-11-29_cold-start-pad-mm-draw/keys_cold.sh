#!/bin/bash
# Two cold starts, each process writing torch's structured trace (TORCH_TRACE), then every process's FX-graph cache
# hits and misses with their keys and key components (keys_extract.py). Run from the repository root on the GPU
# machine, carrying .bench/shards_w1 and .bench/fa3; ~200 s. As measured, the run's collection after each compiled
# frame was off (the experiments row of 2026-11-29, where the run missed the helper's backward in two of three).
set -u
export OUT=${OUT:-/tmp/out}
HERE=records/enwiki-124/2026-11-29_cold-start-pad-mm-draw
sed -i 's/dynamo = dict(specialize_float=True)/dynamo = dict(specialize_float=True, run_gc_after_compile=False)/' \
  train_gpt.py
tools/ab_runs.sh setup --shards .bench/shards_w1 || exit 1
for i in 1 2; do
  TORCH_TRACE=/tmp/tt$i tools/ab_runs.sh cold C$i 0 --cache /tmp/c$i --by $((i == 1 ? 120 : 215))
  grep -h "compile helpers\|startup" $OUT/logs/C$i.console | cut -c1-220
  python3 $HERE/keys_extract.py $OUT/keys_C$i.jsonl /tmp/tt$i
done
