"""Writing an ``always`` approval's rules to a real config file."""

from __future__ import annotations

import os
import stat
import threading
import tomllib
from pathlib import Path

import pytest

from lich.approvals.store import add_allow_rules, approval_config_targets
from lich.config import ConfigError, LichConfig, load_config, locate_config, user_config_path

COMMENTED = """\
# my project
max_turns = 5  # keep it short

[approvals]
mode = "ask"   # ask me first
allow = [
    "read_file",  # reads are fine
    "terminal(git status*)",
]

[tools.terminal]
timeout_s = 3
"""


def test_rules_are_appended_and_the_comments_kept(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(COMMENTED)
    add_allow_rules(path, ["terminal(git diff*)", "read_file", "terminal(git diff*)"])
    text = path.read_text()
    assert text == COMMENTED.replace(
        '    "terminal(git status*)",\n',
        '    "terminal(git status*)",\n    "terminal(git diff*)",\n')
    add_allow_rules(path, ["terminal(git diff*)"])  # nothing new: the file stays
    assert path.read_text() == text


def test_the_file_and_table_are_created_when_absent(tmp_path: Path) -> None:
    path = tmp_path / "project" / ".lich" / "config.toml"
    add_allow_rules(path, ["write_file(src/*)"])
    assert tomllib.loads(path.read_text()) == {"approvals": {"allow": ["write_file(src/*)"]}}
    other = tmp_path / "other.toml"
    other.write_text('model_note = "x"  # a comment\n[tools.read_file]\ntimeout_s = 2\n')
    add_allow_rules(other, ["terminal(ls*)"])
    assert other.read_text().startswith('model_note = "x"  # a comment\n')
    assert tomllib.loads(other.read_text())["approvals"] == {"allow": ["terminal(ls*)"]}
    inline = tmp_path / "inline.toml"
    inline.write_text('approvals = { mode = "allow" }\n')
    add_allow_rules(inline, ["terminal(ls*)"])
    assert tomllib.loads(inline.read_text())["approvals"] == {
        "mode": "allow", "allow": ["terminal(ls*)"]}


def test_a_hostile_rule_is_escaped_and_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("max_turns = 3\n")
    hostile = 'terminal(echo "x" \'y\' \\" \n[providers]\nname = """evil""" # )'
    add_allow_rules(path, [hostile])
    data = tomllib.loads(path.read_text())
    assert data == {"max_turns": 3, "approvals": {"allow": [hostile]}}
    # And the config loader takes the file as it is.
    loaded = load_config(config_path=str(path), env={})
    assert loaded.config.table("approvals") == {"allow": [hostile]}


def test_an_unparsable_file_or_rule_is_refused_and_nothing_written(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    broken = "[approvals\nallow = [\n"
    path.write_text(broken)
    with pytest.raises(ConfigError, match="not valid TOML") as caught:
        add_allow_rules(path, ["terminal(ls*)"])
    assert caught.value.file == str(path)
    assert path.read_text() == broken
    path.write_text("approvals = 3\n")
    with pytest.raises(ConfigError, match=r"\$\.approvals: expected a table"):
        add_allow_rules(path, ["terminal(ls*)"])
    path.write_text('[approvals]\nallow = "terminal"\n')
    with pytest.raises(ConfigError, match=r"\$\.approvals\.allow: expected an array"):
        add_allow_rules(path, ["terminal(ls*)"])
    assert path.read_text() == '[approvals]\nallow = "terminal"\n'
    with pytest.raises(ValueError, match="bad rule 'terminal\\('"):
        add_allow_rules(tmp_path / "never.toml", ["terminal("])
    assert not (tmp_path / "never.toml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]  # no temp file left


def test_the_mode_is_kept_and_a_symlink_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text("max_turns = 2\n")
    os.chmod(real, 0o600)
    link = tmp_path / "config.toml"
    os.symlink(real, link)
    add_allow_rules(link, ["terminal(ls*)"])
    assert link.is_symlink()
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert tomllib.loads(real.read_text())["approvals"]["allow"] == ["terminal(ls*)"]


def test_concurrent_writers_lose_no_rule(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("# shared\n")
    rules = [f"terminal(job{i}*)" for i in range(8)]
    threads = [threading.Thread(target=add_allow_rules, args=(path, [r])) for r in rules]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(tomllib.loads(path.read_text())["approvals"]["allow"]) == sorted(rules)
    assert path.read_text().startswith("# shared\n")


def test_targets_are_the_project_config_and_the_user_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    project = tmp_path / "project"
    (project / ".lich").mkdir(parents=True)
    (project / ".lich" / "config.toml").write_text("")
    below = project / "src"
    below.mkdir()
    config = LichConfig(work_dir=str(below))
    assert approval_config_targets(config, locate_config(below)) == [
        ("this project", project / ".lich" / "config.toml"),
        ("your user config", user_config_path()),
    ]
    assert approval_config_targets(LichConfig(work_dir=str(tmp_path)), None) == [
        ("this project", tmp_path / ".lich" / "config.toml"),
        ("your user config", user_config_path()),
    ]
    given = tmp_path / "ci.toml"
    given.write_text("")
    targets = approval_config_targets(config, locate_config(below, str(given)))
    assert targets[0] == ("the config given with --config", given)


def test_a_config_created_for_a_rule_is_private_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        path = tmp_path / "home" / ".config" / "lich" / "config.toml"
        add_allow_rules(path, ["terminal(ls*)"])
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for directory in (path.parent, path.parent.parent, path.parent.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
