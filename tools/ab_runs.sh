#!/usr/bin/env bash
# The GPU machine's side of an enwiki-124 record (records/README.md): unpack the data and FlashAttention-3, then
# the project's proxy runs and the reference's runs, each named, with its own compile caches and time limit. A
# record lists its parts as calls of this script, run from the repository root, back to back on one machine.
#
# Usage: tools/ab_runs.sh [--dry_run] COMMAND [ARGS...]
#   setup [--shards DIR] [--gpu NAME]
#       DATA from the xz shards in DIR (default .bench/shards; kept if already there), FlashAttention-3 into
#       /tmp/fa3 from .bench/fa3 (fa3src.tar.xz, fa3_C.so.xz, flash_attn_config.py) if that folder exists, and
#       Python's bytecode cache /tmp/pycache filled by importing torch's compiler. Writes OUT/gpu.txt and
#       OUT/cpu.txt and starts the part's clock (for --by). --gpu H100: stop unless the GPU's name holds H100.
#   project RUN_ID SEED [--gpus LIST] [--cache DIR] [--limit S | --by S] [-- TRAIN_GPT_FLAGS...]
#       one proxy run (tools/enwiki-124.sh) on the GPUs LIST (default 0): log OUT/logs/RUN_ID.txt, console
#       OUT/logs/RUN_ID.console. Compile caches in DIR (default /tmp/caches/RUN_ID): runs that name one DIR share
#       it, the first starting cold, e.g. /tmp/c_fp8 for the default numerics, /tmp/c_exact for --fp8_body False;
#       they also share that compile's timed picks of launch configs (the fixed-short-row-configs record).
#       A --profile_steps trace is left as OUT/logs/RUN_ID_trace.json.xz.
#   cold RUN_ID SEED [--gpus LIST] [--cache DIR] [--limit S | --by S] [-- TRAIN_GPT_FLAGS...]
#       a cold start: as project, from a cache DIR that must be new or empty, stopped (SIGTERM) once its log
#       says `startup:`; with --guard_every 1 (unless the flags give one), as ranks stop at an agreed check: the
#       default 50 steps between checks trained ~20 s more per world-2 cold start.
#   reference NAME WORLD [--gpus LIST] [--limit S | --by S]
#       the reference's proxy run on the WORLD GPUs LIST, default 0..WORLD-1 (REF_DIR/run_reference.sh, REF_DIR
#       default .bench/reference, a copy of ../shared/reference): stdout OUT/NAME/stdout.txt, full log in OUT/NAME.
#       From empty caches it compiles for 5-8 min before its first step (a whole world-1 run on an H200: 381 s,
#       505 s as a freshly started machine's first run): give it a call's part of its own, run first, with --by 575.
#       Beside other runs on the host's other GPUs it is not at its own speed (its stage 3 ran 10-35% slower beside
#       the project's: records/enwiki-124/2026-11-30_vs-reference-world2-360b8d6): a line wants it alone.
#   summary
#       the start-up, ms/step by stage, val loss, summary and peak memory lines of OUT/logs/*.txt, then each run's
#       GPU clocks (tools/gpu_clocks.py): every run leaves OUT/logs/NAME.gpus.csv, nvidia-smi's samples of the GPUs'
#       SM clock, power and temperature every 200 ms while it ran (an H200 at its power cap clocks lower when warmer).
#   --limit S   stop the run after S seconds
#   --by S      stop the run S seconds after the part's `setup` began (what is left of a call's time limit)
#   --dry_run   print each command with its environment instead of running it
# Environment: OUT (default /tmp/out) gets everything to keep, DATA (default /tmp/data) the unpacked shards, REF_DIR
# as above. Each run appends "NAME rc=... wall=...s at=...s" to OUT/walls.txt (at: since the part's setup).
# Example, a part of three seeds of the default numerics within a 600 s call:
#   tools/ab_runs.sh setup --gpu H100
#   tools/ab_runs.sh project P0 0 --cache /tmp/c_fp8 --limit 250
#   tools/ab_runs.sh project P1 1 --cache /tmp/c_fp8 --by 590
#   tools/ab_runs.sh project P2 2 --cache /tmp/c_fp8 --by 590
set -uo pipefail

