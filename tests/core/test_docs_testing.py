"""``docs/testing.md`` stays true: every example in it runs, as a plugin author would run it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import lich.testing
import lich.testing.plugin

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
EXAMPLE = re.compile(r"<!-- example: (\S+\.py) -->\n```python\n(.*?)\n```", re.S)
MAIN_EXAMPLE = "test_shout_plugin.py"


def _examples() -> list[tuple[str, str]]:
    return EXAMPLE.findall(DOC.read_text(encoding="utf-8"))


def _test_count(code: str) -> int:
    return sum(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        for node in ast.parse(code).body
    )


def test_the_doc_describes_every_public_name_of_the_kit() -> None:
    text = DOC.read_text(encoding="utf-8")
    names = [*lich.testing.__all__, *lich.testing.plugin.__all__]
    missing = [name for name in names if f"`{name}" not in text]
    assert missing == []


def test_the_docs_examples_run_as_a_plugin_authors_test_suite(tmp_path: Path) -> None:
    examples = _examples()
    names = [name for name, _ in examples]
    assert names[0] == MAIN_EXAMPLE
    assert len(set(names)) == len(names)
    expected = 0
    for name, code in examples:
        (tmp_path / name).write_text(code + "\n", encoding="utf-8")
        expected += _test_count(code)
    assert expected >= 10
    # A plugin author's project: the documented pytest setting, nothing of lich's own config.
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\n"
        "asyncio_mode = auto\n"
        "asyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
        "timeout = 100\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LICH_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # no user config leaks in
    # no:benchmark: pytest-benchmark, where the machine's Python has it beside xdist, warns
    # at configure time and filterwarnings=error makes that an INTERNALERROR; it is the
    # machine's plugin, not part of what the docs tell an author to set up.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark",
         str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110, check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(rf"\b{expected} passed\b", done.stdout), output
