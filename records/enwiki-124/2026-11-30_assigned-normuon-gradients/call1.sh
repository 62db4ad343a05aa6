#!/usr/bin/env bash
# B (this tree: NorMuon gradients assigned by autograd at one micro-batch a step) against A (main 364d8f9,
# .bench/A_prev): emulated world-8 ranks alternating (seed 0 cold, each side its own cache), profiles of both,
# then the GPU test of the graph path.
set -u
export OUT=${OUT:-/tmp/out}
tools/ab_runs.sh setup --shards .bench/shards_w1
A=.bench/A_prev/tools/ab_runs.sh B=tools/ab_runs.sh
E="--gpus 0 -- --emulate_world_size 8"
$A project EA0 0 --cache /tmp/ca --limit 110 $E
$B project EB0 0 --cache /tmp/cb --limit 110 $E
$A project EA1 1 --cache /tmp/ca --limit 45 $E
$B project EB1 1 --cache /tmp/cb --limit 45 $E
$A project EA2 2 --cache /tmp/ca --limit 45 $E
$B project EB2 2 --cache /tmp/cb --limit 45 $E
$A project PA 0 --cache /tmp/ca --by 470 --gpus 0 -- --emulate_world_size 8 --profile_steps 20:24
$B project PB 0 --cache /tmp/cb --by 510 --gpus 0 -- --emulate_world_size 8 --profile_steps 20:24
(PYTHONPATH=/tmp/fa3/fa/hopper timeout 70 python3 -m pytest -q -p no:cacheprovider tests/test_train.py -k cuda_graph_replays > "$OUT/gpu_tests.txt" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.txt")
for P in PA PB; do
  T=$OUT/logs/${P}_trace.json.xz
  [ -f "$T" ] || continue
  python3 tools/trace_summary.py "$T" > "$OUT/logs/${P}_trace_summary.txt" 2>&1
  for pat in elementwise Memset Memcpy "*"; do echo "== $pat"; python3 .bench/elw.py "$T" "$pat" | head -40; done > "$OUT/logs/${P}_launches.txt" 2>&1
done
python3 .bench/traces.py "$OUT"/logs/P?_trace.json.xz > "$OUT/traces.txt" 2>&1
tools/ab_runs.sh summary > "$OUT/summary.txt" 2>&1
cd "$OUT" && rm -f logs/*_trace.json.xz && tar -cJf logs.tar.xz logs walls.txt; rm -rf logs; ls -la
