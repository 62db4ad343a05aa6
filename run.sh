#!/usr/bin/env bash
# Train on every visible GPU (FineWeb, downloaded on first use), or without a GPU a tiny CPU model:
# on synthetic data, or on your own shards when --train_files/--val_files are given.
# Arguments go to train_gpt.py and override the defaults (later flags win):
#   ./run.sh                      # record run / CPU demo
#   ./run.sh --val_every 100      # same, with a changed setting
#   ./run.sh --help               # every setting
# Steps: tools/install.sh (installs what is unmet; its interpreter, python3 or .venv/bin/python, runs every later
# step), `train_gpt.py ... --check` (the settings, in seconds; stops here with its one-line error), the data
# (FineWeb download / synthetic shards; none with --train_files), then torchrun.
# RUN_SH_DRY_RUN=1: all steps but the last; the torchrun command is printed, not run.
set -euo pipefail
cd "$(dirname "$0")"

# A tiny model and schedule for machines without a GPU: a smoke test of the whole code path.
CPU_FLAGS=(
    --device cpu --compile False
    --model_dim 64 --num_heads 2 --head_dim 32
    --micro_batch_tokens '(128, 256, 384)' --val_micro_batch_tokens 256
    --stage_seq_lens '(64, 128, 128)' --window_block 16
    --num_scheduled_steps 60 --num_extension_steps 4
    --val_every 20 --val_tokens 8192
)
# ... and its data when none is given: the synthetic shards, with their 256-token vocabulary.
SYNTHETIC_FLAGS=(
    --train_files 'data/synthetic/synthetic_train_*.bin' --val_files 'data/synthetic/synthetic_val_*.bin'
    --vocab_size 256 --bos_id 255
)

# One shell word for $1: as is when plain, else in single quotes (a quote inside as '\''), or with printf %q
# where it holds a control character: the printed command, pasted, runs exactly these arguments and nothing else.
quote() {
    if [[ $1 =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then
        printf '%s' "$1"
    elif [[ $1 == *[[:cntrl:]]* ]]; then
        printf '%q' "$1"
    else
        local q="'\\''"
        printf "'%s'" "${1//\'/$q}"
    fi
}

# Print the command so it can be pasted, then replace this shell with it (with RUN_SH_DRY_RUN=1: only print it).
launch() {
    local shown=() arg
    for arg in "$@"; do shown+=("$(quote "$arg")"); done
    echo "run.sh: ${shown[*]}"
    if [[ ${RUN_SH_DRY_RUN:-0} != 0 ]]; then echo "run.sh: dry run (RUN_SH_DRY_RUN=1): not started"; exit 0; fi
    exec "$@"
}

for arg in "$@"; do  # train_gpt.py --help needs no package: it answers before any install
    if [[ $arg == -h || $arg == --help ]]; then exec python3 train_gpt.py --help; fi
done

PY=$(tools/install.sh --print-python)

OWN_DATA=0  # train/val files given: no FineWeb download, no synthetic shards
for arg in "$@"; do
    case $arg in --train_files|--train_files=*|--val_files|--val_files=*) OWN_DATA=1 ;; esac
done

# torch counts the GPUs it can use (honours CUDA_VISIBLE_DEVICES; 0 with a CPU-only build).
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
if (( NGPU > 0 )); then
    ALL_ARGS=("$@")
elif (( OWN_DATA )); then
    ALL_ARGS=("${CPU_FLAGS[@]}" "$@")
else
    ALL_ARGS=("${CPU_FLAGS[@]}" "${SYNTHETIC_FLAGS[@]}" "$@")
fi

# The settings, before any download or torchrun: a mistake costs seconds and one line.
"$PY" train_gpt.py "${ALL_ARGS[@]}" --check || exit $?

if (( NGPU > 0 )); then
    if (( ! OWN_DATA )); then
        echo "run.sh: $NGPU GPU(s); checking the FineWeb shards in data/fineweb10B/ (downloads any missing)"
        "$PY" data/download.py
    else
        echo "run.sh: $NGPU GPU(s) on your shards"
    fi
    launch "$PY" -m torch.distributed.run --standalone --nproc_per_node="$NGPU" train_gpt.py "${ALL_ARGS[@]}"
elif (( OWN_DATA )); then
    echo "run.sh: no GPU; tiny CPU model on your shards (GPT-2 vocabulary unless --vocab_size/--bos_id are given)"
    launch "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 train_gpt.py "${ALL_ARGS[@]}"
else
    echo "run.sh: no GPU; tiny CPU demo on synthetic data in data/synthetic/"
    "$PY" data/synthetic.py
    launch "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 train_gpt.py "${ALL_ARGS[@]}"
fi
