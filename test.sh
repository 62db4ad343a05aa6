#!/usr/bin/env bash
# The test suite: installs what is unmet (tools/install.sh; its interpreter, python3 or .venv/bin/python, runs the
# tests), then runs pytest, on tests/ unless paths are given.
#   ./test.sh                          # everything; without a GPU, Triton runs interpreted, GPU-only cases skip
#   ./test.sh tests/test_data.py -x    # arguments go to pytest
#   ./test.sh -n 8                     # with pytest-xdist (optional: python3 -m pip install pytest-xdist)
set -euo pipefail
cd "$(dirname "$0")"
PY=$(tools/install.sh --print-python)
paths=0
for arg in "$@"; do [[ $arg != -* && -e ${arg%%::*} ]] && paths=1; done
(( paths )) || set -- tests "$@"
exec "$PY" -m pytest -q "$@"
