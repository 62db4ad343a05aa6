#!/usr/bin/env bash
# World 1 (one process on GPU 0): main (A: .bench/A_prev, 1d215f7) against the working tree (B: one host thread,
# the head's dW in bf16), cold then warm, alternating. Then NCCL's speed at world 2 by channel count.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for ch in default 8 16 32; do
  if [ $ch = default ]; then env TAG=$ch NCCL_DEBUG=INFO torchrun --standalone --nproc_per_node=2 .bench/nccl_ch.py > $OUT/nccl_default.txt 2>&1; grep -h "^default\|nChannels\|NCCL version" $OUT/nccl_default.txt | head -8
  else env TAG=min$ch NCCL_MIN_NCHANNELS=$ch torchrun --standalone --nproc_per_node=2 .bench/nccl_ch.py 2>&1 | grep "^min"; fi
done | tee $OUT/nccl_channels.txt
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
$A project A0 0 --cache /tmp/ca --limit 120
$B project B0 0 --cache /tmp/cb --limit 120
$A project A1 1 --cache /tmp/ca --limit 90
$B project B1 1 --cache /tmp/cb --by 575
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf logs.tar.xz logs walls.txt nccl_default.txt; rm -rf logs; ls -la
