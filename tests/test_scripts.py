"""tools/install.sh and run.sh on the CPU, in seconds: nothing is installed or trained.

pip is never reached: python3 on PATH is a shim that fails `python3 -m pip ...` (exit 97). run.sh's steps are
checked in a copy of the scripts with stub train_gpt.py / data scripts, in its dry run (RUN_SH_DRY_RUN=1), and
once against the real train_gpt.py's --check. Also: every relative link in README.md and records/**/README.md resolves.

    python3 -m pytest -q tests/test_scripts.py
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ALL_INSTALLED = "tools/install.sh: all requirements installed"

STUB_TRAIN = """\
import json, sys
from pathlib import Path
if "--help" in sys.argv:
    print("stub help"); sys.exit(0)
if sys.argv[-1] == "--check":
    Path("check_args.json").write_text(json.dumps(sys.argv[1:]))
    if "--bad" in sys.argv:
        print("error: --bad is bad", file=sys.stderr); sys.exit(2)
    print("settings OK"); sys.exit(0)
sys.exit("stub train_gpt.py: started without --check")
"""
STUB_DATA = "from pathlib import Path\nPath('data/{0}').mkdir(parents=True)\nprint('stub {0}')\n"


@pytest.fixture
def shim(tmp_path):
    """A PATH entry whose python3 runs this interpreter but fails on `-m pip`, and whose nvidia-smi fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(
        f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = pip ]; then echo "shim: pip called: $*" >&2; exit 97; fi\n'
        f'exec {sys.executable} "$@"\n')
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def run(cmd, cwd, shim, **env):
    full_env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "", **env}
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - start


def test_install_all_present_is_quick_and_calls_no_pip(shim):
    proc, seconds = run(["tools/install.sh"], REPO, shim)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(ALL_INSTALLED) and "pip called" not in proc.stderr
    assert seconds < 20


@pytest.mark.parametrize("module, failed", [
    ("tiktoken", "failed: python3 -m pip install -r requirements.txt"),
    ("torch", "failed: python3 -m pip install torch>=2.11,<2.14"),  # no GPU: the CPU build first
])
def test_install_missing_module_runs_pip_and_names_the_failed_command(shim, tmp_path, module, failed):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / f"{module}.py").write_text("raise ImportError('hidden by the test')\n")
    proc, _ = run(["tools/install.sh"], REPO, shim, PYTHONPATH=str(hide))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"missing: {module}" in out and "shim: pip called" in out
    assert out.strip().splitlines()[-1] == f"tools/install.sh: {failed}"
    assert ("installing the CPU build of torch" in out) == (module == "torch")


@pytest.fixture
def repo_copy(tmp_path):
    """run.sh, tools/install.sh and requirements.txt with stub train_gpt.py, data/synthetic.py, data/download.py."""
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    (root / "data").mkdir()
    for rel in ("run.sh", "tools/install.sh", "requirements.txt"):
        shutil.copy2(REPO / rel, root / rel)
    (root / "train_gpt.py").write_text(STUB_TRAIN)
    (root / "data" / "synthetic.py").write_text(STUB_DATA.format("synthetic"))
    (root / "data" / "download.py").write_text(STUB_DATA.format("fineweb10B"))
    return root


def launched(out):
    """The torchrun line run.sh printed (its dry run starts nothing)."""
    lines = [line for line in out.splitlines() if line.startswith("run.sh: torchrun ")]
    assert len(lines) == 1, out
    assert "dry run (RUN_SH_DRY_RUN=1): not started" in out
    return lines[0]


def test_run_sh_cpu_demo_plans_synthetic_data(repo_copy, shim):
    proc, _ = run(["./run.sh", "--val_every", "5"], repo_copy, shim, RUN_SH_DRY_RUN="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "no GPU; tiny CPU demo on synthetic data in data/synthetic/" in out
    assert (repo_copy / "data" / "synthetic").is_dir() and not (repo_copy / "data" / "fineweb10B").exists()
    line = launched(out)
    assert "--vocab_size 256 --bos_id 255" in line and "'data/synthetic/synthetic_train_*.bin'" in line
    assert line.endswith("--val_every 5")  # the user's flags last: they win
    assert (repo_copy / "check_args.json").read_text().endswith('"--val_every", "5", "--check"]')


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
    line = launched(out)
    assert "--vocab_size" not in line and "--bos_id" not in line and "synthetic" not in line
    assert "--model_dim 64" in line  # the tiny model and schedule stay


def test_run_sh_stops_at_a_failed_check(repo_copy, shim):
    proc, _ = run(["./run.sh", "--bad", "1"], repo_copy, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --bad is bad"
    assert "torchrun" not in proc.stdout and not (repo_copy / "data" / "synthetic").exists()


def test_run_sh_with_real_train_gpt_check(shim, tmp_path):
    """The real --check: a typo or missing shards are one line in seconds; own shards with the CPU flags pass."""
    proc, seconds = run(["./run.sh", "--val_evry", "5"], REPO, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode != 0 and "torchrun" not in proc.stdout
    assert proc.stderr.strip().splitlines() == ["error: unknown setting --val_evry (--help lists the settings)"]
    assert seconds < 30
    own = ["--train_files", f"{tmp_path}/synthetic_train_*.bin", "--val_files", f"{tmp_path}/synthetic_val_*.bin"]
    proc, _ = run(["./run.sh", *own], REPO, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode != 0 and "torchrun" not in proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"error: no train shards match '{own[1]}'"), proc.stderr
    subprocess.run([sys.executable, "data/synthetic.py", "--out", str(tmp_path)], cwd=REPO, check=True,
                   capture_output=True)
    proc, _ = run(["./run.sh", *own, "--vocab_size", "256", "--bos_id", "255"], REPO, shim, RUN_SH_DRY_RUN="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny CPU model on your shards" in proc.stdout and "synthetic data" not in proc.stdout


def test_markdown_links_in_readme_and_records_resolve():
    """Every relative link (and picture) in README.md and records/**/README.md names a file or folder that exists."""
    broken = []
    for md in [REPO / "README.md", *sorted((REPO / "records").rglob("README.md"))]:
        text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # web addresses and anchors
            if not (md.parent / target.split("#")[0]).exists():
                broken.append(f"{md.relative_to(REPO)}: {target}")
    assert not broken, "\n".join(broken)
