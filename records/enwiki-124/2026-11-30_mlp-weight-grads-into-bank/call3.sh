#!/usr/bin/env bash
# World 2 on two H200s: A (main, .bench/A_prev) against B (this tree), alternating, each its own cache; then the
# d_pre op's registration test on the GPU.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
G="--gpus 0,1"
$A project A0 0 $G --cache /tmp/ca --limit 110
$B project B0 0 $G --cache /tmp/cb --limit 110
$A project A1 1 $G --cache /tmp/ca --limit 60
$B project B1 1 $G --cache /tmp/cb --limit 60
$A project A2 2 $G --cache /tmp/ca --by 520
$B project B2 2 $G --cache /tmp/cb --by 575
timeout 20 python3 -m pytest -q -p no:cacheprovider tests/test_relu_square.py -k registration > "$OUT/gpu_test.txt" 2>&1; tail -2 "$OUT/gpu_test.txt"
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
