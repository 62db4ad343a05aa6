#!/bin/bash
# World 1 on one H200: this tree (B: micro-batches wait on the host) from an empty cache, then main (A) warm;
# peak memory of each; then the GPU tests of the graph path and the host batches.
set -u
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT; rm -f $OUT/walls.txt
tools/ab_runs.sh setup --shards .bench/shards_w1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
$B project B1 0 --cache /tmp/c --limit 170
$A project A1 0 --cache /tmp/c --by 330
(export PYTHONPATH=/tmp/fa3/fa/hopper; timeout 80 python3 -m pytest -q tests/test_train.py -k "cuda_graph or pinned" 2>&1 | tail -4) > $OUT/gpu_tests.txt
tools/ab_runs.sh summary > $OUT/summary_w1.txt
cd $OUT && XZ_OPT=-9 tar -cJf logs_w1.tar.xz logs walls.txt && rm -rf logs
