#!/usr/bin/env bash
# A world-2 cold start with every train_gpt.py process's Python stack sampled at 20 Hz (.bench/sampler), then a
# profiled world-2 run and a profiled emulated world-8 rank from its caches (the trace summaries' warm-up filter).
set -u
tools/ab_runs.sh setup --shards .bench/shards_w1
SAMPLE_DIR=$OUT/samples PYTHONPATH=$PWD/.bench/sampler tools/ab_runs.sh cold C2 0 --gpus 0,1 --cache /tmp/cs --limit 150
tools/ab_runs.sh project PR2 0 --gpus 0,1 --cache /tmp/cs --by 330 -- --profile_steps 36:40
python3 tools/trace_summary.py "$OUT/logs/PR2_trace.json.xz" > "$OUT/PR2_trace_summary.txt" 2>&1
tools/ab_runs.sh project W8P 0 --gpus 0 --cache /tmp/cs --by 400 -- --emulate_world_size 8 --profile_steps 20:23
python3 tools/trace_summary.py "$OUT/logs/W8P_trace.json.xz" > "$OUT/W8P_trace_summary.txt" 2>&1
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && tar -cJf samples.tar.xz samples && rm -rf samples
mkdir -p traces && mv logs/*_trace.json.xz traces/ 2>/dev/null; tar -cf traces.tar traces && rm -rf traces
tar -cJf logs.tar.xz logs && rm -rf logs; ls -la "$OUT"
