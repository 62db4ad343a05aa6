#!/usr/bin/env bash
# Loss pairs at world 1: the default numerics (GPU 0) and the exact math (GPU 1) side by side, seeds 3 onwards,
# as many pairs as the call's time allows (each pair's runs start together; the first compiles cold).
set -u
export OUT=${OUT:-/tmp/out}
T0=$(date +%s)
tools/ab_runs.sh setup --shards .bench/shards_w1
for s in 3 4 5 6 7 8 9 10 11 12; do
  left=$(( 585 - ($(date +%s) - T0) ))
  [ $left -lt 80 ] && break
  tools/ab_runs.sh project P$s $s --gpus 0 --cache /tmp/c_fp8 --limit $left &
  tools/ab_runs.sh project E$s $s --gpus 1 --cache /tmp/c_exact --limit $left -- --fp8_body False &
  wait
done
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
