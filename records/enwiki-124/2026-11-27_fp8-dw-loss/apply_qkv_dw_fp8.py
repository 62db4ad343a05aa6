# experiment, on top of apply_mlp_dw_fp8.py: the QKV projection's dW in FP8 too (per-tensor e4m3 scales, unfused)
import sys
p = sys.argv[1] + '/kernels/fp8_linear.py'; s = open(p).read()
old = "    return grad @ w, grad.T @ x, None, None, None"
assert old in s
s = s.replace(old, "    from kernels.relu_square import _dw8\n    return grad @ w, _dw8(grad, x), None, None, None")
open(p, 'w').write(s)
print("patched", p)
