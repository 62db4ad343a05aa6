# Wall-clock stack sampler for cold-start studies: in every train_gpt.py process (runs and compile helpers), a daemon
# thread samples the main thread's Python stack at 20 Hz and appends "t<TAB>frame;frame;..." (outermost first) to
# $SAMPLE_DIR/<role>_<pid>.txt, flushed every second (helpers are killed, not stopped).
import os
import sys

if os.environ.get("SAMPLE_DIR") and sys.argv and sys.argv[0].endswith("train_gpt.py"):
    import threading
    import time

    def _sample():
        out_dir = os.environ["SAMPLE_DIR"]
        os.makedirs(out_dir, exist_ok=True)
        helper = os.environ.get("TRAIN_GPT_COMPILE_HELPER", "").split(":")[0]
        role = helper or f"rank{os.environ.get('RANK', '0')}"
        main = threading.main_thread().ident
        start = float(os.environ.get("SAMPLE_T0", "0")) or time.time()
        with open(os.path.join(out_dir, f"{role}_{os.getpid()}.txt"), "w", buffering=1 << 16) as f:
            f.write(f"# role={role} pid={os.getpid()} ppid={os.getppid()} t0={time.time():.3f}\n")
            last_flush = time.time()
            while True:
                time.sleep(0.05)
                frame = sys._current_frames().get(main)
                names = []
                while frame is not None:
                    code = frame.f_code
                    names.append(f"{code.co_name}@{os.path.basename(code.co_filename)}:{code.co_firstlineno}")
                    frame = frame.f_back
                f.write(f"{time.time() - start:.2f}\t{';'.join(reversed(names))}\n")
                if time.time() - last_flush > 1.0:
                    f.flush()
                    last_flush = time.time()

    threading.Thread(target=_sample, daemon=True, name="stack-sampler").start()
