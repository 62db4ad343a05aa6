#!/usr/bin/env bash
# Make sure a Python interpreter meets requirements.txt (each package installed, its version in range),
# installing what is unmet; with everything met it only says so.
#   tools/install.sh                  (run.sh and test.sh call it first)
#   tools/install.sh --print-python   the same, its messages on stderr; the interpreter on stdout
# The interpreter: python3 (on PATH) when it is a virtual environment's (or an active conda environment's) or
# already meets every requirement; else the repository's .venv/, created on first use with
# `python3 -m venv --system-site-packages .venv` (so a machine's own torch build is reused where it fits). That is
# the case on a PEP 668 system Python (Debian 12, Ubuntu 23.04+), where pip refuses to install into python3.
# torch, when unmet: on a machine without a working nvidia-smi, the CPU build from PyTorch's CPU index
# ($TORCH_CPU_INDEX, default below; else pip's default index, e.g. a local CPU wheel). With an NVIDIA GPU: when
# missing, PyPI's default (CUDA) build through requirements.txt; a torch of another version is left alone, with
# what to do (its CUDA build must fit the driver). Then the rest of requirements.txt.
# A failure ends in one line: what failed and the fix. Ctrl-C stops quietly.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'exit 130' INT

PRINT_PYTHON=0
if [[ ${1:-} == --print-python ]]; then
    PRINT_PYTHON=1
    exec 3>&1 1>&2  # every message (pip's too) on stderr; only the interpreter's name on stdout
elif [[ $# -gt 0 ]]; then
    echo "error: unknown argument $1 (usage: tools/install.sh [--print-python])" >&2
    exit 2
fi

say() { echo "tools/install.sh: $*"; }
fail() { echo "tools/install.sh: failed: $1; fix: $2" >&2; exit 1; }

# Reads requirements.txt and prints, tab-separated: `env 0|1`, `python <description>`, `met <name version, ...>`,
# then one `unmet <name> <requirement> <why>` line per unmet requirement (or `error <message>`). Versions are
# compared as PEP 440 orders them, for the specifiers requirements.txt uses (>=, <, ==); local labels (+cpu) are
# ignored and an installed pre-release meets a range only when it lies inside it (2.11.0a0 is below 2.11).
CHECKER=$(cat <<'PY'
import importlib.metadata
import importlib.util
import os
import re
import signal
import sys

VERSION = re.compile(r"v?(\d+(?:\.\d+)*)"
                     r"((?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?)"
                     r"((?:[-_.]?(?:post|rev|r)[-_.]?\d*|-\d+)?)"
                     r"((?:[-_.]?dev[-_.]?\d*)?)"
                     r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?", re.I)
REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)")
SPECIFIER = re.compile(r"(>=|<|==)\s*(\d+(?:\.\d+)*)")


def parse_version(text):
    """(release, rank) with rank -1 for a pre- or dev release, 0 final, 1 post; None if not a PEP 440 version."""
    m = VERSION.fullmatch(text.strip())
    if m is None:
        return None
    pre, post, dev = m[2], m[3], m[4]
    rank = -1 if pre or (dev and not post) else 1 if post else 0
    return tuple(int(x) for x in m[1].split(".")), rank


def parse_requirement(line):
    """'name>=1,<2' -> (name, [(op, release), ...]); ValueError for what this check does not handle."""
    m = REQUIREMENT.fullmatch(line.strip())
    if m is None:
        raise ValueError(f"{line.strip()!r} is not a name and version specifiers")
    specs = []
    for part in filter(None, (p.strip() for p in m[2].split(","))):
        s = SPECIFIER.fullmatch(part)
        if s is None:
            raise ValueError(f"{line.strip()!r}: {part!r} is not >=, < or == with a version of digits and dots")
        specs.append((s[1], tuple(int(x) for x in s[2].split("."))))
    return m[1], specs


def satisfies(version, op, target):
    (release, rank), n = version, max(len(version[0]), len(target))
    release, target = release + (0,) * (n - len(release)), target + (0,) * (n - len(target))
    if op == ">=":  # 2.11.0rc1 < 2.11 <= 2.11.post1
        return release > target or (release == target and rank >= 0)
    if op == "<":  # PEP 440: <2.14 excludes 2.14's pre-releases
        return release < target
    return release == target and rank == 0  # ==


def meets(installed, specs):
    version = parse_version(installed)
    return version is not None and all(satisfies(version, op, target) for op, target in specs)


def main(path):
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: quietly
    conda = os.environ.get("CONDA_PREFIX")  # an active conda environment: the user's choice too
    in_env = sys.prefix != sys.base_prefix or bool(conda) and os.path.realpath(conda) == os.path.realpath(sys.prefix)
    print(f"env\t{int(in_env)}")
    print(f"python\tPython {sys.version.split()[0]}, {sys.executable}")
    met, unmet = [], []
    for line in open(path):
        line = line.split("#")[0].strip()
        if not line:
            continue
        try:
            name, specs = parse_requirement(line)
        except ValueError as e:
            print(f"error\t{path}: {e}")
            return
        wanted = line.replace(" ", "")[len(name):]
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append((name, line, f"{name} is not installed"))
            continue
        if not meets(installed, specs):
            unmet.append((name, line, f"{name} {installed} is installed (needs {wanted})"))
        elif importlib.util.find_spec(name.replace("-", "_").lower()) is None:
            unmet.append((name, line, f"{name} {installed} has package data but no module {name.replace('-', '_').lower()}"))
        else:
            met.append(f"{name} {installed}")
    print("met\t" + ", ".join(met))
    for name, line, why in unmet:
        print(f"unmet\t{name}\t{line}\t{why}")


if __name__ == "__main__":
    main(sys.argv[1])
PY
)

# check: PY's report into IN_ENV, WHERE, MET, UNMET_NAMES, UNMET_REQS, UNMET_WHY (arrays) and TORCH_WHY.
check() {
    local out kind a b c
    out=$("$PY" - requirements.txt <<<"$CHECKER" 2>&1) || fail "$PY does not run ($(tail -n 1 <<<"$out"))" \
        "install Python 3.10 or newer, or make python3 name a working one"
    IN_ENV=0 WHERE=$PY MET= UNMET_NAMES=() UNMET_REQS=() UNMET_WHY=() TORCH_WHY=
    while IFS=$'\t' read -r kind a b c; do
        case $kind in
            env) IN_ENV=$a ;;
            python) WHERE=$a ;;
            met) MET=$a ;;
            unmet) UNMET_NAMES+=("$a"); UNMET_REQS+=("$b"); UNMET_WHY+=("$c"); if [[ $a == torch ]]; then TORCH_WHY=$c; fi ;;
            error) fail "$a" "write that line as name>=x,<y or name==x" ;;
        esac
    done <<<"$out"
}
joined() { local out=$1 x; shift; for x in "$@"; do out+="; $x"; done; echo "$out"; }
done_with() {
    if (( PRINT_PYTHON )); then echo "$PY" >&3; fi
    exit 0
}

