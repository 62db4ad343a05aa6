#!/usr/bin/env bash
# Train on every visible GPU (FineWeb, downloaded on first use), or without a GPU a tiny CPU demo
# on synthetic data. Arguments go to train_gpt.py and override the defaults (later flags win):
#   ./run.sh                      # record run / CPU demo
#   ./run.sh --val_every 100      # same, with a changed setting
set -euo pipefail
cd "$(dirname "$0")"

# A tiny model and schedule for machines without a GPU: a smoke test of the whole code path.
CPU_FLAGS=(
    --device cpu --compile False
    --train_files 'data/synthetic/synthetic_train_*.bin' --val_files 'data/synthetic/synthetic_val_*.bin'
    --vocab_size 256 --bos_id 255
    --model_dim 64 --num_heads 2 --head_dim 32
    --micro_batch_tokens '(128, 256, 384)' --val_micro_batch_tokens 1024
    --stage_seq_lens '(64, 128, 128)' --window_block 16
    --num_scheduled_steps 60 --num_extension_steps 4
    --val_every 20 --val_tokens 8192
)

# Print the command (arguments with spaces or wildcards in single quotes, so it can be pasted),
# then replace this shell with it.
launch() {
    local shown=() arg
    for arg in "$@"; do [[ $arg =~ ^[A-Za-z0-9_./=:,+-]+$ ]] && shown+=("$arg") || shown+=("'$arg'"); done
    echo "run.sh: ${shown[*]}"
    exec "$@"
}

# torch counts the GPUs it can use (honours CUDA_VISIBLE_DEVICES; 0 with a CPU-only build).
if ! NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())'); then
    echo "run.sh: cannot import torch; install the requirements first: python3 -m pip install -r requirements.txt" >&2
    exit 1
fi

if (( NGPU > 0 )); then
    if [[ " $* " != *" --train_files"* ]]; then  # with data of one's own, FineWeb is not needed
        echo "run.sh: $NGPU GPU(s); checking the FineWeb shards in data/fineweb10B/ (downloads any missing)"
        python3 data/download.py
    fi
    launch torchrun --standalone --nproc_per_node="$NGPU" train_gpt.py "$@"
else
    echo "run.sh: no GPU; tiny CPU demo on synthetic data in data/synthetic/"
    python3 data/synthetic.py
    launch torchrun --standalone --nproc_per_node=1 train_gpt.py "${CPU_FLAGS[@]}" "$@"
fi
