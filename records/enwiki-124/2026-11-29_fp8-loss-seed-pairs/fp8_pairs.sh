#!/usr/bin/env bash
# Same-seed pairs of the proxy at world 1: the exact math on GPU 0, the default (FP8) numerics on GPU 1, one run
# at a time on each GPU, both GPUs at once; optional third arm: the exact math with 114 scheduled steps (L; the
# second call ran 126, which the data did not cover).
# usage: fp8_pairs.sh "E_SEEDS" "P_SEEDS" ["L_SEEDS_GPU0"] ["L_SEEDS_GPU1"]
set -u
tools/ab_runs.sh setup --shards .bench/shards_w1
lane() {  # GPU ARM CACHE SEEDS [flags...]
    local gpu=$1 arm=$2 cache=$3 seeds=$4; shift 4
    for s in $seeds; do tools/ab_runs.sh project "$arm$s" "$s" --gpus "$gpu" --cache "$cache" --by 588 -- "$@"; done
}
( lane 0 E /tmp/c_exact0 "$1" --fp8_body False; lane 0 L /tmp/c_exact0 "${3:-}" --fp8_body False --num_scheduled_steps 126 ) &
( lane 1 P /tmp/c_fp8_1 "$2"; lane 1 L /tmp/c_exact1 "${4:-}" --fp8_body False --num_scheduled_steps 126 ) &
wait
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cat "$OUT/walls.txt"
(cd "$OUT" && tar -cJf logs.tar.xz logs && rm -rf logs)
