"""The example distribution's metadata: what ``pyproject.toml`` declares is what is installed."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
import tomllib

from .conftest import EXAMPLE_ENTRY_POINTS, EXAMPLES


def test_example_entry_points_are_installed_as_declared() -> None:
    project = tomllib.loads((EXAMPLES / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"]["lich"]
    assert set(declared) == set(EXAMPLE_ENTRY_POINTS)
    installed = {
        ep.name: ep.value for ep in importlib.metadata.entry_points(group="lich")
        if ep.dist is not None and ep.dist.metadata["Name"] == project["name"]
    }
    assert installed == declared, "stale install: run `pip install -e plugins_example`"
    for value in declared.values():
        assert importlib.util.find_spec(value) is not None, value


def test_importing_an_example_plugin_is_cheap() -> None:
    # Loading a plugin imports its module; it must not drag in heavy dependencies.
    code = (
        "import sys, lich_examples.tools, lich_examples.audit, lich_examples.guard\n"
        "heavy = {'httpx', 'textual', 'websockets', 'uvicorn', 'starlette', 'sqlite3'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"
