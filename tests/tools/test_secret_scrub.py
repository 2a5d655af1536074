"""The secret scrub (lich.secrets) by name and by value: each name and each token
shape of the rule table, set in the real environment, is kept from a real
``terminal`` command's environment and redacted by ``env_get`` (#28.18)."""

from __future__ import annotations

from pathlib import Path

import pytest
from provider_kinds import builtin_provider_kinds

from lich.config import LichConfig
from lich.executor import ToolExecutor
from lich.protected import ProtectedPaths
from lich.providers import secret_env_names
from lich.secrets import VALUE_RULES, is_secret_entry, is_secret_name, is_secret_value
from lich.tools import ToolRegistry
from lich.types import ToolCall, ToolResult
from lich_builtin_tools import builtin_tools

# Names whose value is a credential, whatever it looks like.
NAMES = ["SSHPASS", "BW_SESSION", "OP_SESSION_my_team", "OP_SESSION_abc123", "CI_JOB_JWT",
         "CI_JOB_JWT_V1", "CI_JOB_JWT_V2", "VAULT_JWT", "MY_SERVICE_JWT", "NPM_TOKEN",
         "PGPASSWORD", "MYSQL_PWD", "AWS_SESSION_TOKEN"]

_B = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# One example per rule of the table, under a name that says nothing (built from parts,
# so this file holds no token a scanner would flag as a real one).
EXAMPLES = {
    "private-key": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow" + _B
                    + "\n-----END RSA PRIVATE KEY-----"),
    "stripe-access-token": "sk_" + "live_" + _B[:30],
    "github-pat": "ghp_" + _B[:36],
    "github-oauth": "gho_" + _B[:36],
    "github-app-token": "ghs_" + _B[:36],
    "github-refresh-token": "ghr_" + _B[:40],
    "github-fine-grained-pat": "github_pat_" + (_B + _B)[:82],
    "gitlab-pat": "glpat-" + _B[:20],
    "gitlab-ptt": "glptt-" + _B[:40],
    "slack-token": "xoxb-" + "1234567890-" + _B[:24],
    "slack-app-token": "xapp-1-A0" + "B1C2D3-1234567890-" + _B[:20],
    "aws-access-token": "AKIA" + "ABCDEFGHIJKLMNOP",
    "gcp-api-key": "AIza" + _B[:35],
    "openai-api-key": "sk-" + "proj-" + _B[:40],
    "anthropic-api-key": "sk-" + "ant-api03-" + _B[:40],
    "huggingface-access-token": "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "npm-access-token": "npm_" + _B[:36],
    "pypi-upload-token": "pypi-" + "AgEIcHlwaS5vcmc" + (_B + _B)[:60],
    "sendgrid-api-token": "SG." + (_B + _B)[:66],
    "digitalocean-pat": "dop_v1_" + ("0123456789abcdef" * 4),
    "shopify-access-token": "shpat_" + "0123456789abcdef" * 2,
    "doppler-api-token": "dp.pt." + _B[:43],
    "1password-service-account-token": "ops_eyJ" + (_B * 5)[:260],
    "age-secret-key": "AGE-SECRET-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2,
    "password-assignment": "host=db.example port=5432 user=app password=hunter2-x",
    "jwt": "eyJhbGciOiJIUzI1NiJ9x." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0." + "dozjgNryP4J3jVmNHl0w",
}
URL_VALUES = ["https://db.example/connect?user=app&password=hunter2-x",
              "https://api.example/v1?api_key=abcdef123456",
              "postgres://app:hunter2@db.example/app",
              "https://user@example.com:token-abc@proxy.example/"]
PLAIN = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/me", "LANG": "C.UTF-8",
         "XDG_SESSION_ID": "3", "DESKTOP_SESSION": "ubuntu", "SESSION_MANAGER": "local/h:@/tmp",
         "DOCS_URL": "https://docs.example/lich?page=2", "EDITOR": "vim",
         "PYTHONPATH": "/work/src", "SHORT_SK": "sk-1"}


def _executor(work: Path) -> ToolExecutor:
    config = LichConfig(work_dir=str(work), plugins=())
    registry = ToolRegistry()
    for item in builtin_tools(config):
        registry.register(item)
    return ToolExecutor(registry, work_dir=work,
                        secret_env_names=secret_env_names(config, builtin_provider_kinds()),
                        protected=ProtectedPaths.for_config(config))


async def _call(work: Path, name: str, args: dict[str, object]) -> ToolResult:
    return await _executor(work).execute(ToolCall("c1", name, args))


def test_every_rule_of_the_table_has_an_example() -> None:
    assert {rule for rule, _ in VALUE_RULES} == set(EXAMPLES)
    for rule, value in EXAMPLES.items():
        assert is_secret_value(value), rule
        assert is_secret_value(f"Bearer {value}"), rule  # inside a longer value too


def test_plain_entries_stay() -> None:
    for name, value in PLAIN.items():
        assert not is_secret_entry(name, value), name


@pytest.mark.parametrize("name", NAMES)
async def test_a_secret_name_is_scrubbed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
) -> None:
    assert is_secret_name(name)
    value = f"plain-looking-value-{name.lower()}"
    monkeypatch.setenv(name, value)
    shown = await _call(tmp_path, "env_get", {"keys": [name], "reveal": True})
    shell = await _call(tmp_path, "terminal", {"command": "env"})
    assert shown.output == f"{name}=<redacted: {len(value)} chars>"
    assert value not in shell.output
    assert f"{name}=" not in shell.output


@pytest.mark.parametrize("value", [*EXAMPLES.values(), *URL_VALUES],
                         ids=[*EXAMPLES, *(f"url{i}" for i in range(len(URL_VALUES)))])
async def test_a_secret_value_is_scrubbed_whatever_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str,
) -> None:
    monkeypatch.setenv("INNOCENT_SETTING", value)
    shown = await _call(tmp_path, "env_get", {"keys": ["INNOCENT_SETTING"], "reveal": True})
    shell = await _call(tmp_path, "terminal", {"command": "env"})
    assert shown.output == f"INNOCENT_SETTING=<redacted: {len(value)} chars>"
    assert "INNOCENT_SETTING=" not in shell.output


async def test_without_inherit_env_the_launchers_variables_stay_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`inherit_env = false`: what lich's launcher put in its environment (`make`'s
    MAKEFLAGS, an IDE's variables, anything a name rule does not call secret) does
    not reach the command; PATH and HOME do, the tool env and pass_env too."""
    monkeypatch.setenv("LAUNCHER_ONLY_SETTING", "from-the-launcher-7e1a")
    monkeypatch.setenv("WANTED_THROUGH", "kept-on-purpose")
    executor = _executor(tmp_path)
    executor.env = {"FROM_TOOL_ENV": "tool-env-value"}
    executor.tool_settings = {"terminal": {"inherit_env": False,
                                           "pass_env": ["WANTED_THROUGH"]}}
    narrow = await executor.execute(ToolCall("c1", "terminal", {"command": "env; ls /"}))
    executor.tool_settings = {}
    wide = await executor.execute(ToolCall("c2", "terminal", {"command": "env"}))
    assert narrow.ok, narrow.output
    assert "from-the-launcher-7e1a" not in narrow.output
    assert "tool-env-value" in narrow.output
    assert "kept-on-purpose" in narrow.output
    assert f"HOME={Path.home()}" in narrow.output
    assert "PATH=" in narrow.output
    assert "from-the-launcher-7e1a" in wide.output  # the default inherits, scrubbed