command -v python3 >/dev/null || fail "no python3 on PATH" "install Python 3.10 or newer (e.g. apt install python3 python3-venv)"
PY=python3
check
if (( ${#UNMET_NAMES[@]} == 0 )); then
    say "all requirements met (python3: $WHERE): $MET"
    done_with
fi

if (( ! IN_ENV )); then
    # Not an environment of the user's: leave it alone (on a PEP 668 Python pip would refuse anyway) and use .venv/.
    if [[ -e .venv ]]; then
        [[ -x .venv/bin/python ]] && .venv/bin/python -c '' 2>/dev/null \
            || fail ".venv/ exists but .venv/bin/python does not run" "remove it (rm -rf .venv) and run this again"
    else
        say "python3 ($WHERE) is no virtual environment's and does not meet: ${UNMET_NAMES[*]}; creating .venv/ to install into (python3 -m venv --system-site-packages .venv)"
        trap 'rm -rf .venv' EXIT  # no half-made .venv/ on a failure or Ctrl-C
        if ! out=$(python3 -m venv --system-site-packages .venv 2>&1); then
            if [[ $out == *ensurepip* ]]; then
                fail "python3 -m venv --system-site-packages .venv (python3 has no ensurepip)" \
                    "install Python's venv module (Debian/Ubuntu: sudo apt install python3-venv), or activate a virtual environment of your own, then run this again"
            fi
            fail "python3 -m venv --system-site-packages .venv ($(tail -n 1 <<<"$out"))" \
                "activate a virtual environment of your own (python3 -m venv DIR; source DIR/bin/activate), then run this again"
        fi
        trap - EXIT
    fi
    PY=.venv/bin/python
    check
    if (( ${#UNMET_NAMES[@]} == 0 )); then
        say "all requirements met (.venv/bin/python: $WHERE): $MET"
        done_with
    fi
fi

say "$PY does not meet: $(joined "${UNMET_WHY[@]}"); installing"
"$PY" -m pip --version >/dev/null 2>&1 || fail "$PY has no pip" "$PY -m ensurepip --upgrade, then run this again"

shell_words() {  # "$@" as a command to paste: words with shell characters in single quotes
    local word out=()
    for word; do
        if [[ $word =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then out+=("$word"); else out+=("'${word//\'/\'\\\'\'}'"); fi
    done
    echo "${out[*]}"
}
pip_install() {
    say "$(shell_words "$PY" -m pip install "$@")"
    "$PY" -m pip install "$@"
}
PIP_FIX="fix what pip's message above names (the network, a proxy, disk space), then run this again"

TORCH=$(grep -E '^torch[<>=]' requirements.txt | sed 's/#.*//; s/[[:space:]]//g' || true)
CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
if [[ -n $TORCH_WHY ]]; then
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
        if [[ $TORCH_WHY != *"not installed"* ]]; then  # a CUDA build that fits this machine's driver: the user's call
            fail "$TORCH_WHY, on a machine with an NVIDIA GPU" \
                "install a CUDA build of '$TORCH' that fits its driver (nvidia-smi shows the CUDA version it takes), e.g. $PY -m pip install '$TORCH' (PyPI's CUDA build) or from https://pytorch.org/get-started/locally/, then run this again"
        fi
    else
        say "no NVIDIA GPU: installing the CPU build of torch"
        # Probe the CPU index first: where it is unreachable, pip would wait out every dependency's lookup.
        if "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/', timeout=5)" "$CPU_INDEX" 2>/dev/null \
            && pip_install --index-url "$CPU_INDEX" --timeout 15 --retries 1 "$TORCH"; then :
        else
            say "PyTorch's CPU index ($CPU_INDEX) failed or is unreachable; trying pip's default index"
            pip_install "$TORCH" || fail "$(shell_words "$PY" -m pip install "$TORCH")" "$PIP_FIX"
        fi
    fi
fi
pip_install -r requirements.txt || fail "$PY -m pip install -r requirements.txt" "$PIP_FIX"
check
if (( ${#UNMET_NAMES[@]} > 0 )); then
    fail "after installing, $PY still does not meet: $(joined "${UNMET_WHY[@]}")" \
        "$PY -m pip install --force-reinstall$(printf " '%s'" "${UNMET_REQS[@]}"), then run this again"
fi
say "done: $MET"
done_with
