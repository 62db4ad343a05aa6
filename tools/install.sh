#!/usr/bin/env bash
# Make sure a Python interpreter has what the project needs, installing what is missing.
#   tools/install.sh                  (run.sh and test.sh call it first)
#   tools/install.sh --print-python   the same, its messages on stderr; the interpreter on stdout
#   tools/install.sh --locked         CI: .venv/ made anew with exactly the lock's versions, checked after the install
# Two lists: requirements.txt, the version ranges the code supports, and the lock of this machine's toolchain,
# locks/cpu.txt (no NVIDIA GPU) or locks/gpu.txt: every package at the version the test suite last passed with.
# The interpreter: python3 when it is a virtual (or active conda) environment's or already meets every range, used
# as it is: what it lacks is installed at the lock's versions. Else the project's own .venv/ (`python3 -m venv .venv`,
# on first use; the case of a PEP 668 system Python such as Debian 12's), which holds exactly the lock. torch comes
# from the index the lock names (PyTorch's CPU or CUDA build; $TORCH_INDEX overrides it) when that answers, else from
# pip's default index. On a machine with an NVIDIA GPU a torch of another version is left alone, with what to do (its
# CUDA build must fit the driver).
# A failure ends in one line: what failed and the fix. Ctrl-C stops quietly.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'exit 130' INT

PRINT_PYTHON=0 LOCKED=0
for arg; do
    case $arg in
        --print-python) PRINT_PYTHON=1 ;;
        --locked) LOCKED=1 ;;
        *) echo "error: unknown argument $arg (usage: tools/install.sh [--print-python] [--locked])" >&2; exit 2 ;;
    esac
done
if (( PRINT_PYTHON )); then
    exec 3>&1 1>&2  # every message (pip's too) on stderr; only the interpreter's name on stdout
fi

say() { echo "tools/install.sh: $*"; }
fail() { echo "tools/install.sh: failed: $1; fix: $2" >&2; exit 1; }

# Reads requirements.txt and a lock, and prints, tab-separated: `env 0|1`, `python <description>`, `met <name version,
# ...>`, one `unmet <name> <requirement> <why> <pin>` line per unmet requirement (pin: the lock's `name==version`, else
# the requirement), and one `drift <name==version> <installed version or "not installed">` line per lock entry that
# is not installed at exactly its version (or `error <message>`). Ranges are compared as PEP 440 orders versions, for
# the specifiers requirements.txt uses (>=, <, ==); local labels (+cpu) are ignored and an installed pre-release meets
# a range only when it lies inside it (2.11.0a0 is below 2.11). A lock's versions are compared as written, labels too.
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


