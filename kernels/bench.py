"""Benchmarks of the kernels package against PyTorch, on the shapes train_gpt.py uses.

    python -m kernels.bench                      # every family
    python -m kernels.bench --only symmetric     # one family (names: see FAMILIES at the bottom)
    python -m kernels.bench --sweep              # also time candidate block configs (re-tuning the tables)

Needs a CUDA GPU. Timing: triton.testing.do_bench, median of repeated calls. do_bench clears the
L2 cache before every timed call, so each call reads its inputs cold from device memory and no
input rotation is needed. Peaks are measured once at start: device-to-device copy bandwidth
(bytes read + written) and an 8192³ bf16 matmul on random data.

Metric conventions:
  memory-bound ops: TB/s = (bytes read + bytes written) / time, each tensor counted once.
  matmul-like ops: TFLOP/s of the dense product the op delivers (xxt: 2·M²·K per matrix, though
  the triangle kernel performs only about half of those; ba_plus_caa: 2·M³; Polar Express: per
  iteration 2·s²·l + 2·s³ + 2·s²·l for an (s x l) or (l x s) matrix, s the smaller side), so the
  column compares directly with the baseline and "% peak" can exceed 100 for the triangle kernels.
"""
import argparse
import datetime
import itertools
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from kernels.embedding import (embedding_grad_add_reference, embedding_grad_add_triton, round_flagged_rows_triton,
                               zero_flagged_rows_triton)
from kernels.fp8_linear import (E4M3, fp8_block_mm, fp8_linear_op, fp8_operands, fp8_rows, fp8_tensor,
                                fp8_weight_blocks)
from kernels.polar_express import (POLAR_EXPRESS_COEFFS, nesterov_scaled_reference, nesterov_scaled_triton,
                                   polar_express, polar_express_reference)
from kernels.symmetric import (SyrkConfig, ba_plus_caa_reference, ba_plus_caa_triton, syrk_config, xtx_reference,
                               xtx_triton, xxt_reference, xxt_triton)
from kernels.transpose import (TransposeConfig, transpose_add_reference, transpose_add_triton, transpose_config,
                               transpose_copy_reference, transpose_copy_triton)
from kernels.relu_square import (MLPConfig, hopper_backward_applies, matmul_relu_square_triton, mlp_config,
                                 relu_square_backward_hopper, relu_square_d_pre_op, relu_square_mlp,
                                 relu_square_mlp_fp8, relu_square_mlp_reference)
from kernels.softcapped_ce import CEConfig, ce_config, softcapped_ce_reference, softcapped_ce_triton


DEVICE = "cuda"


@dataclass(frozen=True)
class Peaks:
    copy_tb_s: float
    matmul_tflop_s: float


def time_ms(fn, rep_ms: int = 100, warmup_ms: int = 25) -> float:
    return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")


