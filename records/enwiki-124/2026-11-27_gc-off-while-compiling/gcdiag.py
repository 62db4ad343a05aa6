import atexit, gc, os, sys, time
sys.path.insert(0, os.getcwd())
import train_gpt as tg
stats, state = {}, {"t": 0.0, "phase": "startup"}
def cb(phase, info):
    if phase == "start":
        state["t"] = time.perf_counter()
    else:
        dt = time.perf_counter() - state["t"]
        s = stats.setdefault(state["phase"], {}).setdefault(info["generation"], [0, 0.0, 0.0])
        s[0] += 1; s[1] += dt; s[2] = max(s[2], dt)
gc.callbacks.append(cb)
if os.environ.get("GC_NO_FREEZE"):
    gc.freeze = lambda: None
orig = tg.Trainer.warmup
def warmup(self):
    orig(self)
    state["phase"] = "training"
    if os.environ.get("GC_FREEZE"):
        gc.collect(); gc.freeze()
tg.Trainer.warmup = warmup
def report():
    if not tg.compile_helpers.role():
        for ph, d in stats.items():
            for g, (n, tot, mx) in sorted(d.items()):
                print(f"gcdiag {ph} gen{g}: {n} collections, {tot*1000:.1f} ms total, max {mx*1000:.1f} ms", file=sys.stderr)
atexit.register(report)
sys.exit(tg.program(tg.main, ending=tg.run_ending)())
