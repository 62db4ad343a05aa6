"""tools/install.sh, run.sh and test.sh on the CPU, in seconds: nothing is downloaded, installed or trained.

python3 on PATH is a stub (`shim`): this interpreter, except that `-m pip` and `-m venv` are logged and faked
(pip fails with exit 97 unless the test gives it a command that plays the install), nvidia-smi fails unless the test
makes it list a GPU, and torch's index is a closed local port. It runs as no virtual environment's
(this interpreter's base with its packages on PYTHONPATH, like a system Python) or as one's (a real venv made
without pip). Requirements a test needs unmet are fake package metadata on PYTHONPATH (an old torch) or a package
the stub pip "installs" into .venv/; the scripts' copy has its own locks, which pin that package (STUB_LOCK). run.sh's steps are checked in a copy of the scripts with stub train_gpt.py /
data scripts, mostly in its dry run (RUN_SH_DRY_RUN=1), and against the real train_gpt.py's --check.
Also: tools/ab_runs.sh's usage, bad input, dry runs and clock sampler; every relative link in README.md, docs/*.md,
records/**/README.md and experiments/**/README.md resolves, and every flag README.md and docs/ name is a setting of
train_gpt.py or an option of the program it is given to.

    python3 -m pytest -q tests/test_scripts.py
"""
import ast
import contextlib
import json
import lzma
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.utils import REPO

ALL_MET = "tools/install.sh: all requirements met (python3: "
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable) if sys.prefix != sys.base_prefix else sys.executable
SITE = os.pathsep.join([*site.getsitepackages(), site.getusersitepackages()])

SHIM = """\
#!/bin/sh
# python3 stub: logs each call; fakes pip and venv; else runs TARGET with this interpreter's packages
printf '%s\n' "$(printf '%s' "$0 $*" | tr '\n' ' ')" >> "$STUB_LOG"
case "$0" in
    *.venv/bin/python) extra="$(dirname "$0")/../site:"; venv=1 ;;
    *) extra=""; venv=0 ;;
esac
if [ "$1" = -m ] && [ "$2" = pip ]; then
    [ "$3" = --version ] && exit 0
    if [ "$venv" = 0 ] && [ -n "$STUB_EXTERNALLY_MANAGED" ]; then
        echo "error: externally-managed-environment" >&2; exit 1
    fi
    if [ -n "$STUB_PIP" ]; then sh -c "$STUB_PIP"; exit $?; fi
    echo "shim: pip called: $*" >&2; exit 97
fi
if [ "$1" = -m ] && [ "$2" = venv ]; then
    for dest; do :; done
    mkdir -p "$dest/bin" "$dest/site"
    if [ -n "$STUB_VENV_FAILS" ]; then
        echo "The virtual environment was not successfully created because ensurepip is not available."; exit 1
    fi
    cp "$0" "$dest/bin/python"; exit 0
fi
if [ "$1" = -c ] && [ -n "$STUB_NGPU" ]; then
    case "$2" in *device_count*) echo "$STUB_NGPU"; exit 0 ;; esac
fi
PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$extra@SITE@" exec @TARGET@ "$@"
"""


@pytest.fixture(scope="session")
def active_venv(tmp_path_factory):
    """A real virtual environment (no pip: made in a fraction of a second) of this interpreter's base."""
    env = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", "--system-site-packages", str(env)], check=True)
    return env / "bin" / "python"


@pytest.fixture
def shim(tmp_path, request, active_venv):
    """PATH entries: python3 (the stub; a virtual environment's with @pytest.mark.parametrize('shim', ['venv'],
    indirect=True), else no environment's) and nvidia-smi, which fails unless STUB_GPU is set."""
    in_venv = getattr(request, "param", None) == "venv"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    target = active_venv if in_venv else BASE_PYTHON
    (bin_dir / "python3").write_text(SHIM.replace("@SITE@", SITE).replace("@TARGET@", str(target)))
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\n[ -n "$STUB_GPU" ] && { echo "GPU 0: NVIDIA H100"; exit 0; }\nexit 9\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def errors(stderr):
    """stderr without install.sh's line when all is met (run.sh and test.sh show it there)."""
    return [line for line in stderr.splitlines() if not line.startswith("tools/install.sh: all requirements met (")]


def stub_env(shim, **env):
    """The environment of a script under test: the stubs first on PATH, no active environment, no GPU."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH")}
    full_env.update({"PATH": f"{shim}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "", "STUB_LOG": str(shim / "log"),
                     "TORCH_INDEX": "http://127.0.0.1:9/whl/cpu", "no_proxy": "*", **env})
    return full_env


def run(cmd, cwd, shim, timeout=120, **env):
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=stub_env(shim, **env), capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - start


def calls(shim, what="-m "):
    """The stub interpreters' logged calls that contain `what` (pip and venv by default)."""
    log = shim / "log"
    lines = log.read_text().replace(f"{shim}/", "").splitlines() if log.exists() else []
    return [line for line in lines if what in line]


def fake_dist(where: Path, name: str, version: str, module=False):
    """Package metadata (and optionally a module) that importlib.metadata finds first on PYTHONPATH."""
    info = where / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if module:
        (where / f"{name}.py").write_text("")
    return info


STUB_TRAIN = """\
import json, os, signal, sys, time
from pathlib import Path


def main():
    if "--help" in sys.argv:
        print("stub help"); sys.exit(0)
    if sys.argv[1:2] == ["--check"]:
        Path("check_args.json").write_text(json.dumps(sys.argv[1:]))
        Path("check_omp_wait_policy").write_text(os.environ.get("OMP_WAIT_POLICY", "unset"))
        if "--bad" in sys.argv:
            print("error: --bad is bad", file=sys.stderr); sys.exit(2)
        print("settings OK"); sys.exit(0)
    mode = os.environ.get("STUB_TRAIN", "")
    rank, failing = int(os.environ.get("RANK", 0)), int(os.environ.get("RANK", 1)) == 1  # one process, or rank 1 of two
    if mode == "fail" and failing:  # a launch-time error, as train_gpt.py reports one
        sys.exit(f"error: no train shards match 'x_*.bin' (rank {rank})")
    if mode == "crash" and failing:
        raise ValueError("a real crash")
    if mode in ("fail", "crash", "wait"):  # the others: until a signal (each is counted)
        got = []
        signal.signal(signal.SIGINT, lambda s, f: got.append(s))
        signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
        Path(f"started_{rank}").touch()
        end = time.monotonic() + 60
        while not got and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.5)  # a second signal would arrive by now
        if mode == "wait":
            sys.stderr.write(f"rank {rank} stopped by {len(got)} signal(s)\\n")  # one write, as harness/cli.stderr_line
        sys.exit(1)
    sys.exit("stub train_gpt.py: started without --check")


if __name__ == "__main__":
    main()
"""
STUB_FIT = """\
import json, sys
from pathlib import Path
Path("fit_args.json").write_text(json.dumps(sys.argv[1:]))  # run.sh's plan on your shards: its arguments kept
if "--short" in sys.argv:
    sys.exit("error: the 1 train shard(s) cover 2 of the schedule's 64 steps")
print("42 scheduled steps (+ 4; 100 asked) fit the train shards: stub")
"""
STUB_DATA = "from pathlib import Path\nPath('data/{0}').mkdir(parents=True)\nprint('stub {0}')\n"
STUB_SLOW_DATA = "import time\nfrom pathlib import Path\nPath('started').touch()\ntime.sleep(60)\n"


