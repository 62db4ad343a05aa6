"""train_gpt.py with Inductor's combo kernels on (independent small kernels launched as one)."""
import os, sys
sys.path.insert(0, os.getcwd())
import torch._inductor.config as c
c.combo_kernels = True
import train_gpt
sys.argv[0] = "train_gpt.py"
sys.exit(train_gpt.main(sys.argv[1:]))
