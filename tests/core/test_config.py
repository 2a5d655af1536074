"""Configuration: defaults, files, discovery, environment and flag overrides, errors."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from provider_kinds import builtin_provider_kinds

from lich.config import (
    BUILTIN_PLUGINS,
    ConfigError,
    LichConfig,
    ProviderConfig,
    config_with,
    find_config_file,
    load_config,
    user_config_path,
)

PROVIDER = '[[providers]]\nkind = "openai_compat"\nname = "main"\nmodel = "m1"\n'


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user config dir, so a developer's own config never leaks into a test."""
    config_home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    return config_home


def write_config(work: Path, text: str, name: str = "config.toml") -> Path:
    path = work / ".lich" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load(work: Path, **kw: Any) -> LichConfig:
    # The projects here are the test's own: trusted (tests/cli/test_trust.py is the
    # untrusted case).
    kw.setdefault("env", {})
    kw.setdefault("trust", True)
    return load_config(work_dir=work, **kw).config


def problems_of(work: Path, **kw: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(work, **kw)
    return info.value


# ------------------------------------------------------------------ defaults and files


def test_defaults(tmp_path: Path, home: Path) -> None:
    loaded = load_config(work_dir=tmp_path, trust=True, env={})
    config = loaded.config
    assert loaded.file is None
    assert config.providers == ()
    assert config.max_turns == 25
    assert config.context_budget_tokens == 100_000
    assert config.compress_threshold == 0.8
    assert config.tools_enabled is None
    assert config.tools_disabled == ()
    assert config.plugins == BUILTIN_PLUGINS
    assert BUILTIN_PLUGINS[:6] == (
        "builtin_tools", "approvals", "openai_compat", "anthropic", "ollama", "failover"
    )
    assert config.stream is True
    assert config.hook_timeout_s == 10.0
    assert config.strict_plugins is False
    assert config.work_dir == str(tmp_path.resolve())
    assert config.session_dir == str(tmp_path.resolve() / ".lich" / "sessions")


def test_toml_file_in_the_work_dir(tmp_path: Path, home: Path) -> None:
    path = write_config(
        tmp_path,
        textwrap.dedent(
            """
            max_turns = 7
            plugins = ["builtin_tools", "./mine.py"]
            tools_enabled = ["read_file"]
            tools_disabled = ["terminal"]
            stream = false
            hook_timeout_s = 2.5

            [tools.read_file]
            timeout_s = 3
            max_output_chars = 1000

            [plugin_settings.audit]
            level = "loud"
            """
        )
        + PROVIDER,
    )
    loaded = load_config(work_dir=tmp_path, trust=True, env={})
    config = loaded.config
    assert loaded.file == str(path)
    assert loaded.sources["max_turns"] == "file"
    assert config.providers == (ProviderConfig(kind="openai_compat", name="main", model="m1"),)
    assert config.max_turns == 7
    assert config.plugins == ("builtin_tools", "./mine.py")
    assert config.tools_enabled == ("read_file",)
    assert config.tools_disabled == ("terminal",)
    assert config.stream is False
    assert config.hook_timeout_s == 2.5
    assert config.tool_settings("read_file") == {"timeout_s": 3, "max_output_chars": 1000}
    assert config.tool_settings("other") == {}
    assert config.plugin_settings == {"audit": {"level": "loud"}}


def test_explicit_json_config(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "elsewhere.json"
    path.write_text(json.dumps({"providers": [{"kind": "ollama", "name": "o", "model": "q"}],
                                "tools_enabled": "all"}))
    loaded = load_config(work_dir=tmp_path, config_path=str(path), env={})
    assert loaded.file == str(path)
    assert loaded.config.providers[0].kind == "ollama"
    assert loaded.config.tools_enabled is None


def test_explicit_config_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config not found: "):
        load_config(work_dir=tmp_path, config_path=str(tmp_path / "nope.toml"), env={})


def test_discovery_prefers_the_work_dir_then_the_user_config_dir(
    tmp_path: Path, home: Path
) -> None:
    assert find_config_file(tmp_path) is None
    user = user_config_path()
    assert user == home / "lich" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("max_turns = 3\n")
    assert find_config_file(tmp_path) == user
    assert load(tmp_path).max_turns == 3
    local = write_config(tmp_path, "max_turns = 4\n")
    assert find_config_file(tmp_path) == local
    assert load(tmp_path).max_turns == 4


def test_work_dir_in_a_file_is_relative_to_the_project(tmp_path: Path, home: Path) -> None:
    (tmp_path / "sub").mkdir()
    write_config(tmp_path, 'work_dir = "sub"\n')
    config = load(tmp_path)
    assert config.work_dir == str((tmp_path / "sub").resolve())
    assert config.session_dir == str((tmp_path / "sub").resolve() / ".lich" / "sessions")


def test_session_dir_in_a_file_is_relative_to_the_work_dir(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)  # where lich happens to be started must not matter
    write_config(tmp_path, 'session_dir = "transcripts"\n')
    assert load(tmp_path).session_dir == str(tmp_path.resolve() / "transcripts")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write_config(tmp_path, 'session_dir = "~/lich-sessions"\n')
    assert load(tmp_path).session_dir == str(tmp_path / "home" / "lich-sessions")


def test_unreadable_and_malformed_files_name_the_file(tmp_path: Path, home: Path) -> None:
    path = write_config(tmp_path, "max_turns = = 3\n")
    error = problems_of(tmp_path)
    assert error.file == str(path)
    assert str(error).startswith(f"{path}: not valid TOML")
    bad_json = tmp_path / "c.json"
    bad_json.write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(work_dir=tmp_path, config_path=str(bad_json), env={})
    bad_json.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"\$: the top level must be a table/object"):
        load_config(work_dir=tmp_path, config_path=str(bad_json), env={})


# ------------------------------------------------------------------ errors with $.path


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("nonsense = 1\n", "$.nonsense: unknown key"),
        (PROVIDER + "colour = 'red'\n", "$.providers[0].colour: unknown key"),
        ("max_turns = 0\n", "$.max_turns: must be between 1 and 10000, got 0"),
        ("max_turns = '3'\n", "$.max_turns: expected an integer, got string"),
        ("max_tokens = 1.5\n", "$.max_tokens: expected an integer, got number"),
        ("temperature = 2.5\n", "$.temperature: must be between 0 and 2, got 2.5"),
        ("compress_threshold = 0.05\n", "$.compress_threshold: must be between 0.1 and 0.95"),
        ("stream = 'yes'\n", "$.stream: expected true or false, got string"),
        ("log_level = 'loud'\n", "$.log_level: must be one of 'debug', 'info'"),
        ("plugins = 'builtin_tools'\n", "$.plugins: expected an array, got string"),
        ("tools_enabled = 'some'\n", '$.tools_enabled: expected "all" or a list of tool names'),
        ("[tools]\nread_file = 3\n", "$.tools.read_file: expected a table, got integer"),
        ("providers = 'openai'\n", "$.providers: expected an array, got string"),
        ("providers = [1]\n", "$.providers[0]: expected a table, got integer"),
        ('[[providers]]\nkind = "openai_compat"\nname = "main"\n',
         "$.providers[0].model: required key missing"),
        (PROVIDER + "timeout_s = -1\n", "$.providers[0].timeout_s: must be greater than 0"),
        (PROVIDER + PROVIDER, "$.providers: duplicate provider name(s): main"),
        ("api_key = 'sk-123'\n", "$.api_key: secrets never live in the config"),
        (PROVIDER + "api_key = 'sk-123'\n", "$.providers[0].api_key: secrets never live"),
    ],
)
def test_bad_values_name_the_file_and_the_path(
    tmp_path: Path, home: Path, text: str, problem: str
) -> None:
    path = write_config(tmp_path, text)
    error = problems_of(tmp_path)
    assert error.file == str(path)
    assert str(error).startswith(f"{path}: ")
    assert any(p.startswith(problem) for p in error.problems), error.problems


