#!/usr/bin/env bash
# Train on every visible GPU (FineWeb, downloaded on first use), or without a GPU a tiny CPU model:
# on synthetic data, or on your own shards when --train_files/--val_files are given (data/tokenize_text.py
# writes them; without a GPU, long documents are read in 128-token pieces and the schedule is fitted to the shards,
# so that one run trains on most of a small corpus: e.g. 97% of 60 documents of ~2,400 tokens, in 91 s).
# Arguments go to train_gpt.py and override the defaults (later flags win):
#   ./run.sh                      # record run / CPU demo
#   ./run.sh --val_every 100      # same, with a changed setting
#   ./run.sh --train_files 'mine/mine_train_*.bin' --val_files 'mine/mine_val_*.bin'   # on your shards
#   ./run.sh --help               # every setting
# Steps: tools/install.sh (installs what is unmet; its interpreter, python3 or .venv/bin/python, runs every later
# step), the data (FineWeb download / synthetic shards; none with --train_files), `train_gpt.py --check ...` (the
# settings and the data: a mistake stops here with one line), on your shards without a GPU the plan (the longest
# schedule, up to 100 + 4 steps, that they cover: one line, `N scheduled steps (+ 4; 100 asked) fit the train
# shards: they take ...`; skipped when you give --num_scheduled_steps), then the training:
# one process (no GPU, or one) runs train_gpt.py directly; several GPUs, one process each through torchrun.
# The data comes before --check so that the check can see it: the synthetic shards take seconds, and the FineWeb
# download is needed by any run (kept, and skipped when present).
# A failure ends in its one line (train_gpt.py's `error: ...`), without the launcher's traceback. Ctrl-C stops
# quietly; in the training loop train_gpt.py stops at the next step boundary (a second Ctrl-C: at once).
# RUN_SH_DRY_RUN=1: all steps but the last; the training command is printed, not run.
set -euo pipefail
cd "$(dirname "$0")"
trap 'exit 130' INT  # Ctrl-C before the training: quietly (the step that ran stops on it too)

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
# ... or on your shards, where most of the text should be trained on: a document longer than 128 tokens is read as
# 128-token pieces (whole, it would give one sequence, the rest skipped), and a micro-batch, which reads one token
# more than its size (the last target), takes 1, 2 or 3 whole pieces. The schedule is then fitted to the shards
# (below): at most 100 + 4 steps, which take 217,000 tokens, about 2 minutes of training on 2 busy cores.
OWN_CPU_FLAGS=(
    --max_doc_tokens 128 --stage_seq_lens '(128, 128, 128)' --micro_batch_tokens '(127, 255, 383)'
    --num_scheduled_steps 100
)

# Runs a Python script as PY would, except that Ctrl-C ends it without a KeyboardInterrupt traceback.
INTERRUPTIBLE='import runpy, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")'
run_py() { "$PY" -c "$INTERRUPTIBLE" "$@"; }

# torchrun (torch.distributed.run), with one line in place of its agent's tracebacks and log lines: a rank's
# failure is the rank's own message (train_gpt.py's `error: ...`, or its traceback); a rank killed by a signal
# gets a line here, since it could say nothing. Ctrl-C: the agent passes it on to the ranks (each in a session of
# its own, out of the terminal's reach) and waits for them to stop (at a step boundary, saving the run); a second
# Ctrl-C goes to them too, which stops them at once, where torchrun alone would exit and leave them running.
QUIET_TORCHRUN='import logging, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.environ.setdefault("PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGHUP,SIGQUIT")  # SIGINT: on_sigint
from torch.distributed.elastic.multiprocessing import api
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import main
for name in ("torch.distributed.run", "torch.distributed.launcher", "torch.distributed.elastic"):
    logger = logging.getLogger(name)
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
interrupts = []
def on_sigint(signum, frame):
    interrupts.append(signum)
    if len(interrupts) == 1:
        api._terminate_process_handler(signum, frame)  # raises SignalException: the agent stops the ranks with it
    try:  # the ranks: the children of this process, each leading its process group
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            pids = f.read().split()
    except OSError:
        pids = []
    for pid in pids:
        try:
            os.killpg(int(pid), signum)
        except OSError:
            pass
signal.signal(signal.SIGINT, on_sigint)
sys.argv[0] = "torchrun"
try:
    main(sys.argv[1:])
