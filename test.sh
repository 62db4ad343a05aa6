#!/usr/bin/env bash
# The test suite: installs what is missing (tools/install.sh), then runs pytest, on tests/ unless paths are given.
#   ./test.sh                          # everything; without a GPU, Triton runs interpreted, GPU-only cases skip
#   ./test.sh tests/test_data.py -x    # arguments go to pytest
#   ./test.sh -n 8                     # with pytest-xdist (optional: python3 -m pip install pytest-xdist)
set -euo pipefail
cd "$(dirname "$0")"
tools/install.sh
paths=0
for arg in "$@"; do [[ $arg != -* && -e ${arg%%::*} ]] && paths=1; done
(( paths )) || set -- tests "$@"
exec python3 -m pytest -q "$@"
