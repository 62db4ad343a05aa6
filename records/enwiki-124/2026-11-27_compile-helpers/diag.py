"""Device-only diagnostic: a copy of the checkout whose compile helpers log timestamps (relative to the run's start)."""
import re, sys, pathlib
src = pathlib.Path(sys.argv[1]) / "harness/compile_helpers.py"
s = src.read_text()
s = s.replace('stderr=subprocess.DEVNULL,', 'stderr=open(f"/tmp/helper_{name}.log", "w"),')
s = s.replace('            t = time.time()\n', '            t = time.time()\n            print(f"DIAG parent backward wait starts at {t:.2f}", file=sys.stderr, flush=True)\n')
s = s.replace('        def compile_and_exit(*args, **kwargs):\n            compile_backward(*args, **kwargs)  # into the cache\n',
              '        def compile_and_exit(*args, **kwargs):\n            print(f"DIAG helper backward compile starts at {time.time():.2f}", file=sys.stderr, flush=True)\n            compile_backward(*args, **kwargs)  # into the cache\n            print(f"DIAG helper backward compile ends at {time.time():.2f}", file=sys.stderr, flush=True)\n')
s = s.replace('    if role() == "backward":\n        compile_backward', '    print(f"DIAG helper {role()} serve starts at {time.time():.2f}", file=sys.stderr, flush=True)\n    if role() == "backward":\n        compile_backward')
s = s.replace('    trainer.sync()\n    return 0', '    trainer.sync()\n    print(f"DIAG helper {role()} done at {time.time():.2f}", file=sys.stderr, flush=True)\n    return 0')
assert s.count("DIAG") == 5, s.count("DIAG")
src.write_text(s)
