#!/usr/bin/env bash
# The enwiki-124 proxy of shared/BENCHMARK.md: the full record recipe on the visible GPUs (one H100:
# gradient accumulation 8), 120 + 4 steps, validation only at the end.
#   tools/enwiki-124.sh DATA_DIR LOG_DIR [more train_gpt.py flags, e.g. --seed 1 --run_id seed1]
# DATA_DIR holds enwiki_train_00000{0..3}.bin and enwiki_val_000000.bin (unpacked from shared/data/enwiki).
set -euo pipefail
data=${1:?usage: tools/enwiki-124.sh DATA_DIR LOG_DIR [flags...]}
logs=${2:?usage: tools/enwiki-124.sh DATA_DIR LOG_DIR [flags...]}
shift 2
cd "$(dirname "$0")/.."
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
(( ngpu > 0 )) || { echo "tools/enwiki-124.sh: no GPU visible; the proxy is a GPU benchmark" >&2; exit 1; }
exec torchrun --standalone --nproc_per_node="$ngpu" train_gpt.py \
    --train_files "$data/enwiki_train_*.bin" --val_files "$data/enwiki_val_*.bin" --val_tokens 4194304 \
    --num_scheduled_steps 120 --num_extension_steps 4 --val_every 0 --log_dir "$logs" "$@"
