"""The README's promises: its two commands, its plugin example, its doc links."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _code_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_the_first_command_ends_in_lich_demo() -> None:
    first = _code_blocks("sh")[0].strip()
    assert first == "pip install -e '.[all]' && lich demo"


def test_the_test_command_is_what_ci_runs() -> None:
    command = _code_blocks("sh")[1].strip()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")

    assert command == "pip install -e '.[test]' -e ./plugins_example && python -m pytest"
    # CI may add quiet/no-version-check flags, but installs the same two things in one
    # pip call and then runs the same bare pytest command.
    lines = [line for line in ci.splitlines() if not line.lstrip().startswith("#")]
    pip_lines = [line for line in lines if "pip install" in line]
    assert any("-e '.[test]'" in line and "-e ./plugins_example" in line for line in pip_lines)
    assert re.search(r"^python -m pytest\s*$", ci, flags=re.M)


def test_the_plugin_example_works(work: Path, lich: Any) -> None:
    source = _code_blocks("python")[0]
    (work / "shout.py").write_text(source, encoding="utf-8")

    tools = lich("--plugin", "./shout.py", "tools", "--json")
    plugins = lich("--plugin", "./shout.py", "plugins", "--json")

    assert tools.exit_code == 0, tools.stderr
    assert "shout" in [t["name"] for t in json.loads(tools.stdout)]
    report = next(r for r in json.loads(plugins.stdout) if r["plugin"] == "shout")
    assert report["status"] == "loaded"
    assert report["hooks"] == ["lich_before_tool_call", "lich_register_tools"]


def test_linked_files_exist() -> None:
    for target in re.findall(r"\]\(((?:docs|plugins_example)/[^)#]*)\)", README):
        assert (REPO / target).exists(), target
