#!/usr/bin/env bash
# The FP8 weight gradients' parts timed alone (.bench/dw_parts.py); kernels.bench's relu_square family.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
timeout 200 python3 .bench/dw_parts.py > "$OUT/dw_parts.txt" 2>&1
tail -20 "$OUT/dw_parts.txt"
timeout 150 python3 -m kernels.bench --only relu_square > "$OUT/bench_B.txt" 2>&1
tail -30 "$OUT/bench_B.txt"
