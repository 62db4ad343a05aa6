import gc, os, sys, time, resource
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.getcwd())  # run from the repository root
mode = sys.argv[1]
import torch
from tests import inductor_codegen
if mode == "disable": gc.disable()
t0 = time.perf_counter()
codes = inductor_codegen.generated_code(tokens=128)
print(f"{mode}: {time.perf_counter()-t0:.2f}s rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1e6:.2f} GB")
