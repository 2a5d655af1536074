"""``lich sessions``, ``--resume`` and ``lich store migrate`` against the postgres store,
through the real command line (in process and as a subprocess), the model scripted
on 127.0.0.1. The DSN (with its password) reaches lich through ``dsn_env`` and must
never be shown."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lich.postgres.schema import SCHEMA_VERSION
from lich.testing.postgres import PostgresCluster

from .conftest import run_lich, write_config

DSN_VAR = "LICH_TEST_POSTGRES_DSN"
STORE = f'[session_store]\nkind = "postgres"\ndsn_env = "{DSN_VAR}"\nreconnect_s = 5\n'


@pytest.fixture
def pg_work(work: Path, lich_postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(DSN_VAR, lich_postgres_dsn)
    return work


def no_secret(cluster: PostgresCluster, *outputs: str) -> None:
    for text in outputs:
        assert cluster.password not in text


def test_sessions_list_show_path_and_resume(pg_work: Path, lich: Any, scripted: Any,
                                             lich_postgres: PostgresCluster) -> None:
    from lich.testing import Reply
    from lich.types import ToolCall

    server = scripted([Reply("checking", (ToolCall("c1", "list_dir", {"path": "."}),)),
                       "all good", "you asked about the first question"])
    write_config(pg_work, server.base_url, extra=STORE)

    first = lich("first question")
    assert first.exit_code == 0, first.stderr
    listed = lich("sessions", "list")
    as_json = json.loads(lich("sessions", "list", "--json").stdout)
    sid = as_json[0]["session_id"]
    shown = lich("sessions", "show", "latest")
    where = lich("sessions", "path")
    one = lich("sessions", "path", sid[:10])

    assert listed.exit_code == 0
    assert sid in listed.stdout
    assert "first question" in listed.stdout
    assert as_json[0]["title"] == "first question"
    assert as_json[0]["path"] is None
    assert as_json[0]["status"] == "final"
    assert shown.exit_code == 0, shown.stderr
    assert "you: first question" in shown.stdout
    assert "→ list_dir(" in shown.stdout
    assert "lich: all good" in shown.stdout
    assert "run ended: final after 2 turns" in shown.stdout
    host = f"lich@127.0.0.1:{lich_postgres.port}/"
    assert where.stdout.strip().startswith(f"postgres {host}")
    assert one.stdout.strip().endswith(f"session {sid}")
    # Nothing went to files.
    assert not list((pg_work / ".lich" / "sessions").glob("*.jsonl"))

    resumed = lich("--resume", sid[:12], "and now?")
    assert resumed.exit_code == 0, resumed.stderr
    assert server.user_messages() == ["first question", "and now?"]
    shown_json = json.loads(lich("sessions", "show", sid, "--json").stdout)
    assert [m["content"] for m in shown_json["messages"] if m["role"] == "user"] == [
        "first question", "and now?"]
    assert shown_json["problems"] == []
    assert shown_json["location"].endswith(f"session {sid}")
    assert len(json.loads(lich("sessions", "list", "--json").stdout)) == 1

    removed = lich("sessions", "rm", sid)
    assert removed.exit_code == 0, removed.stderr
    assert json.loads(lich("sessions", "list", "--json").stdout) == []
    missing = lich("--resume", sid, "again")
    assert missing.exit_code == 2
    assert "--resume: no session" in missing.stderr
    no_secret(lich_postgres, listed.stdout, listed.stderr, shown.stdout, where.stdout,
              resumed.stderr, missing.stderr)


def test_a_run_and_migrate_as_real_processes(pg_work: Path, scripted: Any,
                                             lich_postgres: PostgresCluster) -> None:
    server = scripted(["hello from the model"])
    write_config(pg_work, server.base_url, extra=STORE)
    env = dict(os.environ)

    migrated = run_lich("store", "migrate", cwd=pg_work, env=env)
    again = run_lich("store", "migrate", cwd=pg_work, env=env)
    ran = run_lich("say hello", cwd=pg_work, env=env)
    listed = run_lich("sessions", "list", "--json", cwd=pg_work, env=env)

    assert migrated.returncode == 0, migrated.stderr
    assert f"schema migrated from version 0 to {SCHEMA_VERSION}" in migrated.stdout
    assert again.returncode == 0
    assert f"schema version {SCHEMA_VERSION}, up to date" in again.stdout
    assert ran.returncode == 0, ran.stderr
    assert "hello from the model" in ran.stdout
    assert [s["title"] for s in json.loads(listed.stdout)] == ["say hello"]
    no_secret(lich_postgres, *(p.stdout + p.stderr for p in (migrated, again, ran, listed)))


def test_store_migrate_with_the_jsonl_store_says_there_is_nothing_to_do(
        work: Path, lich: Any, scripted: Any) -> None:
    write_config(work, scripted([]).base_url)
    result = lich("store", "migrate")
    assert result.exit_code == 0
    assert "has no schema to migrate" in result.stdout


def test_configuration_errors_name_the_setting(work: Path, lich: Any, scripted: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    server = scripted(["never"])
    monkeypatch.delenv(DSN_VAR, raising=False)
    write_config(work, server.base_url, extra=STORE)
    unset = lich("sessions", "list")
    run = lich("a task")
    write_config(work, server.base_url,
                 extra='[session_store]\nkind = "postgres"\npool_size = 0\n')
    validated = lich("config", "validate")

    assert unset.exit_code == 2
    assert f"the environment variable {DSN_VAR} is not set" in unset.stderr
    assert run.exit_code == 2
    assert f"{DSN_VAR} is not set" in run.stderr
    assert validated.exit_code == 2
    assert "$.session_store.pool_size" in validated.stderr + validated.stdout
    assert "exactly one of dsn_env" in validated.stderr + validated.stdout
    assert server.requests == []


def test_an_unreachable_database_is_one_clear_error(
    work: Path, lich: Any, scripted: Any, monkeypatch: pytest.MonkeyPatch,
    refused_port: Callable[[], int],
) -> None:
    port = refused_port()
    monkeypatch.setenv(DSN_VAR, f"postgresql://lich:hunter2secret@127.0.0.1:{port}/x")
    write_config(work, scripted([]).base_url,
                 extra=STORE.replace("reconnect_s = 5", "reconnect_s = 0"))
    result = lich("sessions", "list")
    assert result.exit_code == 1
    assert "session store: listing sessions: the session store (postgres " \
           f"lich@127.0.0.1:{port}/x) is unreachable" in result.stderr
    assert "hunter2secret" not in result.stderr + result.stdout


def test_config_show_masks_a_dsn_and_validate_checks_the_store(
        work: Path, lich: Any, scripted: Any) -> None:
    server = scripted([])
    write_config(work, server.base_url, extra=(
        '[session_store]\nkind = "postgres"\n'
        'dsn = "postgresql://lich:hunter2secret@127.0.0.1:1/x"\n'))
    shown = lich("config", "show", "--json")
    assert shown.exit_code == 0, shown.stderr
    assert "hunter2secret" not in shown.stdout
    assert json.loads(shown.stdout)["values"]["session_store"]["value"]["dsn"] == "***"
    assert lich("config", "validate").exit_code == 0

    write_config(work, server.base_url, extra='[session_store]\nkind = "s3"\n')
    unknown = lich("config", "validate")
    assert unknown.exit_code == 2
    assert "$.session_store.kind: no loaded plugin provides the session store 's3'" in (
        unknown.stderr)
    write_config(work, server.base_url, extra='[session_store]\ndirectory = "x"\n')
    extra = lich("config", "validate")
    assert extra.exit_code == 2
    assert "$.session_store.directory: the jsonl store takes no settings" in extra.stderr


def test_sessions_list_shows_the_cost_as_for_session_files(
        pg_work: Path, lich: Any, scripted: Any) -> None:
    """Priced runs in one postgres session: `sessions list` and its `--json` show their
    summed cost, as they do for the JSONL store (tests/cli/test_cost.py)."""
    from .test_cost import priced_config, tool_then_answer

    server = scripted(responder=tool_then_answer)
    priced_config(pg_work, server.base_url, extra=STORE)
    first = lich("look around")
    assert first.exit_code == 0, first.stderr
    sid = json.loads(lich("sessions", "list", "--json").stdout)[0]["session_id"]
    again = lich("--resume", sid, "again")
    assert again.exit_code == 0, again.stderr

    listed = lich("sessions", "list")
    assert listed.exit_code == 0, listed.stderr
    assert "$0.1600" in listed.stdout
    (entry,) = json.loads(lich("sessions", "list", "--json").stdout)
    assert entry["cost_usd"] == pytest.approx(0.16)
    assert not list((pg_work / ".lich" / "sessions").glob("*.jsonl"))
