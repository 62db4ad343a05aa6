#!/bin/bash
# The commands of this record, as they ran (from the repository root, the shards and FlashAttention-3 under .bench/,
# the reference's folder copied to .bench/reference): `bash run_ab.sh part1`, then `part2`, back to back on machine a
# (its /tmp kept between them); `part4` on machine c (d5efe63), cut off by its time limit during E0. Logs go to
# $OUT/logs: pack them into one archive before copying them off the machine.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O/logs
unset PYTHONDONTWRITEBYTECODE
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpus_$1.txt
grep -q H100 $O/gpus_$1.txt || { echo "not H100: stopping"; exit 3; }
lscpu | grep -E "Model name|^CPU\(s\)" > $O/cpu_$1.txt
if [ ! -f /tmp/data/enwiki_val_000000.bin ]; then
  mkdir -p /tmp/data; for f in .bench/shards/*.xz; do xz -dc $f > /tmp/data/$(basename $f .xz) & done; wait
  mkdir -p /tmp/fa3 && tar xJf .bench/fa3/fa3src.tar.xz -C /tmp/fa3 && xz -dc .bench/fa3/fa3_C.so.xz > /tmp/fa3/fa/hopper/flash_attn_3/_C.abi3.so && cp .bench/fa3/flash_attn_config.py /tmp/fa3/fa/hopper/
  export PYTHONPYCACHEPREFIX=/tmp/pycache
  python3 -c "import torch, torch._dynamo, torch._inductor.compile_fx
torch.compile(lambda x: x + 1)(torch.ones(2, device='cuda'))"
fi
export PYTHONPATH=/tmp/fa3/fa/hopper PYTHONPYCACHEPREFIX=/tmp/pycache
echo "setup done at $(( $(date +%s) - T0 )) s"
proj() {  # GPU NAME CACHE_DIR LIMIT_S flags... ; stdout to logs/NAME.console
  local gpu=$1 name=$2 cache=$3 lim=$4; shift 4; local s=$(date +%s)
  CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_CACHE_DIR=$cache TRITON_CACHE_DIR=$cache/triton \
    timeout $lim tools/enwiki-124.sh /tmp/data $O/logs --run_id $name "$@" > $O/logs/$name.console 2>&1
  echo "$name rc=$? wall=$(( $(date +%s) - s ))s at=$(( $(date +%s) - T0 ))s" | tee -a $O/walls.txt
}
ref() {  # GPU NAME LIMIT_S
  local s=$(date +%s); mkdir -p $O/$2
  CUDA_VISIBLE_DEVICES=$1 OUT=$O/$2 timeout $3 bash .bench/reference/run_reference.sh /tmp/data 1 120 4 4194304 > $O/$2/stdout.txt 2>&1
  echo "$2 rc=$? wall=$(( $(date +%s) - s ))s at=$(( $(date +%s) - T0 ))s" | tee -a $O/walls.txt
}
left() { echo $(( $1 - ($(date +%s) - T0) )); }
case $1 in
part1)
  proj 0 P0 /tmp/c_fp8 250 --seed 0
  proj 0 P1 /tmp/c_fp8 150 --seed 1
  proj 0 P2 /tmp/c_fp8 150 --seed 2
  proj 0 E0 /tmp/c_exact $(left 585) --seed 0 --fp8_body False ;;
part2b)
  proj 0 P0 /tmp/c_fp8 150 --seed 0
  ref 0 ref1 $(left 592) ;;
part2)
  ref 0 ref1 585 ;;
part3)
  proj 0 E1 /tmp/c_exact 150 --seed 1 --fp8_body False
  proj 0 E2 /tmp/c_exact 150 --seed 2 --fp8_body False
  if [ "${WORLD8:-1}" = 1 ]; then
  proj 0 W0 /tmp/c_w8 $(left 585) --emulate_world_size 8
  proj 0 W1 /tmp/c_w8 $(left 585) --emulate_world_size 8
  proj 0 W2 /tmp/c_w8 $(left 585) --emulate_world_size 8; fi ;;
part4)
  proj 0 P0 /tmp/c_fp8 200 --seed 0
  proj 0 W0 /tmp/c_w8 130 --emulate_world_size 8
  proj 0 W1 /tmp/c_w8 60 --emulate_world_size 8
  proj 0 W2 /tmp/c_w8 60 --emulate_world_size 8
  proj 0 E0 /tmp/c_exact $(left 480) --seed 0 --fp8_body False ;;
esac
grep -h "^startup:\|peak memory\|train time\|val_loss" $O/logs/*.txt 2>/dev/null | tail -30
