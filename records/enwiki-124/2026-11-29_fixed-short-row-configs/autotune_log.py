# Logs every Inductor runtime autotune (process, kernel, argument sizes, each candidate's timing) to $AT_DIR/<pid>.txt.
# Installed as sitecustomize.py: a folder holding it named first in PYTHONPATH, AT_DIR set, for every process of a run.
import importlib.abc, importlib.util, os, sys, time
TARGET = "torch._inductor.runtime.triton_heuristics"

def patch(mod):
    C = mod.CachingAutotuner
    orig = C.benchmark_all_configs
    def bench_all(self, *args, **kwargs):
        t0 = time.time()
        timings = orig(self, *args, **kwargs)
        shapes = [tuple(a.shape) if hasattr(a, "shape") else a for a in args]
        try:
            with open(os.path.join(os.environ["AT_DIR"], f"{os.getpid()}.txt"), "a") as f:
                f.write(f"{time.time():.3f} pid={os.getpid()} argv={' '.join(sys.argv)[:80]!r} fn={self.fn.__name__} "
                        f"mutated={sorted(self.mutated_arg_names)} args={shapes} took={time.time()-t0:.3f}\n")
                for k, v in timings.items():
                    f.write(f"    {k.config.kwargs} w{k.config.num_warps}: {v*1000:.2f} us\n")
        except Exception as e:
            sys.stderr.write(f"at-log: {e}\n")
        return timings
    C.benchmark_all_configs = bench_all

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader
        orig_exec = loader.exec_module
        def exec_module(module):
            orig_exec(module)
            patch(module)
        loader.exec_module = exec_module
        return spec

if os.environ.get("AT_DIR"):
    os.makedirs(os.environ["AT_DIR"], exist_ok=True)
    sys.meta_path.insert(0, Finder())
