"""tools/build_fa3.sh on the CPU: its help, the dry run's plan over a fake source tree with a fake
nvcc, and one-line errors for bad arguments. Nothing is compiled.

    python3 -m pytest -q tests/test_build_fa3.py
"""
import os
import subprocess

import pytest

from tests.utils import REPO

SCRIPT = REPO / "tools" / "build_fa3.sh"
DISABLED = ("SM80 FP16 FP8 HDIM64 HDIM96 HDIM192 HDIM256 SPLIT PAGEDKV APPENDKV SOFTCAP PACKGQA "
            "HDIMDIFF64 HDIMDIFF192").split()
NEEDED = ("hopper/setup.py", "hopper/flash_attn_interface.py", "hopper/flash_attn_3/__init__.py",
          "hopper/instantiations/flash_fwd_hdim128_bf16_sm90.cu",
          "hopper/instantiations/flash_bwd_hdim128_bf16_sm90.cu", "csrc/cutlass/include/cutlass/cutlass.h")


def fake_sources(root, skip=()):
    """The layout of fa3src.tar.xz (root/fa/hopper, root/fa/csrc/cutlass/include), files empty."""
    for rel in NEEDED:
        if rel not in skip:
            (root / "fa" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "fa" / rel).touch()
    return root


def fake_cuda(root, release):
    """A CUDA toolkit folder whose nvcc only answers --version, with the given release."""
    (root / "include").mkdir(parents=True)
    (root / "include" / "cuda_runtime.h").touch()
    (root / "bin").mkdir()
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return root


def run(*args, cuda=None):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "MAX_JOBS")}
    if cuda is not None:
        env["PATH"] = f"{cuda / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)


def test_help():
    r = run("--help")
    assert r.returncode == 0, r.stderr
    for word in ("Usage: tools/build_fa3.sh", "--src DIR", "--out DIR", "--dry-run", "fa3.tar.xz", "tar xJf"):
        assert word in r.stdout
    assert r.stdout.count("\n") >= 10 and "set -e" not in r.stdout


@pytest.mark.parametrize("given", ["unpacked", "fa", "hopper"])
def test_dry_run_prints_the_plan(tmp_path, given):
    src = fake_sources(tmp_path / "fa3")
    arg = {"unpacked": src, "fa": src / "fa", "hopper": src / "fa" / "hopper"}[given]
    cuda = fake_cuda(tmp_path / "cuda", "13.0")
    out = tmp_path / "out"
    r = run("--src", arg, "--out", out, "--dry-run", cuda=cuda)
    for flag in DISABLED:
        assert f"    FLASH_ATTENTION_DISABLE_{flag}=TRUE\n" in r.stdout
    assert r.stdout.count("FLASH_ATTENTION_DISABLE_") == len(DISABLED)
    assert "    python3 setup.py build_ext --inplace\n" in r.stdout
    assert f"build in {out}/src/hopper" in r.stdout
    assert f"sources: {src / 'fa'}, copied into {out}/src" in r.stdout
    assert f"CUDA_HOME={cuda}\n" in r.stdout and "NVCC_THREADS=4\n" in r.stdout and "MAX_JOBS=" in r.stdout
    assert "nvcc" not in r.stderr  # the fake 13.0 nvcc passes; torch may not (a CPU build here)
    assert not out.exists()  # a dry run writes nothing


def test_dry_run_reports_old_nvcc_and_still_plans(tmp_path):
    cuda = fake_cuda(tmp_path / "cuda", "12.1")
    r = run("--src", fake_sources(tmp_path / "fa3"), "--out", tmp_path / "out", "--dry-run", cuda=cuda)
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if "nvcc" in line]
    assert len(errors) == 1 and "CUDA 12.1" in errors[0] and ">= 12.3" in errors[0]
    assert "setup.py build_ext --inplace" in r.stdout and "FLASH_ATTENTION_DISABLE_SM80=TRUE" in r.stdout


def test_free_space_is_measured_where_out_goes(tmp_path):
    """With --src given too, the free-space check looks at --out's nearest existing folder, not at the sources'."""
    cuda = fake_cuda(tmp_path / "cuda", "13.0")
    df = cuda / "bin" / "df"  # a full disk, wherever it is asked about
    df.write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                  "echo 'fake 1048576 1048576 0 100% /'\n")
    df.chmod(0o755)
    r = run("--src", fake_sources(tmp_path / "fa3"), "--out", tmp_path / "new" / "out", "--dry-run", cuda=cuda)
    assert r.returncode == 1 and f"only 0 GiB free under {tmp_path}; " in r.stderr, r.stderr


@pytest.mark.parametrize("case", ["missing", "not_a_checkout", "no_cutlass", "unknown_flag", "out_is_a_file",
                                  "out_under_a_file", "src_without_value"])
def test_bad_arguments_give_one_line(tmp_path, case):
    out = tmp_path / "out"
    if case.startswith("out_"):
        (tmp_path / "taken").write_text("a file")
        taken = tmp_path / "taken"
        out = taken if case == "out_is_a_file" else taken / "fa3"
        where = "" if out == taken else f": {taken}"
        args, expect = ["--src", fake_sources(tmp_path / "fa3")], f"--out {out}{where} is a file; name a folder"
    elif case == "missing":
        args, expect = ["--src", tmp_path / "nowhere"], "no such folder"
    elif case == "src_without_value":  # the --out below is no folder of --src's
        args, expect = ["--src"], "--src needs a folder"
    elif case == "not_a_checkout":
        args, expect = ["--src", tmp_path], "no hopper/setup.py"
    elif case == "no_cutlass":
        src = fake_sources(tmp_path / "fa3", skip=("csrc/cutlass/include/cutlass/cutlass.h",))
        args, expect = ["--src", src], "csrc/cutlass/include/cutlass/cutlass.h is missing"
    else:
        args, expect = ["--dry-run", "--bogus"], "unknown argument '--bogus'"
    r = run(*args, "--out", out, "--dry-run", cuda=fake_cuda(tmp_path / "cuda", "13.0"))
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("build_fa3.sh: error: ") and expect in r.stderr
