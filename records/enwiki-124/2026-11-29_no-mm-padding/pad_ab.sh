#!/bin/bash
# Cold full runs of the proxy (empty compile caches, then the whole run) of up to three checkouts, in ORDER.
# Usage, from the repository root on the GPU machine (each checkout a folder with train_gpt.py and tools/):
#   A=DIR B=DIR C=DIR ORDER="B C A C B" [N0=0] bash records/enwiki-124/2026-11-29_no-mm-padding/pad_ab.sh
# Runs are named by side and number (B1, C2, ...), seeded by their number mod 3, each with its own new cache, and
# stopped at 588 s after the setup (one call's time). As measured: A = 1e2ad4d, B = A with shape_padding=False in
# torch_settings' Inductor patches (what this record adopts), C = A with force_shape_pad=True instead.
set -u
export OUT=${OUT:-/tmp/out}
declare -A DIR=([A]=${A:-.} [B]=${B:-.} [C]=${C:-.})
tools/ab_runs.sh setup --shards .bench/shards_w1 || exit 1
n=${N0:-0}
for side in $ORDER; do
  n=$((n + 1))
  "${DIR[$side]}"/tools/ab_runs.sh project "$side$n" $((n % 3)) --cache "/tmp/c_$side$n" --by 588
done
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
grep -h "startup:\|graphs came\|summary:" "$OUT/summary.txt"
