"""The harness around a run: what train_gpt.py needs beside its recipe (settings parsing, the log and its reports,
the non-finite guard and stop signals, checkpoints, profiling); files.py (atomic writes, output-folder checks) also
serves the data/ and tools/ programs.

Its modules never import train_gpt: they take what they need as arguments. settings.py, launch.py and
compile_helpers.py import torch only inside the functions that use it, so that --help, --check and setting errors
answer, and a cold start's compile helpers start, before train_gpt.py imports torch.
"""