FA3=/tmp/fa3/fa/hopper   # where fa3src.tar.xz puts flash_attn_interface.py
PYCACHE=/tmp/pycache
# the reference's proxy: tools/enwiki-124.sh's settings (120 + 4 steps, 4,194,304 validation tokens)
REF_STEPS=(120 4 4194304)

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/out}
DATA=${DATA:-/tmp/data}  # the proxy's shards, unpacked (tools/enwiki-124.sh DATA_DIR)
REF_DIR=${REF_DIR:-$ROOT/.bench/reference}
DRY=0

die() { echo "error: $*" >&2; exit 2; }
value() { [[ $# -ge 2 && $2 != --* ]] || die "$1 needs a value"; }  # OPTION "$@"-rest: never the next option
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# Every run writes bytecode to one prefilled cache and imports FlashAttention-3 from /tmp/fa3 when it is there.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=$PYCACHE
[ -d "$FA3" ] && export PYTHONPATH=$FA3${PYTHONPATH:+:$PYTHONPATH}
# NVLink multicast stays off on shared machines (a program that uses it can take the host's GPUs out of service);
# the collectives of several GPUs need none of it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

now() { date +%s; }
words() {  # "$@" as one line to paste into a shell: a word with other characters than these in single quotes
    local w out=()
    for w; do
        if [[ $w =~ ^[A-Za-z0-9_./=:,@%+-]+$ ]]; then out+=("$w"); else out+=("'${w//\'/\'\\\'\'}'"); fi
    done
    echo "${out[*]}"
}

# Options shared by the run commands: sets GPUS CACHE LIMIT and FLAGS (the rest after --).
parse_run_options() {
    GPUS=0 CACHE="" LIMIT="" FLAGS=()
    local by=""
    while (( $# )); do
        case $1 in
            --gpus) value "$@"; GPUS=$2; shift 2 ;;
            --cache) value "$@"; CACHE=$2; shift 2 ;;
            --limit) value "$@"; LIMIT=$2; shift 2 ;;
            --by) value "$@"; by=$2; shift 2 ;;
            --) shift; FLAGS=("$@"); break ;;
            *) die "unknown option '$1' for $CMD (options: --gpus --cache --limit --by, then -- and train_gpt.py's flags)" ;;
        esac
    done
    [[ $GPUS =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--gpus $GPUS is not a list of GPU numbers such as 0 or 0,1"
    [[ -n $LIMIT && -n $by ]] && die "give --limit or --by, not both"
    [[ -z $LIMIT || $LIMIT =~ ^[0-9]+$ ]] || die "--limit $LIMIT is not a number of seconds"
    if [[ -n $by ]]; then
        [[ $by =~ ^[0-9]+$ ]] || die "--by $by is not a number of seconds"
        # OUT/t0: the epoch second the part's setup began
        [ -f "$OUT/t0" ] || die "--by counts from the part's start: run \`tools/ab_runs.sh setup\` first (OUT=$OUT)"
        LIMIT=$(( by - ($(now) - $(cat "$OUT/t0")) ))
    fi
    return 0
}

# LIMITED: the run's command prefix for LIMIT (none if LIMIT is empty); false once no time is left.
limited() {
    LIMITED=()
    [[ -z $LIMIT ]] && return 0
    (( LIMIT > 0 )) || return 1
    LIMITED=(timeout "$LIMIT")
}

wall() {  # NAME RC START: the run's line in OUT/walls.txt, and on stdout
    local t0
    t0=$(cat "$OUT/t0" 2>/dev/null || echo "$3")
    echo "$1 rc=$2 wall=$(( $(now) - $3 ))s at=$(( $(now) - t0 ))s" | tee -a "$OUT/walls.txt"
}

# The GPUs' clocks while run NAME lasts, in OUT/logs/NAME.gpus.csv (none where nvidia-smi gave nothing)
start_clocks() {
    local reasons=clocks_event_reasons.active  # the older drivers' name: clocks_throttle_reasons.active
    nvidia-smi --query-gpu=$reasons --format=csv,noheader > /dev/null 2>&1 || reasons=clocks_throttle_reasons.active
    CLOCKS_FILE=$OUT/logs/$1.gpus.csv
    mkdir -p "$OUT/logs"
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,$reasons,utilization.gpu \
        --format=csv,nounits -lms 200 > "$CLOCKS_FILE" 2> /dev/null &
    CLOCKS_PID=$!
}
stop_clocks() {
    kill "$CLOCKS_PID" 2> /dev/null
    wait "$CLOCKS_PID" 2> /dev/null
    [ -s "$CLOCKS_FILE" ] || rm -f "$CLOCKS_FILE"
}

# Runs "$@" (NAME first) within the limit, output to OUTPUT, then its wall line; its exit status is the run's.
run_limited() {
    local name=$1 output=$2 start rc; shift 2
    if ! limited; then
        echo "$name rc=124 wall=0s: not started, no time left"
        (( DRY )) || echo "$name rc=124 wall=0s: not started, no time left" >> "$OUT/walls.txt"
        return 124
    fi
    if (( DRY )); then echo "$name: $(words "${LIMITED[@]}" "$@")"; return 0; fi
    start=$(now)
    start_clocks "$name"
    "${LIMITED[@]}" "$@" > "$output" 2>&1
    rc=$?
    stop_clocks
    wall "$name" $rc "$start"
    return $rc
}

cmd_setup() {
    local shards=$ROOT/.bench/shards gpu=""
    while (( $# )); do
        case $1 in
            --shards) value "$@"; shards=$2; shift 2 ;;
            --gpu) value "$@"; gpu=$2; shift 2 ;;
            *) die "unknown option '$1' for setup (options: --shards DIR, --gpu NAME)" ;;
        esac
    done
    local fa3src=$ROOT/.bench/fa3 prefill="from tools.ab import PREFILL; exec(PREFILL)"
    local xzs=("$shards"/*.xz)
    if [ ! -f "$DATA/enwiki_val_000000.bin" ] && [ ! -e "${xzs[0]}" ]; then
        die "no shards: $shards holds no *.xz (give --shards DIR, e.g. a copy of ../shared/data/enwiki)"
    fi
    if (( DRY )); then
        [ -f "$DATA/enwiki_val_000000.bin" ] || for f in "${xzs[@]}"; do echo "setup: xz -dc $f > $DATA/$(basename "$f" .xz)"; done
        [ -d "$fa3src" ] && echo "setup: FlashAttention-3 from $fa3src into /tmp/fa3"
        echo "setup: $PYTHONPYCACHEPREFIX filled by python3 -c '$prefill'"
        return 0
    fi
    mkdir -p "$OUT/logs" "$DATA"
    now > "$OUT/t0"
    nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt" || die "nvidia-smi failed: this is a GPU machine's script"
    if [[ -n $gpu ]] && ! grep -q "$gpu" "$OUT/gpu.txt"; then
        echo "error: the GPU is $(head -1 "$OUT/gpu.txt"), not $gpu: compare times on one kind of machine (or drop --gpu)" >&2
        exit 3
    fi
    lscpu | grep -E "Model name|^CPU\(s\)" > "$OUT/cpu.txt"
    if [ ! -f "$DATA/enwiki_val_000000.bin" ]; then
        for f in "${xzs[@]}"; do xz -dc "$f" > "$DATA/$(basename "$f" .xz)" & done
        wait
    fi
    if [ -d "$fa3src" ] && [ ! -f "$FA3/flash_attn_interface.py" ]; then
        mkdir -p /tmp/fa3 && tar xJf "$fa3src/fa3src.tar.xz" -C /tmp/fa3 &&
            xz -dc "$fa3src/fa3_C.so.xz" > "$FA3/flash_attn_3/_C.abi3.so" &&
            cp "$fa3src/flash_attn_config.py" "$FA3/" || die "unpacking FlashAttention-3 from $fa3src failed"
    fi
    (cd "$ROOT" && PYTHONPATH=$FA3:$ROOT python3 -c "$prefill") || die "filling $PYCACHE failed: does torch import here?"
    echo "setup done in $(( $(now) - $(cat "$OUT/t0") )) s: $(head -1 "$OUT/gpu.txt")"
}

cmd_project() {
    (( $# >= 2 )) || die "$CMD needs RUN_ID SEED (tools/ab_runs.sh --help)"
    local id=$1 seed=$2; shift 2
    [[ $id =~ ^[A-Za-z0-9_.-]+$ ]] || die "RUN_ID '$id' may hold only letters, digits, '_', '.' and '-' (it names files)"
    [[ $seed =~ ^[0-9]+$ ]] || die "SEED '$seed' is not a whole number"
    parse_run_options "$@"
    CACHE=${CACHE:-/tmp/caches/$id}
    if [[ $CMD == cold && -d $CACHE && -n $(ls -A "$CACHE" 2>/dev/null) ]]; then
        die "cold start $id: its cache $CACHE is not empty; name a new --cache DIR"
    fi
    [[ $CMD == cold ]] && FLAGS=(--guard_every 1 "${FLAGS[@]}")  # the flags' own value comes later and wins
    local log=$OUT/logs/$id.txt console=$OUT/logs/$id.console
    local run=(env CUDA_VISIBLE_DEVICES="$GPUS" TORCHINDUCTOR_CACHE_DIR="$CACHE" TRITON_CACHE_DIR="$CACHE/triton"
               "$ROOT/tools/enwiki-124.sh" "$DATA" "$OUT/logs" --run_id "$id" --seed "$seed" "${FLAGS[@]}")
    (( DRY )) || mkdir -p "$OUT/logs"
    if [[ $CMD == project ]] || (( DRY )); then
        run_limited "$id" "$console" "${run[@]}"
        local rc=$?
        # a --profile_steps trace, xz'd: ~60x smaller, small enough for a record to keep (trace_summary.py reads it)
        (( DRY )) || [ ! -f "$OUT/logs/${id}_trace.json" ] || xz -T0 -6 "$OUT/logs/${id}_trace.json"
        return $rc
    fi
    limited || { run_limited "$id" "$console"; return; }  # its line: no time left
    local start pid rc
    start=$(now)
    start_clocks "$id"
    "${LIMITED[@]}" "${run[@]}" > "$console" 2>&1 &
    pid=$!  # timeout's, or (through env and enwiki-124.sh's exec) torchrun's: either passes SIGTERM on to the ranks
    until grep -q "^startup:" "$log" 2>/dev/null || ! kill -0 $pid 2>/dev/null; do sleep 0.5; done
    kill -TERM $pid 2>/dev/null
    wait $pid
    rc=$?
    stop_clocks
    wall "$id" $rc "$start"
    grep -h "^startup:" "$log" 2>/dev/null || { echo "error: cold start $id ended without a startup: line; see $console" >&2; return 1; }
}

cmd_reference() {
    (( $# >= 2 )) || die "reference needs NAME WORLD (tools/ab_runs.sh --help)"
    local name=$1 world=$2; shift 2
    [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "NAME '$name' may hold only letters, digits, '_', '.' and '-' (it names a folder)"
    [[ $world =~ ^[1-9][0-9]*$ ]] || die "WORLD '$world' is not a number of GPUs"
    parse_run_options "$@"
    [[ -z $CACHE && ${#FLAGS[@]} == 0 ]] || die "reference takes only --gpus, --limit or --by"
    [[ " $* " == *" --gpus "* ]] || GPUS=$(seq -s, 0 $(( world - 1 )))
    (( $(tr , '\n' <<< "$GPUS" | wc -l) == world )) || die "--gpus $GPUS does not name WORLD=$world GPUs"
    [ -f "$REF_DIR/run_reference.sh" ] || die "no $REF_DIR/run_reference.sh: copy ../shared/reference there, or set REF_DIR"
    local run=(env CUDA_VISIBLE_DEVICES="$GPUS" OUT="$OUT/$name"
               bash "$REF_DIR/run_reference.sh" "$DATA" "$world" "${REF_STEPS[@]}")
    (( DRY )) || mkdir -p "$OUT/$name"
    run_limited "$name" "$OUT/$name/stdout.txt" "${run[@]}"
}

cmd_summary() {
    (( $# == 0 )) || die "summary takes no arguments"
    # anchored: every log opens with the code that ran, whose lines hold these words too
    grep -H "^startup:\|^peak memory\|^ms/step by stage:\|^step:[0-9]*/[0-9]* val_loss:\|^summary: " "$OUT"/logs/*.txt \
        2>/dev/null || echo "no logs in $OUT/logs"
    local clocks=("$OUT"/logs/*.gpus.csv)
    [ ! -e "${clocks[0]}" ] || python3 "$ROOT/tools/gpu_clocks.py" "${clocks[@]}"
}

[[ ${1:-} == --dry_run ]] && { DRY=1; shift; }
CMD=${1:-}
case $CMD in
    -h|--help) usage ;;
    "") die "no command; give setup, project, cold, reference or summary (tools/ab_runs.sh --help)" ;;
    setup|project|cold|reference|summary) shift
        case $CMD in
            setup) cmd_setup "$@" ;;
            project|cold) cmd_project "$@" ;;
            reference) cmd_reference "$@" ;;
            summary) cmd_summary "$@" ;;
        esac ;;
    *) die "unknown command '$CMD'; give setup, project, cold, reference or summary (tools/ab_runs.sh --help)" ;;
esac
