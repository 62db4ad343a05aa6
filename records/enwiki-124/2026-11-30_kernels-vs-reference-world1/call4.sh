#!/usr/bin/env bash
# Cold starts at world 2 (empty caches, stopped at `startup:`): B (this tree) and A (main 2046776) in the order
# B A A B, on a fresh two-H200 machine; with call3.sh's A0/B0, three a side.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
G="--gpus 0,1"
$B cold CB1 0 $G --cache /tmp/cb1 --limit 110
$A cold CA1 0 $G --cache /tmp/ca1 --limit 110
$A cold CA2 0 $G --cache /tmp/ca2 --limit 110
$B cold CB2 0 $G --cache /tmp/cb2 --by 440
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
