#!/usr/bin/env bash
# The test suite: installs what is unmet (tools/install.sh; its interpreter, python3 or .venv/bin/python, runs the
# tests), then runs pytest, on tests/ unless paths are given.
#   ./test.sh                          # everything; without a GPU, Triton runs interpreted, GPU-only cases skip
#   ./test.sh tests/test_data.py -x    # arguments go to pytest
#   ./test.sh -n 8                     # with pytest-xdist (optional: python3 -m pip install pytest-xdist)
# A bad argument (a test file that is not there, an option pytest does not know) is one `error:` line; Ctrl-C
# stops with pytest's own short report.
set -euo pipefail
cd "$(dirname "$0")"
trap 'exit 130' INT

PY=$(tools/install.sh --print-python)

paths=0 prev=
for arg in "$@"; do
    if [[ $arg != -* && -e ${arg%%::*} ]]; then
        paths=1
    elif [[ $arg != -* && $prev != -* && ( $arg == */* || $arg == *.py || $arg == *::* ) ]]; then
        # a path, not an option's value: pytest would say so in two lines, after collecting nothing
        echo "error: no such test file or folder: ${arg%%::*} (./test.sh runs tests/ unless given paths)" >&2
        exit 4
    fi
    prev=$arg
done
(( paths )) || set -- tests "$@"

# pytest's stderr, with its usage error (the usage, the error, inifile, rootdir) as one `error:` line.
one_line_usage_errors() {
    trap '' INT  # Ctrl-C: pass on pytest's report to the end
    local line usage=0
    while IFS= read -r line || [[ -n $line ]]; do
        if [[ $line == "ERROR: usage: "* ]]; then
            usage=1
        elif [[ $line =~ ^(python\ -m\ pytest|[^\ ]+):\ error:\ (.*)$ ]]; then  # pytest 9.1 prints no usage line first
            usage=1
            echo "error: ${BASH_REMATCH[2]} (arguments go to pytest: $PY -m pytest --help lists them)"
        elif (( usage )) && [[ -z $line || $line == "  inifile:"* || $line == "  rootdir:"* ]]; then
            :
        elif [[ $line == "ERROR: file or directory not found: "* ]]; then
            echo "error: ${line#ERROR: }"
        else
            usage=0
            printf '%s\n' "$line"
        fi
    done
}
{ "$PY" -m pytest -q "$@" 2>&1 1>&3 3>&- | one_line_usage_errors >&2; } 3>&1
