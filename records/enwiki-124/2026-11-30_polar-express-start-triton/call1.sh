#!/usr/bin/env bash
# B (this tree: Polar Express's start as two Triton passes, before its rounding fix) against A (main 2046776,
# .bench/A_prev) at world 2 over NCCL, seeds 0-2 alternating, each side its own cache (seed 0 cold); first the GPU tests.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
(PYTHONPATH=/tmp/fa3/fa/hopper timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_polar_express.py > "$OUT/gpu_tests.txt" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.txt")
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
G="--gpus 0,1"
$A project A0 0 $G --cache /tmp/ca --limit 125
$B project B0 0 $G --cache /tmp/cb --limit 125
$A project A1 1 $G --cache /tmp/ca --limit 70
$B project B1 1 $G --cache /tmp/cb --limit 70
$A project A2 2 $G --cache /tmp/ca --limit 70
$B project B2 2 $G --cache /tmp/cb --by 592
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
