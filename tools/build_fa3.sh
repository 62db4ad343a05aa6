#!/usr/bin/env bash
# Build FlashAttention-3 for this model on a Hopper (H100/H200) machine, in minutes: only the
# kernels the model uses are compiled (sm90, bf16, head dim 128, forward + backward, varlen,
# causal + local window; about 4 minutes on 16 cores), from Dao-AILab/flash-attention hopper/ at a
# pinned commit with its csrc/cutlass submodule.
#
# Usage: tools/build_fa3.sh [--src DIR] [--out DIR] [--dry-run]
#   --src DIR   existing sources: a flash-attention checkout (the folder holding hopper/ and
#               csrc/cutlass/include/), or the folder fa3src.tar.xz was unpacked into (holding fa/).
#               They are copied into OUT/src and built there; DIR is not written to.
#               Without --src the pinned commit is cloned from GitHub into OUT/src (needs network).
#   --out DIR   where the result goes (default: .fa3 in the repository root, which git ignores)
#   --dry-run   run every check and print the plan (sources, environment, build command), then
#               stop: nothing is cloned, copied or compiled; exits 1 if a check failed
#   -h, --help  this text
# Environment: MAX_JOBS (default: the core count, at most one per 6 GiB of free memory),
#   NVCC_THREADS (default 4), CUDA_HOME (default: the toolkit of the nvcc on PATH), PYTHON (python3).
#
# Result, ready to import (`export PYTHONPATH=OUT:$PYTHONPATH`, then `import flash_attn_interface`):
#   OUT/flash_attn_interface.py, OUT/flash_attn_config.py (the build's flags),
#   OUT/flash_attn_3/ (_C.abi3.so and its python files), OUT/build.log,
#   OUT/fa3_C.so.xz: the compiled library alone (~1.8 MB) for machines with the same torch and CUDA.
# Restore from it without rebuilding (SRC: the sources, as for --src; DEST: any folder):
#   mkdir -p DEST/flash_attn_3 && cp SRC/hopper/flash_attn_interface.py DEST/ \
#     && cp SRC/hopper/flash_attn_3/*.py DEST/flash_attn_3/ \
#     && xz -dc fa3_C.so.xz > DEST/flash_attn_3/_C.abi3.so     # then PYTHONPATH=DEST as above
set -euo pipefail

FA_REPO=https://github.com/Dao-AILab/flash-attention.git
FA_COMMIT=0251105a2fb19d2957484b7f023cd8c115286ced   # its csrc/cutlass submodule: NVIDIA/cutlass 7127592
# Everything the model does not use is switched off: the SM80 path, fp16 and fp8, the other head
# dims, split-KV, paged KV, append-KV, softcap, PackGQA.
DISABLE=(SM80 FP16 FP8 HDIM64 HDIM96 HDIM192 HDIM256 SPLIT PAGEDKV APPENDKV SOFTCAP PACKGQA HDIMDIFF64 HDIMDIFF192)
# Files that must be in the sources (relative to the checkout); the two .cu are the kernels built.
NEEDED=(hopper/setup.py hopper/flash_attn_interface.py hopper/flash_attn_3/__init__.py
        hopper/instantiations/flash_fwd_hdim128_bf16_sm90.cu hopper/instantiations/flash_bwd_hdim128_bf16_sm90.cu
        csrc/cutlass/include/cutlass/cutlass.h)
