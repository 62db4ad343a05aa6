#!/usr/bin/env bash
# World 1: B (this tree) and A (main, .bench/A_prev) side by side, one on each GPU, then swapped; caches from the
# world-2 runs of the same machine where they are still there.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
$A project W1A0 0 --gpus 0 --cache /tmp/ca --by 330 & $B project W1B0 0 --gpus 1 --cache /tmp/cb --by 330; wait
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
