"""The floors of the project, read from the source (ast): imports point down. harness/cli.py is the ground floor
(nothing of the project), harness/files.py stands on it alone; harness/ and kernels/ import nothing of data/,
tools/, tests/ or train_gpt; data/ nothing of tools/, tests/ or train_gpt; train_gpt.py nothing of tools/ or tests/.
The programs on top (tools/, records/, tests/) import anything. Below the entry points a refusal is a UserError:
no `SystemExit("error: ...")`, and no UserError message that says `error:` itself.

    python3 -m pytest -q tests/test_floors.py
"""
import ast
from pathlib import Path

from tests.utils import REPO

PROJECT = {"harness", "kernels", "data", "tools", "tests", "train_gpt"}
ABOVE_HARNESS = {"data", "tools", "tests", "train_gpt"}
# (files, as a glob under the root; what they may not import; whether an imported module is that), stricter first
RULES = [
    ("harness/cli.py", "anything of the project", lambda m: m.split(".")[0] in PROJECT),
    ("harness/files.py", "anything of the project but harness.cli",
     lambda m: m.split(".")[0] in PROJECT and m != "harness.cli"),
    ("harness/**/*.py", "data, tools, tests or train_gpt", lambda m: m.split(".")[0] in ABOVE_HARNESS),
    ("kernels/**/*.py", "data, tools, tests or train_gpt", lambda m: m.split(".")[0] in ABOVE_HARNESS),
    ("data/**/*.py", "tools, tests or train_gpt", lambda m: m.split(".")[0] in {"tools", "tests", "train_gpt"}),
    ("train_gpt.py", "tools or tests", lambda m: m.split(".")[0] in {"tools", "tests"}),
]


def imported(path: Path, root: Path):
    """(line, module) for every import in the file, at any depth (imports inside functions count): `from a import b`
    names a.b where a is a package (a folder under root), else a."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: a relative import; the floors are checked on absolute ones"
            if (root / node.module.replace(".", "/")).is_dir():
                yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
            else:
                yield node.lineno, node.module


def violations(root: Path) -> list[str]:
    """`file:line imports module (it may not import ...)` for every import that points up; a file is held to the
    first rule that names it."""
    found, seen = [], set()
    for pattern, forbidden, forbids in RULES:
        for path in sorted(set(root.glob(pattern)) - seen):
            seen.add(path)
            for line, module in imported(path, root):
                if forbids(module):
                    found.append(f"{path.relative_to(root)}:{line} imports {module} (it may not import {forbidden})")
    return found


def error_exits(root: Path) -> list[str]:
    """`file:line` of every SystemExit("error: ...") and UserError("error: ...") below the programs."""
    def says_error(call: ast.Call) -> bool:
        first = call.args[0] if call.args else None
        if isinstance(first, ast.JoinedStr) and first.values:
            first = first.values[0]
        return isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("error:")
    found = []
    for pattern in ("harness/**/*.py", "kernels/**/*.py", "data/**/*.py", "train_gpt.py"):
        for path in sorted(root.glob(pattern)):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ("SystemExit", "UserError") and says_error(node)):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_imports_point_down():
    assert violations(REPO) == []


def test_refusals_below_the_programs_are_user_errors():
    assert error_exits(REPO) == []


def test_a_planted_violation_is_found(tmp_path):
    """The checks on a tree that breaks each rule once (and keeps each allowance once)."""
    files = {
        "harness/__init__.py": "",
        "harness/cli.py": "import os\nfrom harness.files import atomic_write\n",
        "harness/files.py": "from harness.cli import UserError\nfrom harness import cli\nimport harness.log\n",
        "harness/log.py": "def f():\n    from data.shards import read_header\n",
        "harness/guard.py": "import torch\nfrom harness.cli import stderr_line\n",
        "kernels/attention.py": "from harness.cli import UserError\nfrom tools import cli\n",
        "data/__init__.py": "",
        "data/shards.py": "from harness.files import atomic_write\nimport train_gpt as tg\n"
                          "raise SystemExit(f'error: {tg}')\n",
        "data/synthetic.py": "from data.shards import write_shard\nfrom tests.utils import REPO\n",
        "tools/plot.py": "import train_gpt\nfrom data.shards import read_header\n",
        "train_gpt.py": "from data.shards import find_shards\nfrom harness.cli import UserError\n"
                        "def main():\n    from tools.plot import parse_log\n    raise UserError('error: twice')\n"
                        "raise SystemExit(0)\nraise SystemExit('settings OK')\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert violations(tmp_path) == [
        "harness/cli.py:2 imports harness.files (it may not import anything of the project)",
        "harness/files.py:3 imports harness.log (it may not import anything of the project but harness.cli)",
        "harness/log.py:2 imports data.shards (it may not import data, tools, tests or train_gpt)",
        "kernels/attention.py:2 imports tools.cli (it may not import data, tools, tests or train_gpt)",
        "data/shards.py:2 imports train_gpt (it may not import tools, tests or train_gpt)",
        "data/synthetic.py:2 imports tests.utils (it may not import tools, tests or train_gpt)",
        "train_gpt.py:4 imports tools.plot (it may not import tools or tests)",
    ]
    assert error_exits(tmp_path) == ["data/shards.py:3", "train_gpt.py:5"]
