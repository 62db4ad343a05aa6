#!/usr/bin/env bash
# World 1, seed 1: A (main, .bench/A_prev) on GPU 1 and B (this tree) on GPU 0 side by side, the GPUs of call 4 swapped;
# caches from the earlier runs of the same machine.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
$A project W1A1 1 --gpus 1 --cache /tmp/ca --by 200 & $B project W1B1 1 --gpus 0 --cache /tmp/cb --by 200; wait
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