NEED_GIB=2   # free disk for sources, objects and result (a full cutlass clone included)

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
say() { echo "build_fa3.sh: $*"; }
die() { echo "build_fa3.sh: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//p}' "$0"; }
ver_ge() { [[ $(printf '%s\n' "$1" "$2" | sort -V | head -n1) == "$2" ]]; }  # $1 >= $2

# (Names such as CC, OUT or NVCC are left alone: set in the environment, they reach setup.py, and
# torch passes CC to nvcc as its host compiler.)
SRC_DIR="" OUT_DIR="$ROOT/.fa3" DRY=0
while (( $# )); do
    case $1 in
        --src) [[ $# -ge 2 ]] || die "--src needs a folder"; SRC_DIR=$2; shift 2 ;;
        --out) [[ $# -ge 2 ]] || die "--out needs a folder"; OUT_DIR=$2; shift 2 ;;
        --dry-run) DRY=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see tools/build_fa3.sh --help)" ;;
    esac
done
[[ $OUT_DIR == /* ]] || OUT_DIR=$PWD/$OUT_DIR
STAGE=$OUT_DIR/src   # the tree that is built: a copy of --src, or the clone

# --src: the checkout itself, the folder holding the tarball's fa/, or its hopper/ folder.
if [[ -n $SRC_DIR ]]; then
    [[ -d $SRC_DIR ]] || die "--src $SRC_DIR: no such folder; unpack the sources first (mkdir -p /tmp/fa3 && tar xJf fa3src.tar.xz -C /tmp/fa3) or leave --src out to clone them"
    for d in "$SRC_DIR" "$SRC_DIR/fa" "$SRC_DIR/.."; do
        [[ -f $d/hopper/setup.py ]] && { SRC_DIR=$(cd "$d" && pwd); break; }
    done
    [[ -f $SRC_DIR/hopper/setup.py ]] || die "--src $SRC_DIR: no hopper/setup.py in it (nor in $SRC_DIR/fa); point it at the flash-attention checkout, the folder holding hopper/ and csrc/"
    for f in "${NEEDED[@]}"; do
        [[ -f $SRC_DIR/$f ]] || die "--src $SRC_DIR: $f is missing; use flash-attention at ${FA_COMMIT:0:8} with its csrc/cutlass submodule (git submodule update --init csrc/cutlass)"
    done
fi

# ---- checks: each failure is one line naming the fix; all are reported before anything is built.
ERRORS=()
fail() { ERRORS+=("$*"); }

# nvcc: the one in CUDA_HOME (or CUDA_PATH), else on PATH, else /usr/local/cuda, as torch looks.
NVCC_BIN="" CUDA_VER="" CUDA_DIR="" NVCC_OK=0
for c in "${CUDA_HOME:-${CUDA_PATH:-}}/bin/nvcc" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
    [[ $c != /bin/nvcc && -x $c ]] && { NVCC_BIN=$c; break; }
done
if [[ -z $NVCC_BIN ]]; then
    fail "nvcc not found (looked in \$CUDA_HOME/bin, PATH, /usr/local/cuda/bin): install the CUDA toolkit >= 12.3, or set CUDA_HOME to it"
else
    CUDA_VER=$("$NVCC_BIN" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n1)
    # The toolkit folder: nvcc names its real bin/ (it may be a wrapper script or a link elsewhere).
    here=$("$NVCC_BIN" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n1 || true)
    CUDA_DIR=$(cd "${here:-$(dirname "$NVCC_BIN")}/.." && pwd)
    if [[ -z $CUDA_VER ]]; then
        fail "$NVCC_BIN --version names no CUDA release: check the CUDA toolkit installation, or set CUDA_HOME to a working one"
    elif ! ver_ge "$CUDA_VER" 12.3; then
        fail "nvcc is CUDA $CUDA_VER ($NVCC_BIN); FlashAttention-3 needs CUDA >= 12.3: put a newer toolkit first on PATH or set CUDA_HOME to it"
    elif [[ ! -f $CUDA_DIR/include/cuda_runtime.h ]]; then
        fail "no CUDA headers in $CUDA_DIR/include (toolkit of $NVCC_BIN): set CUDA_HOME to the CUDA toolkit folder"
    else
        NVCC_OK=1
    fi
fi

# python3 with a CUDA build of torch; the GPU, if one is visible, must be a Hopper (sm_90).
TORCH_VER="" TORCH_CUDA="" NGPU=0 GPU_CC="" GPU_NAME=""
if info=$("$PYTHON" -c '
import torch
n = torch.cuda.device_count() if torch.version.cuda else 0
cc = "%d%d" % torch.cuda.get_device_capability(0) if n else "-"
name = torch.cuda.get_device_name(0).replace(" ", "_") if n else "-"
print(torch.__version__, torch.version.cuda or "none", n, cc, name)' 2>/dev/null); then
    read -r TORCH_VER TORCH_CUDA NGPU GPU_CC GPU_NAME <<<"$info"
    if [[ $TORCH_CUDA == none ]]; then
        fail "torch $TORCH_VER ($PYTHON) is a CPU-only build: install a CUDA build of torch (see requirements.txt)"
    elif (( NVCC_OK )) && [[ ${CUDA_VER%%.*} != "${TORCH_CUDA%%.*}" ]]; then
        fail "nvcc is CUDA $CUDA_VER but torch $TORCH_VER was built with CUDA $TORCH_CUDA: use a CUDA ${TORCH_CUDA%%.*}.x toolkit (set CUDA_HOME), torch builds no extension across major versions"
    fi
    if (( NGPU > 0 )) && [[ $GPU_CC != 9* ]]; then
        fail "GPU 0 is ${GPU_NAME//_/ } (sm_$GPU_CC); FlashAttention-3 is Hopper-only (sm_90): build and run it on an H100/H200, elsewhere use torch's attention"
    fi
else
    fail "$PYTHON cannot import torch: install the requirements first: python3 -m pip install -r requirements.txt (or set PYTHON)"
fi
"$PYTHON" -c 'import setuptools, packaging, wheel.bdist_wheel' 2>/dev/null \
    || fail "$PYTHON lacks a build tool (setuptools, packaging, wheel): python3 -m pip install setuptools packaging wheel"
command -v ninja >/dev/null \
    || fail "ninja not found (without it the build is serial and takes hours): python3 -m pip install ninja"
command -v "${CXX:-c++}" >/dev/null || fail "no C++ compiler (${CXX:-c++}): install g++ or set CXX"
command -v xz >/dev/null || fail "xz not found (it packs fa3_C.so.xz): install xz-utils"
[[ -n $SRC_DIR ]] || command -v git >/dev/null \
    || fail "git not found, needed to clone the sources: install git, or pass --src with sources unpacked"

d=$OUT_DIR; while [[ ! -d $d ]]; do d=$(dirname "$d"); done
FREE_GIB=$(df -Pk "$d" | awk 'NR == 2 { print int($4 / 1048576) }')
(( FREE_GIB >= NEED_GIB )) || fail "only $FREE_GIB GiB free under $d; the build needs about $NEED_GIB GiB: free some, or pick another --out"

# Parallelism: ninja runs MAX_JOBS nvcc processes of NVCC_THREADS threads each, several GiB apiece.
if [[ -z ${MAX_JOBS:-} ]]; then
    mem_gib=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo 2>/dev/null || echo 8)
    mem_gib=${mem_gib:-8}
    MAX_JOBS=$(nproc)
    (( MAX_JOBS <= mem_gib / 6 )) || MAX_JOBS=$(( mem_gib / 6 > 0 ? mem_gib / 6 : 1 ))
fi
NVCC_THREADS=${NVCC_THREADS:-4}

BUILD_ENV=()
for x in "${DISABLE[@]}"; do BUILD_ENV+=("FLASH_ATTENTION_DISABLE_$x=TRUE"); done
# OFFLINE: use this nvcc as it is; for CUDA 12.x (not 12.8) setup.py would otherwise download
# nvcc 12.6 and ptxas 12.8 (the GPU machines have no network).
BUILD_ENV+=(FLASH_ATTENTION_OFFLINE_BUILD=TRUE "MAX_JOBS=$MAX_JOBS" "NVCC_THREADS=$NVCC_THREADS" "CUDA_HOME=$CUDA_DIR")
BUILD_CMD=("$PYTHON" setup.py build_ext --inplace)

# ---- the plan
say "nvcc ${NVCC_BIN:-(none)}, CUDA ${CUDA_VER:-?}; torch ${TORCH_VER:-?} (CUDA ${TORCH_CUDA:-?}); GPUs visible: $NGPU; $FREE_GIB GiB free"
(( NGPU == 0 )) || say "GPU 0: ${GPU_NAME//_/ } (sm_$GPU_CC)"
(( NGPU > 0 )) || say "no GPU visible: the build is for sm_90 all the same; the import check is left out"
if [[ -n $SRC_DIR ]]; then
    say "sources: $SRC_DIR, copied into $STAGE"
else
    say "sources: clone $FA_REPO at $FA_COMMIT (+ csrc/cutlass) into $STAGE"
fi
say "build in $STAGE/hopper with:"
for e in "${BUILD_ENV[@]}"; do echo "    $e"; done
echo "    ${BUILD_CMD[*]}"
say "then: $OUT_DIR/flash_attn_interface.py, $OUT_DIR/flash_attn_3/ (_C.abi3.so), $OUT_DIR/fa3_C.so.xz"

if (( ${#ERRORS[@]} )); then
    for e in "${ERRORS[@]}"; do echo "build_fa3.sh: error: $e" >&2; done
    exit 1
fi
if (( DRY )); then say "dry run: all checks passed; nothing was built"; exit 0; fi

# ---- sources into OUT/src
mkdir -p "$STAGE"
if [[ -n $SRC_DIR ]]; then
    if [[ $(cd "$STAGE" && pwd -P) != $(cd "$SRC_DIR" && pwd -P) ]]; then
        mkdir -p "$STAGE/csrc/cutlass"
        cp -a "$SRC_DIR/hopper" "$STAGE/"
        cp -a "$SRC_DIR/csrc/cutlass/include" "$STAGE/csrc/cutlass/"
    fi
elif [[ $(git -C "$STAGE" rev-parse HEAD 2>/dev/null || true) != "$FA_COMMIT" ]]; then
    say "cloning flash-attention ${FA_COMMIT:0:8} and its cutlass submodule into $STAGE"
    git init -q "$STAGE"
    git -C "$STAGE" fetch -q --depth 1 "$FA_REPO" "$FA_COMMIT"
    git -C "$STAGE" -c advice.detachedHead=false checkout -q --force FETCH_HEAD
    git -C "$STAGE" submodule update -q --init --depth 1 csrc/cutlass
fi
for f in "${NEEDED[@]}"; do [[ -f $STAGE/$f ]] || die "$STAGE/$f is missing after staging the sources: remove $STAGE and run again"; done
[[ -f $STAGE/README.md ]] || : >"$STAGE/README.md"   # setup.py reads ../README.md
# With OFFLINE set, setup.py still points PYTORCH_NVCC at its download folder for CUDA 12.x
# (other than 12.8): put a forwarder to this nvcc there.
fwd=$STAGE/third_party/nvidia/backend/bin/nvcc
if [[ ! -e $fwd ]]; then
    mkdir -p "$(dirname "$fwd")"
    printf '#!/bin/sh\nexec "%s" "$@"\n' "$CUDA_DIR/bin/nvcc" >"$fwd"
    chmod +x "$fwd"
fi

# ---- build (the full log goes to OUT/build.log)
say "building (MAX_JOBS=$MAX_JOBS NVCC_THREADS=$NVCC_THREADS; a few minutes; log: $OUT_DIR/build.log)"
start=$SECONDS
if ! (cd "$STAGE/hopper" && env "${BUILD_ENV[@]}" "${BUILD_CMD[@]}") >"$OUT_DIR/build.log" 2>&1; then
    tail -n 30 "$OUT_DIR/build.log" >&2
    die "the build failed after $(( SECONDS - start )) s; the full log is $OUT_DIR/build.log"
fi
so=$(ls "$STAGE"/hopper/flash_attn_3/_C*.so 2>/dev/null | head -n1 || true)
[[ -n $so ]] || die "the build made no $STAGE/hopper/flash_attn_3/_C*.so; see $OUT_DIR/build.log"
say "built $(basename "$so") ($(du -h "$so" | cut -f1)) in $(( SECONDS - start )) s"

# ---- install: a folder ready for PYTHONPATH, and the library packed for other machines
rm -rf "$OUT_DIR/flash_attn_3"
mkdir -p "$OUT_DIR/flash_attn_3"
cp "$STAGE"/hopper/flash_attn_3/*.py "$so" "$OUT_DIR/flash_attn_3/"
cp "$STAGE/hopper/flash_attn_interface.py" "$OUT_DIR/"
[[ ! -f $STAGE/hopper/flash_attn_config.py ]] || cp "$STAGE/hopper/flash_attn_config.py" "$OUT_DIR/"
xz -T0 -c "$so" >"$OUT_DIR/fa3_C.so.xz"
say "installed into $OUT_DIR (fa3_C.so.xz: $(du -h "$OUT_DIR/fa3_C.so.xz" | cut -f1))"

say "to use it:"
echo "    export PYTHONPATH=$OUT_DIR:\$PYTHONPATH"
echo "    python3 -c 'import flash_attn_interface'"
if (( NGPU > 0 )); then
    say "checking: import, then a causal forward + backward against torch's SDPA"
    PYTHONPATH="$OUT_DIR${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c '
import torch, flash_attn_interface as fa
q, k, v = (torch.randn(2, 512, 4, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
out = fa.flash_attn_func(q, k, v, causal=True)
out = out[0] if isinstance(out, tuple) else out
ref = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True).transpose(1, 2)
out.float().square().sum().backward()
err = (out - ref).abs().max().item()
assert err < 3e-2 and q.grad is not None and q.grad.isfinite().all(), f"FA3 differs from SDPA by {err}"
print(f"build_fa3.sh: FA3 works: max |FA3 - SDPA| = {err:.1e}, backward ran")'
fi
