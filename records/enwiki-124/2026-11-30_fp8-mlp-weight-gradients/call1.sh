#!/usr/bin/env bash
# GPU tests of kernels/relu_square.py (the transposed copies, the Hopper kernel bit for bit, the FP8 weight gradients)
# and kernels.bench's relu_square family for B (this tree: the MLP's weight gradients in FP8); then world 2, B (this
# tree) and A (main, .bench/A_prev) alternating, seeds 0-1, each side its own cache (seed 0 cold).
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
(PYTHONPATH=/tmp/fa3/fa/hopper timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_relu_square.py > "$OUT/gpu_tests.txt" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.txt")
if ! grep -q "rc=0" "$OUT/gpu_tests.txt"; then tail -c 6000 "$OUT/gpu_tests.txt"; exit 1; fi
timeout 120 python3 -m kernels.bench --only relu_square > "$OUT/bench_B.txt" 2>&1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
G="--gpus 0,1"
$B project B0 0 $G --cache /tmp/cb --limit 130
$A project A0 0 $G --cache /tmp/ca --limit 130
$A project A1 1 $G --cache /tmp/ca --limit 70
$B project B1 1 $G --cache /tmp/cb --by 590
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
