"""The package as installed: the ``lich`` command, the import rule, cheap imports."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_split_modules_keep_their_old_import_paths() -> None:
    import lich.agent
    import lich.executor
    import lich.plugins
    import lich.plugins.calling
    import lich.plugins.host
    import lich.plugins.loading
    import lich.tools

    # lich/plugins.py became a package, and the executor left lich/tools.py and
    # lich/agent.py: third-party code importing from the old places keeps working.
    assert lich.plugins.__all__ == [
        "ENTRY_POINT_GROUP", "AvailablePlugin", "LoadReport", "PluginHost", "PluginLoadError",
        "ToolDecision", "available_plugins", "installed_entry_points",
    ]
    assert lich.plugins.PluginHost is lich.plugins.host.PluginHost
    assert lich.plugins.ToolDecision is lich.plugins.calling.ToolDecision
    for name in ("ENTRY_POINT_GROUP", "AvailablePlugin", "LoadReport", "PluginLoadError",
                 "available_plugins", "installed_entry_points"):
        assert getattr(lich.plugins, name) is getattr(lich.plugins.loading, name), name
    assert "ToolExecutor" in lich.tools.__all__
    assert lich.tools.ToolExecutor is lich.executor.ToolExecutor
    assert "HookedToolRunner" in lich.agent.__all__
    assert lich.agent.HookedToolRunner is lich.executor.HookedToolRunner


@pytest.mark.parametrize("module", ["lich.executor", "lich.tools", "lich.plugins.calling",
                                    "lich.plugins.host", "lich.plugins.loading"])
def test_each_split_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    # Import cycles show only in the order that closes them: each module goes first once.
    done = _run(sys.executable, "-c", f"import {module}")
    assert done.returncode == 0, done.stderr
