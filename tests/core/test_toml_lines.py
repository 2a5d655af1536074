"""lich.toml_lines: the line of a TOML file a configuration problem's $.path stands on."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import lich
from lich.config import load_config
from lich.toml_lines import line_of, with_lines

TEXT = '''\
# the top
max_turns = 0
"quoted key" = 1
tools.terminal.timeout_s = 5   # a dotted key

[[providers]]
kind = "openai_compat"
model = "m"

[[providers]]
name = "b"
note = """
fake = "inside a multi-line string"
[not_a_table]
"""
timeout_s = "slow"

[approvals]
allow = [
  "terminal(git status)",
  "x = [nested]",
]
mode = "ask"

[plugin_settings.failover]
base_delay = 3
'''


def test_the_text_is_toml_as_written() -> None:
    tomllib.loads(TEXT)  # the lines below are those of a file tomllib reads


@pytest.mark.parametrize(("path", "line"), [
    ("$.max_turns", 2),
    ('$."quoted key"', 3),
    ("$.tools.terminal.timeout_s", 4),
    ("$.tools.terminal", 4),
    ("$.providers[0].model", 8),
    ("$.providers[0].name", 6),  # missing: its table's header
    ("$.providers[1].name", 11),
    ("$.providers[1].timeout_s", 16),  # the multi-line string's lines are no keys
    ("$.providers[1]", 10),
    ("$.approvals.allow[1]", 19),  # an array element: the key's line
    ("$.approvals.mode", 23),  # after the multi-line array
    ("$.plugin_settings.failover.base_delay", 26),
    ("$.plugin_settings.failover.base_delay_s", 25),
])
def test_each_path_finds_its_line_or_its_nearest_ancestors(path: str, line: int) -> None:
    assert line_of(TEXT, path) == line


@pytest.mark.parametrize("path", ["$.not_there", "$.fake", "$.not_a_table.x", "$", "nope"])
def test_a_path_the_file_lacks_has_no_line(path: str) -> None:
    assert line_of(TEXT, path) is None


def test_problems_get_their_line_but_not_what_the_environment_set() -> None:
    problems = ["$.max_turns: must be at least 1", "$.providers[1].timeout_s: expected a number",
                "plugin 'x': failed", "$.session_dir: not a directory"]
    assert with_lines(TEXT, problems, skip=frozenset({"providers"})) == [
        "$.max_turns: must be at least 1 (line 2)",
        "$.providers[1].timeout_s: expected a number",
        "plugin 'x': failed",
        "$.session_dir: not a directory",
    ]


def test_a_config_error_names_the_path_and_the_line(tmp_path: Path) -> None:
    config = tmp_path / ".lich" / "config.toml"
    config.parent.mkdir()
    config.write_text("[[providers]]\nkind = \"openai_compat\"\nmodel = \"m\"\n\n"
                      "[[providers]]\nkind = \"ollama\"\nname = \"b\"\nmodel = 3\n",
                      encoding="utf-8")
    with pytest.raises(lich.ConfigError) as info:
        load_config(work_dir=tmp_path, env={})
    assert info.value.problems == [
        "$.providers[0].name: required key missing (line 1)",
        "$.providers[1].model: expected a string, got integer (line 8)",
    ]
    assert str(config) in str(info.value)
    # A value given as a flag has no line of the file, even where the file sets it too.
    config.write_text("max_turns = 5\n", encoding="utf-8")
    with pytest.raises(lich.ConfigError) as flag_info:
        load_config(work_dir=tmp_path, env={}, flags={"max_turns": 0})
    (problem,) = flag_info.value.problems
    assert problem.startswith("$.max_turns: ")
    assert "(line" not in problem
