import re, collections, sys
CATS = [("Inductor: backward graph", "_wrapped_bw_compiler"), ("Inductor: forward graph", "fw_compiler_base"),
        ("AOTAutograd: partition", "min_cut_rematerialization_partition"), ("AOTAutograd: joint-graph passes", "_recursive_joint_graph_passes"),
        ("AOTAutograd: joint trace", "aot_stage1_graph_capture"),
        ("AOTAutograd: metadata collection (a functionalized forward)", "run_functionalized_fw_and_collect_metadata"), ("first calls of compiled graphs (autotuning benchmarks)", "CompiledFxGraph.__call__"),
        ("optimizer step (its graphs, first calls)", "NorMuonAdam.step"), ("Dynamo: bytecode trace", "InstructionTranslatorBase.run"),
        ("CUDA graph capture", "capture"), ("imports", "_find_and_load")]
out = collections.defaultdict(collections.Counter); tot = collections.Counter()
for l in open(sys.argv[1]):
    stack, n = l.rstrip("\n").rsplit(" ", 1); n = int(n)
    frames = stack.split(";")
    ps = [i for i, f in enumerate(frames) if f.startswith("process ")]
    pid = re.match(r"process (\d+)", frames[ps[-1]]).group(1)
    own = frames[ps[-1] + 1:]
    tot[pid] += n
    for name, key in CATS:
        if any(key in f for f in own): out[pid][name] += n; break
    else: out[pid]["other"] += n
for pid in sys.argv[2:]:
    print(f"process {pid}: {tot[pid]/25:.1f} s sampled")
    for name, _ in CATS + [("other", "")]:
        if out[pid][name]: print(f"  {out[pid][name]/25:6.1f} s  {name}")