def normalized(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path):
    """{normalized name: (name, version)} of a lock's `name==version` lines; ValueError for another line."""
    pins = {}
    for line in open(path):
        line = line.split("#")[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
            if m is None:
                raise ValueError(f"{line!r} is not name==version")
            pins[normalized(m[1])] = m[1], m[2]
    return pins


def installed_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(path, lock_path):
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: quietly
    conda = os.environ.get("CONDA_PREFIX")  # an active conda environment: the user's choice too
    in_env = sys.prefix != sys.base_prefix or bool(conda) and os.path.realpath(conda) == os.path.realpath(sys.prefix)
    print(f"env\t{int(in_env)}")
    print(f"python\tPython {sys.version.split()[0]}, {sys.executable}")
    try:
        lock = read_lock(lock_path)
    except ValueError as e:
        print(f"error\t{lock_path}: {e}")
        return
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
        pin = "==".join(lock[normalized(name)]) if normalized(name) in lock else line
        installed = installed_version(name)
        if installed is None:
            unmet.append((name, line, f"{name} is not installed", pin))
        elif not meets(installed, specs):
            unmet.append((name, line, f"{name} {installed} is installed (needs {wanted})", pin))
        elif importlib.util.find_spec(name.replace("-", "_").lower()) is None:
            unmet.append((name, line, f"{name} {installed} has package data but no module {name.replace('-', '_').lower()}",
                          pin))
        else:
            met.append(f"{name} {installed}")
    print("met\t" + ", ".join(met))
    for fields in unmet:
        print("unmet\t" + "\t".join(fields))
    for name, version in lock.values():
        if (installed := installed_version(name)) != version:
            print(f"drift\t{name}=={version}\t{installed or 'not installed'}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
PY
)


command -v python3 >/dev/null || fail "no python3 on PATH" "install Python 3.10 or newer (e.g. apt install python3 python3-venv)"
LOCK=locks/cpu.txt GPU=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then LOCK=locks/gpu.txt GPU=1; fi
[[ -f $LOCK ]] || fail "$LOCK is missing" "restore it (git checkout -- $LOCK), then run this again"

# check: PY's report into IN_ENV, WHERE, MET, UNMET_NAMES, UNMET_WHY, UNMET_PINS, DRIFT (arrays) and TORCH_WHY.
check() {
    local out kind a b c d
    out=$("$PY" - requirements.txt "$LOCK" <<<"$CHECKER" 2>&1) || fail "$PY does not run ($(tail -n 1 <<<"$out"))" \
        "install Python 3.10 or newer, or make python3 name a working one"
    IN_ENV=0 WHERE=$PY MET= UNMET_NAMES=() UNMET_WHY=() UNMET_PINS=() DRIFT=() TORCH_WHY=
    while IFS=$'\t' read -r kind a b c d; do
        case $kind in
            env) IN_ENV=$a ;;
            python) WHERE=$a ;;
            met) MET=$a ;;
            unmet) UNMET_NAMES+=("$a"); UNMET_WHY+=("$c"); UNMET_PINS+=("$d"); if [[ $a == torch ]]; then TORCH_WHY=$c; fi ;;
            drift) DRIFT+=("$a ($b)") ;;
            error) fail "$a" "write that line as name>=x,<y or name==x (requirements.txt) or name==x (a lock)" ;;
        esac
    done <<<"$out"
}
joined() { local out=$1 x; shift; for x in "$@"; do out+="; $x"; done; echo "$out"; }
done_with() {
    if (( PRINT_PYTHON )); then echo "$PY" >&3; fi
    exit 0
}
shell_words() {  # "$@" as a command to paste: words with shell characters in single quotes
    local word out=()
    for word; do
        if [[ $word =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then out+=("$word"); else out+=("'${word//\'/\'\\\'\'}'"); fi
    done
    echo "${out[*]}"
}
PIP_FIX="fix what pip's message above names (the network, a proxy, disk space), then run this again"
# pip install "$@" into PY, with the lock's torch index when that answers (where it does not, pip would wait out
# every package's lookup there); pip's default index (or a local wheel) serves what it does not.
pip_install() {
    "$PY" -m pip --version >/dev/null 2>&1 || fail "$PY has no pip" "$PY -m ensurepip --upgrade, then run this again"
    local index=() url=${TORCH_INDEX:-$(sed -n 's/^# torch index: //p' "$LOCK")}
    if [[ -n $url ]]; then
        if "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/', timeout=5)" "$url" 2>/dev/null; then
            index=(--extra-index-url "$url")
        else
            say "torch's index ($url) is unreachable; trying pip's default index"
        fi
    fi
    say "$(shell_words "$PY" -m pip install "${index[@]}" "$@")"
    "$PY" -m pip install "${index[@]}" "$@" || fail "$(shell_words "$PY" -m pip install "$@")" "$PIP_FIX"
}

# The project's .venv/ as PY: made on first use, anew with --locked; then exactly the lock installed in it.
use_venv() {
    local out
    if (( LOCKED )) && [[ -e .venv ]]; then
        say "removing .venv/ to make it anew from $LOCK"
        rm -rf .venv
    fi
    if [[ -e .venv ]]; then
        [[ -x .venv/bin/python ]] && .venv/bin/python -c '' 2>/dev/null \
            || fail ".venv/ exists but .venv/bin/python does not run" "remove it (rm -rf .venv) and run this again"
    else
        say "creating .venv/ for $LOCK's versions (python3 -m venv .venv)"
        trap 'rm -rf .venv' EXIT  # no half-made .venv/ on a failure or Ctrl-C
        if ! out=$(python3 -m venv .venv 2>&1); then
            if [[ $out == *ensurepip* ]]; then
                fail "python3 -m venv .venv (python3 has no ensurepip)" \
                    "install Python's venv module (Debian/Ubuntu: sudo apt install python3-venv), or activate a virtual environment of your own, then run this again"
            fi
            fail "python3 -m venv .venv ($(tail -n 1 <<<"$out"))" \
                "activate a virtual environment of your own (python3 -m venv DIR; source DIR/bin/activate), then run this again"
        fi
        trap - EXIT
    fi
    PY=.venv/bin/python
    check
    if (( ${#DRIFT[@]} > 0 )); then
        say "$PY differs from $LOCK in ${#DRIFT[@]} package(s): $(joined "${DRIFT[@]:0:3}")${DRIFT[3]:+; ...}; installing the lock"
        pip_install -r "$LOCK"
        check
        (( ${#DRIFT[@]} == 0 )) || fail "after installing $LOCK, $PY still differs: $(joined "${DRIFT[@]}")" \
            "rm -rf .venv, then run this again"
    fi
    (( ${#UNMET_NAMES[@]} == 0 )) || fail "$LOCK does not meet requirements.txt: $(joined "${UNMET_WHY[@]}")" \
        "make $LOCK's versions meet requirements.txt's ranges"
    say "$PY holds $LOCK: $MET"
    done_with
}

if (( LOCKED )); then use_venv; fi
PY=python3
check
if (( ${#UNMET_NAMES[@]} == 0 )); then
    say "all requirements met (python3: $WHERE): $MET"
    done_with
fi
if (( ! IN_ENV )); then  # not an environment of the user's: leave it alone (pip would refuse on a PEP 668 Python)
    say "python3 ($WHERE) is no virtual environment's and does not meet: ${UNMET_NAMES[*]}"
    use_venv
fi

# The user's environment: what it lacks, at the lock's versions; its own torch build on a GPU machine is the user's.
say "$PY does not meet: $(joined "${UNMET_WHY[@]}"); installing"
if (( GPU )) && [[ -n $TORCH_WHY && $TORCH_WHY != *"not installed"* ]]; then
    fail "$TORCH_WHY, on a machine with an NVIDIA GPU" \
        "install a CUDA build of torch that fits its driver and requirements.txt's range (nvidia-smi shows the CUDA version the driver takes; $LOCK names the build the tests passed with), e.g. from https://pytorch.org/get-started/locally/, then run this again"
fi
pip_install "${UNMET_PINS[@]}"
check
if (( ${#UNMET_NAMES[@]} > 0 )); then
    fail "after installing, $PY still does not meet: $(joined "${UNMET_WHY[@]}")" \
        "$PY -m pip install --force-reinstall$(printf " '%s'" "${UNMET_PINS[@]}"), then run this again"
fi
say "done: $MET"
done_with