def time_graph_ms(fn) -> float:
    """Median time of fn captured in a CUDA graph: the GPU time without Python launch overhead."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # compile and warm the allocator outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_ms(graph.replay)


def measure_peaks() -> Peaks:
    src = torch.randn(2**28, device=DEVICE, dtype=torch.bfloat16)  # 512 MiB, far above L2
    dst = torch.empty_like(src)
    # Long warm-ups: the GPU idles at low clocks when the script starts.
    copy_tb_s = 2 * src.nbytes / time_ms(partial(dst.copy_, src), warmup_ms=300) / 1e9
    del src, dst
    n = 8192
    a, b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16), torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    matmul_tflop_s = 2 * n**3 / time_ms(lambda: torch.matmul(a, b, out=out), warmup_ms=500) / 1e9
    return Peaks(copy_tb_s, matmul_tflop_s)


def print_table(title: str, headers: list[str], rows: list[list]):
    print(f"\n### {title}\n")
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" for _ in headers) + "|")
    for row in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |")


COMPARE_HEADERS = ["op", "shape", "ms", "torch ms", "speedup", "metric", "% peak"]


def compare_row(op, shape, ms, torch_ms, amount, unit, peak) -> list:
    """amount: bytes (unit 'TB/s') or FLOPs (unit 'TFLOP/s') the op is credited with."""
    rate = amount / ms / 1e9
    return [op, "x".join(map(str, shape)), ms, torch_ms, f"{torch_ms / ms:.2f}x", f"{rate:.2f} {unit}",
            f"{100 * rate / peak:.0f}%"]


# --- transpose -------------------------------------------------------------------------------
# (op, src shape): copy runs LM head (768, 50304) -> embedding; add runs embedding grad -> LM head grad.
TRANSPOSE_CASES = [("transpose_copy", (768, 50304)), ("transpose_add", (50304, 768))]


def _transpose_inputs(shape):
    src = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    dst = torch.randn(shape[::-1], device=DEVICE, dtype=torch.bfloat16)
    return src, dst


def bench_transpose(peaks: Peaks):
    # op -> (kernel, PyTorch baseline, tensors moved: copy reads src + writes dst, add also reads dst)
    ops = {"transpose_copy": (transpose_copy_triton, transpose_copy_reference, 2),
           "transpose_add": (transpose_add_triton, transpose_add_reference, 3)}
    table_config = transpose_config(torch.device(DEVICE), torch.bfloat16)
    one_per_tile = TransposeConfig(table_config.block_m, table_config.block_n, table_config.num_warps, ctas_per_sm=0)
    rows = []
    for op, shape in TRANSPOSE_CASES + [(op, shape[::-1]) for op, shape in TRANSPOSE_CASES]:
        kernel, baseline, passes = ops[op]
        src, dst = _transpose_inputs(shape)
        amount = passes * src.nbytes
        torch_ms = time_ms(lambda: baseline(src, dst))
        rows.append(compare_row(op, shape, time_ms(lambda: kernel(src, dst)), torch_ms, amount, "TB/s", peaks.copy_tb_s))
        rows.append(compare_row(op + " (1 program/tile)", shape, time_ms(lambda: kernel(src, dst, config=one_per_tile)),
                                torch_ms, amount, "TB/s", peaks.copy_tb_s))
    print_table(f"transpose, bf16 (table config {table_config})", COMPARE_HEADERS, rows)


def _mark_fastest(rows: list[list], ms_column: int = 3) -> list[list]:
    fastest = min(row[ms_column] for row in rows)
    return [row[:2] + [row[2] + (" **fastest**" if row[ms_column] == fastest else "")] + row[3:] for row in rows]


def sweep_transpose(peaks: Peaks):
    rows = []
    for op, shape in TRANSPOSE_CASES:
        kernel = transpose_copy_triton if op == "transpose_copy" else transpose_add_triton
        src, dst = _transpose_inputs(shape)
        amount = (2 if op == "transpose_copy" else 3) * src.nbytes
        case_rows = []
        for block_m, block_n in [(64, 64), (64, 128), (128, 64), (32, 128)]:
            for num_warps in (4, 8):
                for ctas_per_sm in (0, 2, 4, 8):
                    config = TransposeConfig(block_m, block_n, num_warps, ctas_per_sm)
                    ms = time_ms(lambda: kernel(src, dst, config=config), rep_ms=40)
                    case_rows.append([op, "x".join(map(str, shape)), f"{block_m}x{block_n} w{num_warps} c{ctas_per_sm}",
                                      ms, f"{amount / ms / 1e9:.2f}"])
        rows += _mark_fastest(case_rows)
    print_table("transpose sweep (c0 = one program per tile)", ["op", "shape", "config", "ms", "TB/s"], rows)


# --- symmetric -------------------------------------------------------------------------------
# (op, X shape) as Polar Express calls them: 8-GPU shards (5 attn, 3 MLP matrices per rank) and
# 1-GPU whole banks (40, 24); ba_plus_caa acts on the 768 x 768 Gram matrices of both.
SYMMETRIC_CASES = [("xxt", (5, 768, 768)), ("xxt", (40, 768, 768)), ("xtx", (3, 3072, 768)),
                   ("xtx", (24, 3072, 768)), ("ba_plus_caa", (5, 768, 768)), ("ba_plus_caa", (40, 768, 768)),
                   ("ba_plus_caa", (3, 768, 768)), ("ba_plus_caa", (24, 768, 768))]
_B, _C = POLAR_EXPRESS_COEFFS[1].b, POLAR_EXPRESS_COEFFS[1].c


def _symmetric_case(op, shape):
    """(kernel(config), torch baseline, dense FLOPs) for one case, inputs already allocated."""
    X = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16) / shape[-1] ** 0.5
    batch, rows, cols = shape
    if op == "xxt":
        out = X.new_empty(batch, rows, rows)
        return (lambda config=None: xxt_triton(X, out, config=config),
                lambda: xxt_reference(X, out), 2 * batch * rows * rows * cols)
    if op == "xtx":
        out = X.new_empty(batch, cols, cols)
        return (lambda config=None: xtx_triton(X, out, config=config),
                lambda: xtx_reference(X, out), 2 * batch * cols * cols * rows)
    A = X + X.mT  # symmetric
    out = torch.empty_like(A)
    return (lambda config=None: ba_plus_caa_triton(A, _B, _C, out, config=config),
            lambda: ba_plus_caa_reference(A, _B, _C, out), 2 * batch * rows**3)


def bench_symmetric(peaks: Peaks):
    rows = []
    for op, shape in SYMMETRIC_CASES:
        kernel, baseline, flops = _symmetric_case(op, shape)
        rows.append(compare_row(op, shape, time_ms(kernel), time_ms(baseline), flops, "TFLOP/s", peaks.matmul_tflop_s))
    print_table("symmetric, bf16 (torch: full matmul / baddbmm; FLOPs of the dense product)", COMPARE_HEADERS, rows)


SYRK_CANDIDATES = [SyrkConfig(64, 32, 4, 4), SyrkConfig(64, 64, 4, 3), SyrkConfig(64, 64, 4, 4),
                   SyrkConfig(64, 128, 4, 3), SyrkConfig(64, 64, 8, 3), SyrkConfig(128, 32, 8, 4),
                   SyrkConfig(128, 64, 8, 3), SyrkConfig(128, 64, 8, 4), SyrkConfig(128, 128, 8, 3)]


def sweep_symmetric(peaks: Peaks):
    rows = []
    for op, shape in SYMMETRIC_CASES:
        kernel, _, flops = _symmetric_case(op, shape)
        size, K = (shape[2], shape[1]) if op == "xtx" else (shape[1], shape[2])
        table = syrk_config(torch.device(DEVICE), torch.bfloat16, shape[0], size, K)
        case_rows = []
        for config in SYRK_CANDIDATES:
            ms = time_ms(lambda: kernel(config), rep_ms=40)
            mark = " (table)" if config == table else ""
            case_rows.append([op, "x".join(map(str, shape)),
                              f"b{config.block} k{config.block_k} w{config.num_warps} s{config.num_stages}{mark}",
                              ms, f"{flops / ms / 1e9:.0f}"])
        rows += _mark_fastest(case_rows)
    print_table("symmetric sweep", ["op", "shape", "config", "ms", "TFLOP/s"], rows)


# --- polar_express ---------------------------------------------------------------------------
POLAR_EXPRESS_SHAPES = [(5, 768, 768), (3, 3072, 768), (40, 768, 768), (24, 3072, 768)]


def bench_polar_express(peaks: Peaks):
    rows, start_rows = [], []
    for shape in POLAR_EXPRESS_SHAPES:
        grad = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)  # the bank's gradient, as training passes it
        buffer = torch.randn(shape, device=DEVICE)
        # the start: bf16 grad and fp32 buffer read, the buffer and the bf16 start written (12 bytes an element)
        ms = time_ms(lambda: nesterov_scaled_triton(grad, buffer, 0.95))
        torch_ms = time_ms(lambda: nesterov_scaled_reference(grad, buffer, 0.95))
        start_rows.append(compare_row("nesterov_scaled", shape, ms, torch_ms, 12 * grad.numel(), "TB/s",
                                      peaks.copy_tb_s))
        small, large = min(shape[1:]), max(shape[1:])
        flops = shape[0] * len(POLAR_EXPRESS_COEFFS) * (4 * small**2 * large + 2 * small**3)
        ms = time_ms(lambda: polar_express(grad, buffer, 0.95))
        torch_ms = time_ms(lambda: polar_express_reference(grad, buffer, 0.95, dtype=torch.bfloat16))
        row = compare_row("polar_express", shape, ms, torch_ms, flops, "TFLOP/s", peaks.matmul_tflop_s)
        row.insert(4, time_graph_ms(lambda: polar_express(grad, buffer, 0.95)))
        rows.append(row)
    print_table("nesterov_scaled: Polar Express's start (momentum, look-ahead, norm bound, bf16; torch: the same "
                "math eager)", COMPARE_HEADERS, start_rows)
    headers = COMPARE_HEADERS[:4] + ["graph ms"] + COMPARE_HEADERS[4:]
    print_table("polar_express: momentum + 5 bf16 iterations (torch: same math, eager bf16 matmuls; "
                "graph ms: ours replayed in a CUDA graph, no launch overhead)", headers, rows)


# --- softcapped_ce ---------------------------------------------------------------------------
# (rows, MTP predictions) of one micro-batch in each training stage; V = 50304, bf16 logits, e5m2 gradients
# at the model's scale (GPTConfig.head_grad_scale).
CE_CASES = [(16384, 3), (32768, 2), (49152, 1)]
CE_VOCAB = 50304
CE_SOFTCAP = (23.0, 5.0, 7.5)  # (A, B, C), the model's (GPTConfig.logit_cap)
CE_GRAD_SCALE = 0.75 / 448
CE_BLOCKS = [(1, 1024, 4), (1, 2048, 4), (1, 2048, 8), (1, 2048, 16), (1, 4096, 8), (1, 4096, 16), (1, 4096, 32),
             (1, 8192, 16), (1, 8192, 32),
             (2, 1024, 4), (2, 2048, 8), (4, 1024, 8)]  # (block_rows, block_v, num_warps)
CE_CANDIDATES = [CEConfig(*block, reverse_pass2, fma_reciprocal, num_stages) for block in CE_BLOCKS
                 for reverse_pass2 in (False, True) for fma_reciprocal in (False, True) for num_stages in (1, 3)]
CE_SWEEP_SHOWN = 12  # rows printed per shape: the fastest candidates (and the table's config)


def _ce_case(n_rows, num_predict):
    """(fused kernel(config), eager baseline, bytes moved: bf16 logits read once + e5m2 gradient written)."""
    logits = (8 * torch.randn(n_rows, CE_VOCAB, device=DEVICE)).to(torch.bfloat16)
    targets = torch.randint(0, CE_VOCAB, (n_rows,), device=DEVICE)
    weights = torch.tensor([1.0, 0.5, 0.25][:num_predict], device=DEVICE)
    args = (logits, targets, weights, *CE_SOFTCAP, CE_GRAD_SCALE, torch.float8_e5m2)
    return (lambda config=None, tanh_sigmoid=False: softcapped_ce_triton(*args, tanh_sigmoid, config),
            lambda: softcapped_ce_reference(*args), logits.numel() * (2 + 1))


def _time_or_nan(fn) -> float:
    """Time a baseline that may not fit in memory (the fp32 reference makes several N x V temporaries)."""
    try:
        return time_ms(fn)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return float("nan")


def bench_softcapped_ce(peaks: Peaks):
    rows = []
    for n_rows, num_predict in CE_CASES:
        fused, reference, nbytes = _ce_case(n_rows, num_predict)
        baseline = _time_or_nan(reference)
        for tanh_sigmoid in (False, True):
            rows.append(compare_row(f"losses + grad K={num_predict}{' tanh' if tanh_sigmoid else ''}",
                                    (n_rows, CE_VOCAB), time_ms(lambda: fused(None, tanh_sigmoid)), baseline, nbytes,
                                    "TB/s", peaks.copy_tb_s))
    print_table("softcapped_ce, bf16 logits -> fp32 losses + e5m2 grads in one kernel (TB/s: logits read once, "
                "gradient written; tanh: the sigmoid from tanh.approx; torch: the eager fp32 reference; nan: out of "
                "memory)", COMPARE_HEADERS, rows)


def sweep_softcapped_ce(peaks: Peaks):
    rows, fastest = [], []
    for (n_rows, num_predict), tanh_sigmoid in itertools.product(CE_CASES, (False, True)):
        fused, _, nbytes = _ce_case(n_rows, num_predict)
        table = ce_config(torch.device(DEVICE), n_rows, CE_VOCAB, tanh_sigmoid)
        candidates = [c for c in CE_CANDIDATES if not (tanh_sigmoid and c.fma_reciprocal)]  # tanh: no reciprocal
        timings = sorted((time_ms(lambda: fused(config, tanh_sigmoid), rep_ms=40), config) for config in candidates)
        for rank, (ms, config) in enumerate(timings):
            if rank < CE_SWEEP_SHOWN or config == table:
                label = (f"r{config.block_rows} v{config.block_v} w{config.num_warps} s{config.num_stages} "
                         f"{'reverse' if config.reverse_pass2 else 'forward'} "
                         f"{'tanh' if tanh_sigmoid else 'fma' if config.fma_reciprocal else 'mufu'}")
                rate = nbytes / ms / 1e9
                rows.append([f"{n_rows}x{CE_VOCAB}", num_predict, rank + 1,
                             label + (" (table)" if config == table else ""), ms, f"{rate:.2f}",
                             f"{100 * rate / peaks.copy_tb_s:.0f}%"])
        fastest.append((n_rows, tanh_sigmoid, *timings[0]))
    print_table(f"softcapped_ce sweep: the {CE_SWEEP_SHOWN} fastest candidates per shape and sigmoid "
                "(s: pipeline stages; pass 2 in forward or reverse column order; the sigmoid from tanh.approx, or "
                "its reciprocal on the fma or mufu pipe)",
                ["shape", "K", "rank", "config", "ms", "TB/s", "% copy peak"], rows)
    print("\nfastest per shape, for CE_CONFIGS in kernels/softcapped_ce.py:")
    for n_rows, tanh_sigmoid, ms, config in fastest:
        print(f"    ({n_rows}, {CE_VOCAB}, {tanh_sigmoid}): {config!r},  # {ms:.3f} ms")


# --- relu_square -------------------------------------------------------------------------------
# tokens of one micro-batch in each training stage; x (T, 768), w_in and w_out (3072, 768) in bf16
MLP_TOKENS = [16384, 32768, 49152]
MLP_DIM, MLP_HIDDEN = 768, 3072
MLP_CANDIDATES = [MLPConfig(128, 256, 64, 3, 8), MLPConfig(128, 256, 64, 4, 8), MLPConfig(128, 128, 64, 4, 4),
                  MLPConfig(128, 128, 64, 4, 8), MLPConfig(256, 128, 64, 3, 8)]
MLP_FP8_OUT_CANDIDATES = MLP_CANDIDATES + [MLPConfig(256, 128, 64, 2, 8), MLPConfig(128, 128, 64, 3, 8)]
MLP_FP8_CANDIDATES = [MLPConfig(128, 256, 128, 3, 8), MLPConfig(128, 256, 64, 4, 8), MLPConfig(128, 128, 128, 4, 8),
                      MLPConfig(256, 128, 128, 3, 8), MLPConfig(128, 256, 128, 4, 8)]


def _mlp_inputs(tokens):
    x = torch.randn(tokens, MLP_DIM, device=DEVICE, dtype=torch.bfloat16)
    grad_out = torch.randn_like(x)
    bank = (torch.randn(2, MLP_HIDDEN, MLP_DIM, device=DEVICE) / MLP_DIM**0.5).to(torch.bfloat16)
    pre = x @ bank[0].T
    return x, grad_out, bank, pre, torch.relu(pre).square()


def bench_relu_square(peaks: Peaks):
    rows = []
    for tokens in MLP_TOKENS:
        x, grad_out, bank, pre, post = _mlp_inputs(tokens)
        w_in, w_out = bank.unbind(0)
        shape, flops = (tokens, MLP_DIM, MLP_HIDDEN), 2 * tokens * MLP_DIM * MLP_HIDDEN
        rows.append(compare_row("relu(x w_inᵀ)²", shape, time_ms(lambda: matmul_relu_square_triton(x, w_in)),
                                time_ms(lambda: torch.relu(x @ w_in.T).square()), flops, "TFLOP/s",
                                peaks.matmul_tflop_s))
        x8, w8, scale = fp8_operands(x, w_in)  # made outside the timing: training fuses the casts
        rows.append(compare_row("FP8 relu(x w_inᵀ)² (torch: the bf16 kernel)", shape,
                                time_ms(lambda: matmul_relu_square_triton(x8, w8, scale=scale)),
                                time_ms(lambda: matmul_relu_square_triton(x, w_in)), flops, "TFLOP/s",
                                peaks.matmul_tflop_s))
        rows.append(compare_row("  + post's e4m3 copy (torch: without)", shape,
                                time_ms(lambda: matmul_relu_square_triton(x8, w8, scale=scale, fp8_out=True)),
                                time_ms(lambda: matmul_relu_square_triton(x8, w8, scale=scale)), flops, "TFLOP/s",
                                peaks.matmul_tflop_s))
        _, post8, post_scale = matmul_relu_square_triton(x8, w8, scale=scale, fp8_out=True)
        w_out_blocks = fp8_weight_blocks(w_out.T)  # made outside the timing: training fuses it into the forward
        rows.append(compare_row("FP8 out = post w_out, block scales (torch: bf16)", shape,
                                time_ms(lambda: fp8_block_mm(post8, post_scale, *w_out_blocks, torch.bfloat16)),
                                time_ms(lambda: post @ w_out), flops, "TFLOP/s", peaks.matmul_tflop_s))
        rows.append(compare_row("(g w_outᵀ)·2relu(pre)", shape,
                                time_ms(lambda: matmul_relu_square_triton(grad_out, w_out, post=post)),
                                time_ms(lambda: (grad_out @ w_out.T) * (2 * torch.relu(pre))), flops, "TFLOP/s",
                                peaks.matmul_tflop_s))
        rows.append(compare_row("  + its e4m3 copy (torch: the bf16 kernel)", shape,
                                time_ms(lambda: matmul_relu_square_triton(grad_out, w_out, post=post, fp8_out=True)),
                                time_ms(lambda: matmul_relu_square_triton(grad_out, w_out, post=post)), flops,
                                "TFLOP/s", peaks.matmul_tflop_s))
        (g8, g_scale), (w_out8, w_out_scale) = fp8_rows(grad_out), fp8_tensor(w_out)
        rows.append(compare_row("FP8 (g w_outᵀ)·2relu(pre), row scales, + copy (torch: the bf16 kernel)", shape,
                                time_ms(lambda: matmul_relu_square_triton(g8, w_out8, post=post, scale=w_out_scale,
                                                                          row_scale=g_scale, fp8_out=True)),
                                time_ms(lambda: matmul_relu_square_triton(grad_out, w_out, post=post, fp8_out=True)),
                                flops, "TFLOP/s", peaks.matmul_tflop_s))
        if hopper_backward_applies(g8, MLP_HIDDEN, True, torch.bfloat16):
            rows.append(compare_row("  warp-specialized, Hopper (torch: the Triton kernel above)", shape,
                                    time_ms(lambda: relu_square_backward_hopper(g8, w_out8, post, w_out_scale,
                                                                                g_scale)),
                                    time_ms(lambda: matmul_relu_square_triton(g8, w_out8, post=post, scale=w_out_scale,
                                                                              row_scale=g_scale, fp8_out=True)),
                                    flops, "TFLOP/s", peaks.matmul_tflop_s))
        t_mul = torch.tensor([448 / post.float().max().item(), 1.0], device=post.device)
        rows.append(compare_row("  its postᵀ, d_preᵀ e4m3 for FP8 dW, no bf16 d_pre (torch: without)", shape,
                                time_ms(lambda: relu_square_d_pre_op(grad_out, w_out, post, True, g8, g_scale, w_out8,
                                                                     w_out_scale, t_mul)),
                                time_ms(lambda: relu_square_d_pre_op(grad_out, w_out, post, True, g8, g_scale, w_out8,
                                                                     w_out_scale)),
                                flops, "TFLOP/s", peaks.matmul_tflop_s))
        d_pre8, _, post_t8, d_pre_t8 = relu_square_d_pre_op(grad_out, w_out, post, True, g8, g_scale, w_out8,
                                                            w_out_scale, t_mul)
        grad_t8, x_t8, one = grad_out.to(E4M3).T.contiguous(), x.to(E4M3).T.contiguous(), t_mul.new_ones(())
        d_pre = matmul_relu_square_triton(grad_out, w_out, post=post)
        rows.append(compare_row("FP8 dW_out and dW_in, per-tensor scales (torch: bf16)", shape,
                                time_ms(lambda: (torch._scaled_mm(post_t8, grad_t8.T, one, one, out_dtype=torch.bfloat16,
                                                                  use_fast_accum=True),
                                                 torch._scaled_mm(d_pre_t8, x_t8.T, one, one, out_dtype=torch.bfloat16,
                                                                  use_fast_accum=True))),
                                time_ms(lambda: (post.T @ grad_out, d_pre.T @ x)), 2 * flops, "TFLOP/s",
                                peaks.matmul_tflop_s))
        d_pre, d_pre8, d_pre_scale = matmul_relu_square_triton(grad_out, w_out, post=post, fp8_out=True)
        w_blocks = fp8_weight_blocks(w_in.T)  # made outside the timing: training fuses it into the forward
        rows.append(compare_row("FP8 dx = d_pre w_in, block scales (torch: bf16)", shape,
                                time_ms(lambda: fp8_block_mm(d_pre8, d_pre_scale, *w_blocks, torch.bfloat16)),
                                time_ms(lambda: d_pre @ w_in), flops, "TFLOP/s", peaks.matmul_tflop_s))
        x.requires_grad_()
        bank.requires_grad_()

        def forward_backward(mlp):
            x.grad = bank.grad = None
            mlp(x, *bank.unbind(0)).backward(grad_out)
        # forward + backward: 6 matmuls of 2·T·D·H FLOPs
        rows.append(compare_row("MLP fwd+bwd", shape, time_ms(lambda: forward_backward(relu_square_mlp)),
                                time_ms(lambda: forward_backward(relu_square_mlp_reference)), 6 * flops, "TFLOP/s",
                                peaks.matmul_tflop_s))
        rows.append(compare_row("FP8 MLP fwd+bwd, up-projection, casts unfused (torch: bf16 op)", shape,
                                time_ms(lambda: forward_backward(partial(relu_square_mlp_fp8, blocks=False))),
                                time_ms(lambda: forward_backward(relu_square_mlp)), 6 * flops, "TFLOP/s",
                                peaks.matmul_tflop_s))
        rows.append(compare_row("  + down-projection and backward over block and row scales (torch: without)", shape,
                                time_ms(lambda: forward_backward(partial(relu_square_mlp_fp8, blocks=True))),
                                time_ms(lambda: forward_backward(partial(relu_square_mlp_fp8, blocks=False))),
                                6 * flops, "TFLOP/s", peaks.matmul_tflop_s))
        rows.append(compare_row("  + weight gradients, casts unfused (torch: without)", shape,
                                time_ms(lambda: forward_backward(partial(relu_square_mlp_fp8, blocks=True, dw=True))),
                                time_ms(lambda: forward_backward(partial(relu_square_mlp_fp8, blocks=True))),
                                6 * flops, "TFLOP/s", peaks.matmul_tflop_s))
    print_table("relu_square, bf16 (torch: cuBLAS matmul, then relu and square as separate kernels)",
                COMPARE_HEADERS, rows)


def sweep_relu_square(peaks: Peaks):
    tokens = MLP_TOKENS[-1]
    x, grad_out, bank, _, post = _mlp_inputs(tokens)
    flops = 2 * tokens * MLP_DIM * MLP_HIDDEN
    rows = []
    x8, w8, scale = fp8_operands(x, bank[0])
    (g8, g_scale), (w_out8, w_out_scale) = fp8_rows(grad_out), fp8_tensor(bank[1])
    fp8_out8 = [c for c in MLP_FP8_CANDIDATES if c.block_n == 128] + \
        [MLPConfig(128, 128, 128, 3, 8), MLPConfig(256, 128, 128, 2, 8), MLPConfig(256, 128, 64, 3, 8),
         MLPConfig(128, 256, 128, 3, 8), MLPConfig(128, 256, 128, 4, 8), MLPConfig(128, 256, 64, 4, 8)]
    for direction, run in [("forward_bf16", lambda config: matmul_relu_square_triton(x, bank[0], config=config)),
                           ("backward_bf16", lambda config: matmul_relu_square_triton(grad_out, bank[1], post=post,
                                                                                      config=config)),
                           ("backward_bf16_out8", lambda config: matmul_relu_square_triton(
                               grad_out, bank[1], post=post, config=config, fp8_out=True)),
                           ("forward_fp8", lambda config: matmul_relu_square_triton(x8, w8, config=config, scale=scale)),
                           ("forward_fp8_out8", lambda config: matmul_relu_square_triton(x8, w8, config=config,
                                                                                         scale=scale, fp8_out=True)),
                           ("backward_fp8_out8", lambda config: matmul_relu_square_triton(
                               g8, w_out8, post=post, config=config, scale=w_out_scale, row_scale=g_scale,
                               fp8_out=True))]:
        table = mlp_config(torch.device(DEVICE), direction, MLP_HIDDEN, MLP_DIM)
        case_rows = []
        candidates = {"forward_fp8": MLP_FP8_CANDIDATES, "backward_bf16_out8": MLP_FP8_OUT_CANDIDATES,
                      "forward_fp8_out8": fp8_out8, "backward_fp8_out8": fp8_out8}
        for config in candidates.get(direction, MLP_CANDIDATES):
            label = f"{config.block_m}x{config.block_n}x{config.block_k} s{config.num_stages} w{config.num_warps}"
            try:
                ms = time_ms(lambda: run(config), rep_ms=40)
            except triton.runtime.errors.OutOfResources:
                ms, label = float("inf"), label + " (out of shared memory)"
            mark = " (table)" if config == table else ""
            case_rows.append([direction, f"{tokens}x{MLP_DIM}x{MLP_HIDDEN}", label + mark, ms, f"{flops / ms / 1e9:.0f}"])
        rows += _mark_fastest(case_rows)
    print_table("relu_square sweep", ["pass", "shape", "config", "ms", "TFLOP/s"], rows)


# --- embedding gradients ----------------------------------------------------------------------
# The five value-embedding tables (5 x 50304 rows) take n_lookups = 5 x tokens rows a micro-batch.
EMBEDDING_CASES = [("value_embeds, stage 1", 5, 16384), ("value_embeds, stage 3", 5, 49152)]
FLAGGED_SHARES = (0.15, 0.35, 0.7)  # value-table rows written between Adam steps: world 8 stage 1 / 3, world 1


def bench_embedding(peaks: Peaks):
    """Scatter into the fp32 accumulator vs torch's index_add_, and vs the path it replaced: autograd's
    dense embedding backward (a table-sized gradient per micro-batch) added to a bf16 .grad. Then, at the share of
    the value table's rows an Adam step finds written (at world 8 and world 1), rounding those rows for the wire and
    zeroing them, against the whole table's rounding and zeroing."""
    V, D = 50304, 768
    rows = []
    for name, tables, tokens in EMBEDDING_CASES:
        idx = ((torch.rand(tables, tokens, device=DEVICE) ** 3 * V).long() + V * torch.arange(tables, device=DEVICE)[:, None])
        grad = torch.randn(tables, tokens, D, device=DEVICE, dtype=torch.bfloat16)
        acc = torch.zeros(tables * V, D, device=DEVICE)
        flags = torch.zeros(tables * V, device=DEVICE, dtype=torch.uint8)
        grad_bf16 = torch.zeros(tables * V, D, device=DEVICE, dtype=torch.bfloat16)

        def dense_path():
            dense = torch.ops.aten.embedding_dense_backward(grad.view(-1, D), idx.view(-1), tables * V, -1, False)
            grad_bf16.add_(dense)
        amount = grad.nbytes + idx.nbytes + 2 * 4 * grad.numel()  # read rows, read + write their fp32 sums
        ms = time_ms(lambda: embedding_grad_add_triton(grad, idx, acc, flags))
        shape = (tables, tokens, D)
        rows.append(compare_row(f"embedding_grad_add, {name}", shape, ms,
                                time_ms(lambda: embedding_grad_add_reference(grad, idx, acc, flags)), amount, "TB/s",
                                peaks.copy_tb_s))
        rows.append(compare_row(f"  vs dense backward + bf16 add, {name}", shape, ms, time_ms(dense_path), amount,
                                "TB/s", peaks.copy_tb_s))
    acc, wire = torch.randn(5 * V, D, device=DEVICE), torch.zeros(5 * V, D, device=DEVICE, dtype=torch.bfloat16)
    for share in FLAGGED_SHARES:
        flags = (torch.rand(5 * V, device=DEVICE) < share).to(torch.uint8)
        written = int(flags.sum()) * D
        ms = time_ms(lambda: round_flagged_rows_triton(acc, flags, wire))
        rows.append(compare_row(f"round_flagged_rows, {share:.0%} of rows", (5 * V, D), ms,
                                time_ms(lambda: wire.copy_(acc)), written * 6 + flags.numel(), "TB/s", peaks.copy_tb_s))
        # the zeroing clears the flags: time it on a fresh copy of them each call (the copy timed alone is subtracted)
        fresh = flags.clone()
        copy_ms = time_ms(lambda: fresh.copy_(flags))
        ms = time_ms(lambda: (fresh.copy_(flags), zero_flagged_rows_triton(acc, fresh, wire))) - copy_ms
        rows.append(compare_row(f"zero_flagged_rows (and wire), {share:.0%} of rows", (5 * V, D), ms,
                                time_ms(lambda: (acc.zero_(), wire.zero_())), written * 6 + 2 * flags.numel(), "TB/s",
                                peaks.copy_tb_s))
    print_table("embedding gradient scatter (torch: index_add_ in fp32; second row: autograd's dense path); flagged "
                "rows rounded and zeroed (torch: the whole table)", COMPARE_HEADERS, rows)


