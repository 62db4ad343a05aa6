#!/bin/bash
set -u
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT; rm -f /tmp/out/walls.txt
A=.bench/A_prev/tools/ab_runs.sh B=.bench/B_order/tools/ab_runs.sh C=tools/ab_runs.sh
tools/ab_runs.sh setup --shards .bench/shards_w1
G="--gpus 0,1 --cache /tmp/c"
$A project A2 2 $G --limit 70
$B project B2 2 $G --limit 70
$C project C2 2 $G --limit 70
$A project AP 0 $G --limit 70 -- --profile_steps 36:40
$B project BP 0 $G --limit 70 -- --profile_steps 36:40
$C project CP 0 $G --limit 70 -- --profile_steps 36:40
(export PYTHONPATH=/tmp/fa3/fa/hopper; timeout 90 python3 -m pytest -q -x tests/test_embedding.py 2>&1 | tail -8) > $OUT/gpu_tests.txt
timeout 40 python3 -m kernels.bench --only embedding > $OUT/bench_embedding.txt 2>&1
E="-- --emulate_world_size 8"
$A project EA1 1 --cache /tmp/c --by 520 $E
$C project EC1 1 --cache /tmp/c --by 555 $E
$A project EA2 2 --cache /tmp/c --by 575 $E
tools/ab_runs.sh summary > $OUT/summary_more.txt
for t in $OUT/logs/*_trace.json.xz; do timeout 20 python3 tools/trace_summary.py $t > $OUT/logs/$(basename ${t%_trace.json.xz})_summary.txt 2>&1; done
cd $OUT && XZ_OPT=-6 tar -cJf logs_more.tar.xz logs walls.txt && rm -rf logs
