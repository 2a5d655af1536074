"""The package as installed: the ``lich`` command, the import rule, cheap imports."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lich

ROOT = Path(lich.__file__).resolve().parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=env, check=False)


def test_lich_version_via_the_console_script() -> None:
    script = shutil.which("lich") or str(Path(sys.executable).with_name("lich"))
    assert Path(script).exists(), "the `lich` console script is installed with the package"
    done = _run(script, "--version")
    assert done.returncode == 0, done.stderr
    assert lich.__version__ in done.stdout


def test_lich_version_via_python_dash_m() -> None:
    done = _run(sys.executable, "-m", "lich", "--version")
    assert done.returncode == 0, done.stderr
    assert lich.__version__ in done.stdout


def test_importing_lich_is_cheap() -> None:
    code = (
        "import sys, lich, lich.cli; "
        "heavy = [m for m in ('httpx', 'textual', 'uvicorn', 'starlette', 'websockets', "
        "'lich_builtin_tools', 'lich_providers') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    done = _run(sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_nothing_in_lich_imports_the_builtin_plugin_packages() -> None:
    offenders = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("lich_builtin_tools", "lich_providers"):
                    offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_public_names_are_exported() -> None:
    for name in lich.__all__:
        assert getattr(lich, name) is not None, name