def test_several_problems_are_listed_together(tmp_path: Path, home: Path) -> None:
    path = write_config(tmp_path, "nonsense = 1\nother = 2\n")
    error = problems_of(tmp_path)
    assert error.problems == ["$.nonsense: unknown key (line 1)",
                              "$.other: unknown key (line 2)"]
    assert str(error) == (
        f"{path}: invalid configuration:\n  $.nonsense: unknown key (line 1)\n"
        "  $.other: unknown key (line 2)"
    )


def test_the_executor_limits_of_every_tool_table_are_checked(tmp_path: Path, home: Path) -> None:
    # timeout_s and max_output_chars are lich's keys in every [tools.<name>] table, a
    # third-party tool's too; the tool's own keys are left to the plugin that owns it.
    write_config(tmp_path, (
        "[tools.read_file]\ntimeout_s = 0\n"
        "[tools.their_tool]\nmax_output_chars = 1.5\ntimeout_s = '9'\ntheir_key = 'any'\n"))
    assert sorted(problems_of(tmp_path).problems) == [
        "$.tools.read_file.timeout_s: must be greater than 0, got 0.0 (line 2)",
        "$.tools.their_tool.max_output_chars: expected an integer, got number (line 4)",
        "$.tools.their_tool.timeout_s: expected a number, got string (line 5)",
    ]
    write_config(tmp_path, "[tools.their_tool]\ntimeout_s = 2\ntheir_key = 'any'\n")
    assert load(tmp_path).tools == {"their_tool": {"timeout_s": 2, "their_key": "any"}}


