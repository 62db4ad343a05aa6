#!/bin/bash
# World-1 A/B of the short-row rule by read order (B: this checkout) against one config for all short rows
# (A: .bench/A_prev, 8ce859f's code) on one H200, alternating (tools/ab.py): 1 cold start a side, then seeds 0,1 from its caches.
# Needs .bench/shards_w1 (the proxy's xz shards), .bench/fa3 and .bench/A_prev; ~560 s on an H200.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1 || exit 1
export PYTHONPATH=/tmp/fa3/fa/hopper
timeout 540 python3 tools/ab.py --a .bench/A_prev --b . --out /tmp/ab --cold 1 --seeds 0,1 --timeout 200 -- \
  --train_files "/tmp/data/enwiki_train_*.bin" --val_files "/tmp/data/enwiki_val_*.bin" --val_tokens 4194304 \
  --num_scheduled_steps 120 --num_extension_steps 4 --val_every 0
cp /tmp/ab/ab.md $OUT/ 2>/dev/null; (cd /tmp/ab && tar cJf $OUT/ab_logs.tar.xz --exclude=caches --exclude=pycache .)
cat $OUT/ab.md
