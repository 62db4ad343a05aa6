#!/usr/bin/env bash
# GPU tests of kernels/polar_express.py; cold starts at world 2 (empty caches, stopped at `startup:`): B (this tree,
# the Triton start) and A (main, .bench/A_prev) in the order B A A B; then one world-1 cold start of B on GPU 0.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
(PYTHONPATH=/tmp/fa3/fa/hopper timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_polar_express.py > "$OUT/gpu_tests.txt" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.txt")
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
G="--gpus 0,1"
$B cold CB1 0 $G --cache /tmp/cb1 --limit 110
$A cold CA1 0 $G --cache /tmp/ca1 --limit 110
$A cold CA2 0 $G --cache /tmp/ca2 --limit 110
$B cold CB2 0 $G --cache /tmp/cb2 --limit 110
$B cold CW1 0 --gpus 0 --cache /tmp/cw1 --by 560
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