except ChildFailedError as e:
    rank, failure = e.get_first_failure()
    if failure.exitcode < 0:
        print(f"run.sh: rank {rank} was killed by {failure.signal_name()}", file=sys.stderr)
        sys.exit(128 - failure.exitcode)
    sys.exit(failure.exitcode)
except api.SignalException as e:
    sys.exit(128 + e.sigval)'

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
# `PY -m torch.distributed.run ...` runs through QUIET_TORCHRUN: the same launch, less noise.
launch() {
    local shown=() arg
    for arg in "$@"; do shown+=("$(quote "$arg")"); done
    echo "run.sh: ${shown[*]}"
    if [[ ${RUN_SH_DRY_RUN:-0} != 0 ]]; then echo "run.sh: dry run (RUN_SH_DRY_RUN=1): not started"; exit 0; fi
    if [[ ${2:-} == -m && ${3:-} == torch.distributed.run ]]; then exec "$1" -c "$QUIET_TORCHRUN" "${@:4}"; fi
    exec "$@"
}

for arg in "$@"; do  # train_gpt.py --help needs no package: it answers before any install
    if [[ $arg == -h || $arg == --help ]]; then exec python3 train_gpt.py --help; fi
done

PY=$(tools/install.sh --print-python)

OWN_DATA=0  # train/val files given: no FineWeb download, no synthetic shards
OWN_STEPS=0  # --num_scheduled_steps given: taken as it is
for arg in "$@"; do
    case $arg in
        --train_files|--train_files=*|--val_files|--val_files=*) OWN_DATA=1 ;;
        --num_scheduled_steps|--num_scheduled_steps=*) OWN_STEPS=1 ;;
    esac
done

# torch counts the GPUs it can use (honours CUDA_VISIBLE_DEVICES; 0 with a CPU-only build).
NGPU=$("$PY" -c 'import signal; signal.signal(signal.SIGINT, signal.SIG_DFL); import torch; print(torch.cuda.device_count())')
# Without a GPU, OpenMP's threads sleep when they wait for each other rather than spin: on cores that other programs
# use too, a spinning thread holds its core while the one it waits for has none, and each of a step's parallel
# operations waits for a time slice (a step of the CPU model on your shards: 11-24 s, against 1.8 s with this, on 2
# cores under a load of 3). Only the waiting changes, not the results. An OMP_WAIT_POLICY of yours is kept.
if (( NGPU == 0 )); then
    export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
fi
if (( NGPU > 0 )); then
    ALL_ARGS=("$@")
elif (( OWN_DATA )); then
    ALL_ARGS=("${CPU_FLAGS[@]}" "${OWN_CPU_FLAGS[@]}" "$@")
else
    ALL_ARGS=("${CPU_FLAGS[@]}" "${SYNTHETIC_FLAGS[@]}" "$@")
fi

if (( NGPU > 0 )); then
    if (( ! OWN_DATA )); then
        echo "run.sh: $NGPU GPU(s); checking the FineWeb shards in data/fineweb10B/ (downloads any missing)"
        run_py data/download.py
    else
        echo "run.sh: $NGPU GPU(s) on your shards"
    fi
elif (( OWN_DATA )); then
    echo "run.sh: no GPU; tiny CPU model on your shards (GPT-2 vocabulary unless --vocab_size/--bos_id are given), long documents read in 128-token pieces"
else
    echo "run.sh: no GPU; tiny CPU demo on synthetic data in data/synthetic/"
    run_py data/synthetic.py
fi

# The settings (and the data), before the training starts: a mistake costs seconds and one line. --check comes first:
# yours come last, where a flag missing its value (`--log_dir`, last) finds none instead of swallowing run.sh's own.
run_py train_gpt.py --check "${ALL_ARGS[@]}"

# Your shards on the CPU: the longest schedule, up to 100 + 4 steps, that they cover; its line starts with the number
# of scheduled steps (tools/fit_schedule.py).
if (( NGPU == 0 && OWN_DATA && ! OWN_STEPS )); then
    fit=$(run_py tools/fit_schedule.py "${ALL_ARGS[@]}")
    echo "run.sh: $fit"
    ALL_ARGS=("${CPU_FLAGS[@]}" "${OWN_CPU_FLAGS[@]}" --num_scheduled_steps "${fit%% *}" "$@")
fi

if (( NGPU > 1 )); then
    launch "$PY" -m torch.distributed.run --standalone --nproc_per_node="$NGPU" train_gpt.py "${ALL_ARGS[@]}"
else
    launch "$PY" train_gpt.py "${ALL_ARGS[@]}"
fi
