"""docs/cluster.md's walk-through without Docker: its config validates, its SQL makes a
role and database that ``lich store migrate`` can use (and that keep
``synchronous_commit`` on), and its commands are ones ``lich`` accepts."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from lich_env import lich_env

from lich.nats_bus.command import worker_command
from lich.testing.postgres import PostgresCluster

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cluster.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def walkthrough() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## A cluster by hand, without Docker")
    return text[start:text.index("\n## ", start + 1)]


def blocks(language: str = "") -> list[str]:
    return [body for lang, body in _FENCE.findall(walkthrough()) if lang == language]


def lich(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lich", *args], capture_output=True,
                          text=True, timeout=120, env=lich_env(tmp_path, **env), cwd=tmp_path)


def test_the_config_validates(tmp_path: Path) -> None:
    (config,) = blocks("toml")
    path = tmp_path / "cluster.toml"
    path.write_text(config.replace("/var/lib/lich", str(tmp_path / "state")), encoding="utf-8")
    proc = lich(tmp_path, "--config", str(path), "config", "validate",
                LICH_POSTGRES_DSN="postgresql://lich@127.0.0.1/lich", OPENAI_API_KEY="sk-x",
                LICH_GATEWAY_TOKEN="t" * 32)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_sql_makes_a_database_lich_migrates_with_synchronous_commit_on(
        tmp_path: Path, lich_postgres: PostgresCluster) -> None:
    script = next(b for b in blocks() if "CREATE ROLE" in b)
    sql = script[script.index("<<'SQL'\n") + len("<<'SQL'\n"):script.index("\nSQL\n")]
    # A role and database of this test's own, in a cluster other tests share.
    suffix = f"walk_{tmp_path.name[-8:].lower().replace('-', '_')}"
    sql = re.sub(r"\blich\b", suffix, sql)
    dsn_line = next(line for line in script.splitlines() if "LICH_POSTGRES_DSN=" in line)
    password = re.search(r"postgresql://lich:([^@]+)@", dsn_line)
    assert password is not None
    with psycopg.connect(lich_postgres.dsn(), autocommit=True) as conn:
        for statement in filter(str.strip, sql.split(";")):
            conn.execute(statement)
        # Off for the database, as a server tuned for throughput may have it: the role's
        # setting (the doc's ALTER ROLE) comes first, so lich's sessions keep it on.
        conn.execute(f"ALTER DATABASE {suffix} SET synchronous_commit = off")
    dsn = (f"postgresql://{suffix}:{password.group(1)}@{lich_postgres.host}:"
           f"{lich_postgres.port}/{suffix}")
    config = tmp_path / "cluster.toml"
    config.write_text('[session_store]\nkind = "postgres"\ndsn_env = "LICH_POSTGRES_DSN"\n',
                      encoding="utf-8")
    migrate = next(line for line in script.splitlines() if "store migrate" in line)
    args = shlex.split(migrate)
    assert args[0] == "lich"
    args[args.index("--config") + 1] = str(config)
    proc = lich(tmp_path, *args[1:], LICH_POSTGRES_DSN=dsn)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert conn.execute("SELECT count(*) FROM lich_schema_version").fetchone() != (0,)


@pytest.mark.parametrize("line", [
    line for block in blocks() for line in block.splitlines()
    if line.startswith("lich ") and " worker" in line])
def test_the_worker_command_lines_parse(line: str) -> None:
    args = shlex.split(line.split("#")[0])
    worker_args = args[args.index("worker") + 1:]
    context = worker_command.make_context("worker", list(worker_args))
    assert context.params["concurrency"] == 8
