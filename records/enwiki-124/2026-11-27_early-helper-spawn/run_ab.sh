# The early spawn's cold start: A = 38ceed4 (helpers spawned after the run's imports), B = f769d06 (this script's
# checkout). Needs: .bench/shards (the enwiki-124 shards, xz), .bench/fa3 (the FA3 build), .bench/A_38ceed4.tar.gz.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT /tmp/data /tmp/fa3 /tmp/A
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt | grep -q H100 || { echo "not H100"; exit 3; }
lscpu | grep -E "Model name|^CPU\(s\)" > $OUT/cpu.txt; ls -la /dev/nvidiactl > $OUT/nvidiactl.txt 2>&1
for f in .bench/shards/*.xz; do xz -dc $f > /tmp/data/$(basename $f .xz) & done
tar xJf .bench/fa3/fa3src.tar.xz -C /tmp/fa3 && xz -dc .bench/fa3/fa3_C.so.xz > /tmp/fa3/fa/hopper/flash_attn_3/_C.abi3.so && cp .bench/fa3/flash_attn_config.py /tmp/fa3/fa/hopper/
tar xzf .bench/A_38ceed4.tar.gz -C /tmp/A
wait
export PYTHONPATH=/tmp/fa3/fa/hopper
python3 tools/ab.py --a /tmp/A --b $PWD --out /tmp/abrun --cold ${COLD:-2} --seeds "${SEEDS:-}" --timeout 250 -- \
  --train_files '/tmp/data/enwiki_train_00000[0-3].bin' --val_files /tmp/data/enwiki_val_000000.bin \
  --val_tokens 4194304 --num_scheduled_steps 120 --num_extension_steps 4 --val_every 0 2>&1 | tail -40 > $OUT/ab_console.txt
cp /tmp/abrun/ab.md $OUT/ 2>/dev/null
cd /tmp/abrun && tar cJf $OUT/ab_logs.tar.xz $(find . -maxdepth 1 -name "*.txt" -o -maxdepth 1 -name "*.console")
tail -25 $OUT/ab_console.txt
