"""Secrets in URLs (#28.9): a password or token in ``[bus] servers`` (and any URL lich
prints or logs) never reaches stdout, stderr or a log line — attacked with a real
broker and real ``lich`` processes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from lich_env import lich_env

from lich.secrets import REDACTED, redact_url, redact_urls
from lich.testing.nats import NatsServer
from lich.testing.ports import refused_port

PASSWORD = "hunter2-nats-password-77"
TOKEN = "tok-in-query-5150"


@pytest.mark.parametrize(("url", "shown"), [
    (f"nats://alice:{PASSWORD}@127.0.0.1:4222", f"nats://{REDACTED}@127.0.0.1:4222"),
    (f"nats://{PASSWORD}@h:4222", f"nats://{REDACTED}@h:4222"),  # a NATS token
    (f"postgresql://u:{PASSWORD}@db/lich?sslmode=require",
     f"postgresql://{REDACTED}@db/lich?sslmode=require"),
    (f"https://otel.example/v1/traces?api_key={TOKEN}&x=1",
     f"https://otel.example/v1/traces?api_key={REDACTED}&x=1"),
    (f"https://h/p?access-token={TOKEN}", f"https://h/p?access-token={REDACTED}"),
    (f"https://s3/o?X-Amz-Signature={TOKEN}&X-Amz-Date=1",
     f"https://s3/o?X-Amz-Signature={REDACTED}&X-Amz-Date=1"),
    ("http://127.0.0.1:8080/v1?model=m", "http://127.0.0.1:8080/v1?model=m"),
    ("not a url", "not a url"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_urls_in_text_and_lists() -> None:
    text = (f"cannot reach nats://a:{PASSWORD}@h:1, nats://b:{PASSWORD}@h:2,"
            f"nats://c:{PASSWORD}@h:3 (see http://x/?token={TOKEN})")
    out = redact_urls(text)
    assert PASSWORD not in out
    assert TOKEN not in out
    assert out.count("@h:") == 3  # where stays visible


def _config(work: Path, servers: list[str]) -> None:
    (work / ".lich").mkdir(parents=True, exist_ok=True)
    (work / ".lich" / "config.toml").write_text(
        'plugins = ["+nats"]\n[bus]\nkind = "nats"\nconnect_timeout_s = 2\n'
        f"servers = {json.dumps(servers)}\n", encoding="utf-8")


def _lich(work: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lich", "--work-dir", str(work), *args],
                          cwd=work, env=lich_env(home), capture_output=True, text=True,
                          timeout=120)


def test_cluster_status_never_prints_the_bus_password(tmp_path: Path,
                                                      nats_server: NatsServer) -> None:
    work = tmp_path / "w"
    # A broker that takes the connection (it has no users: the credentials are
    # ignored), and one that refuses it: both are printed, neither with its password.
    port = nats_server.url.rsplit(":", 1)[1]
    _config(work, [f"nats://alice:{PASSWORD}@127.0.0.1:{port}"])
    shown = _lich(work, tmp_path, "cluster", "status")
    as_json = _lich(work, tmp_path, "cluster", "status", "--json")
    config = _lich(work, tmp_path, "config", "show", "--json")
    with refused_port() as closed:
        _config(work, [f"nats://alice:{PASSWORD}@127.0.0.1:{closed}"])
        refused = _lich(work, tmp_path, "cluster", "status")
    for proc in (shown, as_json, config, refused):
        assert PASSWORD not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert shown.returncode == 0, shown.stderr
    assert f"{REDACTED}@127.0.0.1:{port}" in shown.stdout
    assert json.loads(as_json.stdout)["broker"]["url"].startswith(f"nats://{REDACTED}@")
    assert refused.returncode != 0
    assert f"{REDACTED}@127.0.0.1" in refused.stderr


@pytest.mark.parametrize("service", [True, False], ids=["service", "cli"])
def test_log_lines_lose_url_credentials(capsys: pytest.CaptureFixture[str],
                                        service: bool) -> None:
    from lich.cli.common import setup_logging

    level = logging.getLogger("lich").level
    setup_logging("info", service=service)
    try:
        logging.getLogger("lich.otel").warning(
            "otel: spans cannot be exported to %s (%s)",
            f"https://collector.example/v1/traces?api_key={TOKEN}", "refused")
        logging.getLogger("lich.gateway").warning("bus at nats://%s@h:1 is away", PASSWORD)
        if service:  # a library's own logger reaches the service handler too
            logging.getLogger("nats.aio.client").error(
                "could not connect to nats://bob:%s@10.0.0.1:4222", PASSWORD)
    finally:
        for owner in (logging.getLogger(), logging.getLogger("lich")):
            for handler in list(owner.handlers):
                if type(handler).__name__ == "_CliLogHandler":
                    owner.removeHandler(handler)
        logging.getLogger("lich").setLevel(level)
    err = capsys.readouterr().err
    assert PASSWORD not in err
    assert TOKEN not in err
    assert err.count(REDACTED) == (3 if service else 2)


def test_a_provider_url_with_credentials_is_never_printed_or_recorded(tmp_path: Path) -> None:
    work = tmp_path / "p"
    work.mkdir()
    with refused_port() as closed:
        for args in ((), ("--json",)):
            proc = subprocess.run(
                [sys.executable, "-m", "lich", *args, "--provider-kind", "openai_compat",
                 "--base-url", f"http://bob:{PASSWORD}@127.0.0.1:{closed}/v1?api_key={TOKEN}",
                 "--model", "m", "hi"], cwd=work, env=lich_env(tmp_path),
                capture_output=True, text=True, timeout=120)
            assert proc.returncode == 1, proc.stderr
            shown = proc.stdout + proc.stderr
            assert "network" in shown  # the failure is reported...
            assert f"127.0.0.1:{closed}" in shown  # ...with where
            assert PASSWORD not in shown
            assert TOKEN not in shown
    transcripts = list((work / ".lich" / "sessions").glob("*.jsonl"))
    assert transcripts
    for path in transcripts:
        text = path.read_text(encoding="utf-8")
        assert PASSWORD not in text
        assert TOKEN not in text
