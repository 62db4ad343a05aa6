"""Inductor's Triton code for the GPU training graph, generated without a GPU, and its index math that divides by
the symbolic token count.

    python3 -m tests.inductor_codegen [--dump DIR]

The model compiles with dynamic shapes (one graph for every stage). A view that Inductor cannot express as new
strides of a symbolic-size buffer becomes a copy kernel whose index math takes `% (c*T)`. On an H100 such kernels
cost several times their static-shape time, and the copies themselves cost more (records/enwiki-124/, the
2026-11-21 static-vs-dynamic-compile and paired-head-layout records). This builds the model with the GPU's settings
(varlen attention, fused MLP, FP8 head: custom ops, only traced here), compiles forward and backward with
Inductor's Triton backend for the CPU, and reports the kernels. Their execution under the Triton interpreter fails
(InterpreterError), and that failure alone is expected and ignored: only the generated code matters; any other error
is raised.
"""
import argparse
import json
import os
import re
import sys

os.environ["TRITON_INTERPRET"] = "1"  # read when Triton is imported

# a Triton load or store whose offset takes a remainder by a symbolic size (ks0, 6*ks0, ...)
SYMBOLIC_MODULO = re.compile(r"tl\.(load|store)\(.*%\s*\(?\s*(\d+\s*\*\s*)?ks\d+")
# a looped reduction kernel (re-reading its rows) over rows of a constant length (kernels/configs.py); a constant
# xnumel may come first
LOOPED_SHORT_ROW = re.compile(r"def (triton_red_\w+)\(.*\n(?:[ \t]+xnumel = \d+\n)?[ \t]+r0_numel = (\d+)\n")
# a one-pass reduction whose launch config Inductor times among candidates at its first launch, with its size hints
TIMED_ROW = re.compile(r"@triton_heuristics\.persistent_reduction\(\s*size_hints=\{'x': (\d+), 'r0_': (\d+)\}.*?\n"
                       r"def (triton_\w+)\(", re.S)
# a kernel launched with a fixed config: its rows a program and warps
FIXED_CONFIG = re.compile(r"@triton_heuristics\.fixed_config\(\s*config=\{'XBLOCK': (\d+), 'num_warps': (\d+),.*?\n"
                          r"def (triton_\w+)\(", re.S)


def generated_code(tokens: int = 128) -> list[str]:
    """Inductor's output modules (forward, backward) for one training micro-step of the full-width model."""
    import torch
    import torch._inductor.config as inductor_config
    import torch.utils._triton
    from torch._inductor.utils import run_and_get_code

    from triton.runtime.errors import InterpreterError

    import train_gpt as tg
    from tests.utils import batch_for
    torch.utils._triton.triton_hash_with_backend = lambda: "interpreter"  # no GPU backend to hash
    inductor_config.cpu_backend = "triton"
    cfg = tg.GPTConfig(vocab_size=256, model_dim=768, num_heads=6, head_dim=128, max_tokens=4 * tokens,
                       attention="varlen", fused_mlp=True, fp8_head=True, fp8_mlp=True, fp8_mlp_blocks=True,
                       fp8_mlp_dw=True, fp8_qkv=True)
    torch.manual_seed(0)
    model = tg.GPT(cfg)
    mb, sched = batch_for(model, tokens)
    compiled = torch.compile(model, dynamic=True, fullgraph=True)
    w8 = model.fp8_weights()  # made once per step outside the graph, as the trainer does

    def micro_step():
        try:
            compiled(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched, w8).backward()
        except InterpreterError:  # the interpreter cannot run Inductor's CPU-targeted kernels; they exist by then
            pass
    with tg.torch_settings():  # what main() sets for the compile
        return run_and_get_code(micro_step)[1]


def summarize(codes: list[str]) -> dict:
    from kernels.configs import PersistentRowReductions
    lines = [line.strip() for code in codes for line in code.splitlines()]
    return dict(modules=len(codes), kernels=sum(line.startswith("def triton_") for line in lines),
                symbolic_modulo=[line for line in lines if SYMBOLIC_MODULO.search(line)],
                looped_short_rows=[m.group(1) for code in codes for m in LOOPED_SHORT_ROW.finditer(code)
                                   if int(m.group(2)) <= PersistentRowReductions.MAX_ROW],
                timed_short_rows=[m.group(3) for code in codes for m in TIMED_ROW.finditer(code)
                                  if int(m.group(2)) < PersistentRowReductions.SHORT_ROW
                                  and int(m.group(1)) >= PersistentRowReductions.SHORT_ROW_CONFIG["XBLOCK"]],
                fixed_configs=[(m.group(3), int(m.group(1)), int(m.group(2)))
                               for code in codes for m in FIXED_CONFIG.finditer(code)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", help="also write each generated module to this directory")
    args = parser.parse_args()
    codes = generated_code()
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        for i, code in enumerate(codes):
            with open(os.path.join(args.dump, f"module{i}.py"), "w") as f:
                f.write(code)
    json.dump(summarize(codes), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