def test_the_config_never_holds_a_key(tmp_path: Path, home: Path) -> None:
    write_config(tmp_path, PROVIDER + 'api_key_env = "MY_KEY"\n')
    config = load(tmp_path, env={"MY_KEY": "sk-secret"})
    assert config.providers[0].api_key_env == "MY_KEY"
    assert "sk-secret" not in repr(config)


# ------------------------------------------------------------------ environment and flags


def test_env_provider_when_no_file_names_one(tmp_path: Path, home: Path) -> None:
    loaded = load_config(
        trust=True,
        work_dir=tmp_path,
        env={"LICH_MODEL": "llama3", "LICH_PROVIDER_KIND": "ollama",
             "LICH_BASE_URL": "http://127.0.0.1:9", "LICH_API_KEY_ENV": "OLLAMA_KEY"},
    )
    (provider,) = loaded.config.providers
    assert provider == ProviderConfig(
        kind="ollama", name="default", model="llama3", base_url="http://127.0.0.1:9",
        api_key_env="OLLAMA_KEY",
    )
    assert loaded.sources["providers"] == "env"


def test_env_provider_leaves_the_defaults_to_the_kind(tmp_path: Path, home: Path) -> None:
    # The config only records what was given: the kind's plugin supplies the rest.
    (provider,) = load(tmp_path, env={"LICH_MODEL": "gpt-x"}).providers
    assert (provider.kind, provider.base_url, provider.api_key_env) == (None, None, None)
    kinds = builtin_provider_kinds()
    resolved = kinds.resolve(provider)
    assert resolved.kind == "openai_compat"  # the first provider plugin of the list
    assert resolved.api_key_env == "OPENAI_API_KEY"
    assert resolved.base_url == "https://api.openai.com/v1"
    env = {"LICH_MODEL": "c", "LICH_PROVIDER_KIND": "anthropic"}
    (anthropic,) = load(tmp_path, env=env).providers
    anthropic = kinds.resolve(anthropic)
    assert anthropic.api_key_env == "ANTHROPIC_API_KEY"
    assert anthropic.base_url == "https://api.anthropic.com"
    # Another host: the default key variable is not filled in.
    env = {"LICH_MODEL": "c", "LICH_BASE_URL": "http://127.0.0.1:9/v1"}
    (local,) = load(tmp_path, env=env).providers
    assert kinds.resolve(local).api_key_env is None


def test_a_kind_alone_does_not_make_a_provider(tmp_path: Path, home: Path) -> None:
    assert load(tmp_path, env={"LICH_PROVIDER_KIND": "ollama"}).providers == ()


def test_env_and_flags_override_the_first_provider_of_the_file(tmp_path: Path, home: Path) -> None:
    write_config(tmp_path, PROVIDER + 'base_url = "http://127.0.0.1:1/v1"\n'
                 '[[providers]]\nkind = "anthropic"\nname = "backup"\nmodel = "c"\n')
    config = load(tmp_path, env={"LICH_MODEL": "from-env"})
    assert [p.model for p in config.providers] == ["from-env", "c"]
    assert config.providers[0].base_url == "http://127.0.0.1:1/v1"

    flagged = load_config(work_dir=tmp_path, trust=True, env={"LICH_MODEL": "from-env"},
                          flags={"model": "from-flag"})
    assert flagged.config.providers[0].model == "from-flag"
    assert flagged.sources["providers"] == "flag"

    # A new kind keeps nothing endpoint-specific from the old one.
    switched = load(tmp_path, env={"LICH_PROVIDER_KIND": "ollama"})
    first = switched.providers[0]
    assert (first.kind, first.base_url, first.api_key_env) == ("ollama", None, None)
    assert builtin_provider_kinds().resolve(first).base_url == "http://localhost:11434"


