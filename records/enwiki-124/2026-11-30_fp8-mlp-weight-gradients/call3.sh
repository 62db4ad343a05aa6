#!/usr/bin/env bash
# GPU tests of the FP8 weight gradients' kernels and op (relu_square, transpose); then world 2, B (this tree: the MLP's
# weight gradients in FP8, the gradient's and input's transposed e4m3 copies by the tiled kernel) and A (main,
# .bench/A_prev) alternating, each side its own cache (seed 0 cold), seeds 0-2 (3 if time allows).
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
(PYTHONPATH=/tmp/fa3/fa/hopper timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_transpose.py tests/test_relu_square.py -k "transposed or weight_gradients or registration or hopper" > "$OUT/gpu_tests.txt" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.txt")
if ! grep -q "rc=0" "$OUT/gpu_tests.txt"; then tail -c 6000 "$OUT/gpu_tests.txt"; exit 1; fi
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
G="--gpus 0,1"
$B project B0 0 $G --cache /tmp/cb --limit 130
$A project A0 0 $G --cache /tmp/ca --limit 130
$A project A1 1 $G --cache /tmp/ca --limit 70
$B project B1 1 $G --cache /tmp/cb --limit 70
$B project B2 2 $G --cache /tmp/cb --limit 70
$A project A2 2 $G --cache /tmp/ca --by 590
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
