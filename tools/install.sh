#!/usr/bin/env bash
# Install what is missing of requirements.txt for python3; with everything importable it only says so.
#   tools/install.sh            (run.sh and test.sh call it first)
# torch, when missing: on a machine without a working nvidia-smi, the CPU build from PyTorch's CPU
# index (else pip's default index, e.g. a local CPU wheel); with an NVIDIA GPU, PyPI's default (CUDA)
# build through requirements.txt. Then the rest of requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

MODULES=(torch triton numpy tiktoken huggingface_hub pytest matplotlib)  # the requirements.txt set
missing=$(python3 - "${MODULES[@]}" <<'PY'
import importlib, sys
missing = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        missing.append(name)
print(" ".join(missing))
PY
) || { echo "tools/install.sh: python3 does not run" >&2; exit 1; }
if [[ -z $missing ]]; then
    echo "tools/install.sh: all requirements installed (${MODULES[*]})"
    exit 0
fi
echo "tools/install.sh: missing: $missing; installing"

pip_install() {
    echo "tools/install.sh: python3 -m pip install $*"
    python3 -m pip install "$@"
}
fail() { echo "tools/install.sh: failed: python3 -m pip install $*" >&2; exit 1; }

TORCH='torch>=2.11,<2.14'  # as in requirements.txt
CPU_INDEX=https://download.pytorch.org/whl/cpu
if [[ " $missing " == *" torch "* ]] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
    echo "tools/install.sh: no NVIDIA GPU: installing the CPU build of torch"
    # Probe the CPU index first: where it is unreachable, pip would wait out every dependency's lookup.
    if python3 -c "import urllib.request; urllib.request.urlopen('$CPU_INDEX/', timeout=5)" 2>/dev/null \
        && pip_install --index-url "$CPU_INDEX" --timeout 15 --retries 1 "$TORCH"; then :
    else
        echo "tools/install.sh: PyTorch's CPU index ($CPU_INDEX) failed or is unreachable; trying pip's default index"
        pip_install "$TORCH" || fail "$TORCH"
    fi
fi
pip_install -r requirements.txt || fail -r requirements.txt
echo "tools/install.sh: done"
