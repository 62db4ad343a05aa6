#!/usr/bin/env bash
# Where a world-1 step's GPU time goes at main with the FP8 weight gradients: stage 3 (steps 96-99) and stage 1
# (36-39), kernel by kernel, as records/enwiki-124/2026-11-30_kernels-vs-reference-world1 measured before them.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
tools/ab_runs.sh project P96 0 --gpus 0 --cache /tmp/c --limit 150 -- --profile_steps 96:100
python3 tools/trace_summary.py $OUT/logs/P96_trace.json.xz > $OUT/P96_summary.txt 2>&1
tools/ab_runs.sh project P36 0 --gpus 0 --cache /tmp/c --by 300 -- --profile_steps 36:40
[ -f $OUT/logs/P36_trace.json.xz ] && python3 tools/trace_summary.py $OUT/logs/P36_trace.json.xz > $OUT/P36_summary.txt 2>&1
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz --exclude="*_trace.json.xz" logs walls.txt; rm -rf logs; ls -la