# --- FP8 linear -------------------------------------------------------------------------------
def bench_fp8_linear(peaks: Peaks):
    """The QKV projection, (T, 768) @ (2304, 768)ᵀ, at each stage's micro-batch: FP8 against bf16 cuBLAS."""
    rows = []
    for tokens in MLP_TOKENS:
        x = F.rms_norm(torch.randn(tokens, MLP_DIM, device=DEVICE), (MLP_DIM,)).bfloat16()
        w = (torch.randn(3 * MLP_DIM, MLP_DIM, device=DEVICE) / MLP_DIM**0.5).bfloat16()
        x8, w8, w_scale = fp8_operands(x, w)  # made outside the timing: training fuses the casts
        rows.append(compare_row("FP8 x @ wᵀ (torch: bf16)", (tokens, MLP_DIM, 3 * MLP_DIM),
                                time_ms(lambda: fp8_linear_op(x, w, x8, w8, w_scale)), time_ms(lambda: x @ w.T),
                                2 * tokens * MLP_DIM * 3 * MLP_DIM, "TFLOP/s", peaks.matmul_tflop_s))
    print_table("fp8_linear (% peak: of the bf16 peak)", COMPARE_HEADERS, rows)


# --- main --------------------------------------------------------------------------------------
# name -> (benchmark, optional config sweep). New families add a line here.
FAMILIES = {
    "transpose": (bench_transpose, sweep_transpose),
    "symmetric": (bench_symmetric, sweep_symmetric),
    "polar_express": (bench_polar_express, None),
    "softcapped_ce": (bench_softcapped_ce, sweep_softcapped_ce),
    "relu_square": (bench_relu_square, sweep_relu_square),
    "embedding": (bench_embedding, None),
    "fp8_linear": (bench_fp8_linear, None),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=sorted(FAMILIES), help="benchmark one family")
    parser.add_argument("--sweep", action="store_true", help="also time candidate block configs")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("kernels.bench needs a CUDA GPU (the Triton interpreter is far too slow to time)")
    torch.manual_seed(0)
    peaks = measure_peaks()
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | triton {triton.__version__} | "
          f"{datetime.date.today()}\n"
          f"measured peaks: copy {peaks.copy_tb_s:.2f} TB/s (read + write), bf16 matmul {peaks.matmul_tflop_s:.0f} TFLOP/s")
    for name, (bench, sweep) in FAMILIES.items():
        if args.only in (None, name):
            bench(peaks)
            if args.sweep and sweep is not None:
                sweep(peaks)


if __name__ == "__main__":
    main()
