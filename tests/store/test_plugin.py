"""The ``postgres`` plugin around the store: its settings, what it costs when it is not
the configured store (nothing: psycopg is not even imported), and how a missing
psycopg or a DSN with a password is reported."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from lich.config import ConfigError
from lich.postgres.plugin import make_store
from lich.postgres.settings import parse_store_settings, resolve_dsn
from lich.postgres.store import describe_dsn
from lich.testing import make_test_config


def test_a_plain_run_never_imports_psycopg(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from lich.agent import Agent\n"
        "from lich.config import LichConfig\n"
        "from lich.testing import ScriptedChat\n"
        f"config = LichConfig(work_dir={str(tmp_path)!r})\n"  # the default plugins
        "agent = Agent(config, chat=ScriptedChat(['hi']))\n"
        "assert 'postgres' in [r.entry for r in agent.host.reports]\n"
        "assert agent.run_sync('hello').text == 'hi'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool')"
        " or m == 'lich.postgres.store'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_settings_need_exactly_one_dsn_source() -> None:
    with pytest.raises(ConfigError, match="exactly one of dsn_env"):
        parse_store_settings({"kind": "postgres"})
    with pytest.raises(ConfigError, match="exactly one of dsn_env"):
        parse_store_settings({"kind": "postgres", "dsn": "x", "dsn_env": "Y"})
    with pytest.raises(ConfigError) as bad:
        parse_store_settings({"kind": "postgres", "dsn_env": "Y", "pool_size": "4",
                              "reconect_s": 3})
    text = str(bad.value)
    assert "$.session_store.pool_size" in text
    assert "$.session_store.reconect_s" in text
    settings = parse_store_settings({"kind": "postgres", "dsn_env": "PG_DSN", "pool_size": 2})
    assert settings.pool_size == 2
    assert resolve_dsn(settings, {"PG_DSN": " postgresql://db/x "}) == "postgresql://db/x"
    with pytest.raises(ConfigError, match="the environment variable PG_DSN is not set"):
        resolve_dsn(settings, {})


def test_a_dsn_is_described_without_its_password() -> None:
    assert describe_dsn("postgresql://ada:s3cret@db.internal:6432/lich?sslmode=require") == (
        "postgres ada@db.internal:6432/lich")
    assert describe_dsn("host=db user=ada password=s3cret dbname=lich") == (
        "postgres ada@db/lich")
    assert "s3cret" not in describe_dsn("postgresql://ada:s3cret@/lich?host=/tmp")


def test_a_dsn_with_a_password_in_the_config_is_warned_about(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = make_test_config(tmp_path, session_store={
        "kind": "postgres", "dsn": "postgresql://ada:s3cret@127.0.0.1:1/x"})
    with caplog.at_level(logging.WARNING, logger="lich.postgres"):
        store = make_store(config)
    store.close()
    assert "prefer dsn_env" in caplog.text
    assert "s3cret" not in caplog.text


def test_without_psycopg_the_store_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now fails
    monkeypatch.delitem(sys.modules, "lich.postgres.store")
    config = make_test_config(tmp_path, session_store={"kind": "postgres", "dsn": "x"})
    with pytest.raises(ConfigError, match=r"pip install 'lich-agent\[postgres\]'"):
        make_store(config)


def test_a_dsn_libpq_cannot_parse_is_a_config_error_that_does_not_quote_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_DSN", "host=db password=s3cret garbage")
    config = make_test_config(tmp_path, session_store={"kind": "postgres", "dsn_env": "PG_DSN"})
    with pytest.raises(ConfigError) as bad:
        make_store(config)
    assert "$.session_store.dsn_env: the dsn_env (PG_DSN) is not a libpq connection" in str(
        bad.value)
    assert "s3cret" not in str(bad.value)
