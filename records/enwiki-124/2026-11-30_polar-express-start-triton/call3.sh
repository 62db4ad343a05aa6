#!/usr/bin/env bash
# kernels.bench's polar_express family for B (this tree: the Triton start, bf16 gradients) and A (main,
# .bench/A_prev: the eager start from fp32 gradients); then seeds 3-5 of the world-2 A/B, alternating, each side its
# own cache (seed 3 cold).
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
timeout 120 python3 -m kernels.bench --only polar_express > "$OUT/bench_B.txt" 2>&1
(cd .bench/A_prev && timeout 120 python3 -m kernels.bench --only polar_express) > "$OUT/bench_A.txt" 2>&1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
G="--gpus 0,1"
$A project A3 3 $G --cache /tmp/ca --limit 125
$B project B3 3 $G --cache /tmp/cb --limit 125
$A project A4 4 $G --cache /tmp/ca --limit 70
$B project B4 4 $G --cache /tmp/cb --limit 70
$A project A5 5 $G --cache /tmp/ca --limit 70
$B project B5 5 $G --cache /tmp/cb --by 585
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
