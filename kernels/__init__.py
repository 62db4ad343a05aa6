"""Triton kernels for train_gpt.py, one module per family, each with a PyTorch reference.

Every public op dispatches on the device of its inputs: CUDA tensors run the Triton kernel,
CPU tensors run the `<op>_reference` beside it (so the CPU configuration of train_gpt.py works).
The Triton launchers themselves (`<op>_triton`) also run on the CPU under TRITON_INTERPRET=1,
which is how tests/ checks them on machines without a GPU.
Launch configs (block sizes, warps, stages) come from a table per family keyed by device and shape, with a
generic fallback: kernels/configs.py.
"""
