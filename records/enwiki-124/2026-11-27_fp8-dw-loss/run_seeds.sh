# Three seeds of the FP8 numerics with dW in FP8 (an unfused experiment), from a checkout of main with this
# record's CE change. Needs .bench/shards (the enwiki-124 shards, xz), .bench/fa3 (the FA3 build) and the two
# apply_*.py scripts as .bench/fp8dw_edit.py and .bench/fp8dw_qkv_edit.py; the MLP-only runs left out the second.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/logs /tmp/data /tmp/fa3 /tmp/Bx
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt | grep -q H100 || { echo "not H100"; exit 3; }
for f in .bench/shards/*.xz; do xz -dc $f > /tmp/data/$(basename $f .xz) & done
tar xJf .bench/fa3/fa3src.tar.xz -C /tmp/fa3 && xz -dc .bench/fa3/fa3_C.so.xz > /tmp/fa3/fa/hopper/flash_attn_3/_C.abi3.so && cp .bench/fa3/flash_attn_config.py /tmp/fa3/fa/hopper/
git ls-files | grep -v "^records/" | tar cf - -T - 2>/dev/null | tar xf - -C /tmp/Bx; cp kernels/*.py /tmp/Bx/kernels/; cp harness/*.py /tmp/Bx/harness/
python3 .bench/fp8dw_edit.py /tmp/Bx && python3 .bench/fp8dw_qkv_edit.py /tmp/Bx

wait
export PYTHONPATH=/tmp/fa3/fa/hopper
cd /tmp/Bx
for s in ${SEEDS:-0 1 2}; do
  timeout 240 python3 train_gpt.py --train_files '/tmp/data/enwiki_train_00000[0-3].bin' --val_files /tmp/data/enwiki_val_000000.bin \
    --val_tokens 4194304 --num_scheduled_steps 120 --num_extension_steps 4 --val_every 0 --seed $s --log_dir /tmp/logs --run_id dw8qkv_seed$s > $OUT/logs/dw8qkv_seed$s.console 2>&1
  grep -E "^startup|124/124 val_loss|peak memory" $OUT/logs/dw8qkv_seed$s.console
done
cd $OUT && tar czf logs.tgz logs && rm -rf logs
