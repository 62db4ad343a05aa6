#!/usr/bin/env bash
# The reference at world 1 on one H200 (the machine of call1.sh), profiled at steps 36-39 and 96-99
# (.bench/reference_prof: the shared reference with a profiler around those steps; it stops after step 99).
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
REF_DIR=.bench/reference_prof tools/ab_runs.sh reference ref 1 --by 585
ls -la $OUT/ref
for s in 39 99; do f=$(ls $OUT/ref/ref_trace_$s.json 2>/dev/null) && python3 tools/trace_summary.py $f > $OUT/ref_summary_$s.txt 2>&1 && xz -T0 -6 $f; done
cd "$OUT" && tar -cf ref.tar ref walls.txt; rm -rf ref; ls -la
