#!/usr/bin/env bash
# World-2 cold starts, helpers spawned before the imports and emulating their own rank (B, the working tree)
# against main (A, .bench/A_prev):
# three a side in the order A B B A A B, each from empty caches; the host's CPU use sampled throughout.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
python3 .bench/cpu_sampler.py "$OUT/cpu.tsv" & sampler=$!
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
i=0
for side in A B B A A B; do
  run=${!side}
  $run cold C$side$i 0 --gpus 0,1 --cache /tmp/c$side$i --limit 110
  i=$((i + 1))
done
kill $sampler
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt cpu.tsv && rm -rf logs; ls -la "$OUT"
