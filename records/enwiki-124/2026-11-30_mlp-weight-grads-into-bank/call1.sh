#!/usr/bin/env bash
# World 2 on two H200s: main (A), main with NCCL_MIN_NCHANNELS=32 (N, A's cache), main with Inductor's cooperative
# reductions (C, its own cache); alternating seeds.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
R=tools/ab_runs.sh
G="--gpus 0,1"
$R project A0 0 $G --cache /tmp/ca --limit 120
TORCHINDUCTOR_COOPERATIVE_REDUCTIONS=1 $R project C0 0 $G --cache /tmp/cc --limit 130
NCCL_MIN_NCHANNELS=32 $R project N0 0 $G --cache /tmp/ca --limit 70
$R project A1 1 $G --cache /tmp/ca --limit 70
TORCHINDUCTOR_COOPERATIVE_REDUCTIONS=1 $R project C1 1 $G --cache /tmp/cc --limit 70
NCCL_MIN_NCHANNELS=32 $R project N1 1 $G --cache /tmp/ca --limit 70
$R project A2 2 $G --cache /tmp/ca --by 588
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