@pytest.fixture
def repo_copy(tmp_path):
    """run.sh, test.sh, tools/install.sh and requirements.txt with stub train_gpt.py, tools/fit_schedule.py and data
    scripts."""
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    (root / "data").mkdir()
    for rel in ("run.sh", "test.sh", "tools/install.sh", "requirements.txt"):
        shutil.copy2(REPO / rel, root / rel)
    write_locks(root, "stubpkg==1.0")
    (root / "train_gpt.py").write_text(STUB_TRAIN)
    (root / "tools" / "fit_schedule.py").write_text(STUB_FIT)
    (root / "data" / "synthetic.py").write_text(STUB_DATA.format("synthetic"))
    (root / "data" / "download.py").write_text(STUB_DATA.format("fineweb10B"))
    return root


STUB_LOCK = "# torch index: http://127.0.0.1:9/whl/never-read\n"  # TORCH_INDEX overrides it


def write_locks(root, *pins):
    (root / "locks").mkdir(exist_ok=True)
    for name in ("cpu.txt", "gpu.txt"):
        (root / "locks" / name).write_text(STUB_LOCK + "".join(f"{pin}\n" for pin in pins))


def add_requirement(root, line):
    with open(root / "requirements.txt", "a") as f:
        f.write(line + "\n")


# tools/install.sh


def test_install_all_met_is_quick_and_calls_no_pip(repo_copy, shim):
    proc, seconds = run(["tools/install.sh"], repo_copy, shim)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(ALL_MET) and "torch " in proc.stdout and proc.stderr == ""
    assert calls(shim) == [] and not (repo_copy / ".venv").exists()
    assert seconds < 20
    proc, _ = run(["tools/install.sh", "--print-python"], repo_copy, shim)
    assert proc.stdout == "python3\n" and proc.stderr.startswith(ALL_MET)


# The stub pip's install of stubpkg 1.0: into .venv/site, which only .venv/bin/python sees.
INSTALL_STUBPKG = ("mkdir -p .venv/site/stubpkg-1.0.dist-info && touch .venv/site/stubpkg.py && "
                   "printf 'Metadata-Version: 2.1\\nName: stubpkg\\nVersion: 1.0\\n' > .venv/site/stubpkg-1.0.dist-info/METADATA")


