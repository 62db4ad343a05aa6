#!/usr/bin/env bash
# B: the working tree (one host thread on GPU runs; the head's dW in bf16 out of the matmul); C: B with Inductor's
# combo kernels. Emulated world-8 rank (cold, then warm), then world 2 (cold) each.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
python3 .bench/head_dw.py > "$OUT/head_dw.txt" 2>&1; cat "$OUT/head_dw.txt"
B=tools/ab_runs.sh C=.bench/C_combo/tools/ab_runs.sh
$B project EB0 0 --gpus 0 --cache /tmp/eb --limit 110 -- --emulate_world_size 8
$C project EC0 0 --gpus 0 --cache /tmp/ec --limit 150 -- --emulate_world_size 8
$B project EB1 1 --gpus 0 --cache /tmp/eb --limit 50 -- --emulate_world_size 8
$C project EC1 1 --gpus 0 --cache /tmp/ec --limit 50 -- --emulate_world_size 8
$B project WB0 0 --gpus 0,1 --cache /tmp/wb --by 465
$C project WC0 0 --gpus 0,1 --cache /tmp/wc --by 570
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
