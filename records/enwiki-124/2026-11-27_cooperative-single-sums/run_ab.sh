# The A/B of this record, as it ran from the repository root with change.patch applied (side B) and main, less
# records/, packed by `git archive HEAD -- . ':!records' | gzip > .bench/head.tar.gz` (side A); the shards and
# FlashAttention-3 under .bench/ as in ../2026-11-27_vs-reference-7b2093e/run_ab.sh. Logs and the table: $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT /tmp/data /tmp/fa3 /tmp/Q
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 || { echo "not H100"; exit 3; }
for f in .bench/shards/*.xz; do xz -dc $f > /tmp/data/$(basename $f .xz) & done
tar xJf .bench/fa3/fa3src.tar.xz -C /tmp/fa3 && xz -dc .bench/fa3/fa3_C.so.xz > /tmp/fa3/fa/hopper/flash_attn_3/_C.abi3.so && cp .bench/fa3/flash_attn_config.py /tmp/fa3/fa/hopper/
tar xzf .bench/head.tar.gz -C /tmp/Q
wait
export PYTHONPATH=/tmp/fa3/fa/hopper
python3 tools/ab.py --a /tmp/Q --b $PWD --out /tmp/abrun --cold 0 --seeds ${SEEDS:-0,1} --timeout 200 -- \
  --train_files '/tmp/data/enwiki_train_00000[0-3].bin' --val_files /tmp/data/enwiki_val_000000.bin \
  --val_tokens 4194304 --num_scheduled_steps 120 --num_extension_steps 4 --val_every 0 ${EXTRA:-} 2>&1 | tail -40 > $OUT/ab_console.txt
cp /tmp/abrun/ab.md $OUT/ 2>/dev/null
cd /tmp/abrun && tar cJf $OUT/ab_logs.tar.xz $(find . -maxdepth 2 -name "*.txt" -o -maxdepth 2 -name "*.console" | grep -v cache)
cat $OUT/ab_console.txt | tail -25
