#!/usr/bin/env bash
# Three world-2 cold starts of the working tree (helpers spawned before the imports), every train_gpt.py process's
# stack sampled at 20 Hz, to see the new critical path and what varies between cold starts.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
for i in 0 1 2; do
  SAMPLE_DIR=$OUT/samples/S$i PYTHONPATH=$PWD/.bench/sampler tools/ab_runs.sh cold S$i 0 --gpus 0,1 --cache /tmp/s$i --limit 110
done
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf samples.tar.xz samples && rm -rf samples && tar -cJf logs.tar.xz logs walls.txt && rm -rf logs; ls -la "$OUT"
