#!/bin/bash
# World 2 on two H200s: main (A: .bench/A_prev), collective-order (B: .bench/B_order), flagged-row rounding and
# zeroing (C: this tree); three seeds each, alternating, one shared compile cache.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
A=.bench/A_prev/tools/ab_runs.sh B=.bench/B_order/tools/ab_runs.sh C=tools/ab_runs.sh
G="--gpus 0,1 --cache /tmp/c"
$A project A0 0 $G --limit 150
$B project B0 0 $G --limit 75
$C project C0 0 $G --limit 130
$A project A1 1 $G --limit 75
$B project B1 1 $G --limit 75
$C project C1 1 $G --limit 75
$A project A2 2 $G --by 480
$B project B2 2 $G --by 530
$C project C2 2 $G --by 585
tools/ab_runs.sh summary > $OUT/summary_w2.txt
cd $OUT && XZ_OPT=-9 tar -cJf logs_w2.tar.xz logs walls.txt && rm -rf logs && mv walls.txt walls_w2.txt
