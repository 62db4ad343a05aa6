#!/usr/bin/env bash
# The test suite: installs what is unmet (tools/install.sh; its interpreter, python3 or .venv/bin/python, runs the
# tests), then runs pytest, on tests/ unless paths are given.
#   ./test.sh                          # everything; without a GPU, Triton runs interpreted, GPU-only cases skip
#   ./test.sh tests/test_data.py -x    # arguments go to pytest
#   ./test.sh -n 8                     # with pytest-xdist (optional: python3 -m pip install pytest-xdist)
# A bad argument (a test file or test that is not there, a file that holds no tests, an option pytest does not
# know) is one `error:` line; Ctrl-C stops with pytest's own short report.
set -euo pipefail
cd "$(dirname "$0")"
trap 'exit 130' INT

PY=$(tools/install.sh --print-python)

# A path (not an option's value) that names no test: pytest would say so in two lines, after collecting nothing.
refuse() {  # WHAT PATH: one line, the path as the shell would read it back (a newline in it shows as \n)
    local shown=$2
    [[ $shown == *[[:cntrl:]]* ]] && shown=$(printf '%q' "$2")
    echo "error: $1: $shown (./test.sh runs tests/ unless given paths: test files, folders, file.py::test_name)" >&2
    exit 4
}
paths=0 prev=
for arg in "$@"; do
    file=${arg%%::*} node=${arg#*::} && node=${node%%::*} && node=${node%%\[*}  # a function or class name
    if [[ $arg != -* && -e $file ]]; then
        [[ -d $file || $file == *.py ]] || refuse "not a test file or folder" "$arg"
        # the test a node id names is a function or class at the top of its file (or a class's method: its class)
        [[ $arg != *::* ]] || grep -qE "^(async def|def|class) $node\b" "$file" ||
            refuse "no such test" "$arg"
        paths=1
    elif [[ $arg != -* && $prev != -* && ( $arg == */* || $arg == *.py || $arg == *::* ) ]]; then
        refuse "no such test file or folder" "$file"
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
        elif [[ $line == "ERROR: not found: "* ]]; then  # a test id of no test (e.g. a parameter's): then its "(no match in"
            usage=1
            echo "error: no such test: ${line#ERROR: not found: }"
        elif (( usage )) && [[ $line == "(no match in any of "* ]]; then
            :
        else
            usage=0
            printf '%s\n' "$line"
        fi
    done
}
{ "$PY" -m pytest -q "$@" 2>&1 1>&3 3>&- | one_line_usage_errors >&2; } 3>&1
