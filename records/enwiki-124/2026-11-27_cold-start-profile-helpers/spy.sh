#!/bin/bash
# cold start-ups of the default numerics: one sampled by py-spy (main process and its helpers), one plain
set -u
O=${OUT:-/tmp/out}; mkdir -p $O /tmp/logs
T0=$(date +%s)
tools/ab_runs.sh setup || exit 3  # data, FlashAttention-3, torch's bytecode
unset PYTHONDONTWRITEBYTECODE
export PYTHONPATH=/tmp/fa3/fa/hopper PYTHONPYCACHEPREFIX=/tmp/pycache
python3 -m compileall -q train_gpt.py kernels harness data > /dev/null
echo "setup done at $(( $(date +%s) - T0 )) s"
SPY=.bench/pyspy/py_spy-0.4.3.data/scripts/py-spy
FLAGS="--train_files /tmp/data/enwiki_train_00000[0-3].bin --val_files /tmp/data/enwiki_val_000000.bin --val_tokens 4194304 --num_scheduled_steps 120 --num_extension_steps 4 --val_every 0 --log_dir /tmp/logs --seed 0"
start() {  # NAME LIMIT [py-spy]: stop the run once its log says startup:
  local name=$1 lim=$2 s=$(date +%s); local cache=/tmp/c_$name
  if [ "${3:-}" = spy ]; then
    TORCHINDUCTOR_CACHE_DIR=$cache TRITON_CACHE_DIR=$cache/triton $SPY record -r 25 --subprocesses --format raw -o $O/${name}_spy.txt -- python3 train_gpt.py $FLAGS --run_id $name > $O/$name.console 2>&1 &
  else
    TORCHINDUCTOR_CACHE_DIR=$cache TRITON_CACHE_DIR=$cache/triton python3 train_gpt.py $FLAGS --run_id $name > $O/$name.console 2>&1 &
  fi
  local pid=$!
  while kill -0 $pid 2>/dev/null && ! grep -q "^startup:" /tmp/logs/$name.txt 2>/dev/null && [ $(( $(date +%s) - s )) -lt $lim ]; do sleep 0.5; done
  local target=$pid; [ "${3:-}" = spy ] && target=$(pgrep -P $pid | head -1)
  kill -TERM $target; for i in $(seq 40); do kill -0 $target 2>/dev/null || break; sleep 0.5; done
  kill -KILL $target 2>/dev/null; wait $pid
  echo "$name wall=$(( $(date +%s) - s ))s at=$(( $(date +%s) - T0 ))s" | tee -a $O/walls.txt
  grep -h "^warm-up\|^compile\|^startup" /tmp/logs/$name.txt | tee $O/$name.startup.txt
}
set -f
start S0 190 spy
start C0 95
ls -la $O
