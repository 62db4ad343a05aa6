#!/usr/bin/env bash
# One sampled world-2 cold start of the working tree (is rank 1's NorMuon graph now found in its helper's cache?),
# then four more unsampled, A B B A: main (.bench/A_prev) against the working tree.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
SAMPLE_DIR=$OUT/samples PYTHONPATH=$PWD/.bench/sampler tools/ab_runs.sh cold SB 0 --gpus 0,1 --cache /tmp/sb --limit 110
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
i=6
for side in A B B A; do
  run=${!side}
  $run cold C$side$i 0 --gpus 0,1 --cache /tmp/c$side$i --by 500
  i=$((i + 1))
done
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf samples.tar.xz samples && rm -rf samples && tar -cJf logs.tar.xz logs walls.txt && rm -rf logs; ls -la "$OUT"