def test_install_externally_managed_python_gets_a_venv_with_the_lock(repo_copy, shim):
    """A system Python (no virtual environment's; pip refuses, PEP 668) that lacks a requirement: .venv/ is made
    and the lock installed into it, once; later runs use it; python3's pip is never asked."""
    add_requirement(repo_copy, "stubpkg==1.0")
    env = dict(STUB_EXTERNALLY_MANAGED="1", STUB_PIP=INSTALL_STUBPKG)
    proc, _ = run(["tools/install.sh", "--print-python"], repo_copy, shim, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ".venv/bin/python\n"
    assert "is no virtual environment's and does not meet: stubpkg" in proc.stderr
    assert "creating .venv/ for locks/cpu.txt's versions (python3 -m venv .venv)" in proc.stderr
    assert ".venv/bin/python differs from locks/cpu.txt in 1 package(s): stubpkg==1.0 (not installed)" in proc.stderr
    assert calls(shim) == ["python3 -m venv .venv", ".venv/bin/python -m pip --version",
                           ".venv/bin/python -m pip install -r locks/cpu.txt"]
    assert proc.stderr.strip().splitlines()[-1].startswith("tools/install.sh: .venv/bin/python holds locks/cpu.txt: ")
    (shim / "log").unlink()
    proc, _ = run(["tools/install.sh"], repo_copy, shim, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("tools/install.sh: .venv/bin/python holds locks/cpu.txt: ")
    assert "stubpkg 1.0" in proc.stdout and calls(shim) == []


def test_install_venv_that_drifted_from_the_lock_gets_the_lock_again(repo_copy, shim):
    """A .venv/ whose versions are not the lock's (an older install, a hand-made change) is brought back to it."""
    add_requirement(repo_copy, "stubpkg>=0.9")
    env = dict(STUB_EXTERNALLY_MANAGED="1", STUB_PIP=f"rm -rf .venv/site/stubpkg-0.9.dist-info && {INSTALL_STUBPKG}")
    run(["tools/install.sh"], repo_copy, shim, STUB_EXTERNALLY_MANAGED="1", STUB_PIP=INSTALL_STUBPKG)
    shutil.rmtree(repo_copy / ".venv" / "site" / "stubpkg-1.0.dist-info")
    fake_dist(repo_copy / ".venv" / "site", "stubpkg", "0.9")
    (shim / "log").unlink()
    proc, _ = run(["tools/install.sh"], repo_copy, shim, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "differs from locks/cpu.txt in 1 package(s): stubpkg==1.0 (0.9); installing the lock" in proc.stdout
    assert calls(shim, "install") == [".venv/bin/python -m pip install -r locks/cpu.txt"]


def test_install_locked_makes_the_venv_anew_and_fails_on_any_other_version(repo_copy, shim):
    """--locked (CI): .venv/ made anew, whatever it held, the lock installed; a version pip did not deliver fails."""
    (repo_copy / ".venv" / "bin").mkdir(parents=True)
    (repo_copy / ".venv" / "left_over").touch()
    proc, _ = run(["tools/install.sh", "--locked"], repo_copy, shim, STUB_PIP=INSTALL_STUBPKG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "removing .venv/ to make it anew from locks/cpu.txt" in proc.stdout
    assert not (repo_copy / ".venv" / "left_over").exists()
    assert calls(shim) == ["python3 -m venv .venv", ".venv/bin/python -m pip --version",
                           ".venv/bin/python -m pip install -r locks/cpu.txt"]
    assert proc.stdout.strip().splitlines()[-1].startswith("tools/install.sh: .venv/bin/python holds locks/cpu.txt: ")
    proc, _ = run(["tools/install.sh", "--locked"], repo_copy, shim, STUB_PIP="true")  # pip "succeeds", installs nothing
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "tools/install.sh: failed: after installing locks/cpu.txt, .venv/bin/python still differs: stubpkg==1.0 "
        "(not installed); fix: rm -rf .venv, then run this again"]


def test_install_on_a_gpu_machine_takes_the_gpu_lock(repo_copy, shim):
    write_locks(repo_copy)  # empty locks ...
    (repo_copy / "locks" / "gpu.txt").write_text("stubpkg==1.0\n")  # ... but the GPU's
    add_requirement(repo_copy, "stubpkg==1.0")
    proc, _ = run(["tools/install.sh"], repo_copy, shim, STUB_GPU="1", STUB_PIP=INSTALL_STUBPKG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls(shim, "install") == [".venv/bin/python -m pip install -r locks/gpu.txt"]
    assert proc.stdout.strip().splitlines()[-1].startswith("tools/install.sh: .venv/bin/python holds locks/gpu.txt: ")


def test_install_venv_that_cannot_be_made_is_one_line_and_leaves_none(repo_copy, shim):
    add_requirement(repo_copy, "stubpkg==1.0")
    proc, _ = run(["tools/install.sh"], repo_copy, shim, STUB_VENV_FAILS="1")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "tools/install.sh: failed: python3 -m venv .venv (python3 has no ensurepip); fix: install "
        "Python's venv module (Debian/Ubuntu: sudo apt install python3-venv), or activate a virtual environment of "
        "your own, then run this again"]
    assert not (repo_copy / ".venv").exists()


@pytest.mark.parametrize("shim", ["venv"], indirect=True)
def test_install_into_an_active_venv_takes_the_locked_version_and_names_a_failed_command(repo_copy, shim):
    add_requirement(repo_copy, "stubpkg>=0.5")
    proc, _ = run(["tools/install.sh"], repo_copy, shim)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "python3 does not meet: stubpkg is not installed; installing" in proc.stdout
    assert "torch's index (http://127.0.0.1:9/whl/cpu) is unreachable; trying pip's default index" in proc.stdout
    assert calls(shim) == ["python3 -m pip --version", "python3 -m pip install stubpkg==1.0"]
    assert proc.stderr.strip().splitlines()[-1] == (
        "tools/install.sh: failed: python3 -m pip install stubpkg==1.0; fix: fix what pip's message above "
        "names (the network, a proxy, disk space), then run this again")
    assert not (repo_copy / ".venv").exists()


@pytest.mark.parametrize("shim", ["venv"], indirect=True)
def test_install_upgrades_an_older_torch_with_the_locked_cpu_build(repo_copy, shim, tmp_path):
    """An environment of the user's with an older torch: only torch is installed, at the lock's version."""
    old = tmp_path / "old"
    fake_dist(old, "torch", "2.10.0")
    write_locks(repo_copy, "torch==2.13.0+cpu", "stubpkg==1.0")
    proc, _ = run(["tools/install.sh"], repo_copy, shim, PYTHONPATH=str(old), STUB_PIP=f"rm -rf {old}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "python3 does not meet: torch 2.10.0 is installed (needs >=2.11,<2.14); installing" in out
    assert "trying pip's default index" in out  # the index: a closed port
    assert calls(shim, "install") == ["python3 -m pip install torch==2.13.0+cpu"]
    assert out.strip().splitlines()[-1].startswith("tools/install.sh: done: torch ")


@pytest.mark.parametrize("shim", ["venv"], indirect=True)
def test_install_older_torch_on_a_gpu_machine_says_what_to_do(repo_copy, shim, tmp_path):
    old = tmp_path / "old"
    fake_dist(old, "torch", "2.9.1+cu126")
    proc, _ = run(["tools/install.sh"], repo_copy, shim, PYTHONPATH=str(old), STUB_GPU="1")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "tools/install.sh: failed: torch 2.9.1+cu126 is installed (needs >=2.11,<2.14), on a machine with an NVIDIA GPU; "
        "fix: install a CUDA build of torch that fits its driver and requirements.txt's range (nvidia-smi shows the "
        "CUDA version the driver takes; locks/gpu.txt names the build the tests passed with), e.g. from "
        "https://pytorch.org/get-started/locally/, then run this again"]
    assert calls(shim, "install") == []


def test_install_a_missing_lock_is_one_line(repo_copy, shim):
    (repo_copy / "locks" / "cpu.txt").unlink()
    proc, _ = run(["tools/install.sh"], repo_copy, shim)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "tools/install.sh: failed: locks/cpu.txt is missing; fix: restore it (git checkout -- locks/cpu.txt), then "
        "run this again"]


@pytest.fixture(scope="module")
def checker():
    """install.sh's requirement check (its Python program), loaded as a module."""
    text = (REPO / "tools" / "install.sh").read_text()
    source = re.search(r"CHECKER=\$\(cat <<'PY'\n(.*?)\nPY\n\)", text, re.S)[1]
    module = {"__name__": "checker"}
    exec(compile(source, "install.sh:CHECKER", "exec"), module)
    return module


@pytest.mark.parametrize("installed, requirement, ok", [
    ("2.13.0+cpu", "torch>=2.11,<2.14", True),
    ("2.11", "torch>=2.11,<2.14", True),
    ("2.11.0.post1", "torch>=2.11,<2.14", True),
    ("2.12.0a0+git1234", "torch>=2.11,<2.14", True),  # an installed pre-release inside the range
    ("2.11.0a0+ecf3bae", "torch>=2.11,<2.14", False),  # below 2.11 (PEP 440), e.g. a vendor's early build
    ("2.10.2", "torch>=2.11,<2.14", False),
    ("2.14.0", "torch>=2.11,<2.14", False),
    ("2.14.0rc1", "torch>=2.11,<2.14", False),  # <2.14 excludes its pre-releases
    ("3.0.0.dev0", "numpy>=1.26,<3", False),
    ("1.26.4", "numpy>=1.26,<3", True),
    ("0.6.0", "tiktoken>=0.7,<1", False),
    ("2.13.0+cpu", "torch==2.13.0", True),
    ("2.13", "torch==2.13.0", True),
    ("2.13.0.post1", "torch==2.13.0", False),
    ("2.13.1", "torch==2.13", False),
    ("not-a-version", "torch>=2.11", False),
])
def test_install_version_ranges(checker, installed, requirement, ok):
    name, specs = checker["parse_requirement"](requirement)
    assert name == requirement.split("=")[0].split(">")[0].split("<")[0]
    assert checker["meets"](installed, specs) is ok


def test_install_reads_every_line_of_requirements_txt(checker):
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, specs = checker["parse_requirement"](line)
            assert specs, line  # every requirement has a version range


@pytest.mark.parametrize("lock", ["cpu.txt", "gpu.txt"])
def test_each_lock_pins_every_requirement_inside_its_range(checker, lock):
    pins = checker["read_lock"](REPO / "locks" / lock)
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if line := line.split("#")[0].strip():
            name, specs = checker["parse_requirement"](line)
            assert checker["normalized"](name) in pins, f"{lock} does not pin {name}"
            assert checker["meets"](pins[checker["normalized"](name)][1], specs), f"{lock}: {name} outside {line}"


@pytest.mark.parametrize("line", ["foo~=1.0", "foo>=1; python_version < '3.12'", "foo[extra]>=1", "foo>=1.0b1"])
def test_install_refuses_a_specifier_it_does_not_check(checker, line):
    with pytest.raises(ValueError):
        checker["parse_requirement"](line)


# run.sh


def launched(out):
    """The training command run.sh printed (its dry run starts nothing), as the shell reads it back."""
    lines = [line for line in out.splitlines() if line.startswith("run.sh: ") and "train_gpt.py" in line]
    assert len(lines) == 1, out
    assert "dry run (RUN_SH_DRY_RUN=1): not started" in out
    return shell_words(lines[0].removeprefix("run.sh: "))


def train_args(argv):
    """train_gpt.py's arguments in a launch command."""
    return argv[argv.index("train_gpt.py") + 1:]


def shell_words(line, cwd=None):
    """The words bash makes of `line` (as when it is pasted), with nothing run: `set --` only assigns them."""
    proc = subprocess.run(["bash", "-c", f"set -- {line}\nprintf '%s\\0' \"$@\""], cwd=cwd, capture_output=True,
                          text=True, check=True)
    return proc.stdout.split("\0")[:-1]


def test_run_sh_cpu_demo_plans_synthetic_data(repo_copy, shim):
    proc, _ = run(["./run.sh", "--val_every", "5"], repo_copy, shim, RUN_SH_DRY_RUN="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "no GPU; tiny CPU demo on synthetic data in data/synthetic/" in out
    assert (repo_copy / "data" / "synthetic").is_dir() and not (repo_copy / "data" / "fineweb10B").exists()
    argv = launched(out)
    assert argv[:2] == ["python3", "train_gpt.py"]  # one process: no torchrun
    assert argv[-2:] == ["--val_every", "5"]  # the user's flags last: they win
    line = " ".join(argv)
    assert "--vocab_size 256 --bos_id 255" in line and "--train_files data/synthetic/synthetic_train_*.bin" in line
    assert json.loads((repo_copy / "check_args.json").read_text()) == ["--check"] + train_args(argv)


@pytest.mark.parametrize("gpus, env, policy", [("0", {}, "PASSIVE"), ("0", {"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
                                              ("2", {}, "unset")])
def test_run_sh_cpu_threads_sleep_while_they_wait(repo_copy, shim, monkeypatch, gpus, env, policy):
    """Without a GPU, OpenMP's waiting threads sleep (unless you chose otherwise): spinning ones stall on busy cores."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    proc, _ = run(["./run.sh"], repo_copy, shim, RUN_SH_DRY_RUN="1", STUB_NGPU=gpus, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (repo_copy / "check_omp_wait_policy").read_text() == policy


def test_run_sh_printed_command_pastes_back_to_the_same_arguments(repo_copy, shim, tmp_path):
    """Quotes, $(...), backquotes, a newline, an empty argument: pasted, the line gives back exactly the arguments
    and runs nothing."""
    tricky = ["--run_id", "it's $(touch pwned) `touch pwned2` \"q\" \\ *", "--note", "two\nlines\t", "--empty", "",
              "--glob", "data/x_*.bin"]
    proc, _ = run(["./run.sh", *tricky], repo_copy, shim, RUN_SH_DRY_RUN="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    line = next(x for x in out.splitlines() if x.startswith("run.sh: ") and "train_gpt.py" in x)
    paste = tmp_path / "paste"
    paste.mkdir()
    argv = shell_words(line.removeprefix("run.sh: "), cwd=paste)
    assert argv[-len(tricky):] == tricky
    assert ["--check"] + train_args(argv) == json.loads((repo_copy / "check_args.json").read_text())
    assert list(paste.iterdir()) == [] and not list(repo_copy.glob("pwned*"))


@pytest.mark.parametrize("data_flags", [
    ["--train_files", "mine/a_train_*.bin", "--val_files", "mine/a_val_*.bin"],
    ["--train_files=mine/a_train_*.bin"],
    ["--val_files", "mine/a_val_*.bin"],
])
def test_run_sh_cpu_own_shards_keep_gpt2_vocabulary(repo_copy, shim, data_flags):
    proc, _ = run(["./run.sh", *data_flags], repo_copy, shim, RUN_SH_DRY_RUN="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "tiny CPU model on your shards" in out and "synthetic data" not in out
    assert not (repo_copy / "data" / "synthetic").exists() and not (repo_copy / "data" / "fineweb10B").exists()
    line = " ".join(launched(out))
    assert "--vocab_size" not in line and "--bos_id" not in line and "synthetic" not in line
    assert "--model_dim 64" in line  # the tiny model stays


OWN_CPU = ["--max_doc_tokens", "128", "--stage_seq_lens", "(128, 128, 128)", "--micro_batch_tokens", "(127, 255, 383)",
           "--num_scheduled_steps", "100"]


def test_run_sh_cpu_own_shards_read_in_pieces_and_fit_the_schedule(repo_copy, shim):
    """On your shards: long documents read as 128-token pieces that micro-batches of 127/255/383 (+1) take whole,
    and the schedule, at most 100 + 4 steps, fitted to them: the plan's line is shown and its number passed, before
    your own flags."""
    mine = ["--train_files", "mine/a_train_*.bin", "--val_files", "mine/a_val_*.bin", "--val_every", "5"]
    proc, _ = run(["./run.sh", *mine], repo_copy, shim, RUN_SH_DRY_RUN="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "run.sh: 42 scheduled steps (+ 4; 100 asked) fit the train shards: stub\n" in proc.stdout
    argv = train_args(launched(out))
    planned = json.loads((repo_copy / "fit_args.json").read_text())
    assert planned == json.loads((repo_copy / "check_args.json").read_text())[1:]  # what --check saw
    assert planned[-len(mine) - len(OWN_CPU):] == OWN_CPU + mine  # after the CPU flags, before yours
    assert argv == planned[:-len(mine)] + ["--num_scheduled_steps", "42"] + mine


@pytest.mark.parametrize("steps", [["--num_scheduled_steps", "30"], ["--num_scheduled_steps=30"]])
def test_run_sh_takes_your_num_scheduled_steps_as_it_is(repo_copy, shim, steps):
    proc, _ = run(["./run.sh", "--train_files", "mine/a_*.bin", *steps], repo_copy, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (repo_copy / "fit_args.json").exists() and launched(proc.stdout)[-len(steps):] == steps


def test_run_sh_stops_at_shards_that_cover_no_schedule(repo_copy, shim):
    proc, _ = run(["./run.sh", "--train_files", "mine/a_*.bin", "--short", "1"], repo_copy, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode == 1
    assert errors(proc.stderr) == ["error: the 1 train shard(s) cover 2 of the schedule's 64 steps"]
    assert "train_gpt.py" not in proc.stdout


def test_run_sh_gpus_on_own_shards_run_the_recipe_as_it_is(repo_copy, shim):
    mine = ["--train_files", "mine/a_train_*.bin", "--val_files", "mine/a_val_*.bin"]
    proc, _ = run(["./run.sh", *mine], repo_copy, shim, RUN_SH_DRY_RUN="1", STUB_NGPU="2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert train_args(launched(proc.stdout)) == mine and not (repo_copy / "fit_args.json").exists()


def test_run_sh_gpus_fetch_fineweb_and_launch_torchrun(repo_copy, shim):
    proc, _ = run(["./run.sh"], repo_copy, shim, RUN_SH_DRY_RUN="1", STUB_NGPU="2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert (repo_copy / "data" / "fineweb10B").is_dir() and (repo_copy / "check_args.json").exists()
    assert launched(out) == ["python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train_gpt.py"]


def test_run_sh_stops_at_a_failed_check(repo_copy, shim):
    proc, _ = run(["./run.sh", "--bad", "1"], repo_copy, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode == 2
    assert errors(proc.stderr) == ["error: --bad is bad"]
    assert "train_gpt.py" not in proc.stdout


@pytest.mark.parametrize("shim", ["venv"], indirect=True)
def test_run_sh_stops_at_a_failed_install_with_its_line(repo_copy, shim):
    add_requirement(repo_copy, "stubpkg==1.0")
    proc, _ = run(["./run.sh"], repo_copy, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("tools/install.sh: failed: python3 -m pip install stubpkg==1.0;")
    assert "run.sh:" not in proc.stdout + proc.stderr and not (repo_copy / "check_args.json").exists()


def test_run_sh_launch_error_is_one_line(repo_copy, shim):
    proc, _ = run(["./run.sh"], repo_copy, shim, STUB_TRAIN="fail")
    assert proc.returncode == 1
    assert errors(proc.stderr) == ["error: no train shards match 'x_*.bin' (rank 0)"]


@pytest.mark.parametrize("mode", ["fail", "crash"])
def test_run_sh_torchrun_failure_shows_the_rank_and_not_the_launcher(repo_copy, shim, mode):
    """Two processes through torchrun: a rank's error line, or its own traceback; never the agent's."""
    proc, _ = run(["./run.sh"], repo_copy, shim, STUB_NGPU="2", STUB_TRAIN=mode)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    if mode == "fail":
        assert errors(proc.stderr) == ["error: no train shards match 'x_*.bin' (rank 1)"]
    else:
        assert errors(proc.stderr)[0] == "Traceback (most recent call last):"
        assert errors(proc.stderr)[-1] == "ValueError: a real crash" and proc.stderr.count("Traceback") == 1
    assert "ChildFailedError" not in proc.stderr and "elastic" not in proc.stderr


def interrupt(cmd, cwd, shim, started, **env):
    """Start cmd in a session of its own, press Ctrl-C (SIGINT to its process group) once `started` files exist."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=stub_env(shim, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        end = time.monotonic() + 60
        while not all((cwd / name).exists() for name in started) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:  # nothing left running when the test fails
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, err


def test_run_sh_ctrl_c_before_training_is_quiet(repo_copy, shim):
    (repo_copy / "data" / "synthetic.py").write_text(STUB_SLOW_DATA)
    code, out, err = interrupt(["./run.sh"], repo_copy, shim, ["started"])
    assert code == 130 and errors(err) == [], err


def test_run_sh_ctrl_c_reaches_each_rank_once_and_quietly(repo_copy, shim):
    """torchrun's ranks run in sessions of their own: the launcher passes Ctrl-C on, once (a second signal would
    stop a rank at once, nothing saved), and exits without its traceback."""
    code, out, err = interrupt(["./run.sh"], repo_copy, shim, ["started_0", "started_1"], STUB_NGPU="2",
                               STUB_TRAIN="wait")
    assert code == 130, err
    assert sorted(errors(err)) == ["rank 0 stopped by 1 signal(s)", "rank 1 stopped by 1 signal(s)"]


def real_copy(tmp_path):
    """A copy of what train_gpt.py --check and data/synthetic.py need, with the real scripts."""
    root = tmp_path / "real"
    for rel in ("harness", "data", "kernels", "tools", "locks"):
        shutil.copytree(REPO / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__", "synthetic", "fineweb10B"))
    for rel in ("run.sh", "train_gpt.py", "requirements.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    return root


def test_run_sh_with_real_train_gpt_check(shim, tmp_path):
    """The real --check: a typo is one line in seconds; the synthetic shards (made before the check, which may look
    at them), then the same shards as one's own with the CPU flags, pass."""
    root = real_copy(tmp_path)
    proc, seconds = run(["./run.sh", "--val_evry", "5"], root, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode != 0 and "train_gpt.py" not in proc.stdout
    assert errors(proc.stderr) == ["error: unknown setting --val_evry (--help lists the settings)"]
    assert seconds < 30
    proc, _ = run(["./run.sh"], root, shim, RUN_SH_DRY_RUN="1")  # the synthetic shards, then their check
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--vocab_size" in launched(proc.stdout)
    proc, _ = run(["./run.sh", "--train_files", "mine/x_*.bin", "--val_files", "mine/v_*.bin"], root, shim,
                  RUN_SH_DRY_RUN="1")  # own shards that are not there: one line, before any training
    assert proc.returncode != 0 and "train_gpt.py" not in proc.stdout
    assert errors(proc.stderr) == ["error: no train shards match 'mine/x_*.bin'; the folder 'mine' does not exist"]
    mine = ["--train_files", "data/synthetic/synthetic_train_*.bin", "--val_files", "data/synthetic/synthetic_val_*.bin",
            "--vocab_size", "256", "--bos_id", "255"]
    proc, _ = run(["./run.sh", *mine], root, shim, RUN_SH_DRY_RUN="1")  # and the real plan for them
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny CPU model on your shards" in proc.stdout and "synthetic data" not in proc.stdout
    steps = re.search(r"^run.sh: (\d+) scheduled steps \(\+ 4(; 100 asked)?\) fit the train shards: they take ",
                      proc.stdout, re.M)[1]
    assert launched(proc.stdout)[-len(mine) - 2:] == ["--num_scheduled_steps", steps, *mine]


@pytest.mark.parametrize("flag", ["--log_dir", "--train_files", "--run_id"])
def test_run_sh_never_lends_its_own_check_to_your_last_flag(shim, tmp_path, flag):
    """A flag missing its value, last: the real check refuses it in one line; run.sh's --check is not its value (it
    was, and the "check" trained the CPU demo into a folder named --check, in a dry run)."""
    root = real_copy(tmp_path)
    proc, _ = run(["./run.sh", flag], root, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode == 1 and "train_gpt.py" not in proc.stdout, proc.stdout + proc.stderr
    assert errors(proc.stderr) == [f"error: {flag} needs a value"]
    assert not (root / "--check").exists() and not (root / "logs").exists()


def test_run_sh_help_needs_no_install(repo_copy, shim):
    add_requirement(repo_copy, "stubpkg==1.0")  # unmet: would need an install
    proc, _ = run(["./run.sh", "--help"], repo_copy, shim)
    assert proc.returncode == 0 and proc.stdout == "stub help\n" and calls(shim) == []


# test.sh


@pytest.mark.parametrize("args, message", [
    (["tests/test_nothere.py"], "error: no such test file or folder: tests/test_nothere.py"),
    (["--no-such-option"], "error: unrecognized arguments: --no-such-option"),
    (["tests/test_cli.py::nosuch"], "error: no such test: tests/test_cli.py::nosuch"),
    (["tests/test_cli.py::test_plot_refuses[nosuch]"], "error: no such test: "),  # pytest's own not found
    (["/etc/passwd"], "error: not a test file or folder: /etc/passwd"),
    (["tests/test_cli.py\n"], "error: no such test file or folder: $'tests/test_cli.py\\n'"),
])
def test_test_sh_bad_argument_is_one_line(shim, args, message):
    proc, _ = run(["./test.sh", *args], REPO, shim)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert len(errors(proc.stderr)) == 1 and errors(proc.stderr)[0].startswith(message), proc.stderr
    assert proc.stdout.strip().startswith("no tests ran in") or not proc.stdout, proc.stdout  # pytest's summary at most


# tools/ab_runs.sh: its usage, bad input, dry runs and clock sampler (stub runs; no GPU)

AB_RUNS = REPO / "tools" / "ab_runs.sh"


def ab_runs(*args, out, **env):
    env = {**os.environ, "OUT": str(out), "DATA": str(out / "data"), **env}
    return subprocess.run(["bash", str(AB_RUNS), *map(str, args)], capture_output=True, text=True, env=env, timeout=60)


def test_ab_runs_is_valid_bash_and_its_help_is_the_header(tmp_path):
    assert subprocess.run(["bash", "-n", str(AB_RUNS)]).returncode == 0
    r = ab_runs("--help", out=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    for word in ("Usage: tools/ab_runs.sh", "setup [--shards DIR]", "project RUN_ID SEED", "cold RUN_ID SEED",
                 "reference NAME WORLD", "--by S", "--dry_run"):
        assert word in r.stdout
    assert "set -uo" not in r.stdout and not r.stdout.startswith("!")


@pytest.mark.parametrize("args, message", [
    (["nothing"], "error: unknown command 'nothing'; give setup, project, cold, reference or summary"),
    ([], "error: no command; give setup, project, cold, reference or summary"),
    (["project", "P0"], "error: project needs RUN_ID SEED"),
    (["cold", "C0", "x"], "error: SEED 'x' is not a whole number"),
    (["project", "P/0", "0"], "error: RUN_ID 'P/0' may hold only letters"),
    (["project", "P0", "0", "--seed", "1"], "error: unknown option '--seed' for project"),
    (["project", "P0", "0", "--limit", "9", "--by", "9"], "error: give --limit or --by, not both"),
    (["project", "P0", "0", "--by", "590"], "error: --by counts from the part's start: run `tools/ab_runs.sh setup`"),
    (["project", "P0", "0", "--gpus", "a"], "error: --gpus a is not a list of GPU numbers"),
    (["reference", "ref1", "0"], "error: WORLD '0' is not a number of GPUs"),
    (["reference", "ref1", "1", "--cache", "c"], "error: reference takes only --gpus, --limit or --by"),
    (["reference", "ref1", "2", "--gpus", "1"], "error: --gpus 1 does not name WORLD=2 GPUs"),
    (["reference", "ref1", "1"], "error: no "),
    (["setup", "--shards", "nowhere"], "error: no shards: nowhere holds no *.xz"),
    (["summary", "x"], "error: summary takes no arguments"),
    (["project", "P0", "0", "--gpus"], "error: --gpus needs a value"),
    (["project", "P0", "0", "--cache", "--limit", "9"], "error: --cache needs a value"),
    (["setup", "--shards"], "error: --shards needs a value"),
])
def test_ab_runs_bad_input_is_one_error_line(tmp_path, args, message):
    r = ab_runs(*args, out=tmp_path, REF_DIR=tmp_path)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr


def test_ab_runs_cold_start_refuses_a_used_cache(tmp_path):
    (tmp_path / "cache" / "fxgraph").mkdir(parents=True)
    r = ab_runs("cold", "C0", 0, "--cache", tmp_path / "cache", out=tmp_path)
    assert r.returncode == 2 and r.stderr == f"error: cold start C0: its cache {tmp_path}/cache is not empty; name a " \
        "new --cache DIR\n"


def test_ab_runs_dry_run_prints_each_run_with_its_limit(tmp_path):
    (tmp_path / "t0").write_text(f"{int(time.time())}\n")  # the part began now: --by 590 leaves 589-590 s
    r = ab_runs("--dry_run", "project", "E0", 2, "--cache", "/tmp/c_exact", "--by", 590, "--", "--fp8_body", "False",
                out=tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(
        rf"E0: timeout 5(89|90) env CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/c_exact "
        rf"TRITON_CACHE_DIR=/tmp/c_exact/triton {REPO}/tools/enwiki-124.sh {tmp_path}/data {tmp_path}/logs "
        rf"--run_id E0 --seed 2 --fp8_body False\n", r.stdout), r.stdout
    r = ab_runs("--dry_run", "cold", "C1", 0, "--gpus", "0,1", out=tmp_path)
    assert r.stdout.startswith("C1: env CUDA_VISIBLE_DEVICES=0,1 TORCHINDUCTOR_CACHE_DIR=/tmp/caches/C1 "), r.stdout
    assert r.stdout.endswith(" --run_id C1 --seed 0 --guard_every 1\n"), r.stdout  # a stop comes within two steps
    r = ab_runs("--dry_run", "cold", "C2", 0, "--", "--guard_every", "5", out=tmp_path)
    assert r.stdout.endswith(" --seed 0 --guard_every 1 --guard_every 5\n"), r.stdout  # the last one wins
    (tmp_path / "run_reference.sh").touch()
    r = ab_runs("--dry_run", "reference", "ref1", 2, "--limit", 585, out=tmp_path, REF_DIR=tmp_path)
    assert r.stdout == (f"ref1: timeout 585 env CUDA_VISIBLE_DEVICES=0,1 OUT={tmp_path}/ref1 bash "
                        f"{tmp_path}/run_reference.sh {tmp_path}/data 2 120 4 4194304\n"), r.stdout
    r = ab_runs("--dry_run", "reference", "ref2", 1, "--gpus", "1", out=tmp_path, REF_DIR=tmp_path)
    assert r.stdout.startswith("ref2: env CUDA_VISIBLE_DEVICES=1 OUT="), r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_reference.sh", "t0"]  # a dry run writes nothing


@pytest.mark.skipif(shutil.which("xz") is None, reason="the GPU machines' xz compresses the trace")
def test_ab_runs_keeps_a_profiled_runs_trace_compressed(tmp_path):
    """A project run's --profile_steps trace is xz'd in place (records keep it; tools/trace_summary.py reads it), with
    the run's own exit status; here tools/enwiki-124.sh is a stub that writes the trace and fails."""
    (tmp_path / "tools").mkdir()
    script = tmp_path / "tools" / "ab_runs.sh"
    script.write_text(AB_RUNS.read_text())
    stub = tmp_path / "tools" / "enwiki-124.sh"  # called as DATA LOG_DIR --run_id ID --seed N ...
    stub.write_text('#!/usr/bin/env bash\necho \'{"traceEvents": []}\' > "$2/$4_trace.json"\nexit 3\n')
    stub.chmod(0o755)
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(script), "project", "PR1", "0"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "OUT": str(out), "DATA": str(out / "data"),
                            "PATH": f"{fake_nvidia_smi(tmp_path, 'exit 9')}:{os.environ['PATH']}"})
    assert r.returncode == 3 and r.stdout.startswith("PR1 rc=3 "), r.stdout + r.stderr
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["PR1.console", "PR1_trace.json.xz"]
    assert json.loads(lzma.open(out / "logs" / "PR1_trace.json.xz").read()) == {"traceEvents": []}


def fake_nvidia_smi(tmp_path, body: str) -> Path:
    """A folder to put first on PATH whose nvidia-smi runs the shell code body (`exit 9`: no GPU here)."""
    bin_dir = tmp_path / "fake_bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/usr/bin/env bash\n{body}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return bin_dir


def test_ab_runs_samples_the_gpus_clocks_while_a_run_lasts(tmp_path):
    """Each run leaves OUT/logs/RUN_ID.gpus.csv, nvidia-smi's samples taken while it ran; the sampler stops with the
    run; with no samples (no GPU) no file. Here nvidia-smi and tools/enwiki-124.sh are stubs."""
    (tmp_path / "tools").mkdir()
    script = tmp_path / "tools" / "ab_runs.sh"
    script.write_text(AB_RUNS.read_text())
    stub = tmp_path / "tools" / "enwiki-124.sh"
    stub.write_text("#!/usr/bin/env bash\nsleep 0.5\n")
    stub.chmod(0o755)
    pids = tmp_path / "sampler.pid"
    rows = "timestamp, index, clocks.sm [MHz]\n2026/11/30 10:58:35.717, 0, 1725"
    sampler = f'[[ " $* " == *" -lms "* ]] || exit 0\necho $$ >> {pids}\necho "{rows}"\nexec sleep 30'
    for name, body, files in (("gpu", sampler, ["C1.console", "C1.gpus.csv"]), ("no_gpu", "exit 9", ["C1.console"])):
        out = tmp_path / name
        env = {**os.environ, "OUT": str(out), "DATA": str(out / "data"),
               "PATH": f"{fake_nvidia_smi(tmp_path, body)}:{os.environ['PATH']}"}
        r = subprocess.run(["bash", str(script), "project", "C1", "0"], capture_output=True, text=True, timeout=60,
                           env=env)
        assert r.returncode == 0 and r.stdout.startswith("C1 rc=0 "), r.stdout + r.stderr
        assert sorted(p.name for p in (out / "logs").iterdir()) == files
        if "C1.gpus.csv" in files:
            assert (out / "logs" / "C1.gpus.csv").read_text() == rows + "\n"
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the sampler ended with its run


def test_ab_runs_summary_adds_each_runs_gpu_clocks(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "W2.gpus.csv").write_text(
        "timestamp, index, clocks.current.sm [MHz], power.draw [W], temperature.gpu, clocks_event_reasons.active, "
        "utilization.gpu [%]\n2026/11/30 10:58:35.717, 0, 1725, 693.1, 60, 0x0000000000000004, 100\n")
    r = ab_runs("summary", out=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"no logs in {tmp_path}/logs",
                                     "W2 GPU 0: 1725 MHz, 693 W, 60 C over 1 working samples; power cap 100%, slowdowns 0%"]


def test_ab_runs_skips_a_run_with_no_time_left(tmp_path):
    (tmp_path / "t0").write_text(f"{int(time.time()) - 600}\n")
    r = ab_runs("project", "P2", 2, "--by", 590, out=tmp_path)
    assert r.returncode == 124 and r.stdout == "P2 rc=124 wall=0s: not started, no time left\n", r.stdout + r.stderr
    assert (tmp_path / "walls.txt").read_text() == r.stdout


def test_ab_runs_dry_setup_names_each_shard(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for name in ("enwiki_train_000000.bin.xz", "enwiki_val_000000.bin.xz"):
        (shards / name).touch()
    r = ab_runs("--dry_run", "setup", "--shards", shards, out=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == [f"setup: xz -dc {shards}/{n}.xz > {tmp_path}/data/{n}"
                                         for n in ("enwiki_train_000000.bin", "enwiki_val_000000.bin")]


FIRST_PAGE_AND_DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# The flags of programs outside the repository that README.md and docs/ name: torchrun's and pip's.
OTHER_PROGRAMS_FLAGS = {"standalone", "nproc_per_node", "index-url", "extra-index-url"}
SETTINGS_FORM = {"name"}  # `--name value`: how a setting is written
FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w-]*)")
# Where a command line hands its flags to train_gpt.py: everything after these, up to the end of the command.
TRAIN_GPT_ENTRIES = re.compile(r"train_gpt\.py|run\.sh|tools/enwiki-124\.sh| -- ")
COMMAND_END = re.compile(r"[;|#)]|&&")


def markdown_files() -> list[Path]:
    return [*FIRST_PAGE_AND_DOCS, *sorted((REPO / "records").rglob("README.md")),
            *sorted((REPO / "experiments").rglob("README.md"))]


def without_code(md: Path) -> str:
    return re.sub(r"```.*?```", "", md.read_text(), flags=re.S)  # code blocks hold no links or headings


def anchors(md: Path) -> set[str]:
    """The anchors of md's headings, as GitHub makes them: lower case, punctuation dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", without_code(md), flags=re.M)}


def broken_links(md: Path) -> list[str]:
    """md's relative links (and pictures) whose file or folder does not exist, or whose #anchor names no heading of
    the markdown file it points into."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", without_code(md)):
        if re.match(r"[a-z]+:", target):
            continue  # web addresses
        path, _, anchor = target.partition("#")
        dest = md.parent / path if path else md
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(f"{os.path.relpath(md, REPO)}: {target}")
    return broken


def train_gpt_settings() -> set[str]:
    """train_gpt.py's flags: the fields of Hyperparameters (read from the source: no torch import), --help, --check."""
    tree = ast.parse((REPO / "train_gpt.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Hyperparameters")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)} | {"help", "check"}


def program_options() -> set[str]:
    """The options the repository's other programs define: argparse's add_argument in data/, tools/ and kernels/,
    the shell scripts' `--name)` cases and `== --name` tests."""
    found = set()
    for py in [*(REPO / "data").glob("*.py"), *(REPO / "tools").glob("*.py"), *(REPO / "kernels").glob("*.py")]:
        found |= set(re.findall(r"add_argument\(\s*[\"']--([\w-]+)", py.read_text()))
    for sh in [*(REPO / "tools").glob("*.sh"), REPO / "run.sh", REPO / "test.sh", REPO / ".ci" / "run"]:
        text = sh.read_text()
        found |= set(re.findall(r"^\s*(?:-\w\|)?--([\w-]+)\)", text, flags=re.M))
        found |= set(re.findall(r"== --([\w-]+)\b", text))
    return found


def unknown_flags(md: Path, settings: set[str], options: set[str]) -> list[str]:
    """md's flags that exist nowhere: in a command line that runs train_gpt.py (directly, through run.sh or
    tools/enwiki-124.sh, or after a tool's ` -- `) a flag must be one of its settings; elsewhere a setting, another
    program's option, or a flag of torchrun or pip."""
    text, name = md.read_text(), os.path.relpath(md, REPO)
    blocks = re.findall(r"```.*?\n(.*?)```", text, flags=re.S)
    spans = [line for block in blocks for line in block.splitlines()] + re.findall(r"`([^`]+)`", without_code(md))
    bad = []
    for span in spans:
        for entry in TRAIN_GPT_ENTRIES.finditer(span):
            command = COMMAND_END.split(span[entry.end():])[0]
            bad += [f"{name}: --{flag} (not a train_gpt.py setting, in `{span.strip()}`)"
                    for flag in FLAG.findall(command) if flag not in settings | SETTINGS_FORM]
    known = settings | SETTINGS_FORM | options | OTHER_PROGRAMS_FLAGS
    bad += [f"{name}: --{flag} (no program of the repository has it)" for flag in FLAG.findall(text) if flag not in known]
    return sorted(set(bad))


def test_markdown_links_resolve():
    """Every relative link (and picture) in README.md, docs/*.md, records/**/README.md and experiments/**/README.md
    names a file or folder that exists, and a heading where it names an anchor."""
    broken = [line for md in markdown_files() for line in broken_links(md)]
    assert not broken, "\n".join(broken)


def test_the_flags_readme_and_docs_name_exist():
    """Every --flag README.md and docs/ name exists: train_gpt.py's in its Hyperparameters (or --help, --check),
    the other programs' in their argument parsers. Records and experiments keep the flags of their day."""
    settings, options = train_gpt_settings(), program_options()
    assert {"fp8_body", "resume", "check"} <= settings and {"prefix", "dry-run", "reference"} <= options
    bad = [line for md in FIRST_PAGE_AND_DOCS for line in unknown_flags(md, settings, options)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("stale, found", [
    ("[gone](no_such_file.md)", "no_such_file.md"),
    ("[gone](#no-such-heading)", "#no-such-heading"),
    ("`./run.sh --prefix mine`", "--prefix (not a train_gpt.py setting"),  # tokenize_text.py's, not a setting
    ("`--fp8_mlp True`", "--fp8_mlp (no program"),  # a setting that was removed
])
def test_the_docs_checks_fail_on_a_stale_doc(tmp_path, stale, found):
    """The two checks above catch a moved file, a renamed heading, another program's option given to train_gpt.py, and
    a flag that no program has."""
    md = tmp_path / "docs.md"
    md.write_text(f"# A heading\n[here]({REPO / 'README.md'}#quick-start) [up](#a-heading) `./run.sh --fp8_body False` "
                  f"`--prefix mine` {stale}\n")
    problems = broken_links(md) + unknown_flags(md, train_gpt_settings(), program_options())
    assert len(problems) == 1 and found in problems[0], problems


def test_ab_runs_summary_prints_the_runs_lines_not_the_code_in_the_log(tmp_path):
    """Every log opens with the code that ran, whose lines also say `val_loss`, `train time` and `peak memory`: the
    summary prints only what the run itself logged."""
    (tmp_path / "logs").mkdir()
    run = ["startup: 61.8s from process start to the first timed step", "ms/step by stage: 1:185.8 2:358.8 3:542.9",
           "step:124/124 val_loss:3.8635 train_time:45649ms step_avg:368.14ms",
           "summary: val loss 3.8635 (chance: log(vocab) = 10.825); train time 45.6 s over 124 steps; log: P0.txt",
           "peak memory allocated: 29714 MiB reserved: 51228 MiB"]
    code = (REPO / "train_gpt.py").read_text() + (REPO / "harness" / "report.py").read_text()
    (tmp_path / "logs" / "P0.txt").write_text(code + "\n".join(["step:1/124 train_loss:10.8 grad_norm:1.0", *run]) + "\n")
    r = ab_runs("summary", out=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == [f"{tmp_path}/logs/P0.txt:{line}" for line in run], r.stdout