def test_strict_plugins_and_log_level_from_env(tmp_path: Path, home: Path) -> None:
    loaded = load_config(work_dir=tmp_path, trust=True, env={"LICH_STRICT_PLUGINS": "1",
                                                 "LICH_LOG_LEVEL": "debug"})
    assert loaded.config.strict_plugins is True
    assert loaded.sources["strict_plugins"] == "env"
    assert loaded.config.log_level == "debug"
    assert load(tmp_path, env={"LICH_STRICT_PLUGINS": "0"}).strict_plugins is False


def test_a_bad_log_level_in_the_environment_is_blamed_on_the_variable(
    tmp_path: Path, home: Path
) -> None:
    # A config file exists (and is fine): the message must not point at it.
    write_config(tmp_path, "max_turns = 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(work_dir=tmp_path, env={"LICH_LOG_LEVEL": "verbose"})
    assert str(info.value) == (
        "LICH_LOG_LEVEL: 'verbose' is not a log level; use one of debug, info, warn, "
        "warning, error"
    )
    assert info.value.file is None
    # Case does not matter in the variable; a --log-level flag makes it irrelevant.
    assert load(tmp_path, env={"LICH_LOG_LEVEL": "DEBUG"}).log_level == "debug"
    flagged = load_config(work_dir=tmp_path, env={"LICH_LOG_LEVEL": "verbose"},
                          flags={"log_level": "error"})
    assert flagged.config.log_level == "error"


def test_flags_win_over_file_and_env(tmp_path: Path, home: Path) -> None:
    write_config(tmp_path, "max_turns = 5\nplugins = ['builtin_tools']\n")
    other = tmp_path / "other"
    other.mkdir()
    loaded = load_config(
        trust=True,
        work_dir=tmp_path,
        env={},
        flags={"max_turns": 9, "system_prompt": "flagged", "plugins": ["./x.py"],
               "stream": False, "work_dir": str(other), "session_dir": None},
    )
    config = loaded.config
    assert config.max_turns == 9
    assert config.system_prompt == "flagged"
    assert config.plugins == ("builtin_tools", "./x.py")  # --plugin adds, not replaces
    assert config.stream is False
    assert config.work_dir == str(other.resolve())
    assert loaded.sources["max_turns"] == "flag"


def test_config_is_frozen_and_config_with_follows_work_dir(tmp_path: Path) -> None:
    config = LichConfig(work_dir=str(tmp_path))
    with pytest.raises(AttributeError):
        config.max_turns = 3  # type: ignore[misc]
    moved = config_with(config, work_dir=str(tmp_path / "b"))
    assert moved.session_dir == str(tmp_path / "b" / ".lich" / "sessions")
    pinned = config_with(LichConfig(work_dir=str(tmp_path), session_dir="/s"), work_dir="/w")
    assert pinned.session_dir == "/s"


def test_data_instead_of_a_file(tmp_path: Path) -> None:
    loaded = load_config(work_dir=tmp_path, env={}, data={"max_turns": 2})
    assert loaded.file is None
    assert loaded.config.max_turns == 2
    with pytest.raises(ConfigError) as info:
        load_config(work_dir=tmp_path, env={}, data={"nope": 1})
    assert info.value.file is None
    assert str(info.value) == "$.nope: unknown key"


def test_the_real_environment_is_the_default(tmp_path: Path, home: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LICH_MODEL", "env-model")
    assert load_config(work_dir=tmp_path).config.providers[0].model == "env-model"
    assert os.environ["LICH_MODEL"] == "env-model"


def test_a_new_kind_keeps_no_header_or_option_of_the_old_endpoint(
    tmp_path: Path, home: Path
) -> None:
    # Headers often carry the old endpoint's credentials: they must not follow the kind.
    write_config(tmp_path, PROVIDER + 'headers = { X-Corp-Token = "abc" }\n'
                 'options = { org = "corp" }\n')
    switched = load(tmp_path, env={"LICH_PROVIDER_KIND": "anthropic"}).providers[0]
    assert (switched.kind, dict(switched.headers), dict(switched.options)) == (
        "anthropic", {}, {})
    same = load(tmp_path, env={"LICH_MODEL": "m2"}).providers[0]
    assert dict(same.headers) == {"X-Corp-Token": "abc"}
