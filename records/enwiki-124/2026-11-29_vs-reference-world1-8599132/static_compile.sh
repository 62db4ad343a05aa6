#!/bin/bash
# Static (dynamic=False) against dynamic compile of the model at one shape (49,152 tokens, stage-3 windows), an
# emulated world-8 rank, compile helpers off on both sides. The GPU machine's copy of the checkout is patched in place
# for ST and restored for DY. Carry .bench/shards_w1 .bench/fa3 and this script; ~200 s.
set -u
export OUT=${OUT:-/tmp/out}
R=tools/ab_runs.sh
$R setup --shards .bench/shards_w1 || exit 1
F=(--num_scheduled_steps 40 --num_extension_steps 0 --val_tokens 262144 --val_micro_batch_tokens 32768
   --micro_batch_tokens "(49152,49152,49152)" --stage_seq_lens "(2048,2048,2048)"
   --stage_windows "((5,11),(5,11),(5,11),(5,11))" --emulate_world_size 8
   --compile_helpers False)
cp train_gpt.py /tmp/train_gpt_dynamic.py
sed -i 's/torch.compile(self.model, dynamic=True,/torch.compile(self.model, dynamic=False,/' train_gpt.py
grep -c "dynamic=False, fullgraph" train_gpt.py
$R project ST 0 --cache /tmp/cs --limit 118 -- "${F[@]}"
cp /tmp/train_gpt_dynamic.py train_gpt.py
$R project DY 0 --cache /tmp/cd --by 240 -- "${F[@]}"
grep -h "^startup\|^ms/step by\|^step:40/40 val\|^compile:\|Recompil" $OUT/logs/DY.txt $OUT/logs/ST.txt \
  $OUT/logs/DY.console $OUT/logs/ST.console | cut -c1-200
(cd $OUT/logs && tar cJf $OUT/static_logs.tar.xz * && rm -f *)
cat $OUT/walls.txt
