#!/usr/bin/env bash
# B (this tree: the MLP's weight gradients as matmuls outside the backward's custom op) against A (main, .bench/A_prev):
# GPU tests of the op beside B's world-1 run (peak memory), then emulated world-8 ranks alternating, then a profiled B.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
(CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_relu_square.py tests/test_fp8_linear.py > "$OUT/gpu_tests.txt" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.txt") &
$B project W1B 0 --gpus 0 --cache /tmp/cb --limit 150
wait; tail -3 "$OUT/gpu_tests.txt"
E="--gpus 0 -- --emulate_world_size 8"
$A project EA0 0 --cache /tmp/ca --limit 90 $E
$B project EB0 0 --cache /tmp/cb --limit 60 $E
$A project EA1 1 --cache /tmp/ca --limit 45 $E
$B project EB1 1 --cache /tmp/cb --limit 45 $E
$A project EA2 2 --cache /tmp/ca --limit 45 $E
$B project EB2 2 --cache /tmp/cb --limit 45 $E
$B project PB 0 --cache /tmp/cb --by 560 --gpus 0 -- --emulate_world_size 8 --profile_steps 20:24
$A project PA 0 --cache /tmp/ca --by 590 --gpus 0 -- --emulate_world_size 8 --profile_steps 20:24
python3 .bench/traces.py "$OUT"/logs/P?_trace.json.xz > "$OUT/traces.txt" 2>&1
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && rm -f logs/*_trace.json.xz && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
